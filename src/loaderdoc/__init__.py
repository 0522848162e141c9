"""loaderdoc: measure, diagnose and export PyTorch DataLoader settings for this machine.

The public API is lazy so that ``import loaderdoc`` stays cheap: torch is imported only by
:func:`probe`, textual only by the TUI.

    >>> import loaderdoc
    >>> facts = loaderdoc.detect()                      # machine facts, no torch import
    >>> rec = loaderdoc.recommend(facts, batch_size=64, sample_shape=(3, 224, 224))
    >>> rec.settings.as_kwargs()                        # goes into DataLoader(dataset, **...)
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_LAZY = {
    "detect": ("loaderdoc.system.detect", "detect"),
    "MachineFacts": ("loaderdoc.system.facts", "MachineFacts"),
    "LoaderSettings": ("loaderdoc.settings", "LoaderSettings"),
    "recommend": ("loaderdoc.advice.recommend", "recommend"),
    "probe": ("loaderdoc.probe.api", "probe"),
    "ProbeReport": ("loaderdoc.probe.result", "ProbeReport"),
}

__all__ = sorted(_LAZY) + ["__version__"]


def __getattr__(name: str) -> Any:
    try:
        module_name, attr = _LAZY[name]
    except KeyError:
        raise AttributeError(f"module 'loaderdoc' has no attribute {name!r}") from None
    import importlib

    return getattr(importlib.import_module(module_name), attr)
