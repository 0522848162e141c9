"""What the three watch loops share: the JPEG ImageFolder, the small CNN and a steady-rate clock.

Not a loop itself. The images are benchmarks/torchvision_pipeline.py's deterministic synthetic
JPEGs, generated on first use (about 15 s) in ``$LOADERDOC_BENCH_WATCH_IMAGES`` (default
``~/.cache/loaderdoc/bench-images-watch-2560``): 2560 images (40 batches of 64 an epoch),
128-224 px a side, so that a CPU epoch stays a few seconds while every sample is still a real
JPEG decode.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # run as a script: benchmarks/ is not importable otherwise
    sys.path.insert(0, str(REPO))

from benchmarks.torchvision_pipeline import (  # noqa: E402
    IMAGENET_MEAN,
    IMAGENET_STD,
    generate_images,
    import_torchvision,
    read_all_files,
)

IMAGES = 2560
CLASSES = 10
CROP = 160  # 224 costs ~200 ms a step for this CNN on 2 cores (cache-bound); 160 keeps it ~55 ms


def loop_arguments(parser, steps_per_epoch: int):
    """The arguments every image loop takes (``--steps``, the author's ``--workers``, ``--threads``), the
    extra ones ``parser`` already holds; parsed, with torch's threads set where asked."""
    parser.add_argument("--steps", type=int, default=3 * steps_per_epoch, help="training steps in all")
    parser.add_argument("--workers", type=int, default=0,
                        help="the script author's num_workers (default 0); --apply changes it")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (a user's OMP_NUM_THREADS=1)")
    args = parser.parse_args()
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    return args


def image_root() -> Path:
    value = os.environ.get("LOADERDOC_BENCH_WATCH_IMAGES")
    root = Path(value).expanduser() if value else Path.home() / ".cache" / "loaderdoc" / f"bench-images-watch-{IMAGES}"
    return generate_images(root, count=IMAGES, classes=CLASSES, min_size=128, max_size=224)


def train_folder(root: Path):
    tv = import_torchvision()
    T = tv.transforms
    transform = T.Compose([T.RandomResizedCrop(CROP), T.RandomHorizontalFlip(), T.ToTensor(),
                           T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    dataset = tv.datasets.ImageFolder(str(root), transform=transform)
    # a file read minutes ago can be cold again on this VM: a cold read would make the first
    # run of a comparison I/O-bound (25 MB, well under a second)
    read_all_files(dataset)
    return dataset


def val_folder(root: Path):
    tv = import_torchvision()
    T = tv.transforms
    transform = T.Compose([T.Resize(CROP), T.CenterCrop(CROP), T.ToTensor(),
                           T.Normalize(IMAGENET_MEAN, IMAGENET_STD)])
    return tv.datasets.ImageFolder(str(root), transform=transform)


def small_cnn(classes: int = CLASSES):
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, classes),
    )


class SteadyClock:
    """Steps/s as loaderdoc watch counts them: each epoch from the end of its first batch's step
    to the end of its last (the first batch's wait is worker start-up, not steady state)."""

    def __init__(self) -> None:
        self.batches = 0
        self.seconds = 0.0
        self.steps = 0
        self._first_end: float | None = None
        self._last_end: float | None = None
        self._in_epoch = 0
        self.started = time.perf_counter()

    def step_done(self) -> None:
        now = time.perf_counter()
        self.steps += 1
        self._in_epoch += 1
        if self._first_end is None:
            self._first_end = now
        self._last_end = now

    def epoch_done(self) -> None:
        if self._first_end is not None and self._in_epoch > 1:
            self.batches += self._in_epoch - 1
            self.seconds += self._last_end - self._first_end
        self._first_end = self._last_end = None
        self._in_epoch = 0

    def report(self, name: str, **extra) -> None:
        rate = self.batches / self.seconds if self.seconds > 0 else None
        print(json.dumps({"loop": name, "steps": self.steps, "steady_steps_per_s": rate,
                          "wall_s": time.perf_counter() - self.started, **extra}), flush=True)
