"""Faults around the interactive app: quitting or SIGTERM in the middle of a real probe, a
terminal far smaller than the app is laid out for, a storm of keys on the export dialog, an
exception in the app, and no terminal at all."""

from __future__ import annotations

import contextlib
import os
import pty
import shutil
import subprocess
import sys
import threading
import time

import psutil
import pytest
from faults_support import TmuxTerminal, assert_nothing_left, fault_env, tagged
from textual import events
from textual.widgets import Button, Input, Static

from loaderdoc.base.errors import EXIT_CRITICAL, EXIT_INTERNAL, EXIT_INTERRUPTED
from loaderdoc.commands.app import APP_CRASHED, NO_TERMINAL, run_to_exit_code
from loaderdoc.export import render
from loaderdoc.probing.result import ProbeReport, WorkloadInfo
from loaderdoc.session import ProbeRequest
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import LoaderDocApp, make_app
from loaderdoc.tui.screens import export as export_screen
from loaderdoc.tui.screens.dialog import Dialog


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
    env, tag = fault_env()
    exit_file = tmp_path / "exit"
    term = TmuxTerminal(["--dataset", "faults_data:make_slow", "--batch-size", "8", "--budget", "60"], env, exit_file)
    tmux = term.tmux
    try:
        deadline = time.monotonic() + 30
        while "Machine" not in tmux("capture-pane", "-p").stdout and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "Machine" in tmux("capture-pane", "-p").stdout, tmux("capture-pane", "-p").stdout
        tmux("send-keys", "C-r")
        # the probe first imports torch on the app's worker thread and measures 0 workers (a
        # 160-ms batch a step here): beside a full suite on 2 cores that has taken over 30 s
        deadline = time.monotonic() + 90
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
        term.close()
        for p in tagged(tag):
            p.kill()


# ---- a storm of keys on the export dialog ----------------------------------------------------------
# The app once crashed with ScreenStackError from the dialog's dismiss, after writing the file,
# with Escape pressed too (and exited 0). Textual acts on Escape when it has come back up to the
# app, on ctrl+o (a priority binding) as soon as it reaches the app, and on Enter one message
# later (Input.Submitted, Button.Pressed): two answers could be handled before the dialog was
# popped, and the second dismiss popped the screen underneath or none. The keys of each burst
# below are put into the app's queue in one go, as the terminal driver does with the bytes of
# one read: the app handles none of them before all are there.
HEADER = ["DataLoader settings by loaderdoc (test header)"]
KEY_CHARS = {"enter": "\r", "escape": "\x1b", "y": "y", "n": "n"}  # ctrl+... keys carry no character


def burst(app, *keys: str) -> None:
    for key in keys:
        event = events.Key(key, KEY_CHARS.get(key))
        event.set_sender(app)
        app.post_message(event)


