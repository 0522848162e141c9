"""`loaderdoc probe`'s text report: every line within the terminal's width, every number whole.

The reports are built in-process: two real `loaderdoc probe --json` documents (tests/fixtures/probe),
reports recorded before the breakdown and the prediction existed (tests/support/recorded), and
hand-built ones (nothing measured, a `not starved` stop, numbers and purposes too wide for a row).
One test runs the real command at 80 columns.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.advice.findings import Finding
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import MiB
from loaderdoc.probing.result import (
    Breakdown,
    ConfigResult,
    CurvePoint,
    Prediction,
    ProbeReport,
    StageCost,
    WaitStats,
    WorkloadInfo,
)
from loaderdoc.text.layout import table_lines
from loaderdoc.text.probe import render_text

HERE = Path(__file__).parent
FIXTURES = HERE / "fixtures" / "probe"
RECORDED = HERE / "support" / "recorded"
WIDTHS = [60, 80, 100, 200]


def fixture(name: str) -> ProbeReport:
    return ProbeReport.from_json((FIXTURES / f"{name}.json").read_text())


def recorded(name: str) -> ProbeReport:
    return ProbeReport.from_dict(json.loads((RECORDED / f"{name}.json").read_text())["probe"])


def nothing_measured() -> ProbeReport:
    return ProbeReport(workload=WorkloadInfo(name="probe_userdata:make"), budget_s=30, elapsed_s=0.4,
                       stopped="cancelled")


def not_starved() -> ProbeReport:
    settings = LoaderSettings(batch_size=128, num_workers=0)
    only = ConfigResult(settings=settings, batches=120, first_batch_s=0.01, batches_per_s=48.9, samples_per_s=6259.2,
                        wait=WaitStats(0.2, 0.4, 0.9, 0.25), starvation_pct=1.2, worker_pss_bytes=0,
                        purpose="baseline: load in the training process")
    return ProbeReport(
        workload=WorkloadInfo(name="tensor", description="tensors in RAM", batch_size=128, step_ms=20.0),
        results=[only], recommended=settings, reasons=["num_workers=0: the step waits 1% of the time; not starved"],
        budget_s=6, elapsed_s=1.3, stopped="not starved", epoch_steps=64,
        breakdown=[Breakdown(settings=settings, label="baseline: num_workers=0", measured_per_s=48.9, wait_ms=0.25,
                             stages=[StageCost("dataset (CPU)", 0.3, None, "in the training process"),
                                     StageCost("transfer", 0.0), StageCost("training step", 20.2, 49.5, "")],
                             bottleneck="step", why="the step (20 ms) outlasts loading (0.4 ms a batch)")],
        prediction=Prediction(curve=[CurvePoint(0, 48.1, 48.9, "step")], workers=0, model="",
                              pick_workers=0, pick_predicted_per_s=48.1, pick_measured_per_s=48.9),
    )


def wide() -> ProbeReport:
    """Every identity column, numbers as wide as they get, purposes longer than any row."""
    report = fixture("remote")
    r = report.results
    r[1].settings.in_order = False
    r[1].purpose = "in_order=False: bursty waits (p95 20.5 ms vs p50 3.5 ms) with workers that finish out of turn"
    r[2].settings.pin_memory = True
    r[2].purpose = "pin_memory on (CUDA)"
    r[3].settings.persistent_workers = True
    r[4].batches_per_s, r[4].first_batch_s, r[4].worker_pss_bytes = 123456.7, 1234.56, 987654 * MiB
    r[4].wait = WaitStats(12345.6, 23456.7)
    r[5].purpose = "the CPU budget: as many workers as the 2 CPUs allow " * 3
    r[6].status, r[6].error, r[6].traceback = "timeout", "no batch in 60 s", "Traceback:\n  " + "x" * 150
    report.reasons.append("a_reason_with_one_very_long_word_" * 5)
    return report


REPORTS = {
    "image": lambda: fixture("image"),
    "remote": lambda: fixture("remote"),
    "old-io-bound": lambda: recorded("real-io-bound"),
    "old-keyerror": lambda: recorded("real-keyerror"),
    "nothing-measured": nothing_measured,
    "not-starved": not_starved,
    "wide": wide,
}
FINDING = Finding("shm-too-small", "warning",
                  "the batches in flight (2 x 16 x 4.6 MiB = 147 MiB) do not fit /dev/shm (64 MiB free); "
                  "the DataLoader will die with a bus error",
                  evidence=["/dev/shm 64 MiB free, read from statvfs(/dev/shm) and /proc/self/mountinfo"],
                  cause="Docker gives a container a 64 MiB /dev/shm unless --shm-size or --ipc=host is set",
                  fix="start the container with --shm-size=1g")


def text_of(name: str, width: int) -> str:
    return render_text(REPORTS[name](), [FINDING], width)


def block(text: str, title: str) -> list[str]:
    """The lines of the section that starts with ``title``, up to the next unindented heading."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(title))
    out = [lines[start]]
    for line in lines[start + 1:]:
        if line and not line.startswith(" "):
            break
        out.append(line)
    return out


