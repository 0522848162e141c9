"""The reaper's pieces on their own (the fault tests run them through the real command)."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import psutil
import pytest

from loaderdoc.probing.reaper import contained, interrupts_deferred, set_subreaper

sys.path.insert(0, str(Path(__file__).with_name("probe_datasets")))
import faults_data  # noqa: E402

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_CHILD_SUBREAPER is Linux's")


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@linux_only
def test_what_is_started_inside_contained_dies_on_the_way_out_and_the_setting_is_restored(tmp_path, monkeypatch):
    log = tmp_path / "started.pids"
    monkeypatch.setenv(faults_data.SPAWN_LOG, str(log))
    assert set_subreaper(False) is False  # this test process is not one to begin with
    with contained():
        assert set_subreaper(True) is True  # (reads the setting: contained() set it)
        faults_data.start_detached_processes()
        pids = [int(line) for line in log.read_text().split()]  # Popen, fork + setsid, the daemon
        # the double fork's grandchild was orphaned at once: adopted by this process, not by init
        assert psutil.Process(pids[2]).ppid() == os.getpid()
    assert len(pids) == 3 and not [pid for pid in pids if running(pid)]
    assert set_subreaper(False) is False  # restored


def test_an_interrupt_during_a_cleanup_is_raised_after_it():
    steps = []
    with pytest.raises(KeyboardInterrupt), interrupts_deferred():
        signal.raise_signal(signal.SIGINT)
        for i in range(10_000):  # the handler runs between bytecodes: long before this ends
            steps.append(i)
    assert len(steps) == 10_000  # the cleanup ran to its end


def test_an_ignored_interrupt_stays_ignored_during_a_cleanup():
    # started with SIGINT ignored (a background job of a shell without job control, nohup'd
    # scripts): Ctrl+C means nothing to the process, inside a cleanup as outside it
    saved = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts_deferred():
            signal.raise_signal(signal.SIGINT)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, saved)
