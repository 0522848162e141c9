"""What the training script does, which neither machine facts nor loader settings carry.

Read from a config's ``[training]`` table; the context rules (BatchNorm, DDP, cuDNN) need it.
No torch, no textual.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, fields
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import coerce_bool, coerce_count, location

DEVICES = ("cuda", "cpu")
_COUNTS = {"dataset_len", "tensors_per_batch"}


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
    def from_mapping(cls, data: dict[str, Any], *, where: str = "", lines: dict[str, int] | None = None
                     ) -> TrainingContext:
        """Build from a config's ``[training]`` table; every value is checked (SettingsError names
        the file, line and key). ``None`` (YAML ``null``) means "not known", as when left out."""
        lines = lines or {}
        known = {f.name for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in data.items():
            loc = location(where, lines.get(key))
            if key not in known:
                hint = difflib.get_close_matches(str(key), sorted(known), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise SettingsError(f"{loc}[training]: unknown key {key!r}{suggestion}; known: {', '.join(sorted(known))}")
            if raw is not None:
                kwargs[key] = _check_field(key, raw, f"{loc}[training] ")
        return cls(**kwargs)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def _check_field(key: str, raw: Any, loc: str) -> Any:
    if key == "device":
        if raw not in DEVICES:
            raise SettingsError(f"{loc}device must be one of {', '.join(DEVICES)}, got {raw!r}")
        return raw
    if key in _COUNTS:
        value = coerce_count(key, raw, loc)
        if value < 1:
            raise SettingsError(f"{loc}{key} must be >= 1, got {value}")
        return value
    return coerce_bool(key, raw, loc)
