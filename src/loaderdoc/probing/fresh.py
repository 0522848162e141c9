"""A measuring process started as a new interpreter instead of forked, for a probe whose own
process has initialised CUDA.

torch marks a fork of a process that initialised CUDA as a bad fork: its first CUDA call raises
"Cannot re-initialize CUDA in forked subprocess". A pinned DataLoader asks CUDA for its device as
its iterator starts (``torch.accelerator.current_device_index()``), so no ``pin_memory=True``
configuration could be measured, and the GPU step could not start either (issue 48: a user's
``--dataset`` factory had initialised CUDA). The probe keeps its own process clear of CUDA. Where
something else initialised it (the user's factory, a notebook that trained a model first),
:func:`loaderdoc.probing.isolate.run_config` starts each measuring process this way.

The new process builds the dataset again from a :class:`Recipe`: the preset's name, the user's
``MOD:FACTORY`` (called again), or the dataset pickled, as a DataLoader with ``spawn`` workers would
pickle it. It then runs the same measurement as a forked one, and reports through the same pipe.
"""

from __future__ import annotations

import pickle
import subprocess
import sys
from dataclasses import dataclass, field, replace
from typing import Any

# a new interpreter imports torch (2-3 s, more on a cold disk) and builds the dataset before it measures
START_S = 60.0


@dataclass
class Recipe:
    """How a new process builds the probe's dataset (and its collate_fn)."""

    preset: str | None = None
    overrides: dict[str, Any] | None = None
    factory: str | None = None  # MOD:FACTORY, called again
    pickled: bytes | None = None  # (dataset, collate_fn)
    sys_path: list[str] = field(default_factory=list)

    def build(self) -> tuple[Any, Any]:
        if self.preset is not None:
            from loaderdoc.probing.workloads import get_preset

            spec = get_preset(self.preset)
            if self.overrides:
                spec = spec.with_overrides(**self.overrides)
            return spec.build()
        if self.factory is not None:
            from loaderdoc.probing.workloads import load_user_dataset

            return load_user_dataset(self.factory)
        if self.pickled is None:
            raise RuntimeError("loaderdoc: a fresh measuring process was given no way to build the dataset")
        return pickle.loads(self.pickled)


def cuda_initialised() -> bool:
    """Whether this process has initialised CUDA (read without initialising it)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return False
    try:
        return bool(torch.cuda.is_initialized())
    except Exception:
        return False


class NoFreshProcess(RuntimeError):
    """The dataset cannot be rebuilt in a new process: the message says why and what to do."""


def recipe_for(job: Any) -> Recipe:
    """The job's own recipe, or its dataset pickled; NoFreshProcess where it does not pickle."""
    recipe = job.recipe or Recipe()
    if recipe.preset is not None or recipe.factory is not None:
        return replace(recipe, sys_path=list(sys.path))
    try:
        pickled = pickle.dumps((job.dataset, job.collate_fn))
    except Exception as exc:
        raise NoFreshProcess(
            f"loaderdoc could not start a measuring process: CUDA was initialised in this process before "
            f"the probe (torch refuses CUDA in a forked copy of it), and the dataset does not pickle for a "
            f"new one ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}); call "
            "loaderdoc.probe before any CUDA work, or run `loaderdoc probe --dataset MOD:FACTORY`") from None
    return replace(recipe, pickled=pickled, sys_path=list(sys.path))


def start(job: Any, settings: Any, plan: Any, write_fd: int, entry: str) -> int:
    """Start the new measuring process, ``python -m ENTRY FD`` (its own session and process
    group); its pid. ``entry``: the module that measures (loaderdoc.probing.isolate)."""
    recipe = recipe_for(job)
    payload = pickle.dumps((recipe, replace(job, dataset=None, collate_fn=None, recipe=None), settings, plan))
    proc = subprocess.Popen([sys.executable, "-m", entry, str(write_fd)],
                            stdin=subprocess.PIPE, pass_fds=(write_fd,), start_new_session=True)
    try:
        proc.stdin.write(payload)
        proc.stdin.close()
    except OSError:
        pass  # it died at once: the pipe's EOF tells the caller
    proc.returncode = 0  # isolate's kill_tree waits for it: Popen must not wait again
    return proc.pid
