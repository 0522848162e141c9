#!/usr/bin/env python
"""Regenerate docs/diagnoses.md (the rule x scenario matrix) and docs/tradeoffs.md.

``python scripts/diagnoses_docs.py`` writes them; ``--check`` exits 1 when they are stale;
``-`` prints the matrix. The scenarios and the generator are test tooling (tests/support/),
not part of the installed package; the tests check the pages are current.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

if __name__ == "__main__":
    sys.path.insert(0, str(REPO / "tests"))
    os.chdir(REPO)
    from support import matrix

    raise SystemExit(matrix.main())
