"""What the probe loads: synthetic presets modelled on real loaders, or the user's own Dataset.

Importing this module does not import torch: the CLI and the TUI list :data:`PRESETS` cheaply.
Building a preset's Dataset (:meth:`Preset.build`) and :func:`load_user_dataset` import
torch when they are called.
"""

from __future__ import annotations

import dataclasses
import difflib
import importlib
import importlib.util
import math
import os
import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoc.base.errors import UserError
from loaderdoc.base.units import DTYPE_BYTES
from loaderdoc.base.usercode import UserCodeExit


# ---- errors: each names the fix in one line ---------------------------------------------------
class WorkloadError(UserError):
    """The workload (preset or --dataset) cannot be built."""


class UnknownPresetError(WorkloadError):
    pass


class DatasetSpecError(WorkloadError):
    """--dataset is not of the form MODULE:FACTORY."""


class DatasetModuleNotFound(WorkloadError):
    pass


class DatasetImportError(WorkloadError):
    """The module exists but importing it raised."""


class DatasetAttributeError(WorkloadError):
    pass


class DatasetNotCallable(WorkloadError):
    pass


class DatasetFactoryError(WorkloadError):
    """The factory raised; ``details`` holds its traceback."""

    def __init__(self, message: str, details: str = "") -> None:
        super().__init__(message)
        self.details = details


class DatasetTypeError(WorkloadError):
    """The factory returned something that is not a Dataset."""


