"""Where the loaderdoc under test lives, for the processes the tests start."""

from __future__ import annotations

import os
from pathlib import Path

import loaderdoc

# The folder holding the loaderdoc package this suite imports: the checkout's src/ where it is
# installed editable (or run from PYTHONPATH=src), site-packages after `pip install .`. A process
# given it on PYTHONPATH runs the same loaderdoc as the tests. Not src/ itself: where
# PYTHONDONTWRITEBYTECODE forbids bytecode files, every process would compile src/ again, while
# an installed copy has the bytecode pip compiled.
LOADERDOC_PATH = str(Path(loaderdoc.__file__).resolve().parent.parent)


def pythonpath(*first: str | None) -> str:
    """PYTHONPATH for a process a test starts: ``first`` (those given), the loaderdoc under test, then
    the suite's own PYTHONPATH."""
    return os.pathsep.join(p for p in (*first, LOADERDOC_PATH, os.environ.get("PYTHONPATH")) if p)
