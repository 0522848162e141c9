"""What the training script does, which neither machine facts nor loader settings carry.

Read from a config's ``[training]`` table; the context rules (BatchNorm, DDP, cuDNN) need it.
No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any


@dataclass
class TrainingContext:
    """What the training script does, which neither machine facts nor loader settings carry.

    Every field is optional; ``None`` means "not known", and rules that need a field stay silent
    while it is unknown.
    """

    device: str | None = None  # "cuda" | "cpu": where the training step runs
    uses_batchnorm: bool | None = None  # the model has BatchNorm layers (not SyncBatchNorm)
    distributed: bool | None = None  # DDP / FSDP: one process per GPU
    uses_distributed_sampler: bool | None = None  # a DistributedSampler (or equivalent) is passed
    calls_set_epoch: bool | None = None  # sampler.set_epoch(epoch) is called every epoch
    fixed_input_size: bool | None = None  # every batch has the same shape
    uses_convolutions: bool | None = None  # the model has conv layers (what cudnn.benchmark tunes)
    cudnn_benchmark: bool | None = None  # torch.backends.cudnn.benchmark as set by the script
    dataset_len: int | None = None  # samples in the (whole) training set
    tensors_per_batch: int | None = None  # tensors in one collated batch (images + labels = 2)

    FIELDS = {  # what each field means, for docs and the app's form
        "device": "where the training step runs: 'cuda' or 'cpu'",
        "uses_batchnorm": "the model has BatchNorm layers (SyncBatchNorm counts as not)",
        "distributed": "one process per GPU (DDP / FSDP)",
        "uses_distributed_sampler": "the DataLoader is given a DistributedSampler (or equivalent)",
        "calls_set_epoch": "sampler.set_epoch(epoch) is called at the start of every epoch",
        "fixed_input_size": "every batch has the same shape",
        "uses_convolutions": "the model has convolution layers (what cudnn.benchmark tunes)",
        "cudnn_benchmark": "torch.backends.cudnn.benchmark as the script sets it",
        "dataset_len": "samples in the whole training set",
        "tensors_per_batch": "tensors in one collated batch (images + labels = 2; detection targets add one per image)",
    }

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> TrainingContext:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown training-context keys: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}
