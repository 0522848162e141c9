"""The live probe: measure real DataLoaders on this machine and recommend settings.

``loaderdoc.probe`` is both this package and, lazily, the :func:`loaderdoc.probe.api.probe`
function: calling the package calls the function, so ``loaderdoc.probe(dataset, ...)`` works
whether or not a submodule was imported first. Importing the package does not import torch.
"""

from __future__ import annotations

import sys
import types
from typing import Any


class _CallableModule(types.ModuleType):
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        from loaderdoc.probe.api import probe

        return probe(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
