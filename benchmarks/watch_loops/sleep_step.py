"""CPU-heavy loading, a GPU-like step: cpu_cnn's ImageFolder over real JPEGs with the ImageNet
training transforms (decode, RandomResizedCrop, flip, ToTensor, Normalize), batch 64, and a step
that sleeps ``--step-ms`` and does no torch compute (a GPU step the host waits on).

    python benchmarks/watch_loops/sleep_step.py [--steps N] [--step-ms MS] [--workers N] [--threads N]

``--step-ms`` defaults to 35: a batch cost 72 ms to load in one process with one thread on the
2-CPU dev VM (median of 12 batches after the first, 69-88 ms, 2026-11-28), and half of that is
35 ms, so one worker cannot keep up (about 14 steps/s against the step's 28) and two can, with
both CPUs loading. The DataLoader is written with num_workers=0 (or the author's ``--workers``);
``loaderdoc watch --apply`` / ``tune`` change it. Needs torch, torchvision and Pillow.
"""

from __future__ import annotations

import argparse
import time

import _common
import torch
from torch.utils.data import DataLoader

STEPS_PER_EPOCH = _common.IMAGES // 64
STEP_MS = 35.0  # half of a batch's load with one worker on the dev VM (72 ms): see above


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--step-ms", type=float, default=STEP_MS, help="the sleeping step (default 35)")
    args = _common.loop_arguments(parser, STEPS_PER_EPOCH)

    torch.manual_seed(0)
    dataset = _common.train_folder(_common.image_root())
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=args.workers)
    clock = _common.SteadyClock()
    step_s = args.step_ms / 1000
    while clock.steps < args.steps:
        for _images, _labels in loader:
            time.sleep(step_s)  # the GPU's step: the host waits, its CPUs are free
            clock.step_done()
            if clock.steps >= args.steps:
                break
        clock.epoch_done()
    clock.report("sleep_step", step_ms=args.step_ms)


if __name__ == "__main__":
    main()
