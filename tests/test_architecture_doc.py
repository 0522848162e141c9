"""docs/architecture.md is the map a new engineer reads first: its three tables (the base, the
features, the front) are the ones tests/test_layering.py enforces, and its module list names every
module in src/loaderdoc (and nothing that is not there)."""

from __future__ import annotations

import re
from pathlib import Path

from test_layering import BASE, FEATURES, FRONT, PACKAGE

DOC = Path(__file__).resolve().parent.parent / "docs" / "architecture.md"


def table(title: str) -> list[tuple[str, str]]:
    """The rows (first cell, second cell) of the table under ``### title``."""
    section = DOC.read_text().split(f"### {title}\n", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| (.+?) \| (.+?) \|$", section, re.MULTILINE)
    return [(a, b) for a, b in rows[1:] if not a.startswith("---")]  # the header row, then the rule


def names(cell: str) -> set[str]:
    """`advice/`, `cli`, the package's `__init__` -> {"advice", "cli", ""}."""
    return {"" if n == "__init__" else n.strip("/") for n in re.findall(r"`([^`]+)`", cell)}


def one(cell: str) -> str:
    (name,) = names(cell)
    return name


def test_the_base_table_is_the_one_the_layering_test_enforces():
    assert [(int(level), names(groups)) for level, groups in table("The base")] == list(enumerate(BASE))


def test_the_feature_table_is_the_one_the_layering_test_enforces():
    assert {one(f): names(needs) for f, needs in table("The features")} == FEATURES


def test_the_front_table_is_the_one_the_layering_test_enforces():
    assert {one(f): names(needs) for f, needs in table("The front")} == FRONT


def test_every_module_is_listed_and_no_listed_module_is_missing():
    section = DOC.read_text().split("## What each module owns", 1)[1].split("## Where to add", 1)[0]
    listed = set(re.findall(r"`([\w/]+\.py)`", section))
    present = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
               if p.name != "__init__.py" or p.parent.name == "policy"}
    assert sorted(present - listed) == [] and sorted(listed - present) == []