# ---- presets ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Preset:
    """A synthetic workload: what one sample looks like and what producing it costs.

    Costs are per sample. CPU costs are burnt in *CPU time* (not wall time), so a worker that
    is descheduled on a busy machine still has to do all of its work, as a real decoder would.
    """

    name: str
    description: str
    sample_shape: tuple[int, ...]
    dtype: str = "uint8"
    length: int = 100_000  # samples in the dataset (synthetic ones cost nothing to hold)
    cpu_ms_gil: float = 0.0  # Python-level work that holds the GIL (parsing, Python augment)
    cpu_ms_nogil: float = 0.0  # C-level work that releases the GIL (libjpeg decode, resize)
    io_ms: float = 0.0  # waiting for storage or the network (sleeps; uses no CPU)
    io_spike_ms: float = 0.0  # extra wait on "spiky" samples (a slow object-store request)
    io_spike_every: int = 0  # one sample in this many is spiky (0 = never)
    variable_length: bool = False  # first dimension varies per sample; a padding collate batches it
    in_memory: bool = False  # all samples materialised in RAM up front (a pre-processed tensor)
    batch_size: int = 32  # default batch size for this workload
    step_ms: float = 20.0  # a training step typical for it

    @property
    def sample_bytes(self) -> int:
        """Bytes of one (largest) sample's data tensor."""
        return math.prod(self.sample_shape) * DTYPE_BYTES[self.dtype]

    @property
    def serial_ms_per_sample(self) -> float:
        """Expected time to produce one sample in a single process (spikes averaged in)."""
        spikes = self.io_spike_ms / self.io_spike_every if self.io_spike_every else 0.0
        return self.cpu_ms_gil + self.cpu_ms_nogil + self.io_ms + spikes

    def with_overrides(self, **changes: Any) -> Preset:
        """A copy with some fields replaced (None values are ignored); checks the values."""
        changes = {k: v for k, v in changes.items() if v is not None}
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise WorkloadError(f"unknown workload field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        if "sample_shape" in changes:
            changes["sample_shape"] = tuple(int(d) for d in changes["sample_shape"])
        spec = dataclasses.replace(self, **changes)
        spec.check()
        return spec

    def check(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise WorkloadError(f"dtype {self.dtype!r} is not supported; use one of {', '.join(sorted(DTYPE_BYTES))}")
        if not self.sample_shape or any(d < 1 for d in self.sample_shape):
            raise WorkloadError(f"sample shape {self.sample_shape} must have positive dimensions, e.g. 3x224x224")
        for name in ("cpu_ms_gil", "cpu_ms_nogil", "io_ms", "io_spike_ms"):
            if getattr(self, name) < 0:
                raise WorkloadError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.length < 1 or self.batch_size < 1:
            raise WorkloadError("length and batch_size must be >= 1")

    def describe_costs(self) -> str:
        parts = []
        if self.cpu_ms_gil:
            parts.append(f"{self.cpu_ms_gil:g} ms CPU holding the GIL")
        if self.cpu_ms_nogil:
            parts.append(f"{self.cpu_ms_nogil:g} ms CPU releasing the GIL")
        if self.io_ms:
            parts.append(f"{self.io_ms:g} ms I/O wait")
        if self.io_spike_every:
            parts.append(f"+{self.io_spike_ms:g} ms on 1 sample in {self.io_spike_every}")
        return ", ".join(parts) + " per sample" if parts else "no per-sample cost (already in RAM)"

    def build(self) -> tuple[Any, Callable | None]:
        """The torch Dataset and collate_fn for this workload (imports torch)."""
        from loaderdoc.probing.synthetic import build_synthetic

        return build_synthetic(self)


PRESETS: dict[str, Preset] = {
    spec.name: spec
    for spec in (
        Preset(
            name="image",
            description="JPEG-style images: 3x224x224 uint8, decode + augment on the CPU",
            sample_shape=(3, 224, 224),
            cpu_ms_gil=1.0,
            cpu_ms_nogil=3.0,
            io_ms=0.3,
        ),
        Preset(
            name="large-image",
            description="medical/satellite-style 2K single-channel uint16 slices, heavy resampling",
            sample_shape=(1, 2048, 2048),
            dtype="uint16",
            cpu_ms_nogil=15.0,
            io_ms=5.0,
            batch_size=4,
            step_ms=50.0,
        ),
        Preset(
            name="tensor",
            description="pre-processed float32 tensors already in RAM (no per-sample work)",
            sample_shape=(3, 32, 32),
            dtype="float32",
            length=8192,
            in_memory=True,
            batch_size=128,
        ),
        Preset(
            name="text",
            description="token sequences up to 512 long, Python tokenisation, padded per batch",
            sample_shape=(512,),
            dtype="int64",
            cpu_ms_gil=0.4,
            variable_length=True,
        ),
        Preset(
            name="remote",
            description="samples fetched from object storage: 10 ms latency each, little CPU",
            sample_shape=(3, 64, 64),
            cpu_ms_nogil=0.2,
            io_ms=10.0,
        ),
        Preset(
            name="spiky",
            description="network storage with tail latency: 2 ms usually, +150 ms on 1 sample in 25",
            sample_shape=(3, 64, 64),
            cpu_ms_nogil=0.2,
            io_ms=2.0,
            io_spike_ms=150.0,
            io_spike_every=25,
        ),
    )
}


def get_preset(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        hint = difflib.get_close_matches(name, list(PRESETS), n=1)
        suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
        raise UnknownPresetError(
            f"unknown preset {name!r}{suggestion}; choose one of: {', '.join(PRESETS)}"
        ) from None


# ---- the user's own dataset -------------------------------------------------------------------
def parse_dataset_spec(spec: str) -> tuple[str, str]:
    """'pkg.mod:factory' -> ('pkg.mod', 'factory')."""
    module, sep, attr = (spec or "").partition(":")
    module, attr = module.strip(), attr.strip()
    if not sep or not module or not attr or ":" in attr:
        raise DatasetSpecError(
            f"--dataset {spec!r}: expected MODULE:FACTORY, e.g. --dataset mypkg.data:make_dataset"
        )
    return module, attr


def _cwd_importable() -> None:
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)  # like `python -m`: the current directory is importable


def _missing(module: str, exc: ModuleNotFoundError) -> str | None:
    """The name ``exc`` says is missing where that is ``module`` or a package above it; None where
    it is something the module itself imports."""
    missing = exc.name or module
    return missing if module == missing or module.startswith(missing + ".") else None


def _not_found(spec: str, missing: str) -> DatasetModuleNotFound:
    return DatasetModuleNotFound(
        f"--dataset {spec}: no module named {missing!r} in the current directory or on "
        "PYTHONPATH; run from your project root or add its directory to PYTHONPATH")


def find_dataset_module(spec: str) -> None:
    """Raise DatasetModuleNotFound where ``spec``'s module is nowhere to import: said before the
    seconds ``import torch`` takes. Looking imports at most the module's parent packages; one that
    fails to import is left for the import itself to explain."""
    module = parse_dataset_spec(spec)[0]
    _cwd_importable()
    try:
        found = importlib.util.find_spec(module)
    except ModuleNotFoundError as exc:
        missing = _missing(module, exc)
        if missing is not None:
            raise _not_found(spec, missing) from None
        return
    except (Exception, SystemExit, UserCodeExit):
        return
    if found is None:
        raise _not_found(spec, module)


def _import_module(module: str, spec: str) -> Any:
    _cwd_importable()
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        missing = _missing(module, exc)
        if missing is not None:
            raise _not_found(spec, missing) from None
        raise DatasetImportError(
            f"--dataset {spec}: importing {module} failed: it needs {exc.name or module!r}, which is not "
            "installed here; install it in this environment"
        ) from None
    except (Exception, SystemExit, UserCodeExit) as exc:  # raised while importing (sys.exit / argparse at import too)
        raise DatasetImportError(
            f"--dataset {spec}: importing {module} {_what_happened(exc)}; fix the module so that it imports"
        ) from None


def load_user_dataset(spec: str) -> tuple[Any, Callable | None]:
    """Import ``module:factory``, call the factory, return ``(dataset, collate_fn or None)``.

    The factory takes no arguments and returns a Dataset or ``(dataset, collate_fn)``.
    """
    module_name, attr_path = parse_dataset_spec(spec)
    module = _import_module(module_name, spec)
    obj: Any = module
    for part in attr_path.split("."):
        if not hasattr(obj, part):
            callables = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
            hint = difflib.get_close_matches(part, callables, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            listing = f"; callables there: {', '.join(callables[:8])}" if callables else ""
            raise DatasetAttributeError(
                f"--dataset {spec}: {module_name} has no attribute {attr_path!r}{suggestion}{listing}"
            )
        obj = getattr(obj, part)
    if not callable(obj):
        raise DatasetNotCallable(
            f"--dataset {spec}: {attr_path} is a {type(obj).__name__}, not a callable; point --dataset "
            "at a function (or class) that takes no arguments and returns a Dataset"
        )
    try:
        made = obj()
    except (Exception, SystemExit, UserCodeExit) as exc:  # sys.exit(), os._exit(): must not end loaderdoc silently
        raise DatasetFactoryError(
            f"--dataset {spec}: {attr_path}() {_what_happened(exc)}; fix the factory (it is called with no arguments)",
            details=traceback.format_exc(),
        ) from None
    collate_fn = None
    if isinstance(made, tuple) and len(made) == 2 and not _is_dataset(made):
        made, collate_fn = made
        if collate_fn is not None and not callable(collate_fn):
            raise DatasetTypeError(
                f"--dataset {spec}: {attr_path}() returned (dataset, {type(collate_fn).__name__}); "
                "the second item must be a collate function or None"
            )
    if not _is_dataset(made):
        raise DatasetTypeError(
            f"--dataset {spec}: {attr_path}() returned {type(made).__name__}, not a Dataset; return a "
            "torch.utils.data.Dataset (or a (dataset, collate_fn) tuple)"
        )
    if not _is_iterable_dataset(made):
        try:
            size = len(made)
        except Exception as exc:
            raise DatasetTypeError(
                f"--dataset {spec}: len(dataset) raised {type(exc).__name__}: {_first_line(exc)}; "
                "a map-style Dataset needs a working __len__"
            ) from None
        if size < 1:
            raise DatasetTypeError(f"--dataset {spec}: the dataset is empty (len 0); give the probe some samples")
    return made, collate_fn


def _is_iterable_dataset(obj: Any) -> bool:
    from torch.utils.data import IterableDataset

    return isinstance(obj, IterableDataset)


def _is_dataset(obj: Any) -> bool:
    """A torch Dataset, or anything DataLoader accepts as map-style (__getitem__ and __len__)."""
    from torch.utils.data import Dataset

    if isinstance(obj, Dataset):
        return True
    if isinstance(obj, (str, bytes, dict, tuple)):
        return False
    return hasattr(type(obj), "__getitem__") and hasattr(type(obj), "__len__")


def _what_happened(exc: BaseException) -> str:
    """'raised ValueError: bad' / 'called os._exit(0)'."""
    if isinstance(exc, UserCodeExit):
        return f"{exc}, which would end loaderdoc with no result"
    return f"raised {type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "(no message)"
