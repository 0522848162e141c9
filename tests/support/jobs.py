"""Pieces of the tiny training scripts the framework tests write and run for real (watch's and
tune's): a Lightning module on a 4-feature regression, the item it learns from, and a Trainer that
trains it on the CPU for EPOCHS epochs without checkpoints, logger or progress bar; and the same
model and items for the Hugging Face Trainer. A script puts its own dataset (``Slow``) and
``EPOCHS`` before them."""

LIGHTNING_TINY = """
import lightning as L
from torch.utils.data import DataLoader

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, i):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)
    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)

def item(i):
    return torch.full((4,), float(i)), torch.tensor([float(i)])

trainer = L.Trainer(max_epochs=EPOCHS, accelerator="cpu", devices=1, num_sanity_val_steps=2,
                    enable_checkpointing=False, logger=False, enable_progress_bar=False,
                    enable_model_summary=False, default_root_dir=".")
"""

HUGGING_FACE_TINY = """
from transformers import Trainer, TrainingArguments

class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def forward(self, x, labels=None):
        out = self.layer(x)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}

def item(i):
    return {"x": torch.full((4,), float(i)), "labels": torch.tensor([float(i)])}
"""
