"""`loaderdoc tradeoffs`: the app's trade-off tables on the command line, per loader of a config,
with a probe report's measurements marked, in 80 columns, and as documented JSON.

The command only reads files: it runs through the CLI's ``main`` in the test's process
(``faults_support.loaderdoc_here``: the exit code and output a process gives, at 80 columns); the
real probe whose report is read back, and ``--help``, run as processes."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from faults_support import loaderdoc, loaderdoc_here, one_line_error

from loaderdoc.advice.tradeoffs import KNOB_ORDER
from loaderdoc.base.errors import EXIT_OK, EXIT_USAGE
from loaderdoc.commands.tradeoffs import TRADEOFFS_SCHEMA, build_report
from loaderdoc.system.fixtures import load_machine, machine_names
from loaderdoc.text.tradeoffs import render_text

RECORDED = Path(__file__).parent / "support" / "recorded"

TWO_LOADERS = textwrap.dedent("""\
    # mmengine style, as mmdetection's configs/_base_/datasets/*.py
    dataset_type = 'CocoDataset'
    train_dataloader = dict(
        batch_size=64,
        num_workers=4,
        persistent_workers=True,
        sampler=dict(type='DefaultSampler', shuffle=True),
        dataset=dict(type=dataset_type, data_root='data/coco/'))
    val_dataloader = dict(
        batch_size=16,
        num_workers=2,
        drop_last=False,
        sampler=dict(type='DefaultSampler', shuffle=False),
        dataset=dict(type=dataset_type, data_root='data/coco/', test_mode=True))
""")


def fits(text: str, width: int = 80) -> list[str]:
    lines = text.splitlines()
    assert lines and max(len(line) for line in lines) <= width, max(lines, key=len)
    return lines


@pytest.fixture
def report_file(tmp_path) -> Path:
    """A probe report exactly as `loaderdoc probe ... --json` prints it (the report plus findings)."""
    data = json.loads((RECORDED / "real-io-bound.json").read_text())["probe"]
    data["findings"] = []
    path = tmp_path / "report.json"
    path.write_text(json.dumps(data, indent=2))
    return path


@pytest.fixture
def two_loaders(tmp_path) -> Path:
    path = tmp_path / "coco_detection.py"
    path.write_text(TWO_LOADERS)
    return path


def test_a_config_path_filling_the_title_line_still_fits(tmp_path):
    # the title's path wraps onto a line of its own; the closing '==' rule must not push it past 80
    k = 80 - 1 - len(str(tmp_path)) - len("/") - len(".py") - 1  # the path and its ')' take 79 columns
    if k < 1:
        pytest.skip(f"the temporary directory's path ({len(str(tmp_path))} characters) is too long for this case")
    path = tmp_path / ("x" * k + ".py")
    path.write_text(TWO_LOADERS)
    proc = loaderdoc_here("tradeoffs", "--config", str(path), "--machine", "k8s-4cpu-quota")
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = fits(proc.stdout)
    assert f"{path})" in lines


def knob_blocks(lines: list[str]) -> dict[str, list[str]]:
    """Knob name -> its lines (up to the next knob or loader), for the first loader in ``lines``."""
    out: dict[str, list[str]] = {}
    current = None
    for line in lines:
        m = re.match(r"^(\w+) \(now .*\)$", line)
        if m:
            current = m.group(1)
            if current in out:  # the next loader starts
                break
            out[current] = []
        elif current:
            out[current].append(line)
    return out


def table_rows(block: list[str], first: str) -> list[str]:
    """The row lines (mark + cells) of a knob's table: its first part, when it is split."""
    rows, inside = [], False
    for line in block:
        if re.match(rf"^ {{4}}{first}\b", line):
            inside = True
        elif inside and re.match(r"^  [> ][* ]\S", line):
            rows.append(line)
        elif inside:
            break
    return rows


