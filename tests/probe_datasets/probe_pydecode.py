"""A pure-Python decode workload for the probe (imported as ``probe_pydecode:make``).

Each sample is a checksum over a bytes object in a Python loop: about 1.5 ms of CPU time a sample
that holds the GIL and touches no C library, like a hand-written parser or tokeniser. Workers doing
it are CPU-bound, yet leave the CPUs idle now and then (handing a batch over, the training process
unpickling it, waiting for indices): the workload on which more workers than CPUs measured faster.
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import Dataset

_CALIBRATED: dict[float, int] = {}


def _checksum(data: bytes) -> int:
    h = 0
    for b in data:
        h = (h * 31 + b) & 0xFFFFFFFF
    return h


def _length_for(ms: float) -> int:
    """Bytes whose checksum takes about ``ms`` of CPU on this machine (measured once per process)."""
    if ms not in _CALIBRATED:
        import time

        probe = os.urandom(20_000)
        best = min(_timed(probe, time) for _ in range(5))
        _CALIBRATED[ms] = max(1, int(len(probe) * ms / 1000.0 / best))
    return _CALIBRATED[ms]


def _timed(data: bytes, time) -> float:
    t = time.thread_time()
    _checksum(data)
    return max(1e-6, time.thread_time() - t)


class PyDecode(Dataset):
    """``n`` samples, each a checksum over ``length`` bytes (about ``ms`` of CPU) and a small tensor."""

    def __init__(self, n: int = 4096, ms: float = 1.5, length: int | None = None) -> None:
        self.n = n
        self.length = length or _length_for(ms)
        self.blob = os.urandom(self.length + 4096)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        off = (i * 37) % 4096
        h = _checksum(self.blob[off:off + self.length])
        return torch.full((64,), float(h & 0xFFFF)), i % 10


def make():
    return PyDecode()
