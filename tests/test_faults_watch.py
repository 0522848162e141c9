"""`loaderdoc watch` under faults, through the real launcher: DataLoaders iterated in processes the
command starts, settings values torch accepts in any numeric type, and the signals a supervisor
sends the launcher.

Each test asserts the exit code, the report, that no process the command started survives it
(tests/faults_support.py) and that no records folder is left in the temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import resource
import select
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from faults_support import assert_nothing_left, fault_env, loaderdoc


@pytest.fixture
def own_tmp():
    """A temp dir of the test's own, with a short path: multiprocessing puts its AF_UNIX sockets
    (forkserver, the resource sharer passing tensors between processes) under TMPDIR, and a socket
    path holds at most 107 bytes. Under pytest's tmp_path (/tmp/pytest-of-root/pytest-101/popen-gw1/
    test_loaders_iterated_in_multi0/tmp) the listener's path passed that once pytest's run number
    reached three digits, and the watched program hung."""
    with tempfile.TemporaryDirectory(prefix="ld-") as folder:
        yield Path(folder)


def watch_env(tmpdir: Path) -> tuple[dict, str]:
    """A tagged environment whose temp dir is the test's own: a records folder left is seen."""
    return fault_env({"TMPDIR": str(tmpdir)})


def left_in(tmpdir: Path) -> list[str]:
    return [p.name for p in tmpdir.iterdir() if p.name.startswith("loaderdoc-")]


# ---- DataLoaders in processes the command starts ------------------------------------------------
# One run starts children by each start method in turn (their loaders' batch counts say which method
# started them, and the script prints their pids); a test for each method reads its part of the report.
IN_PROCESSES = """\
import json, multiprocessing as mp, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

def work(batches, workers):
    loader = DataLoader(TensorDataset(torch.arange(256.0)), batch_size=8, num_workers=workers)
    for i, _ in enumerate(loader):
        if i + 1 == batches:
            break  # an epoch left open: its records are written at the process's exit

if __name__ == "__main__":
    work(5, 0)  # the parent's own loader first: a forked child holds a copy of its records
    codes = []
    for method, with_workers, without in json.loads(sys.argv[1]):
        ctx = mp.get_context(method)
        children = [ctx.Process(target=work, args=(with_workers, 2)), ctx.Process(target=work, args=(without, 0))]
        for p in children:
            p.start()
        for p in children:
            p.join()
        print(json.dumps({"method": method, "pids": [p.pid for p in children]}), flush=True)
        codes += [p.exitcode for p in children]
    sys.exit(max(codes))
"""
# each method's two children: (batches of the one with 2 workers, batches of the one without)
METHODS = {"fork": (7, 9), "forkserver": (11, 13), "spawn": (15, 17)}
IN_PROCESSES_RUN = pytest.mark.xdist_group("faults_watch_in_processes")


@pytest.fixture(scope="module")
def in_processes(tmp_path_factory):
    """The run, its children's pids by method, its report, and what it left in its temp dir (a
    short one of its own: see ``own_tmp``)."""
    script = tmp_path_factory.mktemp("in_processes") / "train.py"
    script.write_text(IN_PROCESSES)
    with tempfile.TemporaryDirectory(prefix="ld-") as folder:
        env, _ = watch_env(Path(folder))
        methods = json.dumps([[m, *batches] for m, batches in METHODS.items()])
        proc = loaderdoc("watch", "--json", "--", sys.executable, str(script), methods, env=env, timeout=180)
        assert proc.returncode == 0, proc.stderr
        start = proc.stdout.index("{\n")
        pids = {line["method"]: line["pids"] for line in map(json.loads, proc.stdout[:start].splitlines())}
        yield pids, json.loads(proc.stdout[start:]), left_in(Path(folder))


@IN_PROCESSES_RUN
@pytest.mark.parametrize("method", list(METHODS))
def test_loaders_iterated_in_multiprocessing_children_are_watched(in_processes, method):
    # before: under fork and forkserver, "no torch DataLoader was iterated; nothing measured"
    pids, report, left = in_processes
    with_workers, without = METHODS[method]
    by_pid = {e["pid"]: (e["totals"]["steps"], e["settings"]["num_workers"]) for e in report["loaders"]}
    assert [by_pid.get(pid) for pid in pids[method]] == [(with_workers, 2), (without, 0)], report["loaders"]
    assert left == []


@IN_PROCESSES_RUN
def test_the_parent_and_every_child_are_each_one_loader_of_the_report(in_processes):
    pids, report, left = in_processes
    by_process = sorted((e["totals"]["steps"], e["settings"]["num_workers"]) for e in report["loaders"])
    assert by_process == [(5, 0), (7, 2), (9, 0), (11, 2), (13, 0), (15, 2), (17, 0)], report["loaders"]
    assert len({e["pid"] for e in report["loaders"]}) == 1 + 2 * len(METHODS)
    assert report["steps"] == 77
    assert left == []


