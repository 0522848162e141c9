"""Where the loaderdoc under test lives, for the processes the tests start."""

from __future__ import annotations

from pathlib import Path

import loaderdoc

# The folder holding the loaderdoc package this suite imports: the checkout's src/ where it is
# installed editable (or run from PYTHONPATH=src), site-packages after `pip install .`. A process
# given it on PYTHONPATH runs the same loaderdoc as the tests. Not src/ itself: where
# PYTHONDONTWRITEBYTECODE forbids bytecode files, every process would compile src/ again, while
# an installed copy has the bytecode pip compiled.
LOADERDOC_PATH = str(Path(loaderdoc.__file__).resolve().parent.parent)
