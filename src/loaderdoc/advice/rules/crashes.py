"""Crashes: workers that raised, died or hung in the probe."""

from __future__ import annotations

import re
from pathlib import Path

from loaderdoc.advice.findings import CRITICAL, WARNING, Finding
from loaderdoc.advice.rules.files import open_files_low
from loaderdoc.advice.rules.registry import (
    NOFILE_ERROR_MARKERS,
    OOM_MARKERS,
    SHM_ERROR_MARKERS,
    Inputs,
    describe,
    found,
    rule,
)


@rule("worker-crashed", CRITICAL, "A DataLoader worker crashed", "probe",
      "a probed configuration ended with status 'failed' for a reason other than shared memory or open files")
def _worker_crashed(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    crashed = []
    for res in i.probe.results:
        text = f"{res.error or ''}\n{res.traceback or ''}".lower()
        if res.status == "failed" and not any(m in text for m in SHM_ERROR_MARKERS + NOFILE_ERROR_MARKERS):
            crashed.append(res)  # shm and open-file failures have their own rules and fixes
    if not crashed:
        return None
    evidence = [f"{describe(r.settings)}: {r.error or 'failed without a message'}" for r in crashed[:3]]
    if len(crashed) > 3:
        evidence.append(f"... and {len(crashed) - 3} more configurations")
    # a run without workers fails in the main process: its traceback points at the user's code
    plain = next((r for r in crashed if r.settings.num_workers == 0 and r.traceback), None)
    where = _innermost_frame(plain.traceback) if plain else None
    if where:
        evidence.append(f"without workers the traceback ends in {where}")
    text = " ".join(f"{r.error or ''} {r.traceback or ''}" for r in crashed).lower()
    if any(m in text for m in OOM_MARKERS):
        cause = ("The process was killed (SIGKILL) or ran out of memory: usually the kernel's OOM killer, when "
                 "the workers' memory exceeds RAM or the cgroup limit (check `dmesg` or the pod's OOMKilled "
                 "status).")
        fix = ("Use fewer workers or a smaller prefetch_factor, and keep the dataset in numpy arrays or tensors "
               "rather than Python objects; `loaderdoc probe` measures the memory per worker.")
    elif where:
        cause = "The dataset (or its transform / collate_fn) raises an exception, with or without workers."
        fix = (f"Fix the code at {where}; the num_workers=0 run above shows the plain traceback. Then restore "
               "the workers.")
    else:
        cause = ("An exception (or a signal) in the dataset, a transform or collate_fn, raised inside a worker "
                 "process; torch re-raises it in the main process with the worker's traceback flattened into "
                 "text.")
        fix = ("Re-run with num_workers=0: the same code then runs in the main process and fails with a plain "
               "traceback (and a debugger can stop at it). Fix the dataset, then restore the workers.")
    with_workers = any(r.settings.num_workers > 0 for r in crashed)
    symptom = ("A DataLoader worker crashed while loading" if with_workers else
               "Loading a batch raised an exception")
    return found(CRITICAL, symptom, evidence, cause, fix, {})


@rule("worker-hung", WARNING, "A DataLoader worker delivered nothing within the timeout", "probe",
      "a probed configuration ended with status 'timeout' (the DataLoader's `timeout`: a worker that "
      "delivers no batch for that long), unless the open-file limit explains it")
def _worker_hung(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    hung = [r for r in i.probe.results if r.status == "timeout"]
    if not hung or open_files_low(i) is not None:
        return None  # a worker starved of file descriptors also times out: that rule names the fix
    evidence = [f"{describe(r.settings)}: {r.error or 'timed out'}" for r in hung[:3]]
    fine = [r for r in i.probe.ok_results if r.settings.num_workers == 0]
    if fine:
        evidence.append(f"{describe(fine[0].settings)}: loaded normally in the training process")
    return found(
        WARNING,
        "A DataLoader worker hung: no batch arrived within the timeout",
        evidence,
        "Something in the dataset blocks inside a forked worker: typically a lock, thread pool or network "
        "client created before the fork (in __init__) and used in __getitem__, or a read that never returns.",
        "Create such clients lazily inside each worker (worker_init_fn or on first use in __getitem__), "
        "or use multiprocessing_context='spawn'; keep a DataLoader timeout (e.g. timeout=120) in training so "
        "a hang becomes an error instead of an idle GPU.",
        {},
    )


_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # .../loaderdoc


def _is_library_frame(path: str) -> bool:
    """A frame in torch or in loaderdoc itself, not in the user's code.

    Judged by the file, not by a folder name: a user's project may live under a folder named
    ``loaderdoc`` or ``torch`` (a plain ``git clone`` of this repository is one). A loaderdoc frame
    is a path ending in one of this package's own files (tracebacks recorded elsewhere carry
    another prefix); a torch frame is inside an installed ``torch`` package."""
    if "/site-packages/torch/" in path or "/dist-packages/torch/" in path:
        return True
    if "/loaderdoc/" in path:
        inside = path.rsplit("/loaderdoc/", 1)[1]
        if (_PACKAGE_DIR / inside).is_file():
            return True
    return False


def _innermost_frame(tb: str) -> str | None:
    """``brokends.py:10 in __getitem__``: the last frame of a traceback outside torch and loaderdoc."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb)
    mine = [f for f in frames if not _is_library_frame(f[0])]
    if not mine:
        return None
    path, line, func = mine[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {func}"
