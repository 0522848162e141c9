"""Numbers as people read them, shared by every report, rule and view.

Sizes are shown in binary units (MiB, GiB) because /dev/shm, cgroup limits and Docker's
``--shm-size`` all count in powers of two.
"""

from __future__ import annotations

import math

MiB = 1024**2
GiB = 1024**3

# bytes per element of each tensor dtype a sample may be given in (--dtype, presets)
DTYPE_BYTES = {"uint8": 1, "int8": 1, "float16": 2, "bfloat16": 2, "int16": 2, "uint16": 2,
               "float32": 4, "int32": 4, "float64": 8, "int64": 8}


def fmt_bytes(n: float | int | None) -> str:
    """A byte count as people read it: ``19.1 MiB``, ``1.5 GiB``, ``512 KiB``."""
    if n is None:
        return "unknown"
    n = float(n)
    for unit, size in (("TiB", 1024**4), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= size:
            value = n / size
            return f"{value:.0f} {unit}" if value >= 100 or value == int(value) else f"{value:.1f} {unit}"
    return f"{int(n)} B"


def fmt_seconds(seconds: float | None) -> str:
    """A duration measured in a run: ``0.42 ms``, ``8.1 ms``, ``240 ms``, ``1.25 s``; ``?`` for None."""
    if seconds is None:
        return "?"
    ms = 1000 * seconds
    if ms >= 1000:
        return f"{seconds:.2f} s"
    return f"{ms:.2f} ms" if ms < 1 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def fmt_num(x: float) -> str:
    """A count that may be fractional (a CPU quota of 2.5): no trailing ``.0``."""
    return f"{x:g}" if x == int(x) else f"{x:.2g}" if x < 1 else f"{x:.1f}"


def cpus_text(x: float) -> str:
    """``1 CPU``, ``2.5 CPUs``, ``4 CPUs``."""
    return f"{fmt_num(x)} CPU" + ("" if x == 1 else "s")


def shm_size_flag(needed_bytes: float) -> str:
    """A Docker ``--shm-size`` value with 2x head-room, rounded up to whole GiB (at least 1g)."""
    return f"{max(1, math.ceil(2 * needed_bytes / GiB))}g"


def fmt_cpus(n: float | None) -> str:
    """A CPU count or budget without a trailing ``.0``; ``unknown`` for None."""
    return "unknown" if n is None else fmt_num(n)


def fmt_share(share: float | None) -> str:
    """A share (0.42) as a whole percentage ("42%"); "-" where it was not measured."""
    return "-" if share is None else f"{100 * share:.0f}%"


def fmt_share_fine(share: float | None) -> str:
    """A share to a tenth of a percent, as a watched run's reports show it ("42.3 %"); "?" unknown."""
    return "?" if share is None else f"{100 * share:.1f} %"


def ranges(numbers: list[int]) -> str:
    """CPUs or ranks as people read them: [0, 1, 2, 3, 8] -> '0-3,8'."""
    out: list[list[int]] = []
    for c in sorted(set(numbers)):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return ",".join(f"{a}" if a == b else f"{a}-{b}" for a, b in out)
