"""A report of another loaderdoc's schema version (issue 49, family 6): `loaderdoc --report` of a
`loaderdoc.watch/2` report said "write one with loaderdoc watch", as for a file that is no report
at all. Now: one line naming the version this build reads and, where the report says (every report
written since carries ``loaderdoc_version``), the loaderdoc that wrote it; exit 3, through the real
command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults_support import loaderdoc, one_line_error

from loaderdoc import __version__

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("writer", [None, "9.4.0"])
@pytest.mark.parametrize("args, fixture, schema, reads", [
    (["--report"], "watch/healthy.json", "loaderdoc.watch/2", "loaderdoc.watch/1"),
    (["--report"], "tune/io-bound.json", "loaderdoc.tune/7", "loaderdoc.tune/1"),
    (["watch", "--merge"], "watch/healthy.json", "loaderdoc.watch/2", "loaderdoc.watch/1"),
])
def test_a_report_of_another_version_says_so_in_one_line(tmp_path, args, fixture, schema, reads, writer):
    doc = json.loads((FIXTURES / fixture).read_text())
    doc["schema"] = schema
    if writer is not None:
        doc["loaderdoc_version"] = writer
    report = tmp_path / "report.json"
    report.write_text(json.dumps(doc), encoding="utf-8")
    files = [str(report), str(report)] if "--merge" in args else [str(report)]
    proc = loaderdoc(*args, *files, cwd=tmp_path)
    who = (f"loaderdoc {writer}, this is {__version__}" if writer
           else f"another loaderdoc (this is {__version__})")
    one_line_error(proc, 3, f"schema {schema} is not one this build reads ({reads}): written by {who}; "
                            "upgrade this one, or write the report again with it")
    assert "write one with" not in proc.stderr


SCRIPT = """
import torch
from torch.utils.data import DataLoader
for _ in DataLoader(torch.arange(8), batch_size=4):
    pass
"""


def test_the_report_watch_writes_names_its_writer(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    proc = loaderdoc("watch", "--report", "r.json", "--", "python", "train.py", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((tmp_path / "r.json").read_text())
    assert list(doc)[:2] == ["schema", "loaderdoc_version"]
    assert doc["loaderdoc_version"] == __version__
