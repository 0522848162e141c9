"""`loaderdoc tune` on scripts that go wrong, each run for real: the command as a user types it, the
user's script as a child process, every trial stopped, killed and measured as in a real run.

Trials are kept short: a tiny dataset that sleeps 2 ms a sample, a 5 ms step (about 75 steps/s
without workers, so a 3 s window holds far more than ``--steps 10``), two or three trials.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import psutil
import pytest
from support.paths import pythonpath

from loaderdoc.base._compat import tomllib

QUICK = ("--steps", "10")

# A training loop that runs until tune stops it; what a test needs comes before or after TRAIN.
PRELUDE = """\
import json, os, subprocess, sys, time
TRIAL = os.environ.get("LOADERDOC_TUNE_TRIAL", "none")
"""
TRAIN = """\
import torch
from torch.utils.data import DataLoader, Dataset

class Slow(Dataset):
    def __init__(self, n):
        self.n = n
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(8)

def train(loader, after_epoch=None):
    for _ in range(100000):  # until tune stops it
        for batch in loader:
            time.sleep(0.005)
        if after_epoch is not None:
            after_epoch()
"""


# in a script: note(name, loader) keeps what each loader was built with, per trial, in seen-<trial>.json
NOTE_SEEN = """\
seen = {}
def note(name, loader):
    # what the script's loaders were built with, as it sees them, per trial
    seen.setdefault(name, []).append(loader.num_workers)
    # whole or not at all: tune may stop the trial anywhere, in this write too
    with open("seen-" + TRIAL + ".part", "w") as f:
        json.dump(seen, f)
    os.replace("seen-" + TRIAL + ".part", "seen-" + TRIAL + ".json")
    return loader

"""


def env_with_src(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath()
    env.pop("LOADERDOC_TUNE_TRIAL", None)
    env.update(extra)
    return env


def write_script(tmp_path: Path, body: str, name: str = "train.py") -> Path:
    script = tmp_path / name
    script.write_text(textwrap.dedent(body), encoding="utf-8")
    return script


def tune(tmp_path: Path, *args: str, env: dict[str, str] | None = None, timeout: float = 120,
         prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """``loaderdoc tune ARGS`` as a user runs it (ARGS holds '-- COMMAND'; ``prefix`` runs it
    through another command that execs it). Past ``timeout`` it is stopped as a scheduler would
    (SIGTERM: tune stops its trial), never killed outright, which would leave the trial's processes
    running."""
    proc = subprocess.Popen([*prefix, sys.executable, "-m", "loaderdoc", "tune", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env or env_with_src(), cwd=tmp_path)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        pytest.fail(f"loaderdoc tune ran past {timeout} s; stopped (exit {proc.returncode}):\n{err[-3000:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def alive_with(marker: str) -> list[psutil.Process]:
    """Live processes (zombies hold nothing) whose command line holds ``marker``."""
    found = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            if proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if any(marker in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            continue
    return found


def read_report(path: Path) -> dict:
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["schema"] == "loaderdoc.tune/1"
    return report


@pytest.fixture
def marker():
    """A string no other process on the machine has in its command line."""
    tag = f"loaderdoc-tune-test-{uuid.uuid4().hex}"
    yield tag
    for proc in alive_with(tag):  # a failing test leaves nothing behind either
        proc.kill()


# ---- 1. a trial that fails -------------------------------------------------------------------
def test_a_trial_that_exits_3_is_reported_failed_and_the_search_goes_on(tmp_path):
    script = write_script(tmp_path, PRELUDE + """\
if TRIAL == "2":
    print("trial 2 refuses", flush=True)
    sys.exit(3)
""" + TRAIN + """\
train(DataLoader(Slow(400), batch_size=4, num_workers=0))
""")
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "3", "--report", str(report_path), "--", sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    # the failed trial named, with the command's exit code and its output's last lines
    assert "trial 2 (" in proc.stderr and "failed (exit code 3)" in proc.stderr, proc.stderr
    assert "| trial 2 refuses" in proc.stderr
    report = read_report(report_path)
    assert report["exit_code"] == proc.returncode
    first, second, *rest = report["trials"]
    assert first["status"] == "ok" and first["settings"]["num_workers"] == 0
    assert second["status"] == "failed" and second["exit_code"] == 3 and second["steps_per_s"] is None
    assert "exited 3" in second["reason"]
    # the search ended cleanly or went on past the failure, never to the failed settings again
    assert all(t["status"] == "ok" and t["settings"] != second["settings"] for t in rest), report["trials"]
    assert report["stopped"] in ("settled", "trials")
    # the pick is a measured trial, never the failed one, and the failure is said beside it
    pick = report["pick"]
    assert pick is not None and pick["trial"] != 2
    assert proc.returncode == (0 if pick["user_within_tolerance"] else 1)
    row = next(line for line in proc.stdout.splitlines() if line.startswith("2 "))
    assert "failed" in row and "exited 3" in row
    assert any(note.startswith("trial 2 (") and "not measured" in note for note in report["notes"]), report["notes"]


# ---- 2. a hang before the first batch --------------------------------------------------------
def test_a_hang_before_the_first_batch_is_stopped_with_everything_it_started(tmp_path, marker):
    # the script ignores SIGTERM (stuck in C code, or a handler that waits): tune must kill it
    script = write_script(tmp_path, PRELUDE + f"""\