def close(token: str, value: float) -> bool:
    """``token`` is ``value`` rounded to the decimals it shows: whole, not cut."""
    decimals = len(token.split(".")[1]) if "." in token else 0
    return abs(float(token) - value) <= 0.5 * 10 ** -decimals + 1e-9


HEAD_KEYS = {"workers": "workers", "fetch": "prefetch", "in_order": "in_order", "persist": "persist", "pin": "pin",
             "steps/s": "rate", "starved": "starved", "p50/p95": "wait", "batch": "first", "MiB": "pss"}


def measured_table(text: str) -> tuple[list[str], list[list[str]]]:
    """The Measured table's column keys (read from its header) and each row's cells, row by row."""
    lines = block(text, "Measured")
    head = next(i for i, line in enumerate(lines) if {"workers", "steps/s"} <= set(line.split()))
    keys = [HEAD_KEYS[t] for t in lines[head].split() if t in HEAD_KEYS]
    rows = []
    for line in lines[head + 1:]:
        if not line.strip():
            break
        tokens = line.split()
        tokens = tokens[1:] if tokens[0] == "*" else tokens
        if tokens[0].isdigit():  # not the wrapped rest of a "why tried" cell
            rows.append(tokens[:len(keys)])
    return keys, rows


def check_cell(key: str, cell: str, r: ConfigResult) -> None:
    s = r.settings
    if key == "workers":
        assert cell == str(s.num_workers)
    elif key == "prefetch":
        assert cell == (str(s.effective_prefetch_factor) if s.num_workers else "-")
    elif key in ("in_order", "persist", "pin"):
        value = {"in_order": s.in_order, "persist": s.persistent_workers, "pin": s.pin_memory}[key]
        assert cell in ("yes" if value else "no", "-")
    elif not r.ok:
        assert cell == (r.status if key == "rate" else "-")
    else:
        expected = {"rate": r.batches_per_s, "starved": r.starvation_pct, "first": r.first_batch_s,
                    "pss": None if r.worker_pss_bytes is None else r.worker_pss_bytes / MiB}
        if key == "wait":
            for token, value in zip(cell.split("/"), (r.wait.p50_ms, r.wait.p95_ms), strict=True):
                assert token == "-" if value is None else close(token, value), (cell, r.wait)
        elif expected[key] is None:
            assert cell == "-"
        else:
            assert close(cell, expected[key]), (key, cell, expected[key])


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", REPORTS)
def test_every_line_fits_the_width(name, width):
    text = text_of(name, width)
    too_long = [line for line in text.splitlines() if len(line) > width]
    assert not too_long, "\n".join(too_long)
    assert "\u2026" not in text  # rich's "4…": nothing is ever cut
    assert text.isascii()


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["image", "remote", "old-io-bound", "old-keyerror", "not-starved", "wide"])
def test_every_number_in_the_measured_table_is_whole(name, width):
    report = REPORTS[name]()
    keys, rows = measured_table(render_text(report, [], width))
    assert keys[:2] == ["workers", "prefetch"] and "rate" in keys
    assert len(rows) == len(report.results)
    for cells, r in zip(rows, report.results, strict=True):
        assert len(cells) == len(keys), cells
        for key, cell in zip(keys, cells, strict=True):
            check_cell(key, cell, r)


