"""A real ``lightning.Trainer.fit`` on the CPU: the small CNN as a LightningModule over the JPEG
ImageFolder (the ImageNet training transforms), batch 64, a validation loader over a 640-image
slice of the same files (resize + centre crop), 3 epochs, no checkpoints, logger or progress bar.

    python benchmarks/watch_loops/lightning_fit.py [--steps N] [--epochs N] [--threads N]

Both DataLoaders are hard-coded with num_workers=0, as a script author would write them;
``loaderdoc watch --apply`` is what changes them. Needs torch, lightning, torchvision and Pillow.
"""

from __future__ import annotations

import argparse
import warnings

import _common

# before lightning: torchmetrics imports torchvision, and a CUDA-linked torchvision beside a CPU
# torch only imports through this stand-in (see benchmarks/torchvision_pipeline.py)
_common.import_torchvision()

import lightning as L  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils.data import DataLoader, Subset  # noqa: E402

EPOCHS = 3
VAL_IMAGES = 640


class Classifier(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = _common.small_cnn()

    def training_step(self, batch, batch_idx):
        images, labels = batch
        return nn.functional.cross_entropy(self.net(images), labels)

    def validation_step(self, batch, batch_idx):
        images, labels = batch
        self.log("val_loss", nn.functional.cross_entropy(self.net(images), labels))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Clock(L.Callback):
    """The steady train rate, counted as loaderdoc watch counts it (see _common.SteadyClock)."""

    def __init__(self) -> None:
        self.clock = _common.SteadyClock()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.clock.step_done()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.clock.epoch_done()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=-1, help="training steps in all (default: 3 epochs)")
    parser.add_argument("--epochs", type=int, default=EPOCHS,
                        help=f"max_epochs (default {EPOCHS}); fit stops at --steps or --epochs, the first reached")
    parser.add_argument("--threads", type=int, help="torch.set_num_threads (a user's OMP_NUM_THREADS=1)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    # Lightning's "consider increasing num_workers" hint: loaderdoc is the one judging that here
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")

    L.seed_everything(0, verbose=False)
    root = _common.image_root()
    train = DataLoader(_common.train_folder(root), batch_size=64, shuffle=True, num_workers=0)
    val_set = _common.val_folder(root)
    every = len(val_set) // VAL_IMAGES  # a slice across every class, not the first class only
    val = DataLoader(Subset(val_set, range(0, every * VAL_IMAGES, every)), batch_size=64, num_workers=0)
    clock = Clock()
    trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=args.epochs, max_steps=args.steps,
                        enable_checkpointing=False, logger=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[clock])
    trainer.fit(Classifier(), train, val)
    clock.clock.report("lightning_fit", val_loss=float(trainer.callback_metrics.get("val_loss", float("nan"))))


if __name__ == "__main__":
    main()
