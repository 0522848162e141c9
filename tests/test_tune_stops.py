"""How tune stops a trial, and what it keeps of its output (issue 49, family 3), through the real
command: SIGINT first (the script's ``finally`` blocks run, as on Ctrl+C), SIGTERM after
INT_GRACE_S (a preemption handler gets GRACE_S), SIGKILL last; the output read through a pipe,
its end kept in memory, nothing written to the temporary folder."""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from faults_support import namespaces_usable
from test_tune_faults import PRELUDE, QUICK, TRAIN, env_with_src, read_report, tune, write_script

from loaderdoc.tuning import trial as trial_module


def test_a_scripts_finally_runs_when_its_trial_is_stopped(tmp_path):
    """Was: SIGTERM then SIGKILL, so a `finally` that removes a lock file never ran, and every later
    trial (and the user's next real run) refused to start."""
    script = write_script(tmp_path, PRELUDE + TRAIN + """\
if os.path.exists("train.lock"):
    sys.exit("train.lock exists: another run is training here")
open("train.lock", "w").close()
try:
    train(DataLoader(Slow(160), batch_size=4))
finally:
    os.remove("train.lock")
    open("cleaned-" + TRIAL, "w").close()
""")
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--", sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert [t["status"] for t in read_report(report_path)["trials"]] == ["ok", "ok"]
    assert (tmp_path / "cleaned-1").exists() and (tmp_path / "cleaned-2").exists()
    assert not (tmp_path / "train.lock").exists()


def test_a_preemption_handler_gets_time_to_finish_its_checkpoint(tmp_path):
    """A script that ignores Ctrl+C and saves a 10 MiB checkpoint on SIGTERM, in about 4 s (a slow
    disk). Was: killed 3 s after SIGTERM, the checkpoint cut (the issue's: at 30 of 50 MiB)."""
    assert trial_module.GRACE_S >= 5.0
    script = write_script(tmp_path, PRELUDE + TRAIN + """\
import signal
signal.signal(signal.SIGINT, signal.SIG_IGN)

def save_and_exit(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one save, however many signals follow
    with open("ckpt-" + TRIAL + ".part", "wb") as f:
        for _ in range(40):
            f.write(bytes(256 << 10))
            time.sleep(0.1)
    os.replace("ckpt-" + TRIAL + ".part", "ckpt-" + TRIAL + ".pt")
    sys.exit(0)

signal.signal(signal.SIGTERM, save_and_exit)
train(DataLoader(Slow(160), batch_size=4))
""")
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--", sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    for n in (1, 2):
        assert (tmp_path / f"ckpt-{n}.pt").stat().st_size == 40 * (256 << 10)
        assert not (tmp_path / f"ckpt-{n}.part").exists()


@pytest.mark.skipif(namespaces_usable() is not None, reason=str(namespaces_usable()))
def test_a_chatty_script_fills_no_small_temporary_folder(tmp_path, request):
    """A script that prints 16 KiB a batch (about 1 MiB a second), with TMPDIR a 4 MiB tmpfs. Was: the
    trial's log filled it, the script died of ENOSPC, "your settings could not be measured"."""
    # a short path: DataLoader workers pass tensors over a Unix socket in TMPDIR, whose path must
    # stay under 108 bytes (pytest's tmp_path under xdist is longer)
    small = Path(tempfile.mkdtemp(prefix="ldt-", dir="/tmp"))
    request.addfinalizer(lambda: small.rmdir())
    script = write_script(tmp_path, PRELUDE + TRAIN.replace(
        "time.sleep(0.005)", "time.sleep(0.005); print('x' * 16384, flush=True)") + """\
train(DataLoader(Slow(160), batch_size=4))
""")
    report_path = tmp_path / "tune.json"
    mount = ("unshare", "--mount", "sh", "-c", f'mount -t tmpfs -o size=4m tmpfs {small} && exec "$@"', "sh")
    # --budget 40: a window that the output's pace keeps from settling is measured as it stands
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--budget", "40", "--report", str(report_path), "--",
                sys.executable, str(script), env=env_with_src(TMPDIR=str(small)), prefix=mount)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert all(t["steps_per_s"] for t in read_report(report_path)["trials"]), proc.stderr[-3000:]


def test_the_log_keeps_the_end_of_a_long_output_and_no_more():
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", "import sys\nfor i in range(20000): print('line', i, 'x' * 100)\n"
                             "print('the last words', file=sys.stderr)"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    log = trial_module.LogTail(proc.stdout)
    proc.wait(timeout=30)
    lines = log.lines(3)
    assert lines == ["line 19998 " + "x" * 100, "line 19999 " + "x" * 100, "the last words"]
    assert len(log._kept) <= 2 * trial_module.LOG_KEEP + 65536  # ~2 MiB went through it


def test_an_export_folder_removed_during_the_trials_loses_the_export_alone(tmp_path):
    """Was: the --report (in a folder that exists) was lost with it."""
    (tmp_path / "out").mkdir()
    script = write_script(tmp_path, PRELUDE + TRAIN + """\
import shutil
shutil.rmtree("out", ignore_errors=True)  # a clean-up step of the script's own
train(DataLoader(Slow(160), batch_size=4))
""")
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", str(tmp_path / "out" / "loader.toml"), "--report",
                str(report_path), "--", sys.executable, str(script))
    assert proc.returncode == 3, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("loaderdoc: error: ")
    assert "out" in proc.stderr.strip().splitlines()[-1]
    assert read_report(report_path)["pick"] is not None  # the report is whole
    assert not (tmp_path / "out").exists()


def test_trials_leave_no_temporary_folders_behind(tmp_path):
    """A trial stopped while its DataLoader workers run left their pymp-* folders in /tmp (issue 49,
    family 8): each trial's temporary files go in its own folder, removed with it."""
    scratch = Path(tempfile.mkdtemp(prefix="ldt-", dir="/tmp"))  # short: see the chatty test
    try:
        script = write_script(tmp_path, PRELUDE + TRAIN + "train(DataLoader(Slow(160), batch_size=4, num_workers=2))\n")
        proc = tune(tmp_path, *QUICK, "--trials", "2", "--", sys.executable, str(script),
                    env=env_with_src(TMPDIR=str(scratch)))
        assert proc.returncode in (0, 1), proc.stderr[-3000:]
        assert sorted(p.name for p in scratch.iterdir()) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
