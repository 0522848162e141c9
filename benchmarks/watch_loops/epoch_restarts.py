"""Short epochs whose workers start again each one (``persistent_workers=False``): what a restart
costs, and what ``watch`` and ``tune`` price it at (issue 47: on a GPU run watch said 1.10x, tune's
trigger 57 %, and turning persistent workers on measured 1.37x).

    python benchmarks/watch_loops/epoch_restarts.py [--workers N] [--load-s S] [--init-s S]
        [--big-gib G] [--epochs N] [--persistent]

Each sample sleeps ``--load-s`` (storage the workers wait on), batch 4, 92 samples (23 batches an
epoch, as that GPU run's), a 20 ms sleeping step (a GPU step). ``--init-s``: each worker's set-up,
CPU burnt in ``worker_init_fn`` (opening its files, building its tables). ``--big-gib``: the
training process holds that much memory (a model, a CUDA context's host side), so each worker's
fork takes longer. It prints the loop's steps per second over the epochs after the first and the
seconds an epoch; ``--persistent`` keeps the workers, the pair gives the real gain.

The two cases measured on the 2-CPU dev VM (2026-11-28; tests/fixtures/watch/epoch-restarts-*.json
are the watched runs):
- ``--workers 16 --load-s 0.5 --big-gib 3``: 5.22-5.32 s an epoch, 4.16 s persistent (1.25-1.28x);
  iter(loader) took 0.7-0.86 s (sixteen forks of a 3 GiB process) and the shutdown 0.28-0.30 s.
- ``--workers 8 --load-s 0.08 --init-s 0.3``: 2.40-2.51 s an epoch, 1.14-1.15 s persistent
  (2.11-2.18x): the set-up of 8 workers on 2 CPUs.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset

SAMPLES = 92  # 23 batches of 4
STEP_S = 0.02


class Sleepy(Dataset):
    def __init__(self, load_s: float) -> None:
        self.load_s = load_s

    def __len__(self) -> int:
        return SAMPLES

    def __getitem__(self, index: int) -> torch.Tensor:
        time.sleep(self.load_s)
        return torch.zeros(1000)


class BurnOnStart:
    """worker_init_fn: ``seconds`` of CPU in each worker as it starts."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, worker_id: int) -> None:
        start = time.process_time()
        while time.process_time() - start < self.seconds:
            pass


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--load-s", type=float, default=0.5)
    parser.add_argument("--init-s", type=float, default=0.0)
    parser.add_argument("--big-gib", type=float, default=0.0)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--persistent", action="store_true")
    args = parser.parse_args()
    held = torch.ones(int(args.big_gib * 2**28)) if args.big_gib else None  # 4 bytes a float, touched
    loader = DataLoader(Sleepy(args.load_s), batch_size=4, num_workers=args.workers,
                        worker_init_fn=BurnOnStart(args.init_s) if args.init_s else None,
                        persistent_workers=args.persistent)
    started = None
    for epoch in range(args.epochs):
        if epoch == 1:
            started = time.perf_counter()
        for _ in loader:
            time.sleep(STEP_S)
    seconds = time.perf_counter() - started
    steps = (args.epochs - 1) * len(loader)
    print(f"persistent_workers={args.persistent}: {steps / seconds:.2f} steps/s, "
          f"{seconds / (args.epochs - 1):.3f} s an epoch", flush=True)
    del held


if __name__ == "__main__":
    main()
