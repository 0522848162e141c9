"""Synthetic torch Datasets for the presets in :mod:`loaderdoc.probing.workloads` (imports torch).

Each ``__getitem__`` really spends the preset's costs: CPU time holding the GIL (a Python loop),
CPU time releasing it (hashing a buffer, which CPython does without the GIL), and I/O wait (a
sleep), then returns a fresh copy of a sample tensor so the copy and the transfer to the main
process cost what they would for real data.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.data import Dataset

if TYPE_CHECKING:  # workloads builds these datasets; it is not imported back at run time
    from loaderdoc.probing.workloads import Preset

_HASH_CHUNK = bytes(64 * 1024)  # ~50-100 us of sha256: fine-grained enough to stop on time


def burn_cpu_holding_gil(ms: float) -> None:
    """Spend ``ms`` of this thread's CPU time in Python bytecode (the GIL stays held)."""
    if ms <= 0:
        return
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


def burn_cpu_releasing_gil(ms: float) -> None:
    """Spend ``ms`` of CPU time in C code that releases the GIL (sha256 over 64 KiB chunks)."""
    if ms <= 0:
        return
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        hashlib.sha256(_HASH_CHUNK).digest()


def _mix(index: int) -> int:
    """A cheap deterministic hash of the index (spikes and lengths repeat between runs)."""
    return (index * 2654435761) & 0xFFFFFFFF


_TORCH_DTYPES = {
    "uint8": torch.uint8, "int8": torch.int8, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "int16": torch.int16, "uint16": torch.int16, "float32": torch.float32, "int32": torch.int32,
    "float64": torch.float64, "int64": torch.int64,
}


def _random_tensor(shape: tuple[int, ...], dtype: str, generator: torch.Generator) -> torch.Tensor:
    tdtype = _TORCH_DTYPES[dtype]  # uint16 is stored as int16: same bytes, wider torch support
    if tdtype.is_floating_point:
        return torch.rand(shape, generator=generator).to(tdtype)
    high = 2**7 if tdtype.itemsize == 1 else 2**15
    return torch.randint(0, high, shape, generator=generator, dtype=tdtype)


class SyntheticDataset(Dataset):
    """A map-style dataset that pays ``spec``'s per-sample costs and returns ``(sample, label)``."""

    def __init__(self, spec: Preset, seed: int = 0) -> None:
        self.spec = spec
        gen = torch.Generator().manual_seed(seed)
        if spec.in_memory:
            # materialised up front, as a pre-processed dataset held in RAM would be
            self.storage = _random_tensor((spec.length, *spec.sample_shape), spec.dtype, gen)
            self.template = None
        else:
            self.storage = None
            self.template = _random_tensor(spec.sample_shape, spec.dtype, gen)

    def __len__(self) -> int:
        return self.spec.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        spec = self.spec
        if index < 0 or index >= spec.length:
            raise IndexError(f"index {index} out of range for a dataset of {spec.length}")
        wait_ms = spec.io_ms
        if spec.io_spike_every and _mix(index) % spec.io_spike_every == 0:
            wait_ms += spec.io_spike_ms
        if wait_ms:
            time.sleep(wait_ms / 1000.0)
        burn_cpu_releasing_gil(spec.cpu_ms_nogil)
        burn_cpu_holding_gil(spec.cpu_ms_gil)
        label = index % 10
        if self.storage is not None:
            return self.storage[index], label
        sample = self.template
        if spec.variable_length:
            length = 1 + _mix(index) % spec.sample_shape[0]
            sample = sample[:length]
        return sample.clone(), label


def pad_collate(batch: list[tuple[torch.Tensor, int]]) -> dict[str, torch.Tensor]:
    """Pad variable-length sequences to the longest in the batch (what NLP loaders do)."""
    sequences = [s for s, _ in batch]
    longest = max(s.shape[0] for s in sequences)
    padded = sequences[0].new_zeros((len(sequences), longest, *sequences[0].shape[1:]))
    for row, seq in enumerate(sequences):
        padded[row, : seq.shape[0]] = seq
    return {
        "input_ids": padded,
        "lengths": torch.tensor([s.shape[0] for s in sequences]),
        "labels": torch.tensor([label for _, label in batch]),
    }


def build_synthetic(spec: Preset) -> tuple[Dataset, Callable[..., Any] | None]:
    spec.check()
    return SyntheticDataset(spec), (pad_collate if spec.variable_length else None)
