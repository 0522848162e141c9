"""Inputs at the limits, in the reports loaderdoc reads back.

- A probe report (``tradeoffs --probe-report``) of a schema this build does not know, or with a
  batch size, a worker count or a prefetch depth no probe can have measured, or a number of
  thousands of digits, is refused in one line, never shown as measured.
- A watch report (``loaderdoc --report``, ``watch --merge``) with a count, a setting, a time or a
  size no run can have measured, or a negative one, NaN or inf, is refused in one line naming the
  file and the key, by the bounds the probe report's reader uses.
- ``watch --merge`` given one report twice (the same path, a symlink, a hard link, a copy)
  refuses: its batches would count twice. Two runs still merge.
- ``watch --merge FIFO`` with no writer ends at once.

The commands here only read files and refuse or print them: most run through the CLI's ``main`` in
the test's own process (``loaderdoc_here``: the same exit code and output, without starting Python
again for each of some hundred files). One refusal of each reader (an unknown schema, a negative
worker count) and the commands that start or wait on something run as a user starts them.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
from pathlib import Path

import pytest
from faults_support import TESTS, loaderdoc, loaderdoc_here, one_line_error

from loaderdoc.base.errors import EXIT_OK, EXIT_USAGE

PROBE_REPORT = json.loads((TESTS / "fixtures" / "probe" / "image.json").read_text())


def spoiled(tmp_path: Path, change) -> Path:
    doc = copy.deepcopy(PROBE_REPORT)
    change(doc)
    path = tmp_path / "probe.json"
    path.write_text(json.dumps(doc))
    return path


def setting(where: str, key: str, value):
    def change(doc):
        target = doc["workload"] if where == "workload" else (
            doc["recommended"] if where == "recommended" else doc["results"][int(where)]["settings"])
        target[key] = value
    return change


# every place a count lives, at the first value past its bound and far past it
BEYOND = [(where, key, value)
          for where in ("workload", "0", "1", "recommended")
          for key, bound in (("batch_size", 1_000_000), ("num_workers", 4096), ("prefetch_factor", 1024))
          if not (where == "workload" and key != "batch_size")
          for value in (bound + 1, 10**6 if key != "batch_size" else 10**7, 10**30)]


@pytest.mark.parametrize("where, key, value", BEYOND)
def test_a_count_no_probe_can_have_measured_is_refused(tmp_path, where, key, value):
    path = spoiled(tmp_path, setting(where, key, value))
    proc = loaderdoc_here("tradeoffs", "--probe-report", str(path))
    place = "workload" if where == "workload" else ("recommended" if where == "recommended" else
                                                    f"results[{where}].settings")
    one_line_error(proc, EXIT_USAGE, f"{place}.{key}:", "is beyond any measured run", "not a measurement")
    assert proc.stdout == ""


@pytest.mark.parametrize("where, key, value", [("workload", "batch_size", 1_000_000), ("0", "num_workers", 4096),
                                               ("recommended", "prefetch_factor", 1024)])
def test_counts_at_the_bound_are_still_read(tmp_path, where, key, value):
    proc = loaderdoc_here("tradeoffs", "--probe-report", str(spoiled(tmp_path, setting(where, key, value))))
    assert proc.returncode == EXIT_OK, proc.stderr


@pytest.mark.parametrize("schema", ["loaderdoc.probe/99", "loaderdoc.probe/3", "loaderdoc.probe/"])
def test_a_probe_report_of_a_schema_this_build_does_not_know_is_refused(tmp_path, schema):
    proc = loaderdoc("tradeoffs", "--probe-report", str(spoiled(tmp_path, lambda d: d.update(schema=schema))))
    one_line_error(proc, EXIT_USAGE, f"schema {schema} is not one this build reads", "loaderdoc.probe/2")


@pytest.mark.parametrize("schema", ["loaderdoc.probe/1", "loaderdoc.probe/2", None])
def test_the_schemas_it_knows_are_read(tmp_path, schema):
    def change(doc):
        if schema is None:
            del doc["schema"]
        else:
            doc["schema"] = schema
    proc = loaderdoc_here("tradeoffs", "--probe-report", str(spoiled(tmp_path, change)))
    assert proc.returncode == EXIT_OK, proc.stderr


@pytest.mark.parametrize("where", ["workload.batch_size", "results.0.batches_per_s", "elapsed_s"])
def test_a_number_of_thousands_of_digits_is_one_line(tmp_path, where):
    path = spoiled(tmp_path, lambda d: None)
    key = where.rsplit(".", 1)[-1]
    text = path.read_text()
    at = text.index(f'"{key}": ') + len(f'"{key}": ')
    end = min(i for i in (text.find(",", at), text.find("}", at)) if i > 0)
    path.write_text(text[:at] + "9" * 5000 + text[end:])
    proc = loaderdoc_here("tradeoffs", "--probe-report", str(path))
    one_line_error(proc, EXIT_USAGE, "holds a number of thousands of digits; not a probe report")


def test_a_probe_report_opened_in_the_app_is_refused_as_what_it_is(tmp_path):
    proc = loaderdoc_here("--report", str(spoiled(tmp_path, lambda d: d.update(schema="loaderdoc.probe/99"))))
    one_line_error(proc, EXIT_USAGE, "a probe report, which 'loaderdoc tradeoffs --probe-report' reads")


# ---- a watch report at the limits -------------------------------------------------------------
WATCH = TESTS / "fixtures" / "watch"
WATCH_REPORT = json.loads((WATCH / "healthy.json").read_text())


def loader0(*path: str | int):
    def change(doc, key, value):
        target = doc["loaders"][0]
        for step in path:
            target = target[step]
        target[key] = value
    return change


def top(doc, key, value):
    doc[key] = value


# a row of each table as loaderdoc watch writes it (a process's place, a rank's row, a process's
# memory): rank 1 on node 1, beside starved-timeline.json's rank 0
ROWS = {"processes": {"pid": 101, "hostname": "node1", "rank": 1, "local_rank": 0, "world_size": 2,
                      "group_rank": 1, "slurm_nodeid": None, "affinity_cpus": 2},
        "ranks": {"rank": 1, "node": "1", "pid": 101, "loader": 1, "wait_share": 0.1, "wait_per_batch_s": 0.002,
                  "steps": 300, "cpus": 2, "shm_total_bytes": 64 << 20, "num_workers": 4},
        "memory": {"pid": 101, "samples": [], "shm_peak_used_bytes": 0, "shm_total_bytes": 64 << 20}}


def row(table: str):
    def change(doc, key, value):
        doc[table] = [{**ROWS[table], key: value}]
    return change


# (where, key, value, what the refusal says after "FILE: where.key")
WATCH_BEYOND = [
    ("loaders[0].settings", loader0("settings"), "num_workers", 10**6,
     "1000000 is beyond any measured run (at most 4,096); not a measurement"),
    ("loaders[0].settings", loader0("settings"), "batch_size", 10**30,
     "a number of 31 digits is beyond any measured run (at most 1,000,000)"),
    ("loaders[0].settings", loader0("settings"), "prefetch_factor", 1025, "1025 is beyond any measured run"),
    ("loaders[0].totals", loader0("totals"), "wait_s", 1e308, "1e+308 is beyond any measured run"),
    ("loaders[0].totals", loader0("totals"), "wait_s", float("nan"), "expected a finite number >= 0, got nan"),
    ("loaders[0].totals", loader0("totals"), "step_s", float("inf"), "expected a finite number >= 0, got inf"),
    ("loaders[0].totals", loader0("totals"), "steps", 10**500, "a number of 501 digits is beyond any measured run"),
    ("loaders[0].totals", loader0("totals"), "waits", -1, "expected a whole number >= 0, got -1"),
    ("loaders[0].epochs[0]", loader0("epochs", 0), "steps", 10**30, "a number of 31 digits is beyond"),
    ("loaders[0].epochs[0]", loader0("epochs", 0), "first_batch_s", -0.5, "expected a finite number >= 0"),
    ("", top, "wait_s", float("inf"), "expected a finite number >= 0, got inf"),
    ("", top, "exit_code", -(10**40), "a number of 41 digits is no process's exit code (a whole number from -255"),
    # the tables watch --merge keys ranks and nodes by (a list for a rank was a traceback, exit 70)
    ("processes[0]", row("processes"), "rank", [1], "expected a whole number >= 0, got [1]"),
    ("processes[0]", row("processes"), "pid", "p", "expected a whole number >= 0, got 'p'"),
    ("processes[0]", row("processes"), "hostname", 7, "expected a string, got 7"),
    ("ranks[0]", row("ranks"), "steps", 10**30, "a number of 31 digits is beyond any measured run"),
    ("ranks[0]", row("ranks"), "wait_share", "lots", "expected a finite number >= 0, got 'lots'"),
    ("memory[0]", row("memory"), "pid", None, "missing; expected a whole number >= 0"),
]


def watch_spoiled(tmp_path: Path, change, key, value) -> Path:
    doc = copy.deepcopy(WATCH_REPORT)
    change(doc, key, value)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("where, change, key, value, words", WATCH_BEYOND)
def test_a_watch_report_no_run_can_have_measured_is_refused(tmp_path, where, change, key, value, words):
    path = watch_spoiled(tmp_path, change, key, value)
    at = f"{path}: {where}.{key}: " if where else f"{path}: {key}: "
    proc = loaderdoc_here("--report", str(path))  # stdout piped: the summary would print, no app starts
    one_line_error(proc, EXIT_USAGE, at, words)
    assert proc.stdout == ""
    merged = tmp_path / "merged.json"
    proc = loaderdoc_here("watch", "--merge", str(WATCH / "starved-timeline.json"), str(path), "--report", str(merged))
    one_line_error(proc, EXIT_USAGE, at, words)
    assert not merged.exists()


def test_a_negative_worker_count_in_a_watch_report_is_refused_as_torch_would(tmp_path):
    path = watch_spoiled(tmp_path, loader0("settings"), "num_workers", -1)
    proc = loaderdoc("--report", str(path))
    one_line_error(proc, EXIT_USAGE, f"{path}: loaders[0].settings: num_workers must be >= 0, got -1")


def test_a_watch_report_at_the_bounds_is_still_read(tmp_path):
    doc = copy.deepcopy(WATCH_REPORT)
    for table, good in ROWS.items():  # each row as watch writes it is read
        doc[table] = [good]
    doc["loaders"][0]["settings"].update(num_workers=4096, batch_size=1_000_000, prefetch_factor=1024)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    proc = loaderdoc_here("--report", str(path))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "num_workers=4096" in proc.stdout
    proc = loaderdoc_here("watch", "--merge", str(WATCH / "starved-timeline.json"), str(path), "--json")
    assert proc.returncode == EXIT_OK, proc.stderr


# ---- one run merged twice ----------------------------------------------------------------------
TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

for _ in DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8):
    pass
"""


