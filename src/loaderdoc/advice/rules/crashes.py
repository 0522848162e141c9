"""Crashes: workers that raised, died or hung in the probe."""

from __future__ import annotations

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
from loaderdoc.probing.blame import innermost_user_frame


@rule("worker-crashed", CRITICAL, "A DataLoader worker crashed", "probe",
      "a probed configuration ended with status 'failed' for a reason other than shared memory or open files")
def _worker_crashed(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    crashed = []
    for res in i.probe.results:
        text = f"{res.error or ''}\n{res.traceback or ''}".lower()
        if res.status == "failed" and not res.loaderdoc_error and not any(
                m in text for m in SHM_ERROR_MARKERS + NOFILE_ERROR_MARKERS):
            crashed.append(res)  # shm and open-file failures have their own rules and fixes; loaderdoc's, its own
    if not crashed:
        return None
    evidence = [f"{describe(r.settings)}: {r.error or 'failed without a message'}" for r in crashed[:3]]
    if len(crashed) > 3:
        evidence.append(f"... and {len(crashed) - 3} more configurations")
    # a run without workers fails in the main process: its traceback points at the user's code
    plain = next((r for r in crashed if r.settings.num_workers == 0 and r.traceback), None)
    where = innermost_user_frame(plain.traceback) if plain else None
    if where:
        evidence.append(f"without workers the traceback ends in {where}")
    else:  # a worker's traceback, which torch flattens into the error's message
        where = next((frame for r in crashed if (frame := innermost_user_frame(f"{r.error}\n{r.traceback}"))), None)
        if where:
            evidence.append(f"the worker's traceback ends in {where}")
    text = " ".join(f"{r.error or ''} {r.traceback or ''}" for r in crashed).lower()
    if any(m in text for m in OOM_MARKERS):
        cause = ("The process was killed (SIGKILL) or ran out of memory: usually the kernel's OOM killer, when "
                 "the workers' memory exceeds RAM or the cgroup limit (check `dmesg` or the pod's OOMKilled "
                 "status).")
        fix = ("Use fewer workers or a smaller prefetch_factor, and keep the dataset in numpy arrays or tensors "
               "rather than Python objects; `loaderdoc probe` measures the memory per worker.")
    elif where:
        cause = "The dataset (or its transform / collate_fn) raises an exception, with or without workers."
        fix = (f"Fix the code at {where}; a num_workers=0 run shows the plain traceback (the probe's table "
               "lists each failure). Then restore the workers.")
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


@rule("probe-failed-itself", CRITICAL, "loaderdoc's own measurement failed (not the dataset)", "probe",
      "a probed configuration failed inside loaderdoc's measuring machinery: no frame of the user's code in "
      "its traceback, and CUDA would not start in the measuring process or the innermost frame is "
      "loaderdoc's (loaderdoc.probing.blame)")
def _probe_failed_itself(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    failed = [r for r in i.probe.results if r.status == "failed" and r.loaderdoc_error]
    if not failed:
        return None
    evidence = [f"{describe(r.settings)}: {r.error or 'failed without a message'}" for r in failed[:3]]
    if len(failed) > 3:
        evidence.append(f"... and {len(failed) - 3} more configurations")
    measured = i.probe.ok_results
    evidence.append(f"{len(measured)} other configuration{'' if len(measured) == 1 else 's'} measured normally"
                    if measured else "no configuration was measured")
    return found(
        CRITICAL,
        "loaderdoc could not measure some configurations: its own measuring process failed",
        evidence,
        "The failure is in loaderdoc's measuring process (starting CUDA, its own code), not in the dataset; "
        "these configurations say nothing about the data.",
        "Nothing to change in the dataset. Report it to loaderdoc with the traceback (`loaderdoc probe --json` "
        "keeps it); meanwhile `loaderdoc tune -- python train.py` measures the settings on the real job.",
        {},
    )
