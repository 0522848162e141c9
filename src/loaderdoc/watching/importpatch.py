"""Patch a module right after it is imported: the watch hook waits for the user's program to import
``torch.utils.data.dataloader`` (torch is never imported by the hook itself).

Standard library only, no loaderdoc import: under ``loaderdoc watch`` this file is loaded by path
beside ``hook.py``.
"""

from __future__ import annotations

import contextlib
import sys


class PatchOnImport:
    """A ``sys.meta_path`` finder that only answers for its target module: it lets the real finders find the
    module, and wraps that spec's ``exec_module`` so the patch runs right after the module ran.
    One string comparison per import is all it costs other modules; it removes itself once used."""

    def __init__(self, target: str, on_load, warn) -> None:
        self._target = target
        self._on_load = on_load
        self._warn = warn  # the hook's one line on stderr

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self._target:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            self._warn(f"cannot instrument {self._target} (loaded by {loader!r}); DataLoaders are not measured")
            return spec
        on_load = self._on_load

        def exec_and_patch(module):
            exec_module(module)
            on_load(module)

        try:
            loader.exec_module = exec_and_patch  # a per-spec loader instance: only this import sees it
        except (AttributeError, TypeError):
            self._warn(f"cannot instrument {self._target}; DataLoaders are not measured")
        return spec

