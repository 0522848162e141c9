"""Whether the workers of a watched loader over an IterableDataset replay one stream: each worker
yields every sample (the dataset never asks ``get_worker_info()``), so an epoch holds the data
``num_workers`` times and its rate counts samples again (issue 49). The hook digests the first
epoch's first batches, two rounds of one batch per worker, and stops at the first sign of a split
stream (two workers' batches differ), so a sharded stream costs two digests. The digests run
after the batch's wait is timed and before its step's clock starts: they count in neither."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

if __package__:  # imported as loaderdoc.watching.replays
    from loaderdoc.base.batches import batch_digest, repeated_streams
else:  # loaded by path beside hook.py, which loads loaderdoc.base's batches.py first
    batch_digest = sys.modules["_loaderdoc_watch_batches"].batch_digest
    repeated_streams = sys.modules["_loaderdoc_watch_batches"].repeated_streams


def looker(loader: Any, record: Any) -> Callable[[Any, Any], None] | None:
    """``look(watched, batch)`` for the first epoch of ``loader``, setting ``record.replays``
    (True, False, or None: it cannot tell) and ``watched._look = None`` once it knows; None where
    the question does not arise (a map-style dataset, fewer than 2 workers)."""
    data = sys.modules.get("torch.utils.data")
    workers = getattr(loader, "num_workers", 0)
    if data is None or not isinstance(workers, int) or workers < 2:
        return None
    if not isinstance(getattr(loader, "dataset", None), data.IterableDataset):
        return None
    digests: list[str | None] = []

    def look(watched: Any, batch: Any) -> None:
        try:
            digest = batch_digest(batch)
        except Exception:  # a batch numpy cannot read (a tensor subclass on a device): no verdict
            digest = None
        digests.append(digest)
        n = len(digests)
        if digest is None:
            verdict = None  # a batch without tensors: no verdict
        elif digest != digests[(n - 1) // workers * workers]:
            verdict = False  # two workers' batches of one round differ: the stream is split
        elif n >= 2 * workers:
            verdict = repeated_streams(digests, workers)  # True, or None for a stream that never changes
        else:
            return
        record.replays = verdict
        watched._look = None
    return look
