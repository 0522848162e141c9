"""Small user-dataset modules for the probe's tests (imported as ``probe_userdata:FACTORY``).

Everything here is tiny and quick: the tests use budgets of a few seconds.
"""

from __future__ import annotations

import os
import signal
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info


class Squares(Dataset):
    """In-memory-like: index -> a small tensor; optional per-sample sleep (I/O latency)."""

    def __init__(self, n: int = 512, io_ms: float = 0.0) -> None:
        self.n = n
        self.io_ms = io_ms

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        if self.io_ms:
            time.sleep(self.io_ms / 1000)
        return torch.full((8,), float(i * i)), i % 3


def make():
    return Squares()


def make_with_collate():
    def collate(batch):
        xs = torch.stack([x for x, _ in batch])
        return {"x": xs, "n": len(batch)}

    return Squares(), collate


def make_io_bound():
    """50 ms of I/O latency per sample: more workers must help, cores or not."""
    return Squares(n=4096, io_ms=50.0)


class Faulty(Squares):
    """Fails at index 13 in a chosen way."""

    def __init__(self, mode: str) -> None:
        super().__init__(n=64)
        self.mode = mode

    def __getitem__(self, i: int):
        in_worker = get_worker_info() is not None
        if i == 13:
            if self.mode == "raise":
                raise ValueError("sample 13 is corrupt")
            if self.mode == "kill" and in_worker:
                os.kill(os.getpid(), signal.SIGKILL)
            if self.mode == "hang-worker" and in_worker:
                time.sleep(3600)
        if self.mode == "hang" :
            time.sleep(3600)  # hangs everywhere, also with num_workers=0
        return super().__getitem__(i)


def make_raising():
    return Faulty("raise")


def make_killing():
    return Faulty("kill")


def make_hanging_worker():
    return Faulty("hang-worker")


def make_hanging():
    return Faulty("hang")


class Stream(IterableDataset):
    def __iter__(self):
        for i in range(10_000):
            yield torch.tensor([i])


def make_iterable():
    return Stream()


def make_io_4ms():
    """Every sample sleeps 4 ms: the dataset of tests/fixtures/tune/io-bound.json's loop."""
    return Squares(n=100_000, io_ms=4.0)


def make_slow():
    """Every sample sleeps 20 ms: a probe of it is still running when the tests interrupt it."""
    return Squares(n=100_000, io_ms=20.0)


# ---- factories that are wrong in the ways users get them wrong ----------------------------------
NOT_CALLABLE = 42


def returns_int():
    return 7


def returns_none():
    return None


def factory_raises():
    raise FileNotFoundError("/data/train does not exist")


def returns_bad_collate():
    return Squares(), "not a function"


def returns_empty():
    return Squares(n=0)


class ShortStream(IterableDataset):
    def __iter__(self):
        yield from (torch.tensor([i]) for i in range(3))


def make_short_stream():
    return ShortStream()


class Files(Dataset):
    """Index -> the bytes of one file on disk, as a uint8 tensor: a dataset of real reads."""

    def __init__(self, paths: list[str]) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        with open(self.paths[i], "rb") as fh:
            return torch.frombuffer(bytearray(fh.read()), dtype=torch.uint8)[:1024].clone()


def write_files(root, count: int, size: int) -> list[str]:
    """``count`` files of ``size`` random bytes under ``root``, flushed to storage (so that the page
    cache can drop them: dirty pages cannot be evicted)."""
    paths = []
    for k in range(count):
        path = os.path.join(root, f"f{k:04d}.bin")
        with open(path, "wb") as fh:
            fh.write(os.urandom(size))
            fh.flush()
            os.fsync(fh.fileno())
        paths.append(path)
    return paths


def evict(paths: list[str]) -> None:
    """Drop the files from the page cache (POSIX_FADV_DONTNEED), so the next read goes to storage."""
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
