"""`loaderdoc watch --merge`: one report from the reports of a job's nodes (the real two-node run is
in test_watch_ranks)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_watch import env_with_src

from loaderdoc.base.errors import UserError
from loaderdoc.watching.merge import merge_reports

HEALTHY = Path(__file__).parent / "fixtures" / "watch" / "healthy.json"


def node_report(rank: int, wait_ms: float, *, node: int, pid: int = 100) -> dict:
    """A node's report holding one rank: its training loader waited ``wait_ms`` of a 50 ms step."""
    report = json.loads(HEALTHY.read_text())
    (loader,) = report["loaders"][:1]
    waits = loader["totals"]["waits"]
    loader.update(pid=pid, rank=rank)
    loader["totals"].update(wait_s=waits * wait_ms / 1000, step_s=waits * 0.05,
                            wait_per_batch_s=wait_ms / 1000, wait_share=wait_ms / (wait_ms + 50))
    report["loaders"] = [loader]
    report["processes"] = [{"pid": pid, "hostname": "same-name", "rank": rank, "group_rank": node,
                            "affinity_cpus": 16}]
    report["machine"] = {"cpus": 16, "affinity": 16, "cpu_quota": 16.0 if node else 4.0}  # node 0: 4 CPUs of quota
    report["memory"] = []
    return report


def test_ranks_of_every_node_in_one_table_the_straggler_named_across_nodes():
    # the same pid on both nodes (containers): the table keeps them apart by their report
    merged = merge_reports([node_report(0, 40.0, node=0), node_report(1, 1.0, node=1)], ["a.json", "b.json"])
    assert [(r["rank"], r["node"], r["source"]) for r in merged["ranks"]] == [(0, "0", 0), (1, "1", 1)]
    (straggler,) = [f for f in merged["findings"] if f["rule_id"] == "watch-straggler-rank"]
    assert straggler["symptom"].startswith("rank 0 on node 0 waits 40.0x")
    assert "its process may use 4 CPUs where the others have 16 CPUs" in straggler["symptom"]
    assert merged["merged_from"] == ["a.json", "b.json"] and merged["steps"] == 2 * merged["loaders"][0]["totals"]["steps"]


def test_node_findings_are_kept_once_and_an_even_job_has_no_straggler():
    merged = merge_reports([node_report(0, 1.0, node=0), node_report(1, 1.2, node=1)], ["a", "b"])
    rules = [f["rule_id"] for f in merged["findings"]]
    assert "watch-straggler-rank" not in rules
    assert len(rules) == len({(f["rule_id"], f["symptom"]) for f in merged["findings"]})


def test_a_rank_in_two_reports_is_refused():
    with pytest.raises(UserError, match="rank 0 is in both a.json and b.json"):
        merge_reports([node_report(0, 1.0, node=0), node_report(0, 1.0, node=0)], ["a.json", "b.json"])


def _merge_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loaderdoc", "watch", *args], capture_output=True, text=True,
                          env=env_with_src(), cwd=cwd, timeout=60)


def test_merge_on_the_command_line_writes_the_report_and_refuses_bad_input(tmp_path):
    for n in (0, 1):
        (tmp_path / f"node{n}.json").write_text(json.dumps(node_report(n, 30.0 if n else 1.0, node=n)))
    ok = _merge_cli("--merge", "node0.json", "node1.json", "--report", "job.json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    assert "2 reports merged" in ok.stderr and "watch-straggler-rank: rank 1 on node 1" in ok.stderr
    from loaderdoc.watching.report_file import load_watch_report

    run = load_watch_report(tmp_path / "job.json")  # the app opens it as it opens one node's
    assert run.command is None and any(f.rule_id == "watch-straggler-rank" for f in run.findings)
    (tmp_path / "bad.json").write_text("{not json")
    cases = {
        ("--merge", "node0.json", "--report", "node0.json"): "is one of the reports to merge",
        ("--merge", "node0.json", "--", "python", "train.py"): "not both",
        ("--merge", "node0.json", "bad.json"): "bad.json",
        ("--merge", "node0.json", "missing.json"): "missing.json",
    }
    before = (tmp_path / "node0.json").read_text()
    for args, words in cases.items():
        bad = _merge_cli(*args, cwd=tmp_path)
        lines = bad.stderr.strip().splitlines()
        assert bad.returncode == 3 and len(lines) == 1 and words in lines[0], (args, bad.stderr)
    assert (tmp_path / "node0.json").read_text() == before  # nothing overwritten


def test_reports_of_two_programs_are_not_one_job(tmp_path):
    """Issue 49, family 7: `watch --merge` joined a train.py run and an eval.py run as one job."""
    for n, script in ((0, "train.py"), (1, "eval.py")):
        report = node_report(n, 1.0 + n, node=n)
        report["command"] = ["torchrun", "--nnodes", "2", f"--node-rank={n}", script, "--epochs", "1"]
        (tmp_path / f"node{n}.json").write_text(json.dumps(report))
    proc = _merge_cli("--merge", "node0.json", "node1.json", "--report", "job.json", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "loaderdoc: error: watch --merge: node0.json ran train.py and node1.json ran eval.py: two programs, not "
        "one job's nodes; merge the reports of one job"]
    assert not (tmp_path / "job.json").exists()


def test_one_run_in_two_reports_is_refused_whatever_was_edited(tmp_path):
    """Issue 49, family 7: a copy of node 0's report with its rank and host edited was merged as a
    second node, its run counted twice."""
    first = node_report(0, 1.0, node=0)
    copy = json.loads(json.dumps(first))
    copy["processes"][0].update(rank=1, hostname="other-node", group_rank=1)
    copy["loaders"][0].update(rank=1)
    (tmp_path / "node0.json").write_text(json.dumps(first))
    (tmp_path / "node1.json").write_text(json.dumps(copy))
    proc = _merge_cli("--merge", "node0.json", "node1.json", "--report", "job.json", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "loaderdoc: error: watch --merge: node0.json and node1.json are the same run (their loaders' waits and "
        "steps are timed alike to the last digit); merge each node's report once"]
    assert not (tmp_path / "job.json").exists()
