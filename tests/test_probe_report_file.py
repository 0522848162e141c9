"""A probe report read back from `loaderdoc probe --json > FILE` is checked before it is believed:
a report loads as it was written; anything else is one error naming the file and the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loaderdoc.base.errors import EXIT_USAGE, UserError
from loaderdoc.probing.report_file import ProbeReportError, load_report
from loaderdoc.probing.result import ProbeReport
from loaderdoc.system.fixtures import load_machine

RECORDED = sorted((Path(__file__).parent / "support" / "recorded").glob("*.json"))


def recorded_probe(name: str = "real-io-bound.json") -> dict:
    return json.loads((Path(__file__).parent / "support" / "recorded" / name).read_text())["probe"]


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: p.stem)
def test_recorded_reports_load_as_written(path, tmp_path):
    data = json.loads(path.read_text())["probe"]
    data["findings"] = []  # `probe --json` adds the findings; a reader ignores them
    report_path = tmp_path / "report.json"
    report_path.write_text(json.dumps(data))
    report = load_report(report_path)
    assert report == ProbeReport.from_dict(data)
    assert report.results and report.workload.batch_size >= 1


def _bad(tmp_path, content) -> str:
    path = tmp_path / "report.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    with pytest.raises(ProbeReportError) as info:
        load_report(path)
    message = str(info.value)
    assert message.startswith(str(path)) and "\n" not in message, message
    assert isinstance(info.value, UserError) and info.value.exit_code == EXIT_USAGE
    return message


def with_change(change) -> dict:
    data = recorded_probe()
    change(data)
    return data


@pytest.mark.parametrize("content, needle", [
    ("", "not valid JSON"),
    ("{\"workload\": ", "not valid JSON"),
    ([], "expected a JSON object"),
    ({}, "no workload or results"),
    ({"schema": "loaderdoc.check/1", "status": "ok"}, "a loaderdoc.check/1 document"),
    (load_machine("ci-2core").to_dict(), "machine facts"),
    ({"workload": {"batch_size": 8}, "results": "many"}, "results: expected a list"),
    ({"workload": [], "results": []}, "workload: expected an object"),
    ({"workload": {"batch_size": 0}, "results": []}, "workload.batch_size: expected a whole number >= 1"),
    (with_change(lambda d: d["results"][1].update(batches_per_s="fast")), "results[1].batches_per_s"),
    (with_change(lambda d: d["results"][0]["wait"].update(p95_ms=-1)), "results[0].wait.p95_ms"),
    (with_change(lambda d: d["results"][0]["settings"].update(num_workers=-2)), "results[0].settings.num_workers"),
    (with_change(lambda d: d["results"][1]["settings"].update(prefetch_factor=0)), "prefetch_factor must be >= 1"),
    (with_change(lambda d: d["recommended"].update(pin_memory="yes")), "recommended.pin_memory"),
    (with_change(lambda d: d["reasons"].insert(1, 3)), "reasons[1]: expected a string"),
    (json.dumps(recorded_probe()).replace('"elapsed_s": ', '"elapsed_s": NaN, "x": '), "elapsed_s"),
])
def test_anything_else_is_one_error_naming_the_file_and_key(tmp_path, content, needle):
    assert needle in _bad(tmp_path, content)


def test_missing_unreadable_and_directory(tmp_path):
    with pytest.raises(ProbeReportError, match="no such file"):
        load_report(tmp_path / "nope.json")
    with pytest.raises(ProbeReportError, match="is a directory"):
        load_report(tmp_path)
    binary = tmp_path / "report.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ProbeReportError, match="cannot read it"):
        load_report(binary)


def test_a_failed_probe_with_nothing_recommended_still_loads(tmp_path):
    data = recorded_probe()
    data["recommended"] = None
    for r in data["results"]:
        r.update(status="failed", error="KeyError: 7", batches_per_s=None)
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data))
    report = load_report(path)
    assert report.recommended is None and not report.ok_results
