"""A small model trained on the CPU from a DataLoader whose samples sleep, for ``watch --trace``.

``--batches`` per epoch, ``--epochs``; each step is a Linear layer's forward and backward, a plain
SGD update and one explicit ``torch.mm`` (so the trace holds ``aten::mm``). The update is written
out: ``torch.optim``'s first step imports ``torch._dynamo`` (about 1.2 CPU-s in a process where
nothing else imports it), which the tests of ``--trace`` do not need. ``--own-profiler`` runs the
whole loop inside the program's own ``torch.profiler`` (then loaderdoc's cannot start).
"""

import argparse
import contextlib
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Sleepy(Dataset):
    def __init__(self, n: int, sleep_s: float) -> None:
        self.n, self.sleep_s = n, sleep_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        time.sleep(self.sleep_s)
        return torch.randn(32)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--sleep-ms", type=float, default=1.0)
    parser.add_argument("--own-profiler", action="store_true")
    args = parser.parse_args()
    model = torch.nn.Linear(32, 32)
    loader = DataLoader(Sleepy(4 * args.batches, args.sleep_ms / 1000), batch_size=4, num_workers=args.workers)
    own = torch.profiler.profile() if args.own_profiler else contextlib.nullcontext()
    with own:
        for _ in range(args.epochs):
            for x in loader:
                loss = model(x).pow(2).mean() + torch.mm(x, x.t()).mean()
                model.zero_grad(set_to_none=True)
                loss.backward()
                with torch.no_grad():
                    for param in model.parameters():
                        param -= 0.01 * param.grad
    if args.own_profiler:  # the program's own trace kept its events (loaderdoc's did not take them)
        assert any(e.name == "aten::mm" for e in own.events()), "the program's own profiler recorded nothing"


if __name__ == "__main__":
    main()
