"""`loaderdoc --report tune.json`: a tune report (`loaderdoc tune --report FILE`) read back, refused
when it is not one, and shown in the app's Tune view: the trials, the pick and its reason, the gain
over the script's own settings and the notes.

Fixtures in tests/fixtures/tune are real `loaderdoc tune --report` runs on this 2-CPU VM of a
loop whose Dataset sleeps 4 ms per sample (I/O-bound) and whose step sleeps 10 ms:
io-bound.json (4 trials, picks num_workers=4) and io-bound-worker-fails.json (the same loop with a
worker_init_fn that raises in a fourth worker: trial 4, num_workers=4, failed with exit code 1).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.report_files import changed as _changed
from support.report_files import write_report
from textual.widgets import DataTable, Static, TabbedContent

from loaderdoc.base.errors import EXIT_USAGE
from loaderdoc.reports import ReportError, TuneRun, open_report
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import make_app
from loaderdoc.tui.widgets.tune import PICK_MARK, pick_lines, status_text

FIXTURES = Path(__file__).resolve().parent / "fixtures"
IO_BOUND, FAILS = FIXTURES / "tune" / "io-bound.json", FIXTURES / "tune" / "io-bound-worker-fails.json"


def app_with(path: Path):
    return make_app(facts=load_machine("ci-2core"), tune_run=open_report(path),
                    header_fn=lambda *a, **k: ["test header"])


def _write(tmp_path: Path, doc) -> Path:
    return write_report(tmp_path, doc, "tune.json")


# ---- reading the file ---------------------------------------------------------------------
def test_the_real_report_reads_back_as_written():
    from loaderdoc.tuning.result import TuneReport

    run = open_report(IO_BOUND)
    assert isinstance(run, TuneRun) and run.path == str(IO_BOUND)
    assert run.report == TuneReport.from_dict(json.loads(IO_BOUND.read_text()))  # nothing lost on a good file
    assert [t.settings.num_workers for t in run.report.trials] == [0, 3, 4, 2]
    assert (run.report.pick.trial, run.report.pick.settings.num_workers) == (3, 4)


def test_a_failed_trial_keeps_its_status_and_reason():
    report = open_report(FAILS).report
    failed = report.trials[3]
    assert (failed.status, failed.exit_code, failed.ok) == ("failed", 1, False)
    assert status_text(failed) == "failed (exit code 1): the command exited 1 before the window settled"
    assert ("Note", "trial 4 (num_workers=4) failed, exit code 1: not measured, so not among the pick's "
            "candidates") in pick_lines(report)


@pytest.mark.parametrize("doc, expected", [
    (_changed(IO_BOUND, lambda d: d.update(trials="x")), "trials: expected a list, got 'x'"),
    (_changed(IO_BOUND, lambda d: d.pop("trials")), "trials: missing; expected a list"),
    (_changed(IO_BOUND, lambda d: d["trials"][1].update(steps_per_s="fast")),
     "trials[1].steps_per_s: expected a finite number >= 0, got 'fast'"),
    (_changed(IO_BOUND, lambda d: d["trials"][0].pop("number")), "trials[0].number: missing; expected a whole number"),
    (_changed(IO_BOUND, lambda d: d["trials"][0]["settings"].update(num_workers=-1)),
     "trials[0].settings.num_workers: expected a whole number >= 0, got -1"),
    (_changed(IO_BOUND, lambda d: d["trials"][0].update(settled="yes")), "trials[0].settled: expected true or false"),
    (_changed(IO_BOUND, lambda d: d["trials"][2]["ranks"].append(3)), "trials[2].ranks[1]: expected an object, got int"),
    (_changed(IO_BOUND, lambda d: d.update(pick=[])), "pick: expected an object, got a list"),
    (_changed(IO_BOUND, lambda d: d["pick"].pop("reason")), "pick.reason: missing; expected a string"),
    (_changed(IO_BOUND, lambda d: d["pick"].update(excluded={"w=8": 1})), "pick.excluded.w=8: expected a string, got 1"),
    (_changed(IO_BOUND, lambda d: d.update(notes=[1])), "notes[0]: expected a string, got 1"),
    (_changed(IO_BOUND, lambda d: d["loader"].update(site=3)), "loader.site: expected a string, got 3"),
    ({"schema": "loaderdoc.check/1"},
     "not a loaderdoc.watch/1, loaderdoc.job/1 or loaderdoc.tune/1 report (a loaderdoc.check/1 document)"),
    ([1], "expected a JSON object (a watch, job or tune report), got a list"),
])
def test_what_is_not_a_tune_report_is_refused_naming_the_key(tmp_path, doc, expected):
    path = _write(tmp_path, doc)
    with pytest.raises(ReportError) as err:
        open_report(path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)
    assert "\n" not in str(err.value)


def test_a_negative_exit_code_is_a_signal_not_a_bad_key(tmp_path):
    path = _write(tmp_path, _changed(FAILS, lambda d: d["trials"][3].update(exit_code=-9)))
    assert open_report(path).report.trials[3].exit_code == -9


# ---- the command line ---------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom loaderdoc.cli import main\nrc = main(sys.argv[1:])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'torch'}), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    return subprocess.run([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


def test_a_bad_tune_report_is_one_line_exit_3_and_no_app(tmp_path):
    path = _write(tmp_path, _changed(IO_BOUND, lambda d: d.update(trials={"1": {}})))
    proc = _cli("--report", str(path))
    error, imported = proc.stderr.splitlines()
    assert proc.returncode == EXIT_USAGE and proc.stdout == ""
    assert error == f"loaderdoc: error: {path}: trials: expected a list, got {{'1': {{}}}}"
    assert imported == "[]"  # refused before textual was imported


def test_without_a_terminal_the_trials_are_printed_as_tune_prints_them():
    proc = _cli("--report", str(FAILS))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "loaderdoc: no terminal; printing the tune report's trials (open the app from a terminal)", "[]"]
    lines = proc.stdout.splitlines()
    assert lines[0] == "loaderdoc tune: python train_io.py"
    assert any(line.split()[:1] == ["4"] and "failed: the command exited 1 before the window settled" in line
               for line in lines)
    assert "gain over your settings: 4.02x (worth changing)" in lines


def test_the_help_names_tune_reports():
    from loaderdoc.cli import build_parser

    text = " ".join(build_parser().format_help().split())
    assert "or a tune's (from 'loaderdoc tune --report FILE'; the trials and the pick in Tune)" in text


# ---- the app ------------------------------------------------------------------------------
def _rows(table: DataTable) -> list[list[str]]:
    return [[str(cell) for cell in table.get_row_at(i)] for i in range(table.row_count)]


@pytest.mark.parametrize("size", [(80, 24), (160, 48)])
async def test_the_app_opens_on_the_trials_and_the_pick(size):
    app = app_with(IO_BOUND)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "tune"
        table = app.screen.query_one("#tune-table", DataTable)
        assert app.focused is table
        rows = _rows(table)
        assert [r[:3] for r in rows] == [["1", "0", "-"], ["2", "3", "2"], [f"3 {PICK_MARK}", "4", "2"], ["4", "2", "2"]]
        assert rows[0][3:] == ["23.1", "-", "77%", "10.2", "-", "your settings"]
        assert rows[2][3:8] == ["88.9", "95.1", "9%", "10.3", "160 MiB"]
        pick = str(app.screen.query_one("#tune-pick", Static).render())
        assert "Pick    num_workers=4: 88.9 steps/s measured in trial 3 (predicted 95.1, -6 %)" in pick
        assert "Gain    3.86x the steps/s of your settings (worth changing)" in pick
        assert "Why     num_workers=4: 88.9 steps/s measured, the fewest workers within 3%" in pick
        head = str(app.screen.query_one("#tune-head", Static).render())
        assert head == "Tune  python train_io.py; loader train_io.py:12 (DataLoader, batch_size=8); 2 CPUs per rank"
        pane = app.screen.query_one("#tune-pane")
        assert pane.region.right <= size[0] and pane.region.bottom <= size[1]
        assert table.region.height >= 6  # the header and the four trials, all on screen
        assert app.screen.query_one("#tune-pick").region.y < size[1] - 1  # the pick is on screen too


async def test_a_failed_trial_shows_its_status_and_its_reason_when_highlighted():
    app = app_with(FAILS)
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#tune-table", DataTable)
        failed = _rows(table)[3]
        assert failed[:4] == ["4", "4", "2", "failed"] and failed[4:8] == ["-"] * 4
        assert failed[8] == "failed (exit code 1): the command exited 1 before the window settled"
        detail = app.screen.query_one("#tune-trial", Static)
        assert str(detail.render()).startswith("Trial 1 (num_workers=0): your settings")
        await pilot.press("down", "down", "down")
        await pilot.pause()
        assert str(detail.render()).startswith(
            "Trial 4 (num_workers=4): failed (exit code 1): the command exited 1 before the window settled")
        pick = str(app.screen.query_one("#tune-pick", Static).render())
        assert "Note    trial 4 (num_workers=4) failed, exit code 1: not measured" in pick


async def test_a_persistent_twin_is_marked_p_as_tune_prints_it(tmp_path):
    twin = {**json.loads(IO_BOUND.read_text())["trials"][2], "number": 5, "purpose": "the pick's persistent twin"}
    twin["settings"] = {"num_workers": 4, "prefetch_factor": None, "persistent_workers": True}
    app = app_with(_write(tmp_path, _changed(IO_BOUND, lambda d: d["trials"].append(twin))))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert _rows(app.screen.query_one("#tune-table", DataTable))[4][:3] == ["5", "4p", "2"]
        pick = str(app.screen.query_one("#tune-pick", Static).render())
        assert "Note    p after the workers: persistent_workers=True" in pick


async def test_the_tune_view_and_its_key_come_only_with_a_tune_report():
    app = app_with(IO_BOUND)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "diagnoses"
        await pilot.press("6")
        assert app.screen.query_one(TabbedContent).active == "tune"
        assert not app.screen.query("TabPane#run") and not app.screen.query("TabPane#job")
    app = make_app(facts=load_machine("ci-2core"))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert not app.screen.query("TabPane#tune")


def test_the_pick_is_the_chosen_settings_and_what_export_writes():
    from loaderdoc.session import Session

    run = open_report(FAILS)
    session = Session(tune_run=run, detect_fn=lambda: load_machine("ci-2core"), header_fn=lambda *a, **k: [])
    pick = run.report.pick
    assert session.settings.num_workers == pick.settings.num_workers == 3
    assert session.settings.batch_size == 8  # the script's own, as the trials ran it
    assert session.settings_origin == f"measured by loaderdoc tune (trial {pick.trial})"
    session.facts = load_machine("ci-2core")
    session.refresh()  # the machine facts' recommendation does not replace it
    assert session.settings.num_workers == 3 and session.user_touched
