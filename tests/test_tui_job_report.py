"""`loaderdoc --report job.json`: a job report (`check --distributed --json`, rank 0) read back,
refused when it is not one, and shown in the app: the job table in the Job view (one column per
node, the odd node's values marked) and the job's findings leading Diagnoses.

Fixtures in tests/fixtures/job: two-nodes.json is a real job report, rank 0's output of two
torchrun "nodes" on one machine, node 1 in a mount namespace with a 64 MiB /dev/shm and pinned to
one core (as in test_cluster_real); four-nodes-odd.json is hand-built test data
(make_four_nodes.py: four recorded H100 nodes, node 2 with a 64 MiB /dev/shm and an older driver).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.text import Text
from support.report_files import changed as _changed
from support.report_files import write_report
from textual.widgets import DataTable, OptionList, Static, TabbedContent

from loaderdoc.base.errors import EXIT_USAGE
from loaderdoc.cluster.job_file import JobReportError, job_report_from, load_job_report
from loaderdoc.cluster.job_report import JobReport
from loaderdoc.reports import ReportError, open_report
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import make_app
from loaderdoc.tui.model import ODD_MARK
from loaderdoc.watching.report import WatchReport

FIXTURES = Path(__file__).resolve().parent / "fixtures"
TWO, FOUR = FIXTURES / "job" / "two-nodes.json", FIXTURES / "job" / "four-nodes-odd.json"
WATCHED = FIXTURES / "watch" / "epochs-only.json"


def app_with(path: Path):
    return make_app(facts=load_machine("ci-2core"), job_run=load_job_report(path),
                    header_fn=lambda *a, **k: ["test header"])


def _write(tmp_path: Path, doc) -> Path:
    return write_report(tmp_path, doc, "job.json")


# ---- reading the file ---------------------------------------------------------------------
def test_the_real_two_node_report_marks_node_1s_cpus_and_shm():
    job = load_job_report(TWO)
    assert (job.launcher, job.world_size, job.status) == ("torchrun", 2, "warning")
    table = job.table
    assert table.columns == ["node 0", "node 1"]
    assert table.odd == {("cpus_per_rank", 1), ("shm_size", 1)}
    shm = dict((key, cells) for key, _, cells in table.rows)["shm_size"]
    assert shm[1] == "64 MiB" and shm[0] != "64 MiB"  # node 1 ran in a 64 MiB /dev/shm
    assert [f.rule_id for f in job.findings][:2] == ["job-cpus_per_rank", "job-shm_size"]
    assert job.findings[1].symptom.startswith("node 1: /dev/shm 64 MiB where node 0 has")


def test_the_four_node_report_marks_node_2_only():
    table = load_job_report(FOUR).table
    assert table.columns == [f"node {i}" for i in range(4)]
    assert table.odd == {("shm_size", 2), ("driver", 2)}
    assert [label for _, label, _ in table.rows][:2] == ["ranks", "host"] and table.rows[-1][0] == "status"
    assert table.rows[-1][2] == ["ok", "ok", "warning", "ok"]


def test_a_report_without_odd_keys_reads_them_from_its_findings():
    doc = json.loads(FOUR.read_text())
    for node in doc["nodes"]:
        del node["odd"]
    assert job_report_from(doc, FOUR).table.odd == {("shm_size", 2), ("driver", 2)}
    two = json.loads(TWO.read_text())
    for node in two["nodes"]:
        del node["odd"]
    assert job_report_from(two, TWO).table.odd == {("cpus_per_rank", 1), ("shm_size", 1)}  # node 1's own finding marks nothing


def test_one_reader_tells_a_job_from_a_watched_run():
    assert isinstance(open_report(FOUR), JobReport) and isinstance(open_report(WATCHED), WatchReport)


@pytest.mark.parametrize("doc, expected", [
    ("{not json", "line 1: not valid JSON"),
    ([1, 2], "expected a JSON object (a watch, job or tune report), got a list"),
    ({"schema": "loaderdoc.check/1"},
     "not a loaderdoc.watch/1, loaderdoc.job/1 or loaderdoc.tune/1 report (a loaderdoc.check/1 document)"),
    ({"workload": {}, "results": []},
     "not a loaderdoc.watch/1, loaderdoc.job/1 or loaderdoc.tune/1 report (a probe report"),
    (_changed(FOUR, lambda d: d["nodes"][1]["cells"].update(shm_size=5)), "nodes[1].cells.shm_size: expected a string"),
    (_changed(FOUR, lambda d: d.pop("nodes")), "nodes: missing; expected a list"),
    (_changed(FOUR, lambda d: d["nodes"][0].update(status="fine")), "nodes[0].status: expected one of ok, warning"),
    (_changed(FOUR, lambda d: d["nodes"][0].update(node=[0])), "nodes[0].node: expected a node rank or a hostname"),
    (_changed(FOUR, lambda d: d["fields"][3].pop("key")), "fields[3].key: missing; expected a string"),
    (_changed(FOUR, lambda d: d["findings"][0].update(severity="bad")), "findings[0].severity: expected one of"),
])
def test_what_is_not_a_job_report_is_refused_naming_the_key(tmp_path, doc, expected):
    path = _write(tmp_path, doc)
    with pytest.raises((ReportError, JobReportError)) as err:
        open_report(path)
    assert str(err.value).startswith(f"{path}: ") and expected in str(err.value)
    assert "\n" not in str(err.value)


# ---- the command line ---------------------------------------------------------------------
def _cli(*args: str) -> subprocess.CompletedProcess:
    code = ("import sys\nfrom loaderdoc.cli import main\nrc = main(sys.argv[1:])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'torch'}), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    return subprocess.run([sys.executable, "-c", code, *args], stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)


def test_a_bad_job_report_is_one_line_exit_3_and_no_app(tmp_path):
    path = _write(tmp_path, _changed(FOUR, lambda d: d["nodes"][1]["cells"].update(shm_size=5)))
    proc = _cli("--report", str(path))
    error, imported = proc.stderr.splitlines()
    assert proc.returncode == EXIT_USAGE and proc.stdout == ""
    assert error == f"loaderdoc: error: {path}: nodes[1].cells.shm_size: expected a string, got 5"
    assert imported == "[]"  # refused before textual was imported


def test_without_a_terminal_the_job_table_is_printed_as_check_distributed_prints_it():
    proc = _cli("--report", str(FOUR))
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.splitlines() == [
        "loaderdoc: no terminal; printing the job report's table (open the app from a terminal)", "[]"]
    lines = proc.stdout.splitlines()
    assert lines[0] == "loaderdoc check --distributed (torchrun): 4 ranks on 4 nodes (by GROUP_RANK)"
    assert any(line.split()[:2] == ["/dev/shm", "size"] and "64 MiB" in line for line in lines)
    assert "  WARNING  job-shm_size: node 2: /dev/shm 64 MiB where the others have 1008 GiB" in lines
    assert lines[-1] == "status: warning (exit 1)"


# ---- the app ------------------------------------------------------------------------------
def _cells(table: DataTable) -> list[list[Text]]:
    return [table.get_row_at(i) for i in range(table.row_count)]


async def test_the_app_opens_on_the_job_table_with_node_2s_cells_marked():
    app = app_with(FOUR)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        assert app.screen.query_one(TabbedContent).active == "job"
        table = app.screen.query_one("#job-table", DataTable)
        assert app.focused is table  # the arrows scroll it at once
        headers = [str(c.label) for c in table.columns.values()]
        assert headers == ["", "node 0", "node 1", f"node 2 {ODD_MARK}", "node 3"]
        marked = {(str(row[0]), col) for row in _cells(table) for col, cell in enumerate(row[1:])
                  if ODD_MARK in str(cell)}
        assert marked == {("/dev/shm size", 2), ("GPU driver", 2)}
        shm = next(row for row in _cells(table) if str(row[0]) == "/dev/shm size")
        assert str(shm[3]) == f"64 MiB {ODD_MARK}" and shm[3].style.bgcolor is not None
        assert shm[1].style == "" and str(shm[1]) == "1008 GiB"
        head = str(app.screen.query_one("#job-head", Static).render())
        assert "warning: node 2 is the odd one out; 4 nodes, 4 ranks (torchrun" in head


async def test_the_real_two_node_job_shows_both_nodes_and_node_1s_marks():
    app = app_with(TWO)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#job-table", DataTable)
        assert len(table.columns) == 3 and table.row_count == 2 + len(app.session.job_run.fields) + 1
        marked = {(str(row[0]), col) for row in _cells(table) for col, cell in enumerate(row[1:])
                  if ODD_MARK in str(cell)}
        assert marked == {("CPUs per rank", 1), ("/dev/shm size", 1)}


async def test_the_diagnoses_view_leads_with_the_jobs_findings():
    app = app_with(FOUR)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("3")
        await pilot.pause()
        options = app.screen.query_one("#findings", OptionList)
        first_two = [str(options.get_option_at_index(i).prompt) for i in range(2)]
        assert "node 2: /dev/shm 64 MiB where the others have 1008 GiB" in first_two[0]
        assert "node 2: driver 535.129.03" in first_two[1]
        note = str(app.screen.query_one("#diagnoses-note", Static).render())
        assert f"the job report {FOUR}" in note
        detail = str(app.screen.query_one("#finding-detail", Static).render())
        assert "Evidence in the job's nodes" in detail and "node 2 (rank 2): 64 MiB" in detail
        await pilot.press("6")
        assert app.screen.query_one(TabbedContent).active == "job"


async def test_the_job_view_and_its_key_come_only_with_a_job_report():
    from loaderdoc.watching.report_file import load_watch_report

    for app in (make_app(facts=load_machine("ci-2core")),
                make_app(facts=load_machine("ci-2core"), watch_run=load_watch_report(WATCHED))):
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.pause()
            await pilot.press("3", "6")
            await pilot.pause()
            active = app.screen.query_one(TabbedContent).active
            assert active == ("run" if app.session.watch_run else "diagnoses")
            assert not app.screen.query("#job-pane") and not app.screen.query("TabPane#job")


def _wide(tmp_path: Path, nodes: int) -> Path:
    """The four-node report with ``nodes`` nodes: node 2 copied over and over."""
    doc = json.loads(FOUR.read_text())
    base = doc["nodes"]
    doc["nodes"] = [dict(base[min(i, 3)], node=i, ranks=[i]) for i in range(nodes)]
    return _write(tmp_path, doc)


async def test_at_80x24_a_wide_job_scrolls_sideways_keeping_the_facts_column(tmp_path):
    app = app_with(_wide(tmp_path, 12))
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        pane = app.screen.query_one("#job-pane")
        table = app.screen.query_one("#job-table", DataTable)
        assert pane.region.right <= 80 and pane.region.bottom <= 24
        assert table.region.height >= 10  # most of the facts on screen at once
        assert len(table.columns) == 13 and table.virtual_size.width > table.size.width
        await pilot.press(*["right"] * 11)
        await pilot.pause()
        assert table.cursor_coordinate.column == 12 and table.scroll_x > 0
        shown = app.screen.query_one("#job-table").render_line(1).text  # the first row, as drawn
        assert shown.lstrip().startswith("ranks") and "11" in shown  # the label stays beside node 11
