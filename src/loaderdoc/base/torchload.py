"""``import torch`` for loaderdoc's own program: the collector paused meanwhile, torch frozen after.

Importing torch creates some 190 000 objects that Python's cyclic collector tracks, and every full
collection after it walks them all again. The ``loaderdoc`` program (``cli.run_as_program``) asks
for them to be frozen (``gc.freeze``) once imported: a ``probe --dataset`` that stops at its
dataset went from 1.26-1.31 to 1.09-1.12 CPU-s, a one-rank ``check --distributed`` from 1.31-1.38
to 1.06-1.15 (measured on 2 cores). The probe's measuring processes unfreeze them again
(``probing/isolate.py``): they and their workers must collect as a training process does. A process
that merely hosts loaderdoc (a test, a notebook calling ``loaderdoc.probe``) keeps its collector as it was,
and so does the app, whose probe imports torch on a worker thread beside its own widgets.
"""

from __future__ import annotations

import gc
import sys
import threading
from types import ModuleType

_program = {"freeze": False}


def freeze_torch_once_imported() -> None:
    """Called by the program before it runs a command (never by a library caller)."""
    _program["freeze"] = True


def import_torch() -> ModuleType:
    """``import torch`` (raising what it raises); in the program, the first import is frozen."""
    if "torch" in sys.modules or not _program["freeze"] or threading.current_thread() is not threading.main_thread():
        import torch

        return torch
    was_enabled = gc.isenabled()
    gc.disable()  # the collections an import of this size triggers would walk what it builds, again and again
    try:
        import torch
    finally:
        if was_enabled:
            gc.enable()
    gc.freeze()
    return torch
