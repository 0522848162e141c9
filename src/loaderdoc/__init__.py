"""loaderdoc: measure, diagnose and export PyTorch DataLoader settings for this machine.

The public API is lazy so that ``import loaderdoc`` stays cheap: torch is imported only by
:func:`probe` (:func:`watch` times whatever the loader's iterator does, importing nothing),
textual only by the TUI.

    >>> import loaderdoc
    >>> facts = loaderdoc.detect()                      # machine facts, no torch import
    >>> rec = loaderdoc.recommend(facts, batch_size=64, sample_bytes=3 * 224 * 224)
    >>> rec.settings.as_kwargs()                        # goes into DataLoader(dataset, **...)
    >>> watched = loaderdoc.watch(loader)               # for batch in watched: ...; then
    >>> print(watched.summary())                        # the data wait of the real loop
"""

from __future__ import annotations

from typing import Any

from loaderdoc._version import __version__

__all__ = ["LoaderSettings", "MachineFacts", "ProbeReport", "__version__", "detect", "probe", "recommend", "watch"]


def __getattr__(name: str) -> Any:
    """The public API, imported on first use (torch only with :func:`probe`)."""
    if name == "detect":
        from loaderdoc.system.detect import detect

        return detect
    if name == "MachineFacts":
        from loaderdoc.system.facts import MachineFacts

        return MachineFacts
    if name == "LoaderSettings":
        from loaderdoc.base.settings import LoaderSettings

        return LoaderSettings
    if name == "recommend":
        from loaderdoc.advice.recommend import recommend

        return recommend
    if name == "probe":
        from loaderdoc.probing.probe import probe

        return probe
    if name == "ProbeReport":
        from loaderdoc.probing.result import ProbeReport

        return ProbeReport
    if name == "watch":
        from loaderdoc.api import watch

        return watch
    raise AttributeError(f"module 'loaderdoc' has no attribute {name!r}")
