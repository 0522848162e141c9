"""Terminal conventions of htop, nvitop and k9s: `q` quits and `?` shows the keys, except while
typing in a field; in a real terminal (tmux) at 80x24 as well as through textual's pilot."""

from __future__ import annotations

import shutil
import time

import pytest
from faults_support import TmuxTerminal, assert_nothing_left, fault_env
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
    env, tag = fault_env()
    exit_file = tmp_path / "exit"
    term = TmuxTerminal(["--machine", "ci-2core"], env, exit_file, size=(80, 24))
    tmux, screen = term.tmux, term.screen
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
        term.close()
