"""The training process's intra-op threads (torch's OpenMP pool) as torch will size them, read
without importing torch (``check`` must stay fast).

What torch 2.13's x86 build does, measured on this project's machine:

* ``MKL_NUM_THREADS`` wins over ``OMP_NUM_THREADS`` (torch sizes the pool from MKL's count:
  ``OMP_NUM_THREADS=2 MKL_NUM_THREADS=1`` gives 1 thread, ``OMP_NUM_THREADS=1 MKL_NUM_THREADS=2`` 2);
* ``OMP_NUM_THREADS`` is a comma list (one value per nesting level): the first is the pool;
* unset: one thread per CPU of the affinity set, not of a cgroup CPU quota (the quota is invisible);
* MKL's dynamic adjustment (``MKL_DYNAMIC`` unless ``FALSE``) caps the count at the physical cores:
  ``OMP_NUM_THREADS=16`` on 2 cores gives 2 threads.

An invalid value makes the reading unknown with the reason: libgomp and MKL each fall back their
own way, and guessing which one sized the pool would be advice on a guess.
"""

from __future__ import annotations

from collections.abc import Mapping

from loaderdoc.system.facts import Reading

# the variables torch's intra-op count follows, the one that wins first
THREAD_VARIABLES = ("MKL_NUM_THREADS", "OMP_NUM_THREADS")


def _first_value(name: str, raw: str) -> tuple[int | None, str | None]:
    """(threads, None) from ``"8"`` or ``"4,2"``; (None, why) for a value torch would not take."""
    first = raw.split(",")[0].strip()
    try:
        value = int(first)
    except ValueError:
        return None, f"{name}={raw!r} is not a whole number"
    if value < 1:
        return None, f"{name}={raw!r}: the thread count must be at least 1"
    return value, None


def read_intra_op_threads(env: Mapping[str, str], affinity: Reading, physical: Reading) -> Reading:
    """Threads in the training process's intra-op pool, and where the count comes from."""
    for name in THREAD_VARIABLES:
        raw = env.get(name)
        if raw is None:
            continue
        value, problem = _first_value(name, raw)
        if problem:
            return Reading.missing(f"{problem}; torch's thread count cannot be told", name)
        source = f"{name}={raw}"
        if name == "MKL_NUM_THREADS" and env.get("OMP_NUM_THREADS") is not None:
            source += f" (torch follows it over OMP_NUM_THREADS={env['OMP_NUM_THREADS']})"
        return _capped(value, source, env, physical)
    cpus = affinity.get()
    if cpus is None:
        why = affinity.unknown or "the affinity set was not read"
        return Reading.missing(f"OMP_NUM_THREADS is not set and {why}", "os.sched_getaffinity")
    return _capped(len(cpus), f"torch's default: one per CPU of the affinity set, {len(cpus)}", env, physical)


def _capped(value: int, source: str, env: Mapping[str, str], physical: Reading) -> Reading:
    cores = physical.get()
    # measured: only FALSE (any case) turns it off; "0" and "no" leave the cap on
    dynamic = env.get("MKL_DYNAMIC", "").strip().lower() != "false"
    if dynamic and cores and value > cores:
        return Reading.of(int(cores), f"{source}, capped at the {cores} physical cores (MKL_DYNAMIC)")
    return Reading.of(value, source)
