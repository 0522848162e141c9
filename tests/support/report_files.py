"""Report files the app-opening tests write: a document (or raw text) into ``tmp_path``, and a
recorded fixture with one change made to it."""

from __future__ import annotations

import json
from pathlib import Path


def write_report(tmp_path: Path, doc, name: str) -> Path:
    """``doc`` (an object, or text as it is) in ``tmp_path / name``."""
    path = tmp_path / name
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc), encoding="utf-8")
    return path


def changed(path: Path, change) -> dict:
    """The report in ``path`` after ``change(doc)``."""
    doc = json.loads(path.read_text())
    change(doc)
    return doc
