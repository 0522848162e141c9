"""Which process of a job the watch hook runs in (host, torchrun / SLURM rank variables, CPUs),
and the hook's settings read from its environment (in a tune trial: a quiet interrupt).

Standard library only, no loaderdoc import: under ``loaderdoc watch`` this file is loaded by path
beside ``hook.py``.
"""

from __future__ import annotations

import os
import sys

RANK_VARS = (("rank", "RANK"), ("local_rank", "LOCAL_RANK"), ("world_size", "WORLD_SIZE"),
             ("local_world_size", "LOCAL_WORLD_SIZE"), ("group_rank", "GROUP_RANK"), ("slurm_nodeid", "SLURM_NODEID"))


def process_info() -> dict:
    """Which process of the job this is: host, rank variables of torchrun / SLURM (None if unset),
    and the CPUs it may run on."""
    out: dict = {"hostname": os.uname().nodename, "argv0": (getattr(sys, "argv", None) or [""])[0]}
    for key, var in RANK_VARS:
        try:
            out[key] = int(os.environ[var])
        except (KeyError, ValueError):
            out[key] = None
    try:  # what explains a slow rank on a node: taskset / srun --cpu-bind give ranks different CPUs
        out["affinity_cpus"] = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        out["affinity_cpus"] = None
    return out


def env_positive(name: str, default: float, floor: float, warn) -> float:
    """A positive number from the environment variable ``name`` (at least ``floor``), else ``default``
    with one line through ``warn`` (the hook's)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        warn(f"{name}={raw!r} is not a positive number; using {default:g}")
        return default
    return max(value, floor)


def quiet_interrupt() -> None:
    """In a tune trial the KeyboardInterrupt of tune's SIGINT ends the program without a traceback:
    the last lines of its output, which tune shows, stay the program's own."""
    previous = sys.excepthook

    def excepthook(kind, value, tb) -> None:
        if not issubclass(kind, KeyboardInterrupt):
            previous(kind, value, tb)

    sys.excepthook = excepthook


# tune's SIGINT, once taken: the next batch the loop asks for raises KeyboardInterrupt again
INTERRUPTED = [False]


def interrupt_sticks() -> None:
    """In a tune trial, tune's one SIGINT must end the loop as Ctrl+C does. Python raises the
    KeyboardInterrupt wherever the main thread is, and one raised inside a ``__del__`` (a DataLoader
    iterator joining its workers at an epoch's end) is printed and dropped: the loop ran on until
    tune's SIGTERM ended it without its ``finally`` (a lock file left behind). The SIGINT is
    remembered, and the watched iterator raises it again at the next batch. A program's own SIGINT
    handler is left alone."""
    import contextlib
    import signal

    if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
        return

    def handler(signum, frame) -> None:
        INTERRUPTED[0] = True
        raise KeyboardInterrupt

    with contextlib.suppress(ValueError):  # not the main thread: Python's own handling stays
        signal.signal(signal.SIGINT, handler)
