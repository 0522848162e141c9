"""A watched run whose loader counts its data again: each worker of an IterableDataset that never
asks ``get_worker_info()`` yields the whole stream (issue 49). Measured by the watch hook
(``watching/replays.py``); the ``watch`` rules do not judge such a loader's data wait.
"""

from __future__ import annotations

from loaderdoc.advice.findings import CRITICAL, Finding
from loaderdoc.advice.rules.registry import Inputs, found, rule


@rule("watch-stream-replayed", CRITICAL, "Every worker yields the whole stream (measured)", "watch",
      "measured in the run: the loader's dataset is an IterableDataset and, in its first epoch, two rounds of "
      "batches (one per worker) were each the first worker's batch while the stream moved on between them "
      "(content digests, loaderdoc.batches.repeated_streams)")
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
