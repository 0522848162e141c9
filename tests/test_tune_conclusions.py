"""What a tune may conclude (issue 49, family 2), through the real command: a pick claims a
comparison, so one trial alone, a search whose every later trial failed, or one interrupted before
it finished picks nothing, writes no --export, and says which; an unmeasured first trial's table
row shows the settings its loader was built with, or "?" where it never showed them."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid

import pytest
from faults_support import TAG_VAR, assert_nothing_left
from test_tune_faults import PRELUDE, QUICK, TRAIN, env_with_src, read_report, tune, write_script


@pytest.fixture
def tagged_env():
    """The environment of a tune whose every process carries a tag of its own (what is left is found)."""
    tag = uuid.uuid4().hex
    yield env_with_src(**{TAG_VAR: tag}), tag
    assert_nothing_left(tag)


def test_one_trial_is_refused_before_anything_runs(tmp_path):
    script = write_script(tmp_path, PRELUDE + 'open("ran", "w").close()\n')
    proc = tune(tmp_path, "--trials", "1", "--export", str(tmp_path / "loader.toml"), "--", sys.executable, str(script))
    assert proc.returncode == 3, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "loaderdoc: error: tune: --trials 1 measures only your own settings, with nothing to compare them with; "
        "give --trials 2 or more (or 'loaderdoc watch -- COMMAND' to measure them alone)"]
    assert not (tmp_path / "ran").exists() and not (tmp_path / "loader.toml").exists()


def test_every_later_trial_failing_leaves_nothing_to_compare_exit_4(tmp_path):
    """Was: exit 0, "your settings are already within tolerance of the fastest trial"."""
    script = write_script(tmp_path, PRELUDE + """\
if TRIAL != "1":
    sys.exit("this run needs the GPU it was promised")  # every trial but the first fails at once
""" + TRAIN + "train(DataLoader(Slow(160), batch_size=4))\n")
    export, report_path = tmp_path / "loader.toml", tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "3", "--export", str(export), "--report", str(report_path), "--",
                sys.executable, str(script))
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "already within tolerance" not in proc.stdout + proc.stderr
    assert ("no pick: only your own settings were measured (trial 2 failed, trial 3 failed): nothing to compare "
            "them with") in proc.stdout
    assert not export.exists()
    assert "--export" in proc.stderr and "not written: no pick: only your own settings were measured" in proc.stderr
    report = read_report(report_path)
    assert [t["status"] for t in report["trials"]] == ["ok", "failed", "failed"]
    assert report["pick"] is None and report["exit_code"] == 4


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: s.name)
def test_a_tune_interrupted_in_trial_2_picks_nothing_and_exports_nothing(tmp_path, tagged_env, sig):
    """Was: --export written with trial 1's settings as "the pick", silent about the interruption."""
    script = write_script(tmp_path, PRELUDE + """\
open("started-" + TRIAL, "w").close()
""" + TRAIN + "train(DataLoader(Slow(160), batch_size=4))\n")
    export, report_path = tmp_path / "loader.toml", tmp_path / "tune.json"
    proc = subprocess.Popen([sys.executable, "-m", "loaderdoc", "tune", *QUICK, "--trials", "3", "--export",
                             str(export), "--report", str(report_path), "--", sys.executable, str(script)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=tagged_env[0],
                            cwd=tmp_path)
    try:
        deadline = time.monotonic() + 90
        while not (tmp_path / "started-2").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err[-3000:]
    assert "no pick: interrupted in trial 2: the search did not finish, so nothing is picked" in out
    assert "pick: num_workers" not in out
    assert not export.exists() and "not written: no pick: interrupted in trial 2" in err
    report = read_report(report_path)
    assert [(t["number"], t["status"]) for t in report["trials"]] == [(1, "ok"), (2, "stopped")]
    assert report["trials"][1]["reason"] == "interrupted: tune was stopped during this trial"
    assert report["pick"] is None and report["stopped"] == "interrupted" and report["exit_code"] == 130


def test_a_first_trial_with_no_batch_shows_the_workers_its_loader_was_built_with(tmp_path, tagged_env):
    """Was: the table said 0 workers where the script's 2 ran (the trial's default settings)."""
    script = write_script(tmp_path, PRELUDE + """\
import torch
from torch.utils.data import DataLoader, Dataset

class Stuck(Dataset):  # every sample waits on a server that never answers
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(3600)

for batch in DataLoader(Stuck(), batch_size=4, num_workers=2):
    pass
""")
    # 30 s: the loader is built after torch's import, which took over 8 s beside the suite's other
    # workers on 2 busy CPUs (CI at 6b45cd6); the trial is stopped then
    proc = tune(tmp_path, *QUICK, "--first-batch-timeout", "30", "--report", str(tmp_path / "tune.json"), "--",
                sys.executable, str(script), env=tagged_env[0])
    assert proc.returncode == 4, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("1 "))
    assert row.split()[:3] == ["1", "2", "2"], row  # trial 1, 2 workers, prefetch 2: as the script built it
    assert "no-batch: no DataLoader batch within 30 s" in row
    (trial,) = read_report(tmp_path / "tune.json")["trials"]
    assert trial["settings"]["num_workers"] == 2 and trial["settings_seen"] is True


def test_a_first_trial_whose_loader_never_showed_has_unknown_settings(tmp_path, tagged_env):
    script = write_script(tmp_path, PRELUDE + """\
time.sleep(3600)  # stuck before it builds a DataLoader (a download, a lock)
""")
    proc = tune(tmp_path, *QUICK, "--first-batch-timeout", "3", "--report", str(tmp_path / "tune.json"), "--",
                sys.executable, str(script), env=tagged_env[0])
    assert proc.returncode == 4, proc.stderr[-3000:]
    row = next(line for line in proc.stdout.splitlines() if line.startswith("1 "))
    assert row.split()[:3] == ["1", "?", "?"], row
    (trial,) = read_report(tmp_path / "tune.json")["trials"]
    assert trial["settings_seen"] is False