def test_no_config_judges_the_recommended_settings_with_nothing_measured():
    proc = loaderdoc_here("tradeoffs", "--machine", "ci-2core", "--batch-size", "64", "--sample-shape", "3x32x32")
    assert proc.returncode == EXIT_OK and not proc.stderr, proc.stderr
    lines = fits(proc.stdout)
    assert any(line.startswith("== recommended from machine facts ") for line in lines)
    assert "none measured" in proc.stdout
    blocks = knob_blocks(lines)
    assert list(blocks) == list(KNOB_ORDER)
    for knob in ("num_workers", "batch_size"):
        rows = table_rows(blocks[knob], knob)
        assert rows and not any(row[3] == "*" for row in rows), rows  # nothing marked measured
        assert sum(row[2] == ">" for row in rows) >= 1  # the current value is marked
    assert "192 KiB per batch" in proc.stdout  # 64 x 3x32x32 uint8


def test_a_config_with_two_loaders_gets_a_table_set_each(two_loaders):
    proc = loaderdoc_here("tradeoffs", "--config", str(two_loaders), "--machine", "k8s-4cpu-quota", "--sample-shape",
                          "3x224x224")
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = fits(proc.stdout)
    titles = [line for line in lines if line.startswith("== loader")]
    assert [t.split("'")[1] for t in titles] == ["train", "val"]
    assert all("mmengine" in t for t in titles)
    train = knob_blocks(lines[lines.index(titles[0]):])
    val = knob_blocks(lines[lines.index(titles[1]):])
    assert list(train) == list(val) == list(KNOB_ORDER)
    assert "num_workers (now 4)" in lines and "num_workers (now 2)" in lines
    current = [row for row in table_rows(train["num_workers"], "num_workers") if row[2] == ">"]
    assert current and all(row[4:].split()[0] == "4" for row in current)
    current = [row for row in table_rows(val["batch_size"], "batch_size") if row[2] == ">"]
    assert current and current[0][4:].split()[:3] == ["16", "2.3", "MiB"]  # 16 x 3x224x224 bytes

    doc = json.loads(loaderdoc_here("tradeoffs", "--config", str(two_loaders), "--machine", "k8s-4cpu-quota",
                                    "--sample-shape", "3x224x224", "--json").stdout)
    assert [(e["name"], e["layout"], e["settings_from"]) for e in doc["loaders"]] == [
        ("train", "mmengine", "config"), ("val", "mmengine", "config")]
    assert [e["settings"]["num_workers"] for e in doc["loaders"]] == [4, 2]
    assert [e["batch_bytes"] for e in doc["loaders"]] == [64 * 3 * 224 * 224, 16 * 3 * 224 * 224]
    assert doc["config"]["path"] == str(two_loaders)


def test_a_setting_the_config_computes_is_said_not_hidden(tmp_path):
    cfg = tmp_path / "cfg.py"
    cfg.write_text("import os\ntrain_dataloader = dict(batch_size=8, num_workers=os.cpu_count())\n")
    proc = loaderdoc_here("tradeoffs", "--config", str(cfg), "--machine", "ci-2core")
    assert proc.returncode == EXIT_OK, proc.stderr
    text = " ".join(fits(proc.stdout))
    assert "num_workers is computed when the config runs" in text and "os.cpu_count()" in text


