"""A training loop whose loading and step are both CPU work, for ``loaderdoc watch`` tests.

Each sample burns ``--load-ms`` of CPU in ``__getitem__`` (the stand-in for JPEG decoding and
transforms) and each step burns ``--step-ms`` of CPU in the training process (the stand-in for a
small model trained on the CPU); the sleep variant (``--io``) sleeps instead, like a read from a
slow disk, and its step sleeps like a GPU step. The DataLoader settings are the script's own
(``--workers``); ``loaderdoc watch --apply FILE`` changes them without touching this file.
"""

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


def burn(seconds: float) -> None:
    end = time.thread_time() + seconds  # CPU time, not wall time: contention stretches it as it would real work
    while time.thread_time() < end:
        pass


class Samples(Dataset):
    def __init__(self, n: int, load_s: float, io: bool) -> None:
        self.n, self.load_s, self.io = n, load_s, io

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.io:
            time.sleep(self.load_s)
        else:
            burn(self.load_s)
        return torch.full((16,), float(i))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--load-ms", type=float, default=8.0, help="per sample")
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--steps", type=int, default=40, help="per epoch")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--io", action="store_true", help="sleep instead of burning CPU (loading and step)")
    args = parser.parse_args()
    data = Samples(args.steps * args.batch_size, args.load_ms / 1000, args.io)
    loader = DataLoader(data, batch_size=args.batch_size, num_workers=args.workers)
    for _ in range(args.epochs):
        for _batch in loader:
            if args.io:
                time.sleep(args.step_ms / 1000)
            else:
                burn(args.step_ms / 1000)


if __name__ == "__main__":
    main()
