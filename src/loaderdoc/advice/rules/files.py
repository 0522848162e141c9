"""Open files: the soft `ulimit -n` against the tensors workers share by file descriptor."""

from __future__ import annotations

from loaderdoc.advice.findings import CRITICAL, WARNING, Finding
from loaderdoc.advice.rules.registry import (
    NOFILE_ERROR_MARKERS,
    NOFILE_LINUX_DEFAULT,
    Inputs,
    describe,
    found,
    rule,
)


@rule("open-files-low", CRITICAL, "Open-file limit too low for the tensors workers share", "machine",
      f"soft `ulimit -n` below the usual Linux default ({NOFILE_LINUX_DEFAULT}) while workers share tensors by "
      "file descriptor; with tensors_per_batch known: workers x prefetch x tensors above half the limit "
      "(the limit is per process); or the probe hit 'Too many open files'")
def open_files_low(i: Inputs) -> Finding | None:
    lim = i.facts.limits
    soft = lim.nofile_soft.get()
    strategy = lim.sharing_strategy.get("file_descriptor")
    hard = lim.nofile_hard.get()
    if isinstance(hard, int) and isinstance(soft, int) and hard <= soft:
        # the soft limit can't go above the hard one without privileges
        fix = (f"The hard limit is {hard} too: raise both where the process starts (docker run --ulimit "
               "nofile=65536:65536, LimitNOFILE=65536 in a systemd unit, limits.conf), or call "
               "torch.multiprocessing.set_sharing_strategy('file_system') at start-up so shared tensors don't "
               "hold file descriptors.")
    else:
        raise_to = min(65536, hard) if isinstance(hard, int) else 65536
        fix = (f"Raise the limit before starting training: `ulimit -n {raise_to}`, or call "
               "torch.multiprocessing.set_sharing_strategy('file_system') at start-up so shared tensors don't "
               "hold file descriptors.")
    base = [f"open-file limit: soft {soft if soft is not None else 'unlimited'}, hard {hard if hard is not None else 'unlimited'}",
            f"torch sharing strategy: {strategy}"]
    cause = ("With the 'file_descriptor' strategy every tensor a worker sends stays an open file descriptor "
             "until the training loop frees it.")
    if i.probe is not None:
        for res in i.probe.results:
            text = f"{res.error or ''}\n{res.traceback or ''}".lower()
            if res.status == "failed" and any(m in text for m in NOFILE_ERROR_MARKERS):
                return found(CRITICAL, "Workers failed with 'Too many open files'",
                                 [f"the probe's {describe(res.settings)} failed: {res.error}"] + base, cause, fix, {})
    if soft is None or strategy != "file_descriptor":
        return None
    if i.settings is not None and i.settings.num_workers == 0:
        return None
    # the limit is per process: each rank's training process receives its own loader's tensors
    tensors = i.context.tensors_per_batch
    if i.settings is not None and tensors:
        fds = i.settings.batches_in_flight * tensors
        if fds <= soft / 2:
            return None
        return found(
            CRITICAL if fds > soft else WARNING,
            f"{fds} shared tensors in flight against an open-file limit of {soft}",
            [f"{i.settings.num_workers} workers x prefetch {i.settings.effective_prefetch_factor} x {tensors} tensors"
             f" = {fds} file descriptors held by the training process"] + base,
            cause, fix, {},
        )
    if soft >= NOFILE_LINUX_DEFAULT:
        return None
    evidence = list(base)
    hung = [res for res in (i.probe.results if i.probe else []) if res.status == "timeout" and res.settings.num_workers]
    if hung:
        # the worker's own "Too many open files" goes to its stderr; the loader only sees silence
        evidence.append(f"the probe's {describe(hung[0].settings)} timed out waiting for a worker, as a worker "
                        "that can't send its batch does")
    return found(
        WARNING,
        f"The open-file limit is {soft}, below the usual {NOFILE_LINUX_DEFAULT}: workers may fail with "
        "'Too many open files'",
        evidence, cause, fix, {},
    )
