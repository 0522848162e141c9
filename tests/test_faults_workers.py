"""Faults in the DataLoader's workers, through `python -m loaderdoc probe` as a user runs it.

Each test asserts the documented exit code, a clear message, the finding, and that no process
the command started survives it (tests/faults_support.py tags them through the environment).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from faults_support import assert_nothing_left, fault_env, loaderdoc, run_tagged, tagged

from loaderdoc.base.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBE_FAILED

QUICK = ["--batch-size", "8", "--step-ms", "5", "--no-progress", "--json"]


def probe_json(dataset: str, budget: str = "6", env=None) -> tuple[subprocess.CompletedProcess, dict]:
    proc = loaderdoc("probe", "--dataset", f"faults_data:{dataset}", *QUICK, "--budget", budget, env=env)
    return proc, json.loads(proc.stdout)


def findings(doc: dict) -> dict[str, dict]:
    return {f["rule_id"]: f for f in doc["findings"]}


def test_a_dataset_raising_on_some_indices_exits_4_with_the_crash_finding():
    proc, doc = probe_json("make_raises_on_some")
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "loaderdoc: error: no DataLoader configuration could be measured (see the failures above)"]
    assert doc["recommended"] is None
    assert all(r["status"] == "failed" and "truncated file" in r["error"] for r in doc["results"])
    crash = findings(doc)["worker-crashed"]
    assert crash["severity"] == "critical"
    # the plain traceback of the 0-worker run points at the user's code
    assert any("faults_data.py" in e and "__getitem__" in e for e in crash["evidence"]), crash["evidence"]


def test_a_crash_in_a_project_under_a_folder_named_loaderdoc_is_named_by_file_and_line(tmp_path):
    # a plain `git clone` of this repository is such a folder; so is any user's ~/loaderdoc/...
    project = tmp_path / "loaderdoc" / "myproject"
    project.mkdir(parents=True)
    source = (Path(__file__).parent / "probe_datasets" / "faults_data.py").read_text()
    (project / "faults_data.py").write_text(source)
    line = next(n for n, text in enumerate(source.splitlines(), 1) if "cannot decode sample" in text)
    env, _ = fault_env(pythonpath=[str(project)])
    proc, doc = probe_json("make_raises_on_some", env=env)
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    crash = findings(doc)["worker-crashed"]
    assert f"without workers the traceback ends in faults_data.py:{line} in __getitem__" in crash["evidence"]
    assert f"faults_data.py:{line}" in crash["fix"]


def test_a_worker_sigkilled_mid_epoch_fails_that_configuration_and_is_diagnosed():
    proc, doc = probe_json("make_kills_its_worker")
    assert proc.returncode == EXIT_OK, proc.stderr  # 0 workers still measured: a recommendation
    killed = [r for r in doc["results"] if r["status"] == "failed"]
    assert killed and all(r["settings"]["num_workers"] > 0 for r in killed)
    # torch words it either way, depending on whether its SIGCHLD handler or the queue notices first
    assert "killed by signal" in killed[0]["error"] or "exited unexpectedly" in killed[0]["error"]
    assert doc["recommended"]["num_workers"] == 0
    crash = findings(doc)["worker-crashed"]
    assert any("faults_data" in e or "exited" in e or "killed" in e for e in crash["evidence"])
    if "signal: killed" in (killed[0]["error"] + (killed[0]["traceback"] or "")).lower():
        assert "OOM" in crash["cause"]


def test_a_hung_worker_times_out_in_seconds_not_at_the_watchdog():
    started = time.monotonic()
    proc, doc = probe_json("make_hangs_in_worker")
    elapsed = time.monotonic() - started
    assert proc.returncode == EXIT_OK, proc.stderr
    hung = [r for r in doc["results"] if r["status"] == "timeout"]
    assert hung, [r["status"] for r in doc["results"]]
    # the DataLoader's own timeout (2 s at this budget) names the cause, not the watchdog
    assert "DataLoader timed out" in hung[0]["error"] and "hangs" in hung[0]["error"]
    assert hung[0]["duration_s"] < 6, hung[0]["duration_s"]
    assert elapsed < 20
    assert "worker-hung" in {f["rule_id"] for f in doc["findings"]}


def memory_cgroup_dir() -> tuple[Path | None, str]:
    if os.geteuid() != 0:
        return None, "needs root to create a memory cgroup"
    try:
        line = next(x for x in Path("/proc/self/cgroup").read_text().splitlines() if ":memory:" in x)
    except (OSError, StopIteration):
        return None, "no cgroup v1 memory controller here"
    base = Path("/sys/fs/cgroup/memory") / line.split(":", 2)[2].lstrip("/")
    if not (base / "memory.limit_in_bytes").exists():
        return None, f"cgroup v1 memory controller not mounted at {base}"
    return base, ""


@pytest.fixture
def tight_memory_cgroup():
    base, why = memory_cgroup_dir()
    if base is None:
        pytest.skip(why)
    cg = base / f"loaderdoc-fault-{os.getpid()}"
    try:
        cg.mkdir()
        (cg / "memory.limit_in_bytes").write_text(str(900 * 1024**2))
    except OSError as exc:
        pytest.skip(f"cannot create a memory cgroup here: {exc}")
    yield cg
    for _ in range(50):
        try:
            cg.rmdir()
            break
        except OSError:
            time.sleep(0.1)


def test_a_worker_growing_past_the_memory_limit_is_killed_and_diagnosed(tight_memory_cgroup):
    cg = tight_memory_cgroup
    env, tag = fault_env()
    cmd = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", sys.executable, "-m", "loaderdoc",
           "probe", "--dataset", "faults_data:make_hoarder", "--batch-size", "4", "--step-ms", "5",
           "--budget", "8", "--no-progress", "--json"]
    proc = run_tagged(cmd, tag, capture_output=True, text=True, env=env, timeout=60)
    assert int((cg / "memory.failcnt").read_text()) > 0  # it really hit the limit
    assert proc.returncode in (EXIT_OK, EXIT_PROBE_FAILED), proc.stderr
    doc = json.loads(proc.stdout)
    failed = [r for r in doc["results"] if r["status"] == "failed"]
    assert failed and any("SIGKILL" in r["error"] or "killed by signal" in r["error"]
                          or "exited unexpectedly" in r["error"] for r in failed)
    ids = findings(doc)
    assert "worker-crashed" in ids or "ram-pressure" in ids, list(ids)
    text = " ".join(f"{r['error']} {r['traceback'] or ''}" for r in failed).lower()
    if "worker-crashed" in ids and ("sigkill" in text or "signal: killed" in text):
        assert "OOM" in ids["worker-crashed"]["cause"]


def start_probe(*extra: str) -> tuple[subprocess.Popen, str]:
    env, tag = fault_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderdoc", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )
    return proc, tag


def wait_for_workers(tag: str, proc: subprocess.Popen, timeout: float = 60) -> None:
    """Until the probe is measuring with workers: the CLI, its measuring process and 2+ workers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if len(tagged(tag)) >= 4:
            return
        time.sleep(0.05)
    proc.kill()
    pytest.fail(f"the probe never started workers (exit {proc.poll()})")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_mid_probe_stops_cleanly_with_the_partial_json(sig):
    proc, tag = start_probe("probe", "--dataset", "faults_data:make_slow", "--batch-size", "8", "--budget", "60",
                            "--no-progress", "--json")
    wait_for_workers(tag, proc)
    workers = [p for p in tagged(tag) if p.pid != proc.pid]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("loaderdoc: interrupted")
    doc = json.loads(out)  # what was measured, as valid JSON
    assert doc["stopped"] == "interrupted" and doc["results"]
    assert not [p for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert_nothing_left(tag)


def test_sigterm_during_a_probed_export_writes_no_file(tmp_path):
    target = tmp_path / "loader.toml"
    proc, tag = start_probe("--export", str(target), "--dataset", "faults_data:make_slow", "--batch-size", "8",
                            "--budget", "60")
    wait_for_workers(tag, proc)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert err.strip().splitlines()[-1] == "loaderdoc: interrupted" and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary sibling
    assert_nothing_left(tag)
