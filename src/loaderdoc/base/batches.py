"""What a batch holds, read without torch: its tensors, their bytes, a digest of their contents; and
whether the workers of a loader over an IterableDataset replay one stream (the probe asks it of a
loader of its own, the watch hook of the run's first epoch). numpy is imported only to digest."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def iter_tensors(batch: Any) -> Iterator[Any]:
    """Every tensor/array in a batch made of tensors, tuples, lists and dicts."""
    if hasattr(batch, "nbytes") and hasattr(batch, "shape"):
        yield batch
    elif isinstance(batch, dict):
        for value in batch.values():
            yield from iter_tensors(value)
    elif isinstance(batch, (list, tuple)):
        for value in batch:
            yield from iter_tensors(value)


def batch_nbytes(batch: Any) -> int:
    return int(sum(int(t.nbytes) for t in iter_tensors(batch)))


def batch_digest(batch: Any) -> str | None:
    """A hash of every tensor in a batch (shape, dtype and bytes); None for a batch without one."""
    import hashlib

    import numpy as np

    digest = hashlib.blake2b(digest_size=16)
    found = False
    for t in iter_tensors(batch):
        found = True
        array = t.detach().cpu().contiguous().numpy() if hasattr(t, "detach") else np.ascontiguousarray(t)
        digest.update(f"{tuple(array.shape)} {array.dtype};".encode())
        digest.update(array.reshape(-1).view(np.uint8).data)
    return digest.hexdigest() if found else None


def repeated_streams(digests: list[str | None], workers: int) -> bool | None:
    """Whether the workers of a DataLoader over an IterableDataset yield the same stream.

    Batch k comes from worker ``k % workers`` (torch hands tasks out round-robin and returns them
    in order). True when, in two rounds, every worker delivered the first worker's batch while
    the stream moved on between the rounds: each worker replays the whole stream. False when
    workers delivered different batches. None when it cannot tell: too few batches, a batch
    without tensors, or a stream whose batches never change.
    """
    if workers < 2 or len(digests) < 2 * workers or None in digests[:2 * workers]:
        return None
    rounds = [digests[:workers], digests[workers:2 * workers]]
    if any(len(set(r)) > 1 for r in rounds):
        return False
    return None if rounds[0][0] == rounds[1][0] else True
