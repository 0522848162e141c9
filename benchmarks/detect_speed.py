"""How long ``loaderdoc.system.detect.detect()`` takes here (without py-cpuinfo).

Not a pass/fail test. Three figures: a fresh interpreter importing and running detect() once
(what ``loaderdoc check`` pays), the first call in a process (includes the lazy ``pynvml``
import and NVML start-up), and warm calls.

    python benchmarks/detect_speed.py [--runs 20]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

COLD = (
    "import time; t = time.perf_counter(); from loaderdoc.system.detect import detect; "
    "i = time.perf_counter(); detect(); d = time.perf_counter(); print(i - t, d - i)"
)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    procs, imports, firsts = [], [], []
    for _ in range(args.runs):
        start = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, check=True)
        procs.append(time.perf_counter() - start)
        imp, first = map(float, out.stdout.split())
        imports.append(imp)
        firsts.append(first)
    from loaderdoc.system.detect import detect

    detect()
    warm = []
    for _ in range(args.runs * 5):
        start = time.perf_counter()
        detect()
        warm.append(time.perf_counter() - start)

    def ms(values: list[float]) -> str:
        values = sorted(values)
        return f"median {1000 * statistics.median(values):7.1f} ms   max {1000 * values[-1]:7.1f} ms"

    print(f"fresh process: python -c 'import + detect()'   {ms(procs)}")
    print(f"  import loaderdoc.system.detect               {ms(imports)}")
    print(f"  first detect() (lazy pynvml + NVML init)      {ms(firsts)}")
    print(f"warm detect()                                   {ms(warm)}")


if __name__ == "__main__":
    main()
