"""A CPU image-classification loop: ImageFolder over real JPEGs, the ImageNet training
transforms (RandomResizedCrop, flip, ToTensor, Normalize), a small CNN, SGD, batch 64.

    python benchmarks/watch_loops/cpu_cnn.py [--steps N] [--workers N] [--threads N]

The DataLoader settings are hard-coded as a script author would write them (num_workers=0, or
the author's ``--workers N``); ``loaderdoc watch --apply`` is what changes them. Needs torch,
torchvision and Pillow.
"""

from __future__ import annotations

import argparse

import _common
import torch
from torch import nn
from torch.utils.data import DataLoader

STEPS_PER_EPOCH = _common.IMAGES // 64


def main() -> None:
    parser = argparse.ArgumentParser()
    args = _common.loop_arguments(parser, STEPS_PER_EPOCH)

    torch.manual_seed(0)
    dataset = _common.train_folder(_common.image_root())
    loader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=args.workers)
    model = _common.small_cnn()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    clock = _common.SteadyClock()
    loss = torch.tensor(0.0)
    while clock.steps < args.steps:
        for images, labels in loader:
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(images), labels)
            loss.backward()
            opt.step()
            clock.step_done()
            if clock.steps >= args.steps:
                break
        clock.epoch_done()
    clock.report("cpu_cnn", loss=loss.item())


if __name__ == "__main__":
    main()
