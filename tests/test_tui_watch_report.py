"""`loaderdoc --report FILE`: a watched run's report read back, refused when it is not one, and
shown in the app (its findings in Diagnoses, wait vs step per loader in the Run view).

Fixtures in tests/fixtures/watch: starved-timeline.json and healthy.json are written by hand
(test data, shaped as the loaderdoc.watch/1 contract with timeline, memory and gpu);
epochs-only.json is a real `loaderdoc watch --report` of a 0-worker loop from before timelines.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.report_files import write_report
from textual.widgets import OptionList, Static, TabbedContent

from loaderdoc.base.errors import EXIT_USAGE
from loaderdoc.cli import build_parser, main
from loaderdoc.system.fixtures import load_machine
from loaderdoc.text.watch import cpu_text, io_text
from loaderdoc.tui.app import make_app
from loaderdoc.tui.widgets.run import WaitShareChart, chart_text, column_shares
from loaderdoc.watching.report_file import WatchReportError, load_watch_report

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "watch"
STARVED, EPOCHS, HEALTHY = (FIXTURES / f"{n}.json" for n in ("starved-timeline", "epochs-only", "healthy"))
MiB = 2**20


def app_with(path: Path, machine: str = "ci-2core"):
    return make_app(facts=load_machine(machine), watch_run=load_watch_report(path),
                    header_fn=lambda *a, **k: ["test header"])


# ---- reading the file ---------------------------------------------------------------------
def test_a_timeline_report_reads_as_intervals_with_memory_peaks():
    run = load_watch_report(STARVED)
    (loader,) = run.loaders
    assert loader.per == "interval" and len(loader.intervals) == 24
    assert loader.intervals[9].label == "at 10.0 s" and loader.intervals[9].wait_s == pytest.approx(0.8)
    assert (loader.rank, loader.pid) == (0, 4242)
    assert run.main_pss_peak_bytes == (900 + 10 * 24) * MiB  # the largest sample
    assert run.workers_pss_peak_bytes == 1536 * MiB  # the loader's epoch maximum beats the samples
    assert (run.shm_peak_bytes, run.shm_total_bytes) == (48 * MiB, 64 * MiB)
    assert [f.rule_id for f in run.findings] == ["watch-data-starved"]
    assert run.findings[0].settings_change == {"num_workers": 5}


def test_a_report_without_a_timeline_falls_back_to_its_epochs():
    run = load_watch_report(EPOCHS)
    (loader,) = run.loaders
    assert loader.per == "epoch" and [i.label for i in loader.intervals] == ["epoch 0", "epoch 1", "epoch 2"]
    assert run.main_pss_peak_bytes is None and run.gpu_timing is None


def _write(tmp_path: Path, doc) -> Path:
    return write_report(tmp_path, doc, "run.json")


def _broken(key_path: list, value) -> dict:
    doc = json.loads(STARVED.read_text())
    node = doc
    for key in key_path[:-1]:
        node = node[key]
    node[key_path[-1]] = value
    return doc


@pytest.mark.parametrize("doc, expected", [
    ("{not json", "line 1: not valid JSON"),
    ([1, 2], "expected a JSON object (a watch report), got a list"),
    ({"schema": "loaderdoc.check/1"}, "not a loaderdoc.watch/1 report (a loaderdoc.check/1 document)"),
    ({"workload": {}, "results": []}, "not a loaderdoc.watch/1 report (a probe report"),
    ({}, "not a loaderdoc.watch/1 report (no 'schema' key)"),
    (_broken(["loaders", 0, "totals", "steps"], "many"), "loaders[0].totals.steps: expected a whole number >= 0"),
    (_broken(["loaders", 0, "timeline", 3, "wait_s"], -1.0), "loaders[0].timeline[3].wait_s: expected a finite"),
    (_broken(["findings", 0, "severity"], "bad"), "findings[0].severity: expected one of ok, warning, critical"),
    (_broken(["loaders"], None), "loaders: missing; expected a list"),
])
def test_what_is_not_a_watch_report_is_refused_naming_the_key(tmp_path, doc, expected):
    path = _write(tmp_path, doc)
    with pytest.raises(WatchReportError) as err:
        load_watch_report(path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)
    assert "\n" not in str(err.value)


# ---- the command line ---------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom loaderdoc.cli import main\nrc = main(sys.argv[1:])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'torch'}), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    return subprocess.run([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: tmp / "missing.json", "missing.json: no such file; check the --report path"),
    (lambda tmp: _write(tmp, "{not json"), "not valid JSON"),
    (lambda tmp: _write(tmp, {"schema": "loaderdoc.check/1"}),
     "not a loaderdoc.watch/1, loaderdoc.job/1 or loaderdoc.tune/1 report"),
])
def test_a_bad_report_is_one_line_exit_3_and_no_app(tmp_path, make, expected):
    proc = _cli("--report", str(make(tmp_path)))
    error, imported = proc.stderr.splitlines()
    assert proc.returncode == EXIT_USAGE
    assert error.startswith("loaderdoc: error: ") and expected in error and "write one with" in error \
        or "check the --report path" in error
    assert imported == "[]"  # refused before textual was imported: no app started
    assert proc.stdout == ""


def test_without_a_terminal_the_report_is_printed_not_opened():
    proc = _cli("--report", str(STARVED))
    assert proc.returncode == 0, proc.stderr
    assert "no terminal; printing the watched run's summary" in proc.stderr
    assert proc.stderr.splitlines()[-1] == "[]"
    assert "exit 0, 238 batches, waited for data 62.9 %" in proc.stdout
    assert "CRITICAL watch-data-starved" in proc.stdout


def test_report_beside_a_command_is_refused_and_watch_keeps_its_own_report(capsys):
    assert main(["--report", str(STARVED), "check"]) == EXIT_USAGE
    assert "does not go with 'check'" in capsys.readouterr().err
    args = build_parser().parse_args(["watch", "--report", "out.json", "--", "true"])
    assert (args.report, args.open_report) == ("out.json", None)  # a file to write, never the one opened


# ---- the app ------------------------------------------------------------------------------
async def test_the_app_opens_on_the_run_with_its_header_and_a_chart_per_loader():
    app = app_with(STARVED)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "run"
        head = str(app.screen.query_one("#run-head", Static).render())
        for part in ("python train.py --lr 3e-4", "exit 0", "238 batches", "62.9 %", "main 1.1 GiB",
                     "workers 1.5 GiB", "/dev/shm 48 MiB of 64 MiB", "idle time not measured"):
            assert part in head, part
        chart = app.screen.query_one("#run-chart-0", WaitShareChart)
        assert chart.region.height >= 10 and chart.region.width > 100
        note = str(app.screen.query_one(".run-note", Static).render())
        assert "share of each interval" in note and "most waiting at 9.0 s" in note


async def test_the_diagnoses_view_leads_with_the_runs_findings_and_applies_its_fix():
    app = app_with(STARVED)
    async with app.run_test(size=(120, 40)) as pilot:
        await app.action_show_tab("diagnoses")
        await pilot.pause()
        options = app.screen.query_one("#findings", OptionList)
        assert "num_workers=2, batch_size=64" in str(options.get_option_at_index(0).prompt)
        note = str(app.screen.query_one("#diagnoses-note", Static).render())
        assert f"the watched run {STARVED}" in note
        await pilot.press("a")
        await pilot.pause()
        assert app.session.settings.num_workers == 5
        assert app.session.findings[0].rule_id == "watch-data-starved"  # a past run's measurement stays


async def test_the_chosen_settings_are_the_ones_the_watched_run_used():
    """Issue 49, family 6: opened on a watched run (batch 2, 0 workers) the app said "Chosen ...
    batch_size=32, num_workers=1" and called the run's findings "for the chosen settings"."""
    app = app_with(EPOCHS)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        chosen = app.session.settings
        assert (chosen.batch_size, chosen.num_workers) == (2, 0)
        assert app.session.settings_origin == "as the watched run epochs-only.json used them, its loader 1"
        await app.action_show_tab("diagnoses")
        await pilot.pause()
        note = str(app.screen.query_one("#diagnoses-note", Static).render())
        assert "for the chosen settings" not in note and f"the watched run {EPOCHS}" in note