async def until(pilot, condition, what: str, timeout: float = 60.0) -> None:
    """Let the app run until ``condition()``; the timeout only keeps a broken app from hanging the
    suite, it times nothing."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        await pilot.pause()


def closed(dialog: Dialog) -> bool:
    """Answered, and its message loop (the last of its widgets' to stop) has ended: nothing sent
    to the dialog can act any more."""
    return dialog.finished and not dialog.is_running


@pytest.fixture
def dialogs(monkeypatch) -> list[Dialog]:
    """Every dialog the app opens, in order."""
    made: list[Dialog] = []
    init = Dialog.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Dialog, "__init__", recording)
    return made


@pytest.fixture
def writes(monkeypatch) -> list:
    """The export dialog's calls of write_export (the real one runs)."""
    calls = []
    write = export_screen.write_export

    def counting(target, *args, **kwargs):
        calls.append(target)
        return write(target, *args, **kwargs)

    monkeypatch.setattr(export_screen, "write_export", counting)
    return calls


def export_app(tmp_path, **kwargs):
    return make_app(facts=load_machine("ci-2core"), workload=ProbeRequest(preset="image", batch_size=32),
                    export_dir=tmp_path, header_fn=lambda *a, **k: HEADER, **kwargs)


async def open_export(pilot, focus: str | None = None):
    await pilot.press("ctrl+e")
    dialog = pilot.app.screen
    assert isinstance(dialog, export_screen.ExportScreen)
    await until(pilot, lambda: dialog.query_one("#export-path", Input).has_focus, "the dialog is ready")
    if focus is not None:
        dialog.query_one(f"#{focus}", Button).focus()
    return dialog


@pytest.mark.parametrize(("keys", "focus", "writes_file"), [
    # opening the dialog and hammering keys: the burst that crashed the app
    (("ctrl+e", "enter", "escape", "enter"), None, True),
    (("ctrl+e", "enter", "enter", "escape"), None, True),
    (("ctrl+e", "escape", "ctrl+o"), None, False),
    (("enter", "escape"), None, True),  # Enter was first: it writes; the Escape does nothing
    (("escape", "enter"), None, False),
    (("escape", "ctrl+o"), None, False),  # nothing is written after a cancel
    (("enter", "enter"), None, True),  # written once, no "already exists, overwrite?" afterwards
    (("enter", "escape"), "write", True),
    (("enter", "ctrl+o"), "cancel", False),  # Enter on the Cancel button cancels
    (("escape",) * 3 + ("enter", "ctrl+o") * 3, None, False),
    (("enter", "ctrl+o") * 3 + ("escape",) * 3, None, True),
], ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
async def test_a_burst_of_keys_on_the_export_dialog_acts_once_first_key_wins(
        tmp_path, dialogs, writes, keys, focus, writes_file):
    target = tmp_path / "loaderdoc.toml"
    app = export_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:  # an exception in the app would be raised here
        if keys[0] != "ctrl+e":
            await open_export(pilot, focus)
        burst(app, *keys)
        await until(pilot, lambda: dialogs and all(closed(d) for d in dialogs), "the dialog closed")
        assert [type(d).__name__ for d in dialogs] == ["ExportScreen"]  # never asked to overwrite
        assert app.screen is app.main_screen and len(app.screen_stack) == 1
        if writes_file:
            assert writes == [target]
            assert target.read_text() == render(app.session.settings, "toml", HEADER)
        else:
            assert writes == [] and list(tmp_path.iterdir()) == []
        await pilot.press("ctrl+q")
    assert app.return_code == 0 and app.return_value == 0


async def test_text_typed_after_enter_is_not_taken_into_the_path(tmp_path, dialogs, writes):
    """Enter, then 'y' at once (the overwrite question is expected): the 'y' reached the path field
    before the Enter reached the dialog, which then asked about 'loaderdoc.tomly'."""
    target = tmp_path / "loaderdoc.toml"
    target.write_text("# mine\n")
    app = export_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_export(pilot)
        burst(app, "enter", "y")
        await until(pilot, lambda: len(dialogs) == 2 and app.screen is dialogs[1], "the overwrite question")
        question = str(app.screen.query_one("#confirm-question", Static).render())
        assert f"{target} already exists" in question
        assert dialog.query_one("#export-path", Input).value == str(target)
        assert writes == [] and target.read_text() == "# mine\n"
        await pilot.press("y")  # typed once the question is there: it answers it
        await until(pilot, lambda: all(closed(d) for d in dialogs), "both dialogs closed")
        assert writes == [target] and target.read_text().startswith("# DataLoader settings by loaderdoc")
        assert app.screen is app.main_screen
        await pilot.press("ctrl+q")
    assert app.return_code == 0


@pytest.mark.parametrize(("keys", "overwrites"), [
    (("enter", "y"), False),  # Enter on the focused "Cancel (n)" first: not overwritten
    (("y", "escape", "enter"), True),
    (("escape", "y"), False),
    (("n", "y", "y"), False),
    (("y", "n", "escape", "y"), True),
], ids=lambda v: "+".join(v) if isinstance(v, tuple) else v)
async def test_a_burst_of_keys_on_the_overwrite_question_answers_once(tmp_path, dialogs, writes, keys, overwrites):
    target = tmp_path / "loaderdoc.toml"
    target.write_text("# mine\n")
    app = export_app(tmp_path)
    async with app.run_test(size=(120, 40)) as pilot:
        dialog = await open_export(pilot)
        await pilot.press("enter")
        await until(pilot, lambda: len(dialogs) == 2 and app.screen is dialogs[1], "the overwrite question")
        question = dialogs[1]
        await until(pilot, lambda: question.focused is not None, "the question is ready")
        burst(app, *keys)
        if overwrites:
            await until(pilot, lambda: all(closed(d) for d in dialogs), "both dialogs closed")
            assert writes == [target] and target.read_text().startswith("# DataLoader settings by loaderdoc")
            assert app.screen is app.main_screen
        else:
            await until(pilot, lambda: closed(question) and "not overwritten" in str(
                dialog.query_one("#export-error", Static).render()), "the question answered no")
            assert writes == [] and target.read_text() == "# mine\n"
            assert app.screen is dialog and not dialog.finished  # back in the dialog: choose another path
            await pilot.press("escape")
            await until(pilot, lambda: closed(dialog), "the dialog closed")
            assert app.screen is app.main_screen and writes == []
        assert len(dialogs) == 2
        await pilot.press("ctrl+q")
    assert app.return_code == 0


def waiting_probe(started: threading.Event):
    """Stands in for the probe: runs until cancelled."""

    def probe(dataset=None, *, cancel, preset=None, batch_size=32, **_):
        started.set()
        assert cancel.wait(60), "the app never cancelled the probe"
        return ProbeReport(workload=WorkloadInfo(name=preset, batch_size=batch_size), results=[], stopped="cancelled")

    return probe


async def test_the_escape_of_a_burst_that_wrote_does_not_stop_the_running_probe(tmp_path, dialogs, writes):
    """Esc on the main screen stops a running probe; an Esc meant for the dialog must not, once
    the Enter before it has written the file and closed the dialog."""
    started = threading.Event()
    app = export_app(tmp_path, probe_fn=waiting_probe(started))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("ctrl+r")
        await until(pilot, started.is_set, "the probe started")
        await open_export(pilot)
        burst(app, "enter", "escape")
        await until(pilot, lambda: all(closed(d) for d in dialogs), "the dialog closed")
        assert writes == [tmp_path / "loaderdoc.toml"]
        assert app.session.probe_running and not app.session.cancel.is_set()
        await pilot.press("escape")  # pressed on the main screen: stops the probe
        await app.workers.wait_for_complete()
        assert app.session.probe_state == "cancelled"
        await pilot.press("ctrl+q")
    assert app.return_code == 0


# ---- an exception in the app -----------------------------------------------------------------------
def test_an_exception_in_the_app_exits_70_not_0(monkeypatch, capsys):
    """Textual catches an exception in a handler, prints it and returns from run() as if the app
    had ended normally: `loaderdoc` exited 0. It must say so and exit EXIT_INTERNAL (70)."""

    def broken(self):
        raise RuntimeError("a bug in the app")

    monkeypatch.setattr(LoaderDocApp, "action_toggle_theme", broken)
    app = make_app(facts=load_machine("ci-2core"))

    async def press(pilot) -> None:
        await until(pilot, lambda: app.main_screen.probe_pane is not None, "the views are built")
        await pilot.press("ctrl+t")
        if app.return_code is None:  # it did not crash: stop, and fail below rather than hang
            app.exit(0)

    assert run_to_exit_code(app, headless=True, size=(120, 40), auto_pilot=press) == EXIT_INTERNAL
    assert app.return_code == 1  # textual's own code: run() returned its return value, None
    err = capsys.readouterr().err
    assert "RuntimeError" in err and "a bug in the app" in err
    assert err.strip().splitlines()[-1] == APP_CRASHED


def test_an_app_that_ends_normally_exits_with_its_own_code():
    app = make_app(facts=load_machine("ci-2core"))

    async def quit_(pilot) -> None:
        await pilot.press("ctrl+q")

    assert run_to_exit_code(app, headless=True, size=(120, 40), auto_pilot=quit_) == 0


def test_textual_failing_outside_the_app_exits_70(capsys):
    class FailsToStart:  # as textual does when it cannot set up the terminal
        return_code = None

        def run(self, **options):
            raise OSError(25, "Inappropriate ioctl for device")

    assert run_to_exit_code(FailsToStart()) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert "OSError: [Errno 25] Inappropriate ioctl for device" in err
    assert err.strip().splitlines()[-1] == APP_CRASHED


# ---- no terminal: a job script, a pipe ----------------------------------------------------------------
# `loaderdoc` with no terminal opened the app anyway: it wrote ~40 KB of escape codes into the pipe
# (textual draws on stderr) and waited for ever for keys from /dev/null.
CHECK_OPTIONS = ["--machine", "docker-64m-shm", "--batch-size", "16", "--sample-shape", "3x1024x1024"]


def read_all(master: int) -> str:
    """What was written to a pseudo-terminal whose other end is closed."""
    data = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: nothing more
            break
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace").replace("\r\n", "\n")


def run_without_terminal(args: list[str], no_tty: str) -> tuple[int, str, str]:
    """``python -m loaderdoc ARGS`` with ``no_tty`` ('stdin', 'stdout' or 'stderr') not a terminal
    (stdin /dev/null, the others a pipe) and each other stream a pseudo-terminal of its own: exit
    code, stdout, stderr. A command still running after 60 s fails the test (it is killed)."""
    env, tag = fault_env()
    env["TERM"] = "xterm-256color"
    ptys = {name: pty.openpty() for name in ("stdin", "stdout", "stderr") if name != no_tty}
    streams = {name: slave for name, (_, slave) in ptys.items()}
    streams[no_tty] = subprocess.DEVNULL if no_tty == "stdin" else subprocess.PIPE
    try:
        proc = subprocess.Popen([sys.executable, "-m", "loaderdoc", *args], env=env, text=True, **streams)
        try:
            piped_out, piped_err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            pytest.fail(f"`loaderdoc` without a terminal on {no_tty} did not finish in 60 s (the app opened?)")
        for _, slave in ptys.values():
            os.close(slave)
        on_tty = {name: read_all(master) for name, (master, _) in ptys.items()}
    finally:
        for master, slave in ptys.values():
            for fd in (master, slave):
                with contextlib.suppress(OSError):
                    os.close(fd)
    assert_nothing_left(tag)
    out = piped_out if no_tty == "stdout" else on_tty["stdout"]
    err = piped_err if no_tty == "stderr" else on_tty["stderr"]
    return proc.returncode, out, err


@pytest.mark.parametrize("no_tty", ["stdin", "stdout", "stderr"])
def test_without_a_terminal_the_bare_command_runs_check_and_says_so(no_tty):
    env, _ = fault_env()
    check = subprocess.run([sys.executable, "-m", "loaderdoc", "check", *CHECK_OPTIONS], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    assert check.returncode == EXIT_CRITICAL, check.stderr  # the 64 MiB /dev/shm cannot hold these batches

    code, out, err = run_without_terminal(CHECK_OPTIONS, no_tty)
    assert code == check.returncode
    assert out == check.stdout
    assert err == NO_TERMINAL + "\n"
    assert "\x1b" not in out and "\x1b" not in err


def test_without_a_terminal_in_a_job_script(tmp_path):
    """stdin /dev/null, stdout and stderr pipes, as a batch job runs it: this machine's check."""
    env, tag = fault_env()
    args = ["--batch-size", "16", "--sample-shape", "3x224x224"]
    check = subprocess.run([sys.executable, "-m", "loaderdoc", "check", *args], env=env,
                           stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60)
    try:
        proc = subprocess.run([sys.executable, "-m", "loaderdoc", *args], env=env, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=60, cwd=tmp_path)
    except subprocess.TimeoutExpired as exc:
        pytest.fail(f"`loaderdoc` in a job script did not finish in 60 s; it wrote {len(exc.stderr or b'')} "
                    "bytes to stderr")
    assert_nothing_left(tag)
    assert proc.returncode == check.returncode
    assert proc.stderr == NO_TERMINAL + "\n"
    assert proc.stdout.startswith("loaderdoc check\n") and "status: " in proc.stdout
    assert "\x1b" not in proc.stdout and "\x1b" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_without_a_terminal_textual_is_not_imported():
    env, _ = fault_env()
    code = ("import sys\n"
            "from loaderdoc.cli import main\n"
            "rc = main(['--machine', 'ci-2core'])\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'textual', 'torch'}), file=sys.stderr)\n"
            "sys.exit(rc)\n")
    proc = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, capture_output=True,
                          text=True, timeout=60)
    assert proc.stderr.splitlines() == [NO_TERMINAL, "[]"]
    assert proc.returncode == 0
