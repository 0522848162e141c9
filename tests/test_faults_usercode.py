"""User code owns our output, our exit, our end: a ``--dataset`` factory or its Dataset that prints,
calls ``os._exit()`` or leaves a thread running, through ``python -m loaderdoc`` as a user runs it.

Each test asserts the exit code, the message, and that no process the command started survives it
(tests/faults_support.py).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time

import pytest
from faults_support import assert_nothing_left, fault_env, loaderdoc, one_line_error

from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBE_FAILED, EXIT_USAGE

PROBE = ["--batch-size", "8", "--step-ms", "2", "--budget", "3"]

# every way user code reaches standard output: Python's print and sys.stdout, the descriptor
# (os.write, C code, a process it starts), in the factory, at import, in the measuring process
# (__getitem__ with 0 workers), in DataLoader workers, from a thread while loaderdoc prints
NOISE = ["import", "factory-print", "factory-write", "factory-fd", "factory-libc", "factory-child", "getitem-print",
         "getitem-fd", "getitem-libc", "worker", "thread"]


def test_any_printing_user_code_leaves_probe_json_valid():
    # every kind at once, in one probe: a single write of any of them reaching stdout breaks the JSON
    env, _ = fault_env({"USERCODE_NOISE": ",".join(NOISE)})
    proc = loaderdoc("probe", "--dataset", "usercode_data:make_noisy", *PROBE, "--no-progress", "--json", env=env)
    assert proc.returncode == EXIT_OK, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)  # the whole of stdout is our document
    assert doc["recommended"] is not None
    assert [kind for kind in NOISE if f"NOISE-{kind}" not in proc.stderr] == []  # each ran, and went to stderr
    assert any(r["settings"]["num_workers"] > 0 and r["status"] == "ok" for r in doc["results"])  # "worker" too


def test_printing_user_code_leaves_export_to_stdout_valid():
    kinds = ["factory-print", "getitem-fd", "thread"]
    env, _ = fault_env({"USERCODE_NOISE": ",".join(kinds)})
    proc = loaderdoc("--export", "-", "--format", "toml", "--dataset", "usercode_data:make_noisy", *PROBE, env=env)
    assert proc.returncode == EXIT_OK, proc.stderr[-2000:]
    assert tomllib.loads(proc.stdout)["dataloader"]["batch_size"] == 8
    assert [kind for kind in kinds if f"NOISE-{kind}" not in proc.stderr] == []


def test_printing_user_code_leaves_the_text_table_whole():
    env, _ = fault_env({"USERCODE_NOISE": "getitem-print"})
    proc = loaderdoc("probe", "--dataset", "usercode_data:make_noisy", *PROBE, "--no-progress", env=env)
    assert proc.returncode == EXIT_OK, proc.stderr[-2000:]
    assert "NOISE" not in proc.stdout and "NOISE-getitem-print" in proc.stderr


@pytest.mark.parametrize(("factory", "needle"), [
    ("usercode_data:make_exiting", "make_exiting() called os._exit(0)"),
    ("usercode_data:make_exiting_thread", "called os._exit(0) in thread"),
])
@pytest.mark.parametrize("command", [["probe", "--no-progress", "--json"], ["--export", "{target}"],
                                     ["probe", "--no-progress", "--export", "{target}"]],
                         ids=["probe --json", "--export", "probe --export"])
def test_user_code_calling_os_exit_is_one_line_and_exit_3(tmp_path, factory, needle, command):
    # before: a probed --export exited 0 with no file and no word
    target = tmp_path / "loader.toml"
    args = [a.replace("{target}", str(target)) for a in command]
    proc = loaderdoc(*args, "--dataset", factory, *PROBE)
    one_line_error(proc, EXIT_USAGE, needle)
    assert proc.stdout == ""
    assert not target.exists() and list(tmp_path.iterdir()) == []


def test_os_exit_in_getitem_fails_that_configuration_not_loaderdoc(tmp_path):
    # __getitem__ runs in the measuring process: its end is observed there, as a failed configuration
    target = tmp_path / "loader.toml"
    proc = loaderdoc("probe", "--no-progress", "--export", str(target), "--dataset",
                     "usercode_data:make_exiting_getitem", *PROBE)
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    assert "the measuring process died (exit code 0) before reporting" in " ".join(proc.stdout.split())
    assert "no DataLoader configuration could be measured" in proc.stderr
    assert not target.exists()


@pytest.mark.parametrize("command", [["probe", "--no-progress", "--json"], ["--export", "-", "--format", "toml"]])
def test_a_thread_the_factory_leaves_does_not_keep_loaderdoc_alive(command):
    # before: the report was printed and the process never exited
    proc = loaderdoc(*command, "--dataset", "usercode_data:make_lingering", *PROBE, timeout=60)
    assert proc.returncode == EXIT_OK, proc.stderr[-2000:]
    assert "left 1 thread(s) running ('forgotten-prefetcher'); not waiting for them" in proc.stderr
    assert "Traceback" not in proc.stderr
    if "--json" in command:
        assert json.loads(proc.stdout)["recommended"] is not None
    else:
        assert tomllib.loads(proc.stdout)["dataloader"]


def test_a_daemon_thread_the_users_code_left_ends_the_process_without_finalizing(monkeypatch):
    # a dataset's daemon thread printing in a loop crashed one probe at exit (SIGSEGV in libpython
    # while the interpreter finalized): such a thread must not be running Python then
    from loaderdoc.base import output, usercode

    monkeypatch.setattr(output, "_end_without_finalizing", False)
    monkeypatch.setattr(usercode, "_state", dict(usercode._state, ran=False, depth=0, owner=None))
    monkeypatch.setattr(output, "route_user_output_to_stderr", lambda inside: None)
    with usercode.running_user_code():
        pass
    usercode.leave_past_user_threads()
    assert not output._end_without_finalizing  # no thread of its own: Python's exit, handlers and all
    stop = threading.Event()
    with usercode.running_user_code():
        chatter = threading.Thread(target=stop.wait, daemon=True)
        chatter.start()
    try:
        usercode.leave_past_user_threads()
    finally:
        stop.set()
        chatter.join()
    assert output._end_without_finalizing


def test_sigterm_with_a_lingering_thread_is_a_clean_interrupt(tmp_path):
    # before: SIGTERM while Python waited for the thread printed a KeyboardInterrupt traceback
    mark = tmp_path / "factory-ran"
    env, tag = fault_env({"USERCODE_MARK": str(mark)})
    proc = subprocess.Popen([sys.executable, "-m", "loaderdoc", "probe", "--dataset", "usercode_data:make_lingering",
                             "--batch-size", "8", "--step-ms", "2", "--budget", "30", "--no-progress", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        while not mark.exists():  # the probe measures: the factory ran, its thread is alive
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert json.loads(out)["stopped"] == "interrupted"
    assert_nothing_left(tag)
