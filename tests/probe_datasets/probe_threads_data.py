"""A dataset that records the intra-op thread count of the process that loads each sample, for
tests/test_probe_threads.py: at 0 workers that is the probe's measuring process (the training
process's stand-in), in a worker torch's worker loop has set one. Each sample waits 2 ms (storage),
so a batch of 16 outlasts a 5 ms step at 0 workers on any machine, busy or not: the probe always
goes on to measure workers."""

from __future__ import annotations

import os
import time

import torch
from torch.utils.data import Dataset


class ThreadsSeen(Dataset):
    def __init__(self, record: str) -> None:
        self.record = record

    def __len__(self) -> int:
        return 512

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(0.002)
        with open(self.record, "a") as fh:
            fh.write(f"{os.getpid()} {torch.get_num_threads()}\n")
        return torch.zeros(16)


def factory() -> ThreadsSeen:
    return ThreadsSeen(os.environ["THREADS_RECORD"])
