"""A watched loader that ran wrong: its workers each replayed an IterableDataset's stream (an epoch
counts its data again; ``watching/replays.py``, and the ``watch`` rules do not judge such a
loader's data wait), or ``iter(loader)`` raised before any batch (under ``--apply``: was "its
settings were not applied") (issue 49).
"""

from __future__ import annotations

from loaderdoc.advice.findings import CRITICAL, Finding
from loaderdoc.advice.rules.registry import Inputs, found, rule
from loaderdoc.advice.rules.rejected import REJECT_FIXES


@rule("watch-stream-replayed", CRITICAL, "Every worker yields the whole stream (measured)", "watch",
      "measured in the run: the loader's dataset is an IterableDataset and, in its first epoch, two rounds of "
      "batches (one per worker) were each the first worker's batch while the stream moved on between them "
      "(content digests, loaderdoc.base.batches.repeated_streams)")
def _watch_replayed(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or not w.replays:
        return None
    evidence = [f"{w.workers} workers: the first {2 * w.workers} batches came as {w.workers} copies of one batch, "
                f"then {w.workers} copies of the next (batches are returned from the workers in turn)",
                f"the run returned {w.steps} batches"]
    return found(
        CRITICAL,
        f"{w.name} yields every sample {w.workers} times: each of its {w.workers} workers replays the whole stream",
        evidence,
        "Each DataLoader worker runs its own copy of an IterableDataset's __iter__; one that never asks "
        "torch.utils.data.get_worker_info() yields the whole stream in every worker, so an epoch holds the data "
        "num_workers times over and its speed counts the same samples again.",
        "Shard the stream per worker in __iter__: info = torch.utils.data.get_worker_info(); yield only the "
        "items i with i % info.num_workers == info.id (or split the files), as the IterableDataset docs show; "
        "until then run it with num_workers=0 or 1.",
    )


_PICKLING = ("pickle", "pickling")

# what torch's DataLoader(...) names in the ValueError it raises for a combination it refuses, and the
# change that settles it (the check's settings-rejected rule knows the same combinations)
_REFUSED_FIXES = {
    "persistent_workers": "persistent_workers=False where num_workers=0 (or give the loader workers)",
    "prefetch_factor": "no prefetch_factor where num_workers=0 (or give the loader workers)",
    "multiprocessing_context": "no multiprocessing_context where num_workers=0 (or give the loader workers)",
    "num_workers": "num_workers=0 or more",
    "timeout": "timeout=0 or more",
    "batch_size": "a batch_size of 1 or more (or None with a batch_sampler)",
    "shuffle": "no shuffle with this sampler or IterableDataset",
}


@rule("watch-loader-refused", CRITICAL, "DataLoader(...) raised: torch refused its settings (measured)", "watch",
      "the run's DataLoader(...) raised at construction (recorded by the watch hook with the line that built it "
      "and the settings it was called with); the fix is read from what torch named in the error")
def _watch_refused(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or not w.init_error:
        return None
    where = f" at {w.init_site}" if w.init_site else ""
    applied = list(w.applied.get("applied") or [])
    asked = ", ".join(f"{k}={w.settings.get(k)!r}" for k in ("num_workers", "persistent_workers", "prefetch_factor")
                      if w.settings.get(k) is not None)
    evidence = [f"DataLoader(...){where} raised {w.init_error}",
                f"it was called with {asked}" + ("" if applied else " (the program's own settings: nothing applied)")]
    message = w.init_error.split(":", 1)[-1]
    named = [key for key in _REFUSED_FIXES if key in message]
    fixes = [_REFUSED_FIXES[key] for key in named]
    change = dict(REJECT_FIXES.get(named[0], {})) if named else {}
    fix = (f"Set {fixes[0]}{where}." if fixes else
           f"Change the settings{where} as the error says; 'loaderdoc check --config FILE' names what torch refuses.")
    return found(CRITICAL, f"{w.name} was refused by torch at construction{where}: {w.init_error}", evidence,
                 "torch's DataLoader checks its arguments when it is built and raises on combinations it refuses "
                 "(persistent_workers, prefetch_factor and multiprocessing_context only mean something with worker "
                 "processes): the program stopped before its first batch.", fix, change)


@rule("watch-loader-did-not-start", CRITICAL, "iter(loader) raised before any batch (measured)", "watch",
      "the run's iter(loader) raised (recorded by the watch hook); its cause is read from what it raised and "
      "the start method the loader was given")
def _watch_did_not_start(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or not w.iter_error:
        return None
    kind = w.iter_error.split(":", 1)[0]
    context = w.settings.get("multiprocessing_context")
    applied = list(w.applied.get("applied") or [])
    asked = w.applied.get("asked") or {}
    built = f"num_workers={w.workers}" + (f", multiprocessing_context={context!r}" if context else "")
    evidence = [f"iter(loader) raised {w.iter_error}", f"the loader was built with {built}"]
    if applied:
        evidence.append("--apply changed " + ", ".join(f"{k} {asked.get(k)!r} -> {w.settings.get(k)!r}" for k in applied))
    if any(word in w.iter_error.lower() for word in _PICKLING):
        how = f"multiprocessing_context={context!r}" if context else "the start method in use (spawn or forkserver)"
        cause = (f"Under {how} each worker starts a fresh interpreter and receives a pickled copy of the dataset, "
                 "its collate_fn and worker_init_fn: a lambda, a local function or an open handle in them cannot be "
                 "pickled (fork, Linux's default before Python 3.14, copies them without pickling).")
        keep = ("drop multiprocessing_context from the --apply file (fork)" if "multiprocessing_context" in applied
                else "start the workers with fork (multiprocessing_context='fork')")
        fix = (f"Make the dataset picklable (a module-level function or a class in place of the lambda), or {keep}.")
    else:
        cause = ("The loader failed before its first batch: with workers, usually while starting them (too little "
                 "memory or /dev/shm, a worker_init_fn that raises, a start method the program cannot import "
                 "under); without, the sampler or the dataset's __iter__.")
        fix = ("The program's traceback shows where; run it with num_workers=0 to see whether the dataset itself "
               "starts" + (", and with its own settings (without --apply) to compare" if applied else "") + ".")
    return found(CRITICAL, f"{w.name} never gave a batch: iter(loader) raised {kind}", evidence, cause, fix)