def test_a_narrow_terminal_gets_fewer_columns_not_shorter_numbers():
    wide_keys, _ = measured_table(text_of("wide", 200))
    narrow_keys, _ = measured_table(text_of("wide", 80))
    assert {"in_order", "persist", "pin", "starved", "wait", "first", "pss"} <= set(wide_keys)
    assert set(narrow_keys) < set(wide_keys) and {"in_order", "persist", "pin", "rate"} <= set(narrow_keys)
    assert "why tried" in block(text_of("image", 200), "Measured")[2]
    assert "why tried" in block(text_of("image", 80), "Measured")[2]  # shortened to its first words
    assert "verify: around the predicted size" not in text_of("image", 80)
    assert "  verify" in text_of("image", 80)


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["image", "remote"])
def test_the_sections_of_a_current_report(name, width):
    report = REPORTS[name]()
    text = render_text(report, [FINDING], width)
    headings = [line for line in text.splitlines() if line and not line.startswith(" ")]
    order = ["Measured", "Where a step's time goes", "Predicted vs measured", "Recommended", "Findings"]
    found = [next(i for i, h in enumerate(headings) if h.startswith(title)) for title in order]
    assert found == sorted(found)
    assert headings[0].startswith(f"{report.workload.name}: ")
    flat = " ".join(text.split())
    assert f"{len(report.results)} configurations in" in flat and "stopped: settled" in flat
    p = report.prediction
    assert re.search(rf"pick: num_workers={p.pick_workers} predicted [\d.]+ steps/s, measured [\d.]+ "
                     rf"\({p.error_pct:+.0f} %\)", flat)
    assert "bottleneck:" in text and "* " in text
    assert "shm-too-small:" in text and "fix: start the container" in text


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize("name", ["image", "remote"])
def test_breakdown_and_prediction_numbers_are_whole(name, width):
    report = REPORTS[name]()
    text = render_text(report, [], width)
    section = block(text, "Where a step's time goes")
    for b in report.breakdown:
        start = next(i for i, line in enumerate(section) if line.startswith("  " + b.label))
        for stage in b.stages:
            rows = [line for line in section[start:] if re.match(rf"    {re.escape(stage.stage)}  +[\d.]+ ", line)]
            if stage.per_s is None and round(stage.ms, 1) == 0:
                continue  # a stage that costs nothing is left out
            ms_cell, rate_cell = rows[0][4 + len(stage.stage):].split()[:2]
            assert close(ms_cell, stage.ms)
            assert rate_cell == "-" if stage.per_s is None else close(rate_cell, stage.per_s)
    lines = block(text, "Predicted vs measured")
    head = next(i for i, line in enumerate(lines) if line.split()[:3] == ["workers", "predicted", "measured"])
    curve = {pt.workers: pt for pt in report.prediction.curve}
    shown = []
    for line in lines[head + 1:]:
        tokens = line.split()
        tokens = tokens[1:] if tokens[0] == "*" else tokens
        if not tokens[0].isdigit():
            break
        pt = curve[int(tokens[0])]
        shown.append(pt.workers)
        assert close(tokens[1], pt.predicted_per_s)
        assert tokens[2] == "-" if pt.measured_per_s is None else close(tokens[2], pt.measured_per_s)
    measured = {pt.workers for pt in report.prediction.curve if pt.measured_per_s is not None}
    assert set(shown) == measured | {report.prediction.workers, report.recommended.num_workers}


@pytest.mark.parametrize("name", ["old-io-bound", "old-keyerror", "nothing-measured", "not-starved"])
def test_reports_without_the_new_fields_or_without_results_render(name):
    report = REPORTS[name]()
    text = render_text(report, [], 80)
    assert text.startswith(report.workload.name)
    assert ("Where a step's time goes" in text) == bool(report.breakdown)
    assert ("Predicted vs measured" in text) == (report.prediction is not None)
    assert "Findings: none" in text
    if report.recommended is None:
        assert "No recommendation" in text
    else:
        assert "Recommended (* above):" in text and "DataLoader(dataset, " in text


def test_edge_reports_say_what_they_have():
    assert "Measured: nothing" in text_of("nothing-measured", 80)
    starved = text_of("not-starved", 80)
    assert "stopped: not starved" in starved and "pick: num_workers=0 predicted 48.1 steps/s, measured 48.9" in starved
    assert "transfer" not in starved  # costs nothing and has no rate
    failed = text_of("old-keyerror", 80)
    assert "Traceback (most recent call last):" in failed and "KeyError: 407" in failed


def test_long_lines_wrap_with_a_hanging_indent():
    text = text_of("image", 80)
    reasons = block(text, "Recommended")
    assert reasons[1].startswith("  DataLoader(dataset, ") and reasons[2].startswith(" " * 13)
    long_reason = next(i for i, line in enumerate(reasons) if line.startswith("  - not chosen:"))
    assert reasons[long_reason + 1].startswith("    ") and not reasons[long_reason + 1].startswith("    -")
    finding = block(text, "Findings")
    assert finding[1].startswith("  WARNING  shm-too-small: ") and finding[2].startswith(" " * 11)


