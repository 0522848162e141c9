"""Faults around the interactive app: quitting or SIGTERM in the middle of a real probe, and a
terminal far smaller than the app is laid out for."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid

import psutil
import pytest
from faults_support import assert_nothing_left, fault_env, tagged

from loaderdoc.errors import EXIT_INTERRUPTED
from loaderdoc.session import ProbeRequest
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import make_app


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE}


async def wait_until(pilot, condition, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        await pilot.pause(0.05)
    return condition()


async def test_quitting_mid_probe_stops_the_real_probe_and_its_workers():
    before = children()
    app = make_app(facts=load_machine("ci-2core"),
                   workload=ProbeRequest(preset="remote", batch_size=32, step_ms=20.0, budget_s=60.0))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+r")
        # the measuring process and at least one DataLoader worker
        assert await wait_until(pilot, lambda: len(children() - before) >= 2), "the probe never started workers"
        started = time.monotonic()
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert time.monotonic() - started < 10
    assert app.return_value == 0
    deadline = time.monotonic() + 5
    while children() - before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not children() - before, f"left running: {children() - before}"


@pytest.mark.parametrize("tab", ["machine", "probe", "diagnoses", "tradeoffs", "settings"])
async def test_a_40x12_terminal_does_not_crash_and_keys_still_work(tab):
    app = make_app(facts=load_machine("docker-64m-shm"), workload=ProbeRequest(preset="image", batch_size=32))
    async with app.run_test(size=(40, 12)) as pilot:
        await app.action_show_tab(tab)
        await pilot.pause()
        await pilot.press("tab", "down", "down", "tab")
        await pilot.pause()
        assert app.is_running
        assert app.screen.size.width == 40 and app.screen.size.height == 12
        await pilot.press("ctrl+e")  # the export dialog opens in the small terminal too
        await pilot.pause()
        await pilot.press("escape")
        await pilot.pause()
        assert app.is_running
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.return_value == 0


# ---- a real `loaderdoc` in a real terminal (tmux), killed with SIGTERM mid-probe -----------------
TMUX = shutil.which("tmux")


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
def test_sigterm_to_the_app_mid_probe_leaves_no_worker(tmp_path):
    socket = f"loaderdoc-faults-{uuid.uuid4().hex[:8]}"
    env, tag = fault_env()
    exit_file = tmp_path / "exit"
    command = " ".join(
        ["env", f"LOADERDOC_FAULT_TAG={tag}", f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])}", "TERM=xterm-256color",
         shlex.quote(sys.executable), "-m", "loaderdoc", "--dataset", "faults_data:make_slow", "--batch-size", "8",
         "--budget", "60"]) + f"; echo $? > {shlex.quote(str(exit_file))}; sleep 60"

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([TMUX, "-L", socket, *args], capture_output=True, text=True, timeout=10)

    tmux("new-session", "-d", "-x", "120", "-y", "40", command)
    try:
        deadline = time.monotonic() + 30
        while "Machine" not in tmux("capture-pane", "-p").stdout and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "Machine" in tmux("capture-pane", "-p").stdout, tmux("capture-pane", "-p").stdout
        tmux("send-keys", "C-r")
        deadline = time.monotonic() + 30
        while len(tagged(tag)) < 4 and time.monotonic() < deadline:  # app, measuring process, 2+ workers
            time.sleep(0.05)
        procs = tagged(tag)
        assert len(procs) >= 4, f"the probe never started workers; the terminal shows:\n{tmux('capture-pane', '-p').stdout}"
        app = next(p for p in procs if p.ppid() not in {q.pid for q in procs})
        workers = [p for p in procs if p.pid != app.pid]
        app.terminate()  # SIGTERM, as `kill`, systemd or a job scheduler sends it
        # the running configuration is cancelled at once (not measured to its end, nor the search
        # carried on for the rest of the budget): its processes are gone within a few seconds
        deadline = time.monotonic() + 3
        while any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p.pid for p in workers if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        deadline = time.monotonic() + 15
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert exit_file.exists(), "the app was still running 15 s after SIGTERM"
        assert int(exit_file.read_text()) == EXIT_INTERRUPTED
        assert_nothing_left(tag)
    finally:
        tmux("kill-server")
        for p in tagged(tag):
            p.kill()
