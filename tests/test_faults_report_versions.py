"""A report of another loaderdoc's schema version (issue 49, family 6): `loaderdoc --report` of a
`loaderdoc.watch/2` report said "write one with loaderdoc watch", as for a file that is no report
at all. Now: one line naming the version this build reads, exit 3, through the real command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from faults_support import loaderdoc, one_line_error

FIXTURES = Path(__file__).resolve().parent / "fixtures"


@pytest.mark.parametrize("args, fixture, schema, reads", [
    (["--report"], "watch/healthy.json", "loaderdoc.watch/2", "loaderdoc.watch/1"),
    (["--report"], "tune/io-bound.json", "loaderdoc.tune/7", "loaderdoc.tune/1"),
    (["watch", "--merge"], "watch/healthy.json", "loaderdoc.watch/2", "loaderdoc.watch/1"),
])
def test_a_report_of_another_version_says_so_in_one_line(tmp_path, args, fixture, schema, reads):
    doc = json.loads((FIXTURES / fixture).read_text())
    doc["schema"] = schema
    report = tmp_path / "report.json"
    report.write_text(json.dumps(doc), encoding="utf-8")
    files = [str(report), str(report)] if "--merge" in args else [str(report)]
    proc = loaderdoc(*args, *files, cwd=tmp_path)
    one_line_error(proc, 3, f"schema {schema} is not one this build reads ({reads}): written by another "
                            "loaderdoc; upgrade this one, or write the report again with it")
    assert "write one with" not in proc.stderr
