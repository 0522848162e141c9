"""The open-file limit and torch's default tensor-sharing strategy on this OS.

With the ``file_descriptor`` strategy (torch's default on Linux) every shared tensor a worker
sends is an open file descriptor until the batch is consumed, so a low ``ulimit -n`` shows up as
"Too many open files"; torch's own advice is ``ulimit -n`` or
``torch.multiprocessing.set_sharing_strategy('file_system')``. macOS and Windows only have
``file_system``. Read from the OS name, without importing torch.
"""

from __future__ import annotations

from loaderdoc.system.facts import LimitsFacts, Reading
from loaderdoc.system.host import Host

_STRATEGY_SOURCE = "torch.multiprocessing default"


def sharing_strategy(system: Reading) -> Reading:
    name = system.get()
    if not name:
        return Reading.missing("the operating system is unknown", _STRATEGY_SOURCE)
    lowered = str(name).lower()
    if lowered in ("darwin", "windows") or lowered.startswith(("win", "cygwin", "msys")):
        return Reading.of("file_system", f"{_STRATEGY_SOURCE} on {name}")
    return Reading.of("file_descriptor", f"{_STRATEGY_SOURCE} on {name}")


def read_limits(host: Host, system: Reading) -> LimitsFacts:
    soft, hard = host.nofile()
    return LimitsFacts(nofile_soft=soft, nofile_hard=hard, sharing_strategy=sharing_strategy(system))