import signal
signal.signal(signal.SIGTERM, signal.SIG_IGN)
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)", "{marker}"])
open("started-" + TRIAL, "w").write(str(helper.pid))
time.sleep(600)  # never gets to its DataLoader
""")
    report_path = tmp_path / "tune.json"
    # 5 s: the script must start and write its marker before the stop, beside busy CPUs
    proc = tune(tmp_path, *QUICK, "--first-batch-timeout", "5", "--report", str(report_path), "--",
                sys.executable, str(script), marker)
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert (tmp_path / "started-1").exists()  # it did run, in trial 1
    assert "trial 1 (your settings): no-batch: no DataLoader batch within 5 s of the start; stopped" in proc.stderr
    assert "no pick: your own settings could not be measured (no DataLoader batch within" in proc.stdout
    assert not alive_with(marker)  # neither the script nor its helper
    report = read_report(report_path)
    (trial,) = report["trials"]
    assert trial["status"] == "no-batch" and trial["exit_code"] is None  # tune stopped it
    assert report["pick"] is None and report["exit_code"] == 4


# ---- 3. helpers that must not outlive their trial --------------------------------------------
def test_helpers_a_trial_starts_do_not_outlive_it_whatever_their_session(tmp_path, marker):
    script = write_script(tmp_path, PRELUDE + f"""\
import psutil
# what the trials before this one left running (they are stopped before the next starts)
left = [p.pid for p in psutil.process_iter(["cmdline"]) if "{marker}" in (p.info["cmdline"] or [])
        and p.status() != psutil.STATUS_ZOMBIE]
open("left-before-" + TRIAL, "w").write(json.dumps(left))
sleeper = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
same = subprocess.Popen(sleeper + ["{marker}", "same-group"])
apart = subprocess.Popen(sleeper + ["{marker}", "own-session"], start_new_session=True)
# a daemon: double fork into its own session; its parent exits, so it is nobody's child but a subreaper's
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, sleeper + ["{marker}", "daemon"])
    os._exit(0)
os.wait()
open("helpers-" + TRIAL, "w").write(json.dumps([same.pid, apart.pid]))
""" + TRAIN + """\
train(DataLoader(Slow(400), batch_size=4, num_workers=1))
""")
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--", sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "2 trials in" in proc.stdout
    # each trial started its three helpers, and none of the six is left
    assert (tmp_path / "helpers-1").exists() and (tmp_path / "helpers-2").exists()
    assert json.loads((tmp_path / "left-before-2").read_text()) == []  # trial 1's were gone when trial 2 began
    assert not alive_with(marker), [p.info["cmdline"] for p in alive_with(marker)]


# ---- 4. two loaders: only the training one changes -------------------------------------------
def test_only_the_training_loader_is_changed_and_the_pick_is_exported(tmp_path):
    script = write_script(tmp_path, PRELUDE + TRAIN + NOTE_SEEN + """\
def make_loader(name, n):  # one line builds both loaders: they differ by the line that called it
    return note(name, DataLoader(Slow(n), batch_size=4, num_workers=0, shuffle=name == "train"))

def validate():
    val = make_loader("val", 12)  # 3 batches
    for batch in val:
        pass