async def test_a_healthy_run_shows_its_ok_finding_and_a_low_wait():
    app = app_with(HEALTHY)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert any(f.rule_id == "watch-loader-healthy" for f in app.session.findings)
        assert "waited for data 1.2 %" in str(app.screen.query_one("#run-head", Static).render())
        shares = column_shares(app.session.watch_run.loaders[0].intervals, 30)
        assert all(s is not None and s < 0.02 for s in shares)


@pytest.mark.parametrize("path", [STARVED, EPOCHS, HEALTHY])
async def test_the_run_view_fits_80x24(path):
    app = app_with(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.screen.query_one("#run-pane")
        chart = app.screen.query_one("#run-chart-0", WaitShareChart)
        assert pane.region.right <= 80 and pane.region.bottom <= 24
        assert chart.region.height >= 5 and chart.region.bottom <= pane.region.bottom  # on screen, not scrolled


async def test_without_a_report_there_is_no_run_view_and_6_does_nothing():
    app = make_app(facts=load_machine("ci-2core"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        await pilot.press("6")
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "machine"
        assert not app.screen.query("#run-pane")


async def test_6_comes_back_to_the_run_view():
    app = app_with(EPOCHS)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        assert app.screen.query_one(TabbedContent).active == "diagnoses"
        await pilot.press("6")
        assert app.screen.query_one(TabbedContent).active == "run"


# ---- the chart ----------------------------------------------------------------------------
def test_the_chart_stacks_each_stretchs_wait_share_from_the_bottom():
    loader = load_watch_report(STARVED).loaders[0]
    shares = column_shares(loader.intervals, 48)  # 24 intervals, two columns each
    assert shares[:2] == [None, None]  # worker start-up: no time measured yet
    assert shares[2] == pytest.approx(0.55 / 0.98, abs=1e-3) and shares[20] == pytest.approx(0.8 / 0.98, abs=1e-3)
    merged = column_shares(loader.intervals, 6)  # four intervals a column: their seconds summed
    assert merged[0] == pytest.approx(3 * 0.55 / (3 * 0.98), abs=1e-3)
    lines = chart_text(loader, 53, 11).plain.splitlines()
    assert len(lines) == 11 and all(len(line) <= 53 for line in lines)
    bottom, top = lines[9], lines[0]
    assert bottom.startswith("  0% ") and top.startswith("100% ")
    assert bottom[5:7] == "  " and set(bottom[7:]) == {"█"}  # every measured column waits a little
    assert set(top[7:]) == {"░"}  # and none waits all the time
    assert lines[10].split() == ["at", "1.0", "s", "at", "24.0", "s"]


def test_first_paint_of_a_report_imports_no_torch():
    code = (
        "import asyncio, sys\n"
        "from loaderdoc.system.fixtures import load_machine\n"
        "from loaderdoc.tui.app import make_app\n"
        "from loaderdoc.watching.report_file import load_watch_report\n"
        "async def go():\n"
        f"    app = make_app(facts=load_machine('ci-2core'), watch_run=load_watch_report({str(STARVED)!r}))\n"
        "    async with app.run_test(size=(80, 24)) as pilot:\n"
        "        await pilot.pause()\n"
        "        assert app.screen.query_one('#run-chart-0').region.height > 0\n"
        "asyncio.run(go())\n"
        "print('torch' in sys.modules)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "False", proc.stderr


async def test_each_loader_of_each_rank_gets_its_own_chart(tmp_path):
    doc = json.loads(STARVED.read_text())
    second = json.loads(json.dumps(doc["loaders"][0]))
    second.update(pid=4243, rank=1)
    for point in second["timeline"]:
        point["wait_s"], point["step_s"] = point["step_s"], point["wait_s"]  # this rank hardly waits
    doc["loaders"].append(second)
    app = app_with(_write(tmp_path, doc))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        titles = [str(t.render()) for t in app.screen.query(".run-title")]
        assert len(titles) == 2 and "rank 1, pid 4243" in titles[1]
        first, other = (app.screen.query_one(f"#run-chart-{i}", WaitShareChart) for i in (0, 1))
        assert first.render().plain != other.render().plain


# ---- the CPU accounting (issue 28) ------------------------------------------------------------
CPU = {"budget_cpus": 2.0, "load_cpu_per_batch_s": 0.132, "load_is_cpu": True, "load_queued_per_batch_s": None,
       "step_cpu_per_step_s": 0.152, "step_wall_per_step_s": 0.0792, "step_is_cpu": True, "step_threads": 1.9,
       "torch_threads": 2, "handover_per_batch_s": 0.0, "idle_wait_share": 0.452, "cpu_per_batch_s": 0.285,
       "used_cpus": 1.96, "others_cpus": 0.01, "saturated": True, "rate_per_s": 6.9, "ceiling_per_s": 7.0,
       "ceiling_matters": True}


def _with_cpu(tmp_path: Path, cpu) -> Path:
    doc = json.loads(STARVED.read_text(encoding="utf-8"))
    doc["loaders"][0]["cpu"] = cpu
    return _write(tmp_path, doc)


async def test_the_run_view_says_where_each_loaders_cpu_time_went(tmp_path):
    path = _with_cpu(tmp_path, CPU)
    (loader,) = load_watch_report(path).loaders
    assert cpu_text(loader.cpu).startswith("CPU: loading 132 ms/batch (CPU work), step 152 ms of CPU per 79.2 ms")
    assert "at most about 7.0 steps/s on these CPUs at this run's CPU time a batch (ran 6.9)" in cpu_text(loader.cpu)
    app = app_with(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = str(app.screen.query_one(".run-cpu", Static).render())
        assert "at most about 7.0 steps/s" in shown  # wrapped at 80 columns, not cut


def test_a_report_from_before_the_cpu_accounting_shows_no_cpu_line_and_a_broken_one_is_refused(tmp_path):
    (loader,) = load_watch_report(STARVED).loaders
    assert cpu_text(loader.cpu) is None
    with pytest.raises(WatchReportError, match=r"loaders\[0\]\.cpu: not a CPU accounting"):
        load_watch_report(_with_cpu(tmp_path, {"budget_cpus": 2.0}))


# ---- the reads (issue 34) ---------------------------------------------------------------------
IO = {"readable": True, "main": {"rchar_bytes": 13107200, "read_calls": 410, "read_bytes": 13107200},
      "workers": None, "steady_batches": 49, "steady_s": 0.14, "rchar_per_batch_bytes": 262144.0,
      "read_calls_per_batch": 8.1, "read_bytes_per_batch": 262144.0, "rchar_per_s": 9.2e7,
      "read_bytes_per_s": 9.2e7, "device_share": 1.0, "bytes_per_read_call": 32768.0,
      "epoch_read_bytes": [13107200], "reads_from": "disk", "verdict": "waiting on the disk"}


def _with_io(tmp_path: Path, io) -> Path:
    doc = json.loads(STARVED.read_text(encoding="utf-8"))
    doc["loaders"][0]["io"] = io
    return _write(tmp_path, doc)


async def test_the_run_view_says_what_each_loader_read_and_from_where(tmp_path):
    path = _with_io(tmp_path, IO)
    (loader,) = load_watch_report(path).loaders
    assert io_text(loader.io) == ("reads: 256 KiB/batch in 8.1 read calls (87.7 MiB/s), 256 KiB/batch from the disk "
                              "(100%, 87.7 MiB/s): waiting on the disk")
    app = app_with(path)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        shown = [str(s.render()) for s in app.screen.query(".run-cpu").results(Static)]
        assert any("waiting on the disk" in line for line in shown), shown


def test_unread_reads_are_said_and_a_broken_read_block_is_refused(tmp_path):
    (loader,) = load_watch_report(_with_io(tmp_path, {"readable": False, "reason": "/proc/self/io does not exist"})).loaders
    assert io_text(loader.io) == "reads: not measured: /proc/self/io does not exist"
    assert io_text(load_watch_report(STARVED).loaders[0].io) is None  # a report from before the reads
    with pytest.raises(WatchReportError, match=r"loaders\[0\]\.io: not a read accounting"):
        load_watch_report(_with_io(tmp_path, {"readable": True}))
