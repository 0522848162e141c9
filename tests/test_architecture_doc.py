"""docs/architecture.md is the map a new engineer reads first: its layer table is the one
tests/test_layering.py enforces, and its module list names every module in src/loaderdoc (and
nothing that is not there)."""

from __future__ import annotations

import re
from pathlib import Path

from test_layering import LAYERS, PACKAGE

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def test_the_layer_table_is_the_one_the_layering_test_enforces():
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", DOC.read_text(), re.MULTILINE)
    documented = [{name.strip("`/") for name in re.findall(r"`[^`]+`", cells)} for _, cells in rows]
    enforced = [{name for name in layer if name} for layer in LAYERS]
    enforced[-1].add("__init__")  # "" is the package's own __init__
    documented[-1] = {"__main__", "__init__"}
    assert documented == enforced


def test_every_module_is_listed_and_no_listed_module_is_missing():
    section = DOC.read_text().split("## What each module owns", 1)[1].split("## Where to add", 1)[0]
    listed = set(re.findall(r"`([\w/]+\.py)`", section))
    present = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" or p.parent.name == "policy"}
    assert sorted(present - listed) == [] and sorted(listed - present) == []