validate()  # a sanity check before training, as Lightning's
train(make_loader("train", 160), after_epoch=validate)
""")
    lines = script.read_text().splitlines()
    train_line = 1 + next(i for i, line in enumerate(lines) if 'make_loader("train"' in line)
    built_line = 1 + next(i for i, line in enumerate(lines) if "return note(name, DataLoader(" in line)
    export = tmp_path / "loader.toml"
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", str(export), "--report", str(report_path), "--",
                sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = read_report(report_path)
    assert report["loader"]["site"].endswith(f"train.py:{built_line} < {script}:{train_line}"), report["loader"]
    assert f"training loader: train.py:{built_line} < train.py:{train_line} (DataLoader, batch_size=4)" in proc.stdout
    first, second = report["trials"]
    assert first["status"] == second["status"] == "ok", report["trials"]
    tried = second["settings"]["num_workers"]
    assert tried > 0 and second["applied"] is True
    # what the script saw: the training loader built with the trial's workers, the validation
    # loader (built again after every epoch) always as written
    seen1 = json.loads((tmp_path / "seen-1.json").read_text())
    seen2 = json.loads((tmp_path / "seen-2.json").read_text())
    assert seen1["train"] == [0] and set(seen1["val"]) == {0} and len(seen1["val"]) >= 2
    assert seen2["train"] == [tried] and set(seen2["val"]) == {0} and len(seen2["val"]) >= 2
    # --export: the pick, as TOML, with the loader's own batch size
    table = tomllib.loads(export.read_text(encoding="utf-8"))["dataloader"]
    pick = report["pick"]["settings"]
    assert table["num_workers"] == pick["num_workers"] and table["batch_size"] == 4
    assert table["shuffle"] is True  # the script's own, never a default written over it
    assert f"wrote {export}" in proc.stderr


# ---- 5. no DataLoader ------------------------------------------------------------------------
@pytest.mark.parametrize("body", [
    "print('nothing to load', flush=True)\n",
    # torch imported, a loader built, never iterated
    "import torch\nfrom torch.utils.data import DataLoader\nloader = DataLoader(list(range(8)), batch_size=2)\n",
], ids=["no-torch", "built-not-iterated"])
def test_a_script_that_never_iterates_a_dataloader_is_exit_4(tmp_path, body):
    script = write_script(tmp_path, PRELUDE + body)
    report_path = tmp_path / "tune.json"
    export = tmp_path / "loader.toml"
    proc = tune(tmp_path, *QUICK, "--export", str(export), "--report", str(report_path), "--",
                sys.executable, str(script))
    assert proc.returncode == 4, proc.stderr[-3000:]
    assert "the command exited 0 without iterating a torch DataLoader" in proc.stderr
    assert "no pick: your own settings could not be measured" in proc.stdout
    assert not export.exists() and "not written: nothing was measured" in proc.stderr
    report = read_report(report_path)
    (trial,) = report["trials"]
    assert trial["status"] == "no-loader" and trial["exit_code"] == 0
    assert report["exit_code"] == 4 and report["pick"] is None


def test_export_to_stdout_is_the_settings_alone_and_the_table_goes_to_stderr(tmp_path):
    """Issue 49: `tune --export -` mixed the trials' table into the TOML on stdout."""
    script = write_script(tmp_path, PRELUDE + TRAIN + "train(DataLoader(Slow(160), batch_size=4, shuffle=True))\n")
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", "-", "--", sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    table = tomllib.loads(proc.stdout)["dataloader"]  # the whole of stdout is the export
    assert table["batch_size"] == 4 and isinstance(table["num_workers"], int)
    assert "pick: " in proc.stderr and "trial workers" in proc.stderr


# ---- 7. --export refuses before anything runs -------------------------------------------------
def test_an_existing_export_file_is_refused_before_any_trial(tmp_path):
    script = write_script(tmp_path, PRELUDE + 'open("ran", "w").close()\n')
    export = tmp_path / "loader.toml"
    export.write_text("# mine\n", encoding="utf-8")
    proc = tune(tmp_path, *QUICK, "--export", str(export), "--", sys.executable, str(script))
    assert proc.returncode == 3, proc.stderr
    assert "already exists; pass --force" in proc.stderr
    assert not (tmp_path / "ran").exists() and export.read_text(encoding="utf-8") == "# mine\n"
    assert "trial 1" not in proc.stderr


# ---- 6. a torchrun job: every rank gets the trial's settings, the slowest rank decides ---------
# Not alone: it compares the two ranks of one trial (4x slower loading on rank 0, sleeps both), not a
# rate with a prediction, so other tests' load slows both alike.
def test_under_torchrun_every_rank_gets_the_settings_and_the_slowest_rank_sets_the_rate(tmp_path):
    pytest.importorskip("torch.distributed")
    script = write_script(tmp_path, PRELUDE + """\
import torch, torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler
dist.init_process_group("gloo")
RANK = dist.get_rank()

class Slow(Dataset):
    def __len__(self):
        return 100000
    def __getitem__(self, i):
        time.sleep(0.004 if RANK == 0 else 0.001)  # rank 0 loads 4x slower: the slow rank
        return torch.zeros(8)

ds = Slow()
loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds), num_workers=0)
with open(f"seen-{TRIAL}-{RANK}.json", "w") as f:
    json.dump(loader.num_workers, f)
for batch in loader:  # no collective per step: each rank runs at its own pace
    time.sleep(0.005)
""")
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--",
                sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = read_report(report_path)
    first, second = report["trials"]
    for trial in (first, second):
        assert trial["status"] == "ok", report["trials"]
        ranks = {r["rank"]: r["steps_per_s"] for r in trial["ranks"]}
        assert set(ranks) == {0, 1}
        assert trial["steps_per_s"] == min(ranks.values())  # the slowest rank's rate is the trial's
    # without workers each rank loads in its loop: rank 0's 16 ms a batch against rank 1's 4 ms makes
    # it the slow one (with workers both can keep up with the 5 ms step, and either may be slower)
    zero = {r["rank"]: r["steps_per_s"] for r in first["ranks"]}
    assert zero[0] < 0.8 * zero[1], zero
    # each rank built its loader with the trial's settings
    workers = second["settings"]["num_workers"]
    assert workers > 0
    for rank in (0, 1):
        assert json.loads((tmp_path / f"seen-1-{rank}.json").read_text()) == 0
        assert json.loads((tmp_path / f"seen-2-{rank}.json").read_text()) == workers
    assert report["cpu_budget"] <= len(os.sched_getaffinity(0)) / 2 + 1e-9  # each rank's share of the node
    assert "each trial's rate is its slowest rank's (2 ranks on this node)" in proc.stdout
