"""A training loop whose loading reads real files, for ``loaderdoc watch``'s read accounting.

``--mode cold``: the page cache is dropped for the files before each epoch
(``posix_fadvise(DONTNEED)`` on each), so every sample comes from the disk; ``cached``: the files
are read once before the loop, so the page cache serves them; ``sleep``: no file is read, each
sample sleeps ``--sleep-ms`` (a wait on the network or a lock). The step sleeps ``--step-ms``
(a GPU step). Prints one JSON line: the bytes the loop read and its batches.
"""

import argparse
import json
import os
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Files(Dataset):
    def __init__(self, paths: list[str], sleep_s: float | None) -> None:
        self.paths, self.sleep_s = paths, sleep_s

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> torch.Tensor:
        if self.sleep_s is not None:
            time.sleep(self.sleep_s)
            return torch.zeros(8)
        with open(self.paths[i], "rb") as fh:
            data = fh.read()
        return torch.tensor([len(data)], dtype=torch.int64)


def drop_from_page_cache(paths: list[str]) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("folder")
    parser.add_argument("--mode", choices=("cold", "cached", "sleep"), required=True)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--persistent", action="store_true")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--sleep-ms", type=float, default=4.0)
    parser.add_argument("--step-ms", type=float, default=1.0)
    args = parser.parse_args()
    paths = sorted(os.path.join(args.folder, n) for n in os.listdir(args.folder))
    if args.mode == "cached":
        for path in paths:
            with open(path, "rb") as fh:
                fh.read()
    loader = DataLoader(Files(paths, args.sleep_ms / 1000 if args.mode == "sleep" else None),
                        batch_size=args.batch, num_workers=args.workers,
                        persistent_workers=args.persistent and args.workers > 0)
    read = batches = 0
    for _ in range(args.epochs):
        if args.mode == "cold":
            drop_from_page_cache(paths)
        for batch in loader:
            read += int(batch.sum()) if args.mode != "sleep" else 0
            batches += 1
            time.sleep(args.step_ms / 1000)
    print(json.dumps({"read_bytes": read, "batches": batches}))


if __name__ == "__main__":
    main()
