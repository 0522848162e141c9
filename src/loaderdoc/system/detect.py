"""``detect()``: the machine as a PyTorch DataLoader sees it, as a :class:`MachineFacts` tree.

    >>> from loaderdoc.system.detect import detect
    >>> facts = detect()
    >>> facts.cpu.budget, facts.cpu.budget_source
    (4.0, 'cgroup quota')

Seams, so tests run on recorded machines:

* ``root``: every ``/proc``, ``/sys``, ``/dev/shm``, ``/.dockerenv`` path is read under it.
  With a root other than ``/``, the syscalls that cannot be redirected (``os.cpu_count``,
  ``os.sched_getaffinity``, ``os.statvfs``, ``resource.getrlimit``, ``os.uname``, the torch
  install) are answered by a :class:`~loaderdoc.system.host.TreeHost` from the tree's files and
  ``<root>/loaderdoc-host.json`` instead; pass ``host=`` to fake them directly.
* ``env``: the environment (``CUDA_VISIBLE_DEVICES``, ``WORLD_SIZE``, ``SLURM_*``, ``OMP_NUM_THREADS``, ...);
  defaults to ``os.environ``.
* ``nvml``: the NVML module (default: ``import pynvml`` lazily); a fake object with pynvml's
  functions in tests.

Nothing here raises for a machine that lacks something, and nothing imports torch or textual;
py-cpuinfo is imported only with ``cpu_info=True``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TypeVar

from loaderdoc.system._files import Tree
from loaderdoc.system.container import read_container
from loaderdoc.system.cpu import read_cpu
from loaderdoc.system.distributed import read_distributed
from loaderdoc.system.facts import (
    ContainerFacts,
    CpuFacts,
    DistributedFacts,
    GpuFacts,
    LimitsFacts,
    MachineFacts,
    MemoryFacts,
    PlatformFacts,
    Reading,
    ShmFacts,
    TorchFacts,
)
from loaderdoc.system.gpu import read_gpus
from loaderdoc.system.host import Host, LiveHost, TreeHost
from loaderdoc.system.limits import read_limits
from loaderdoc.system.memory import read_memory
from loaderdoc.system.osinfo import read_platform
from loaderdoc.system.shm import read_shm
from loaderdoc.system.threads import read_intra_op_threads

T = TypeVar("T")

__all__ = ["detect", "make_host"]


def make_host(root: str | os.PathLike[str] = "/") -> Host:
    """The host seam for ``root``: live syscalls for ``/``, the recorded tree otherwise."""
    tree = Tree(root)
    return LiveHost(tree) if tree.live else TreeHost(tree)


def _guard(section: str, fn: Callable[[], T], empty: Callable[[], T]) -> T:
    """Run one reader; if it raises anyway (a bug), mark every reading unknown, don't crash."""
    try:
        return fn()
    except Exception as exc:  # pragma: no cover - readers are written not to raise
        out = empty()
        reason = f"internal error reading {section}: {type(exc).__name__}: {exc}"
        for name, value in vars(out).items():
            if isinstance(value, Reading):
                setattr(out, name, Reading.missing(reason, section))
        return out


def _guard_reading(what: str, fn: Callable[[], Reading]) -> Reading:
    """One reading's reader behind the same guard as a section's."""
    try:
        return fn()
    except Exception as exc:  # pragma: no cover - readers are written not to raise
        return Reading.missing(f"internal error reading {what}: {type(exc).__name__}: {exc}", what)


def detect(
    root: str | os.PathLike[str] = "/",
    *,
    env: Mapping[str, str] | None = None,
    nvml: object | None = None,
    cpu_info: bool = False,
    host: Host | None = None,
    label: str = "",
) -> MachineFacts:
    """Detect this machine (or the recorded tree at ``root``). Never raises for missing facts."""
    tree = Tree(root)
    env = os.environ if env is None else env
    if host is None:
        host = LiveHost(tree) if tree.live else TreeHost(tree)

    platform = _guard("platform", lambda: read_platform(host), PlatformFacts)
    facts = MachineFacts(label=label, platform=platform)
    facts.cpu = _guard("cpu", lambda: read_cpu(tree, host, cpu_info=cpu_info), CpuFacts)
    facts.memory = _guard("memory", lambda: read_memory(tree, host), MemoryFacts)
    facts.shm = _guard("shm", lambda: read_shm(tree, host), ShmFacts)
    facts.container = _guard("container", lambda: read_container(tree, env), ContainerFacts)
    facts.limits = _guard("limits", lambda: read_limits(host, platform.system), LimitsFacts)
    facts.gpu = _guard("gpu", lambda: read_gpus(env, nvml), GpuFacts)
    facts.torch = _guard("torch", host.torch, TorchFacts)
    facts.torch.intra_op_threads = _guard_reading(
        "intra-op threads", lambda: read_intra_op_threads(env, facts.cpu.affinity, facts.cpu.physical))
    facts.distributed = _guard("distributed", lambda: read_distributed(env), DistributedFacts)
    return facts


def main(argv: list[str] | None = None) -> int:  # pragma: no cover - thin debugging entry
    """``python -m loaderdoc.system.detect [--cpu-info] [ROOT]``: print the facts as JSON."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m loaderdoc.system.detect")
    parser.add_argument("root", nargs="?", default="/")
    parser.add_argument("--cpu-info", action="store_true", help="also read model and flags via py-cpuinfo")
    parser.add_argument("--label", default="")
    args = parser.parse_args(argv)
    print(detect(args.root, cpu_info=args.cpu_info, label=args.label).to_json())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