# ---- settings values torch accepts ------------------------------------------------------------
SETTINGS_KINDS = """\
import enum, json, sys
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

class Two(enum.IntEnum):
    TWO = 2

class MyInt(int):
    pass

# (name, value) pairs torch accepts; each loader gets one, the rest plain
CASES = [("num_workers", v) for v in (np.int64(2), np.int32(1), np.uint8(1), np.intp(2), Two.TWO, MyInt(1), True,
                                      np.int16(0), 0)]
CASES += [("batch_size", v) for v in (Two.TWO, MyInt(3), 4)]  # torch's BatchSampler refuses numpy ints
CASES += [("prefetch_factor", v) for v in (np.int64(3), Two.TWO, MyInt(4))]
CASES += [("pin_memory", v) for v in (np.bool_(True), np.bool_(False), 1, 0, True)]
CASES += [("drop_last", v) for v in (True, False)]  # BatchSampler refuses anything but a bool
CASES += [("persistent_workers", v) for v in (np.bool_(True), 1, True)]

expected = []
for name, value in CASES:
    kwargs = {"batch_size": 4, name: value}
    if name in ("prefetch_factor", "persistent_workers"):
        kwargs["num_workers"] = 1
    loader = DataLoader(TensorDataset(torch.arange(10.0)), **kwargs)
    it = iter(loader)
    batches = [b[0] for b in it]
    # what torch did with it: the workers it started, the batches it made; flags by truth
    workers = len(getattr(it, "_workers", []))
    size = len(batches[0])
    read = {"num_workers": workers, "batch_size": size, "prefetch_factor": getattr(it, "_prefetch_factor", None),
            "drop_last": len(batches) == 10 // size}
    want = read.get(name, None)
    if want is None or name == "prefetch_factor":
        want = int(value) if name in ("num_workers", "batch_size", "prefetch_factor") else bool(value)
    expected.append({"name": name, "value": repr(value), "want": want})
    del it, loader
print(json.dumps(expected))
"""


