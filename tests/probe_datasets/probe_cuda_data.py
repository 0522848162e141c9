"""A --dataset factory that initialises CUDA in the probe's own process, as a user's factory that
sets up the device (or imports the training module) does (issue 48), for tests/test_probe_cuda_fork.py.
Its samples wait 2 ms each (storage), so the probe picks workers and then measures pinned memory."""

from __future__ import annotations

import time

import torch
from torch.utils.data import Dataset


class Waiting(Dataset):
    def __len__(self) -> int:
        return 4096

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.002)
        return torch.zeros(16)


def factory() -> Waiting:
    torch.cuda.init()  # the stand-in's CUDA (tests/support/fake_cuda.py): no GPU here
    return Waiting()
