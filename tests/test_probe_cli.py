"""`loaderdoc probe` as a user runs it: output, JSON, export, exit codes, Ctrl+C."""

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
import tomllib
from support.warm import run_loaderdoc

from loaderdoc.base.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBE_FAILED, EXIT_USAGE

DATASETS = str(Path(__file__).with_name("probe_datasets"))


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": DATASETS + os.pathsep + os.environ.get("PYTHONPATH", "")}


def run(*args: str, cwd=None) -> subprocess.CompletedProcess:
    """``python -m loaderdoc probe ARGS``, forked from the worker's warm interpreter where it fits
    (support/warm.py: as fresh but for the import of torch; the Ctrl+C test starts its own fresh)."""
    return run_loaderdoc(["probe", *args], env=env(), cwd=cwd, timeout=120)


# one probe of the tensor preset, its JSON on stdout and its recommendation exported: a test reads each
TENSOR_RUN = pytest.mark.xdist_group("probe_cli_tensor_run")


@pytest.fixture(scope="module")
def tensor_run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    target = tmp_path_factory.mktemp("export") / "loader.toml"
    return run("tensor", "--budget", "2", "--json", "--no-progress", "--export", str(target)), target


@TENSOR_RUN
def test_json_holds_every_configuration_and_the_recommended_kwargs(tensor_run):
    proc, _ = tensor_run
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["workload"]["name"] == "tensor"
    assert doc["results"] and all("settings" in r and "status" in r for r in doc["results"])
    assert "num_workers" in doc["recommended"] and doc["recommended"]["batch_size"] == 128
    assert doc["reasons"] and doc["budget_s"] == 2.0


# the CPU-bound preset measures the machine's time (beside the suite's other workers its 6 s probe
# measured nothing): it runs alone, as the timing tests do
@pytest.mark.parametrize("preset", [pytest.param("image", marks=pytest.mark.alone), "remote"])
def test_no_finding_proposes_another_worker_count_than_the_recommendation(preset):
    # CPU-bound decoding and I/O-bound reads: the pick and the probe's own findings are one answer
    proc = run(preset, "--budget", "6", "--json", "--no-progress")
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    workers = doc["recommended"]["num_workers"]
    for f in doc["findings"]:
        assert f["settings_change"].get("num_workers", workers) == workers, (f, doc["reasons"])


def test_table_and_recommendation_for_a_user_dataset():
    proc = run("--dataset", "probe_userdata:make", "--batch-size", "16", "--step-ms", "2", "--budget", "2")
    assert proc.returncode == EXIT_OK, proc.stderr
    out = proc.stdout
    assert "probe_userdata:make" in out
    assert "steps/s" in out and "starved %" in out
    assert "Recommended" in out and "DataLoader(dataset, batch_size=16" in out


@TENSOR_RUN
def test_export_writes_the_recommendation(tensor_run):
    proc, target = tensor_run
    assert proc.returncode == EXIT_OK, proc.stderr
    table = tomllib.loads(target.read_text())["dataloader"]
    assert table["batch_size"] == 128 and "num_workers" in table
    assert table["num_workers"] == json.loads(proc.stdout)["recommended"]["num_workers"]
    again = run("tensor", "--budget", "2", "--export", str(target))
    assert again.returncode == EXIT_USAGE  # exists, no --force: refused before probing
    assert len(again.stderr.strip().splitlines()) == 1


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr + proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_bad_inputs_exit_3_with_one_line():
    one_line_error(run("--dataset", "no_such_mod_xyz:make"), EXIT_USAGE, "no module named", "PYTHONPATH")
    one_line_error(run("--dataset", "probe_userdata:returns_int"), EXIT_USAGE, "not a Dataset")
    one_line_error(run("--dataset", "probe_userdata:NOT_CALLABLE"), EXIT_USAGE, "not a callable")
    one_line_error(run("--dataset", "probe_userdata"), EXIT_USAGE, "MODULE:FACTORY")
    one_line_error(run("imagee"), EXIT_USAGE, "did you mean 'image'")
    one_line_error(run(), EXIT_USAGE, "name a preset")
    one_line_error(run("tensor", "--dataset", "probe_userdata:make"), EXIT_USAGE, "not both")


def test_no_measurable_configuration_exits_4_and_shows_the_traceback():
    proc = run("--dataset", "probe_userdata:make_raising", "--budget", "5", "--no-progress")
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    assert "sample 13 is corrupt" in proc.stdout
    assert "Traceback" in proc.stdout and "probe_userdata.py" in proc.stdout
    assert "no DataLoader configuration could be measured" in proc.stderr


def test_ctrl_c_stops_cleanly_reports_what_was_measured_and_leaves_no_process():
    proc = subprocess.Popen(
        [sys.executable, "-m", "loaderdoc", "probe", "--dataset", "probe_userdata:make_slow", "--batch-size", "8",
         "--budget", "60", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(),
    )
    me = psutil.Process(proc.pid)
    seen: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 60
    # wait until the search runs a configuration with workers (measuring process + workers)
    while time.monotonic() < deadline:
        try:
            kids = me.children(recursive=True)
        except psutil.NoSuchProcess:
            break
        for k in kids:
            seen.setdefault(k.pid, k)
        if len(kids) >= 3:
            break
        time.sleep(0.05)
    assert len(seen) >= 3, "the probe never started workers"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "interrupted" in err and "Traceback" not in err
    assert "num_workers=0" in out or "steps/s" in out  # the partial table
    time.sleep(0.2)
    alive = [p for p in seen.values() if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
    assert not alive, f"left running: {alive}"


def test_the_progress_line_of_a_run_that_only_timed_the_restart():
    from loaderdoc.base.settings import LoaderSettings
    from loaderdoc.commands.probe import _outcome_text
    from loaderdoc.probing.result import ConfigResult

    settings = LoaderSettings(batch_size=32, num_workers=2, prefetch_factor=2)
    restart = ConfigResult(settings=settings, epoch_restart_s=0.68, epoch_restart_persistent_s=0.37)
    assert _outcome_text(restart) == "epoch restart 0.68 s, 0.37 s with persistent workers"
    steady = ConfigResult(settings=settings, batches_per_s=45.5, starvation_pct=3.2)
    assert _outcome_text(steady) == "45.5 steps/s, step starved 3% of the time"


@pytest.mark.alone
def test_a_pure_python_decode_is_cpu_work_and_each_window_says_how_many_cpus_the_loader_kept_busy():
    # probe_pydecode: ~1.5 ms of pure-Python checksum a sample, the held-out decode workload's kind
    proc = run("--dataset", "probe_pydecode:make", "--batch-size", "16", "--budget", "6", "--json", "--no-progress")
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["workload"]["consumer"] == ("cuda-kernel" if doc["device"] == "cuda" else "cpu-sleep")
    zero = next(r for r in doc["results"] if r["settings"]["num_workers"] == 0)
    assert zero["fetch_cpu_pct"] >= 70
    windows = [r for r in doc["results"] if r["status"] == "ok" and r["batches_per_s"]]
    assert windows and all(r["loader_cpus"] is not None and r["loader_cpus"] > 0 for r in windows)
    assert max(r["loader_cpus"] for r in windows if r["settings"]["num_workers"] >= 2) > zero["loader_cpus"]
