"""An I/O-bound loop: each sample costs an 8 ms sleep (a stand-in for a network or disk read
that leaves the CPU idle), batch 8, num_workers=8, and a 16 ms ``time.sleep`` as a GPU-like step
(the host waits, the CPU is free).

    python benchmarks/watch_loops/io_bound.py [--steps N]

One worker makes a batch in 64 ms, so the 16 ms step needs four or more workers to be fed: eight
workers on a 2-core machine is over the core count, yet right for this load. The DataLoader
settings are hard-coded as a script author would write them; ``loaderdoc watch --apply`` is what
changes them. Needs torch only.
"""

from __future__ import annotations

import argparse
import time

import _common
import torch
from torch.utils.data import DataLoader, Dataset

SAMPLES_PER_EPOCH = 1600  # 200 batches of 8
READ_S = 0.008
STEP_S = 0.016


class SlowReads(Dataset):
    def __len__(self) -> int:
        return SAMPLES_PER_EPOCH

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(READ_S)
        return torch.full((16,), float(index))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3 * SAMPLES_PER_EPOCH // 8, help="training steps in all")
    parser.add_argument("--workers", type=int, default=8,
                        help="the script author's num_workers (default 8); --apply changes it")
    args = parser.parse_args()

    loader = DataLoader(SlowReads(), batch_size=8, shuffle=True, num_workers=args.workers)
    clock = _common.SteadyClock()
    total = 0.0
    while clock.steps < args.steps:
        for batch in loader:
            total += float(batch.sum())
            time.sleep(STEP_S)
            clock.step_done()
            if clock.steps >= args.steps:
                break
        clock.epoch_done()
    clock.report("io_bound", checksum=total)


if __name__ == "__main__":
    main()
