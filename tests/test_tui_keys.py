"""Terminal conventions of htop, nvitop and k9s: `q` quits and `?` shows the keys, except while
typing in a field; in a real terminal (tmux) at 80x24 as well as through textual's pilot."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
import time
import uuid

import pytest
from faults_support import assert_nothing_left, fault_env
from textual.widgets import HelpPanel, Input

from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import make_app

TMUX = shutil.which("tmux")


async def test_q_quits_and_question_mark_toggles_the_keys():
    app = make_app(facts=load_machine("ci-2core"))
    async with app.run_test(size=(80, 24)) as pilot:
        await app.action_show_tab("machine")
        await pilot.press("question_mark")
        await pilot.pause()
        assert app.screen.query(HelpPanel), "? did not show the keys"
        await pilot.press("question_mark")
        await pilot.pause()
        assert not app.screen.query(HelpPanel), "? did not hide the keys again"
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


async def test_q_and_question_mark_are_text_while_typing_in_a_field():
    app = make_app(facts=load_machine("ci-2core"))
    async with app.run_test(size=(100, 34)) as pilot:
        await app.action_show_tab("probe")
        field = app.screen.query(Input).first()
        field.focus()
        field.value = ""
        await pilot.press("q", "question_mark")
        await pilot.pause()
        assert app.is_running, "q quit the app while typing in a field"
        assert field.value == "q?"
        assert not app.screen.query(HelpPanel)
        field.blur()
        await pilot.press("q")
        await pilot.pause()
    assert app.return_code == 0


@pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
def test_the_app_opens_at_80x24_in_a_real_terminal_and_q_quits_it(tmp_path):
    socket = f"loaderdoc-keys-{uuid.uuid4().hex[:8]}"
    env, tag = fault_env()
    exit_file = tmp_path / "exit"
    command = " ".join(
        ["env", f"LOADERDOC_FAULT_TAG={tag}", f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])}", "TERM=xterm-256color",
         shlex.quote(sys.executable), "-m", "loaderdoc", "--machine", "ci-2core"]
    ) + f"; echo $? > {shlex.quote(str(exit_file))}; sleep 60"

    def tmux(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([TMUX, "-L", socket, *args], capture_output=True, text=True, timeout=10)

    def screen() -> str:
        return tmux("capture-pane", "-p").stdout

    tmux("new-session", "-d", "-x", "80", "-y", "24", command)
    try:
        deadline = time.monotonic() + 30
        while "Machine" not in screen() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "Machine" in screen(), screen()
        tmux("send-keys", "q")
        deadline = time.monotonic() + 15
        while not exit_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert exit_file.exists(), f"q did not quit the app; the terminal shows:\n{screen()}"
        assert int(exit_file.read_text()) == 0
        assert_nothing_left(tag)
    finally:
        tmux("kill-server")
