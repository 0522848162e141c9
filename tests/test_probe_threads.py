"""The probe's measuring process runs the training job's intra-op threads and says which; a
process whose own thread pool has started (which a forked child cannot use) measures at one thread
and says why, rather than hanging."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import tomllib
from test_probe_cli import env, run

from loaderdoc.base.errors import EXIT_OK


def test_the_measuring_process_loads_on_the_jobs_threads_and_the_export_keeps_them(tmp_path, monkeypatch):
    record = tmp_path / "threads.txt"
    target = tmp_path / "loader.toml"
    monkeypatch.setenv("THREADS_RECORD", str(record))
    result = run("--dataset", "probe_threads_data:factory", "--batch-size", "16", "--step-ms", "5",
                 "--budget", "6", "--torch-threads", "2", "--json", "--no-progress", "--export", str(target))
    assert result.returncode == EXIT_OK, result.stderr
    report = json.loads(result.stdout)
    assert report["workload"]["torch_threads"] == 2
    assert report["workload"]["torch_threads_source"] == "--torch-threads 2"
    ok = [r for r in report["results"] if r["status"] == "ok"]
    assert ok and all(r["torch_threads"] == 2 for r in ok)
    assert any(r["settings"]["num_workers"] == 0 for r in ok)
    assert any(r["settings"]["num_workers"] > 0 for r in ok)
    # the dataset saw it: at 0 workers the sample is loaded on the job's threads, in a worker on one
    counts = {int(line.split()[1]) for line in record.read_text().splitlines()}
    assert counts == {1, 2}, counts
    assert tomllib.loads(target.read_text())["process"] == {"torch_threads": 2}


def test_by_default_the_probe_runs_the_count_torch_takes_from_the_environment(tmp_path):
    # OMP_NUM_THREADS changes what torch reads as it starts: the command runs as a fresh process
    result = subprocess.run(
        [sys.executable, "-m", "loaderdoc", "probe", "tensor", "--budget", "3", "--json", "--no-progress"],
        env={**env(), "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=120)
    assert result.returncode == EXIT_OK, result.stderr
    workload = json.loads(result.stdout)["workload"]
    assert (workload["torch_threads"], workload["torch_threads_source"]) == (1, "OMP_NUM_THREADS=1")


def test_the_text_report_names_the_threads(tmp_path):
    result = run("tensor", "--budget", "3", "--torch-threads", "1", "--no-progress")
    assert result.returncode == EXIT_OK, result.stderr
    assert "the training process at 1 torch thread (--torch-threads 1)" in " ".join(result.stdout.split())


def test_a_caller_whose_pool_started_is_measured_at_one_thread_and_told_why():
    """libgomp's pool does not survive fork: measuring at 2 threads would hang every configuration."""
    script = textwrap.dedent("""
        import json, torch, loaderdoc
        from loaderdoc.probing.isolate import forked_pool_works
        torch.set_num_threads(2)
        before = forked_pool_works(2)
        torch.ones(1 << 22).add_(1)  # this process's pool starts: 2 threads
        after = forked_pool_works(2)
        report = loaderdoc.probe(preset="tensor", budget_s=3, torch_threads=2)
        print(json.dumps({"before": before, "after": after, "threads": report.workload.torch_threads,
                          "why": report.workload.torch_threads_source,
                          "measured": [r.torch_threads for r in report.results if r.ok]}))
    """)
    result = subprocess.run([sys.executable, "-c", script], env=env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout.splitlines()[-1])
    assert seen["before"] is True and seen["after"] is False
    assert seen["threads"] == 1 and seen["measured"] and set(seen["measured"]) == {1}
    assert seen["why"].startswith("1, not the job's 2 (as given)") and "already run torch's thread pool" in seen["why"]


def test_the_pool_check_answers_for_one_thread_without_forking(monkeypatch):
    from loaderdoc.probing import isolate

    def no_fork():
        raise AssertionError("forked")

    monkeypatch.setattr(os, "fork", no_fork)
    assert isolate.forked_pool_works(1) is True


def test_the_apps_probe_summary_names_the_threads():
    from loaderdoc.probing.result import ProbeReport, WorkloadInfo
    from loaderdoc.tui import model

    report = ProbeReport(workload=WorkloadInfo(name="tensor", batch_size=128, step_ms=20, torch_threads=2,
                                               torch_threads_source="OMP_NUM_THREADS=2"))
    assert "step 20 ms (cpu-sleep) on cpu, 2 torch threads" in model.report_summary(report)[0]
    report.workload.torch_threads = None  # a report from before the probe said it
    assert model.report_summary(report)[0].endswith("on cpu")