def test_every_settings_value_torch_accepts_is_read_as_torch_reads_it(tmp_path, own_tmp):
    # before: num_workers=np.int64(2) was recorded as the string 'np.int64(2)' and judged as 0 workers
    script = tmp_path / "train.py"
    script.write_text(SETTINGS_KINDS)
    env, tag = watch_env(own_tmp)
    proc = loaderdoc("watch", "--json", "--", sys.executable, str(script), env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    first, _, rest = proc.stdout.partition("\n")
    expected, report = json.loads(first), json.loads(rest)
    assert len(report["loaders"]) == len(expected)
    for loader, case in zip(report["loaders"], expected, strict=True):
        got = loader["settings"][case["name"]]
        assert got == case["want"] and type(got) is type(case["want"]), (case, loader["settings"])
        for name in ("num_workers", "batch_size", "prefetch_factor"):
            value = loader["settings"][name]
            assert value is None or type(value) is int, (case, loader["settings"])
    assert "np." not in proc.stderr  # the summary names them as numbers too
    assert left_in(own_tmp) == []


# ---- signals a supervisor sends the launcher ----------------------------------------------------
WAITS = """\
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset
for _ in DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8):
    pass
open(sys.argv[1], "w").close()  # the records of its 8 batches are written at the epoch's end
while True:
    time.sleep(0.05)
"""


def no_core_dumps() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # SIGQUIT's default action dumps core


def start_watch(tmp_path: Path, own_tmp: Path, script_text: str, *extra: str) -> tuple[subprocess.Popen, str, Path, Path]:
    script = tmp_path / "train.py"
    script.write_text(script_text)
    ready, report = tmp_path / "ready", tmp_path / "run.json"
    env, tag = watch_env(own_tmp)
    proc = subprocess.Popen([sys.executable, "-m", "loaderdoc", "watch", "--report", str(report), "--", sys.executable,
                             str(script), str(ready), *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True, preexec_fn=no_core_dumps)
    return proc, tag, ready, report


def await_file(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR2", "SIGALRM"])
def test_a_signal_to_the_launcher_reaches_the_command_and_the_report_is_written(tmp_path, own_tmp, name):
    # before: SIGINT was swallowed (the command ran on); SIGHUP, SIGQUIT, SIGUSR2 killed the launcher
    # at once, the command ran on unwatched, no report, the records folder left in the temp dir
    signum = getattr(signal, name)
    proc, tag, ready, report_file = start_watch(tmp_path, own_tmp, WAITS)
    try:
        await_file(ready, proc)
        os.kill(proc.pid, signum)  # the launcher alone, as an IDE, `timeout` or a scheduler does
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    # the command died of it as it would bare, and the launcher says so the shell's way
    assert proc.returncode == 128 + signum, err
    report = json.loads(report_file.read_text())
    assert report["exit_code"] == 128 + signum and report["steps"] == 8
    assert f"(exit {128 + signum})" in err
    assert left_in(own_tmp) == []
    assert_nothing_left(tag)


COUNTS_SIGINT = """\
import signal, sys, time
from pathlib import Path
import torch
from torch.utils.data import DataLoader, TensorDataset
got = []
signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
for _ in DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8):
    pass
Path(sys.argv[1]).touch()
while not got:
    time.sleep(0.01)
Path(sys.argv[2]).touch()  # it has seen Ctrl+C; the test looks at the launcher, then says finish
while not Path(sys.argv[3]).exists():
    time.sleep(0.01)
print("sigints", len(got), flush=True)
"""


def launcher_idle_without(pid: int, signum: int) -> bool:
    """The launcher sleeps (in sigwaitinfo) and ``signum`` is not pending: it has dealt with it."""
    status = Path(f"/proc/{pid}/status").read_text()
    fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
    pending = int(fields["SigPnd"], 16) | int(fields["ShdPnd"], 16)
    return fields["State"].split()[0] == "S" and not pending & (1 << (signum - 1))


def drain_until_exit(pid: int, master: int, timeout: float = 60) -> tuple[bytes, int]:
    """What the pty shows until ``pid`` exits (read all along: a full pty would block it); its status."""
    out, status, eof = b"", None, False
    deadline = time.monotonic() + timeout
    while True:
        assert time.monotonic() < deadline, out.decode(errors="replace")
        ready = False
        if not eof:
            ready = bool(select.select([master], [], [], 0.1)[0])
            if ready:
                try:
                    chunk = os.read(master, 4096)
                except OSError:  # EIO: no process holds the terminal any more
                    chunk = b""
                if chunk:
                    out += chunk
                    continue
                eof = True
        if status is None:
            done, status_now = os.waitpid(pid, os.WNOHANG)
            status = status_now if done else None
        if status is not None and (eof or not ready):
            return out, status
        if eof:
            time.sleep(0.02)


def test_ctrl_c_in_a_terminal_reaches_the_command_once(tmp_path, own_tmp):
    # the terminal sends SIGINT to the whole foreground group, the command included: the launcher
    # must not forward a second one (it would cut a graceful shutdown short)
    script = tmp_path / "train.py"
    script.write_text(COUNTS_SIGINT)
    ready, seen, finish = tmp_path / "ready", tmp_path / "seen", tmp_path / "finish"
    env, tag = watch_env(own_tmp)
    pid, master = pty.fork()  # a new session whose controlling terminal is the pty
    if pid == 0:  # pragma: no cover - the child execs the launcher
        os.execve(sys.executable, [sys.executable, "-m", "loaderdoc", "watch", "--", sys.executable, str(script),
                                   str(ready), str(seen), str(finish)], env)
    status = None
    try:
        while not ready.exists():
            assert os.waitpid(pid, os.WNOHANG) == (0, 0), "the launcher ended early"
            time.sleep(0.02)
        os.write(master, b"\x03")  # Ctrl+C
        while not seen.exists():
            time.sleep(0.02)
        deadline = time.monotonic() + 30
        while not launcher_idle_without(pid, signal.SIGINT):
            assert time.monotonic() < deadline
            time.sleep(0.02)
        finish.touch()
        out, status = drain_until_exit(pid, master)
    finally:
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(master)
    text = out.decode(errors="replace")
    assert "sigints 1" in text, text
    assert os.waitstatus_to_exitcode(status) == 0, text
    assert left_in(own_tmp) == []
    assert_nothing_left(tag)


def test_a_launcher_started_ignoring_sighup_leaves_it_ignored(tmp_path, own_tmp):
    # nohup: the command inherits SIGHUP ignored, as it would bare; the launcher does not forward it
    env, tag = watch_env(own_tmp)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import signal, sys
        print(signal.getsignal(signal.SIGHUP) is signal.SIG_IGN)
    """))
    proc = loaderdoc("watch", "--", sys.executable, str(script), env=env, prefix=["nohup"])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "True"
    assert left_in(own_tmp) == []


TUNED = """\
import sys, time
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8)
while True:
    for _ in loader:
        open(sys.argv[1], "w").close()
        time.sleep(0.01)
"""


@pytest.mark.parametrize("name", ["SIGHUP", "SIGQUIT", "SIGUSR2"])
def test_a_hangup_to_tune_stops_its_trial_and_cleans_up(tmp_path, own_tmp, name):
    # before: SIGHUP ended tune at once; the trial (in a session of its own) ran on, its folder left
    script = tmp_path / "train.py"
    script.write_text(TUNED)
    ready = tmp_path / "ready"
    env, tag = watch_env(own_tmp)
    proc = subprocess.Popen([sys.executable, "-m", "loaderdoc", "tune", "--", sys.executable, str(script), str(ready)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            start_new_session=True, preexec_fn=no_core_dumps)
    try:
        await_file(ready, proc)  # a trial is running
        os.kill(proc.pid, getattr(signal, name))
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    assert left_in(own_tmp) == []
    assert_nothing_left(tag)