def test_table_lines_aligns_right_and_wraps_the_last_column_in_place():
    header, rows = ["stage", "ms", "note"], [["collate", "1.5", "in the training process " * 3], ["x", "133", ""]]
    lines = table_lines(header, rows, ["", ""], 40, right={1}, wrap_last=True)
    assert "" not in lines and max(len(line) for line in lines) <= 40  # one part, the note wrapped
    assert lines[1].startswith("  collate  1.5  in the") and lines[-1].startswith("  x        133")
    # without wrap_last the note goes to a part of its own, as before
    assert "" in table_lines(header, rows, ["", ""], 40)


def test_the_command_at_80_columns():
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "probe", "tensor", "--budget", "4", "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 80, proc.stdout
    for title in ("Measured", "Recommended (* above):", "Findings"):
        assert any(line.startswith(title) for line in lines), proc.stdout
    assert "steps/s" in proc.stdout and "starved %" in proc.stdout and "\u2026" not in proc.stdout


def test_the_fixtures_are_current_reports():
    # the sample reports carry every field this view reads; an old copy would test nothing new
    for name in ("image", "remote"):
        doc = json.loads((FIXTURES / f"{name}.json").read_text())
        assert doc["schema"] == "loaderdoc.probe/2" and doc["breakdown"] and doc["prediction"]
        assert all(r["stages"] is not None for r in doc["results"])


def _recorded(name: str):
    from support.scenarios import RECORDED_DIR

    from loaderdoc.probing.result import ProbeReport

    return ProbeReport.from_dict(json.loads((RECORDED_DIR / name).read_text(encoding="utf-8"))["probe"])


@pytest.mark.parametrize("width", [80, 120])
def test_worker_memory_still_rising_is_marked_beside_its_figure(width):
    from loaderdoc.policy import still_growing
    from loaderdoc.text.probe import measured_lines

    # a real probe of 8 MiB slices at glibc's defaults: the pick's workers' memory rose
    report = _recorded("real-large-heap-growth.json")
    lines = measured_lines(report, width)
    text = "\n".join(lines)
    assert "+ after PSS: still rising when the window ended" in re.sub(r"\s+", " ", text)
    rows = [line for line in lines if re.match(r"^\s+\*?\s+\d+\s", line)]  # one a run, in order
    marked = [bool(re.search(r"\s\d+\+(\s|$)", row)) for row in rows]
    assert marked == [still_growing(r) for r in report.results] and any(marked)
    assert all(len(line) <= width for line in lines)
    # the same workload with glibc's mmap threshold fixed: nothing rose, nothing marked
    settled = "\n".join(measured_lines(_recorded("real-large-mmap-threshold.json"), width))
    assert "still rising" not in settled and not re.search(r"\d\+", settled)


@pytest.mark.parametrize("width", [60, 80, 200])
def test_a_simulated_step_says_what_it_leaves_out_a_sleep_and_a_gpu_kernel_alike(width):
    from loaderdoc.probing.result import SLEEP_STEP_NOTE

    report = REPORTS["image"]()
    assert report.workload.consumer == "cpu-sleep"
    section = " ".join(" ".join(block(render_text(report, [], width), "Predicted vs measured")).split())
    pick = section.index("pick: num_workers=")
    assert section.index(f"note: {SLEEP_STEP_NOTE}") > pick  # right under the pick's predicted and measured rate
    assert "loaderdoc tune -- python train.py" in section
    report.workload.consumer = "cuda-kernel"
    gpu = " ".join(render_text(report, [], width).split())
    assert "simulated with a sleep" not in gpu
    # a GPU kernel leaves out the training process's host work and threads (issue 48): said too
    assert "the step is a GPU kernel" in gpu and "launches its model's kernels" in gpu


def test_the_json_report_and_the_tui_carry_the_step_note():
    from types import SimpleNamespace

    from loaderdoc.probing.probe import _fill
    from loaderdoc.probing.result import GPU_STEP_NOTE, SLEEP_STEP_NOTE
    from loaderdoc.tui import model

    for consumer, expected in (("cpu-sleep", SLEEP_STEP_NOTE), ("cuda-kernel", GPU_STEP_NOTE)):
        report = REPORTS["image"]()
        report.workload.consumer = consumer
        outcome = SimpleNamespace(recommended=report.recommended, reasons=report.reasons, stopped=report.stopped,
                                  breakdown=report.breakdown, prediction=report.prediction)
        report.prediction.step_note = "stale"
        _fill(report, outcome, 0.0)
        doc = json.loads(report.to_json())
        assert doc["prediction"]["step_note"] == expected
        assert ProbeReport.from_json(report.to_json()).prediction.step_note == expected
        summary = model.report_summary(report)
        assert f"  note: {expected}" in summary