def test_a_probe_report_marks_the_measured_rows(report_file, two_loaders):
    probe = json.loads(report_file.read_text())
    proc = loaderdoc_here("tradeoffs", "--probe-report", str(report_file), "--machine", "ci-2core")
    assert proc.returncode == EXIT_OK, proc.stderr
    lines = fits(proc.stdout)
    assert f"measured:{report_file}:spiky,batch_size32," in re.sub(r"\s+", "", proc.stdout)  # the report, named
    assert "* measured by the probe" in proc.stdout
    assert any(line.startswith("== recommended from the probe") for line in lines)
    rows = table_rows(knob_blocks(lines)["num_workers"], "num_workers")
    measured = {int(row[4:].split()[0]) for row in rows if row[3] == "*"}
    assert measured == {r["settings"]["num_workers"] for r in probe["results"]}
    speeds: dict[int, set] = {}  # workers -> every throughput measured with them
    for r in probe["results"]:
        speeds.setdefault(r["settings"]["num_workers"], set()).add(r["batches_per_s"])
    for row in (row for row in rows if row[3] == "*"):  # the measured throughput, as the probe recorded it
        n, bps = row[4:].split()[:2]
        assert bps in {f"{x:.1f}" for x in speeds[int(n)]}, row

    # a loader of the config at a worker count the probe never ran: computed, not marked measured
    doc = json.loads(loaderdoc_here("tradeoffs", "--probe-report", str(report_file), "--config", str(two_loaders),
                                    "--machine", "ci-2core", "--json").stdout)
    assert doc["probe_report"]["path"] == str(report_file)
    assert doc["probe_report"]["configurations"] == len(probe["results"])
    nw = doc["loaders"][0]["knobs"][0]
    assert nw["knob"] == "num_workers" and "batches/s" in nw["columns"]
    by_value = {r["value"]: r for r in nw["rows"]}
    assert by_value[4]["current"] and not by_value[4]["measured"] and by_value[4]["data"].get("batches_per_s") is None
    assert by_value[11]["measured"] and by_value[11]["data"]["batches_per_s"] in speeds[11]


def test_a_real_probe_report_reads_back(tmp_path):
    # what `loaderdoc probe tensor --budget 2 --json > report.json` writes, read by tradeoffs
    probe = loaderdoc("probe", "tensor", "--budget", "2", "--json", "--no-progress")
    assert probe.returncode == EXIT_OK, probe.stderr
    path = tmp_path / "report.json"
    path.write_text(probe.stdout)
    written = json.loads(probe.stdout)
    doc = json.loads(loaderdoc_here("tradeoffs", "--probe-report", str(path), "--json").stdout)
    assert doc["probe_report"]["configurations"] == len(written["results"])
    assert doc["probe_report"]["workload"] == "tensor"
    assert any(r["measured"] for k in doc["loaders"][0]["knobs"] for r in k["rows"])
    text = loaderdoc_here("tradeoffs", "--probe-report", str(path))
    assert text.returncode == EXIT_OK, text.stderr
    fits(text.stdout)
    assert "(measured)" in text.stdout


def test_json_is_the_documented_structure(report_file, two_loaders):
    proc = loaderdoc_here("tradeoffs", "--json", "--machine", "h100x8-node", "--config", str(two_loaders),
                          "--probe-report", str(report_file), "--sample-shape", "3x224x224")
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema"] == TRADEOFFS_SCHEMA == "loaderdoc.tradeoffs/1"
    assert set(doc) == {"schema", "machine_line", "probe_report", "config", "loaders", "machine"}
    assert doc["machine"]["label"] == load_machine("h100x8-node").label
    assert set(doc["probe_report"]) == {"path", "workload", "batch_size", "batch_bytes", "device",
                                        "configurations", "measured"}
    for entry in doc["loaders"]:
        assert set(entry) == {"name", "layout", "settings_from", "settings", "unreadable", "not_set",
                              "framework_defaults", "batch_bytes", "knobs"}
        assert [k["knob"] for k in entry["knobs"]] == list(KNOB_ORDER)
        for knob in entry["knobs"]:
            assert set(knob) == {"knob", "current", "raising", "lowering", "evidence", "columns", "rows", "note"}
            for row in knob["rows"]:
                assert set(row) == {"value", "cells", "data", "current", "measured", "fits"}
                assert set(row["cells"]) <= set(knob["columns"])  # a row the probe did not measure lacks those
    bare = json.loads(loaderdoc_here("tradeoffs", "--json", "--machine", "ci-2core").stdout)
    assert bare["probe_report"] is None and bare["config"] is None
    assert bare["loaders"][0]["settings_from"] == "recommended from machine facts"