# one worker runs every test that reads these two real runs: xdist would make them again in each
TWO_RUNS = pytest.mark.xdist_group("two_runs")


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("runs")
    (folder / "train.py").write_text(TRAIN)
    for name in ("a.json", "b.json"):
        proc = loaderdoc("watch", "--report", name, "--", sys.executable, "train.py", cwd=folder)
        assert proc.returncode == EXIT_OK, proc.stderr
    return folder / "a.json", folder / "b.json"


def twice(kind: str, report: Path, folder: Path) -> tuple[str, str, str]:
    """Two names for one run, and the words the refusal gives."""
    other = folder / "other.json"
    if kind == "same path":
        return str(report), str(report), "the same file"
    if kind == "symlink":
        other.symlink_to(report)
        return str(report), str(other), "the same file"
    if kind == "hard link":
        os.link(report, other)
        return str(report), str(other), "the same file"
    doc = json.loads(report.read_text())
    if kind == "copy":
        other.write_text(report.read_text())
        return str(report), str(other), "the same content"
    assert kind == "copy written again"  # other spacing, the same document
    other.write_text(json.dumps(doc, separators=(",", ":")))
    return str(report), str(other), "the same content"


@TWO_RUNS
@pytest.mark.parametrize("kind", ["same path", "symlink", "hard link", "copy", "copy written again"])
def test_one_run_merged_twice_is_refused_not_counted_twice(tmp_path, two_runs, kind):
    first, second, words = twice(kind, two_runs[0], tmp_path)
    proc = loaderdoc_here("watch", "--merge", first, second, "--report", str(tmp_path / "merged.json"))
    one_line_error(proc, EXIT_USAGE, "watch --merge:", "are the same run", words, "give each node's report once")
    assert not (tmp_path / "merged.json").exists()


@TWO_RUNS
def test_two_runs_still_merge(tmp_path, two_runs):
    proc = loaderdoc_here("watch", "--merge", *map(str, two_runs), "--json")
    assert proc.returncode == EXIT_OK, proc.stderr
    merged = json.loads(proc.stdout)
    assert merged["merged_from"] == [str(p) for p in two_runs]
    assert sum(e["totals"]["steps"] for e in merged["loaders"]) == sum(
        e["totals"]["steps"] for p in two_runs for e in json.loads(p.read_text())["loaders"])


def test_merge_from_a_fifo_without_a_writer_ends_at_once(tmp_path):
    fifo = tmp_path / "node0.json"
    os.mkfifo(fifo)
    started = time.monotonic()
    proc = loaderdoc("watch", "--merge", str(fifo), timeout=30)
    one_line_error(proc, EXIT_USAGE, "node0.json: a named pipe with nothing written to it (no writer)")
    assert time.monotonic() - started < 10