def args(**kw) -> argparse.Namespace:
    base = dict(config=None, probe_report=None, machine="ci-2core", batch_size=None, sample_shape=None,
                dtype="uint8", json=False, explain=False)
    return argparse.Namespace(**{**base, **kw})


@pytest.mark.parametrize("machine", machine_names())
@pytest.mark.parametrize("width", [60, 80])
def test_every_line_fits_the_width_and_no_number_is_cut(machine, width, report_file, two_loaders):
    for kw in ({}, {"probe_report": str(report_file), "sample_shape": (3, 224, 224)},
               {"config": str(two_loaders), "probe_report": str(report_file), "batch_size": 256}):
        report = build_report(args(machine=machine, **kw))
        text = render_text(report, width, explain_knobs=True)
        fits(text, width)
        flat = re.sub(r"\s+", " ", text)
        for entry in report["loaders"]:
            for t in entry["items"]:
                for row in t.rows:
                    for cell in row.cells.values():
                        assert cell in text or cell in flat, (machine, t.knob, cell)  # whole, never cut


def test_bad_inputs_are_one_line_exit_3(tmp_path, report_file):
    missing = tmp_path / "nope.json"
    one_line_error(loaderdoc_here("tradeoffs", "--probe-report", str(missing)), EXIT_USAGE, str(missing), "no such file")
    facts = tmp_path / "facts.json"
    facts.write_text(loaderdoc_here("facts", "--json", "--machine", "ci-2core").stdout)
    one_line_error(loaderdoc_here("tradeoffs", "--probe-report", str(facts)), EXIT_USAGE, str(facts),
                   "not a probe report", "--machine")
    check = tmp_path / "check.json"
    check.write_text(loaderdoc_here("check", "--json", "--machine", "ci-2core").stdout)
    one_line_error(loaderdoc_here("tradeoffs", "--probe-report", str(check)), EXIT_USAGE, "loaderdoc.check/1")
    broken = tmp_path / "broken.json"
    data = json.loads(report_file.read_text())
    data["results"][0]["batches_per_s"] = "4.4"
    broken.write_text(json.dumps(data))
    one_line_error(loaderdoc_here("tradeoffs", "--probe-report", str(broken)), EXIT_USAGE, str(broken),
                   "results[0].batches_per_s")
    one_line_error(loaderdoc_here("tradeoffs", "--config", str(tmp_path / "none.toml")), EXIT_USAGE, "none.toml")
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[dataloader]\nnum_workers = -1\n")
    one_line_error(loaderdoc_here("tradeoffs", "--config", str(cfg)), EXIT_USAGE, "bad.toml", "num_workers")
    one_line_error(loaderdoc_here("tradeoffs", "--machine", "no-such-box"), EXIT_USAGE, "no-such-box")
    assert not list(tmp_path.glob("*.tmp"))


def test_neither_textual_nor_torch_is_imported(report_file, two_loaders):
    code = (
        "import sys, io, contextlib\n"
        "from loaderdoc.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    a = main(['tradeoffs', '--json', '--probe-report', {str(report_file)!r}, '--config', {str(two_loaders)!r}])\n"
        "    b = main(['tradeoffs'])\n"
        "print(a, b, [m for m in ('textual', 'torch', 'rich') if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "0 0 []", proc.stdout + proc.stderr


def test_help_lists_the_command():
    proc = loaderdoc("--help")
    assert proc.returncode == EXIT_OK and re.search(r"^\s+tradeoffs\s+what each DataLoader knob", proc.stdout, re.M)
    sub = loaderdoc("tradeoffs", "--help")
    for option in ("--config", "--probe-report", "--machine", "--batch-size", "--sample-shape", "--json"):
        assert option in sub.stdout, option
