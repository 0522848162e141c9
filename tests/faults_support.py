"""Helpers for tests/test_faults_*.py: run loaderdoc as a user does and find what it left behind.

Every command runs with a unique ``LOADERDOC_FAULT_TAG`` in its environment. Child processes
inherit it, so after the command is gone any process still carrying the tag was left behind,
even one reparented to init.
"""

from __future__ import annotations

import contextlib
import io
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil

TESTS = Path(__file__).parent
DATASETS = str(TESTS / "probe_datasets")
TAG_VAR = "LOADERDOC_FAULT_TAG"


def fault_env(extra: dict[str, str] | None = None, pythonpath: list[str] | None = None) -> tuple[dict, str]:
    tag = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    paths = (pythonpath or []) + [DATASETS] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    env.update({"PYTHONPATH": os.pathsep.join(paths), TAG_VAR: tag, "NO_COLOR": "1"})
    env.update(extra or {})
    return env, tag


def tagged(tag: str) -> list[psutil.Process]:
    """Live (non-zombie) processes whose environment carries ``tag`` (this process and the warm
    interpreter, which carry theirs all along, aside)."""
    from support.warm import warm_pids

    aside = {os.getpid(), *warm_pids()}
    found = []
    for proc in psutil.process_iter():
        try:
            if proc.pid in aside or proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(TAG_VAR) == tag:
                found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def assert_nothing_left(tag: str, timeout: float = 3.0) -> None:
    deadline = time.monotonic() + timeout
    left = tagged(tag)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = tagged(tag)
    described = []
    for p in left:
        try:
            described.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            described.append(str(p.pid))
    _kill(left)  # do not leak them into the rest of the suite
    assert not left, f"processes left behind: {described}"


def _kill(processes: list[psutil.Process]) -> None:
    for p in processes:
        with contextlib.suppress(psutil.Error):
            p.kill()


def run_tagged(cmd: list[str], tag: str, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, **kwargs)`` (its env carrying ``tag``); asserts that nothing it
    started survives it. Past its timeout, subprocess.run kills the command alone: what it started
    is killed here too, or it would outlive the test and load the machine under the rest of the suite."""
    try:
        proc = subprocess.run(cmd, **kwargs)
    except subprocess.TimeoutExpired:
        _kill(tagged(tag))
        raise
    assert_nothing_left(tag)
    return proc


def loaderdoc(*args: str, env: dict | None = None, cwd=None, timeout: float = 120,
              prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """``python -m loaderdoc ARGS`` to completion; asserts that no process it started survives.
    A command that imports torch runs as a fork of this worker's warm interpreter
    (``support.warm``), unless given a ``prefix`` to run under."""
    from support.warm import server_for

    if env is None:
        env, tag = fault_env()
    else:
        tag = env[TAG_VAR]
    server = server_for(args, env, cwd) if prefix is None else None
    if server is None:
        cmd = (prefix or []) + [sys.executable, "-m", "loaderdoc", *args]
        return run_tagged(cmd, tag, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    # what the command forked carries the warm interpreter's tag, what it executed the command's
    proc = server.run(list(args), env=env, cwd=cwd, timeout=timeout,
                      on_timeout=lambda: _kill(tagged(tag) + tagged(server.tag)))
    assert_nothing_left(tag)
    assert_nothing_left(server.tag)
    return proc


def loaderdoc_here(*args: str) -> subprocess.CompletedProcess:
    """``loaderdoc ARGS`` run by the CLI's own ``main`` in this process: its exit code, standard
    output and standard error, as ``loaderdoc()`` gives them, for commands that only read files and
    print or refuse them (they start no process and run no user code). A command started as a
    process costs about 0.1 CPU-s to start Python and loaderdoc again; the tests of the readers'
    limits run some hundred of them. What only a process shows (a signal, a closed stream, what it
    leaves behind, its environment) stays with ``loaderdoc()``.

    As ``loaderdoc()`` runs it: output to a pipe (80 columns), no colour; the signal handlers the
    command installs are put back after."""
    from loaderdoc.base.errors import STOP_SIGNALS
    from loaderdoc.cli import main

    handlers = {signum: signal.getsignal(signum)
                for signum in (getattr(signal, name, None) for name in STOP_SIGNALS) if signum is not None}
    environ = dict(os.environ)
    out, err = io.StringIO(), io.StringIO()
    try:
        os.environ.pop("LINES", None)
        os.environ.update(COLUMNS="80", NO_COLOR="1")
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exit_:  # argparse's own exit (bad usage, --help), as the process's
                code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    finally:
        os.environ.clear()
        os.environ.update(environ)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
    return subprocess.CompletedProcess(["loaderdoc", *args], code, out.getvalue(), err.getvalue())


def one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """The command failed with ``code`` and exactly one line on stderr containing the needles."""
    assert proc.returncode == code, f"exit {proc.returncode}\nstderr: {proc.stderr}\nstdout: {proc.stdout[-2000:]}"
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def namespaces_usable() -> str | None:
    """None if `unshare --mount` can mount a tmpfs here, else the reason it can't."""
    if os.geteuid() != 0:
        return "needs root (CAP_SYS_ADMIN) for unshare --mount and mount"
    try:
        proc = subprocess.run(
            ["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm && df /dev/shm"],
            capture_output=True, text=True, timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare not available: {exc}"
    if proc.returncode != 0:
        return f"unshare --mount / mount not permitted here: {proc.stderr.strip()[:200]}"
    return None


def in_small_shm(size: str = "16m") -> list[str]:
    """A command prefix that runs the rest in a mount namespace with a ``size`` /dev/shm."""
    return ["unshare", "--mount", "sh", "-c", f'mount -t tmpfs -o size={size} tmpfs /dev/shm && exec "$@"', "sh"]


class TmuxTerminal:
    """``python -m loaderdoc ARGS`` in a real terminal (a private tmux server) of ``size``; its exit
    code lands in ``exit_file``. Close it with :meth:`close` (kills the server)."""

    def __init__(self, args: list[str], env: dict, exit_file: Path, size: tuple[int, int] = (120, 40)) -> None:
        import shlex
        import shutil

        self.tmux_path = shutil.which("tmux")
        self.socket = f"loaderdoc-test-{uuid.uuid4().hex[:8]}"
        command = " ".join(
            ["env", f"{TAG_VAR}={env[TAG_VAR]}", f"PYTHONPATH={shlex.quote(env['PYTHONPATH'])}", "TERM=xterm-256color",
             shlex.quote(sys.executable), "-m", "loaderdoc", *map(shlex.quote, args)]
        ) + f"; echo $? > {shlex.quote(str(exit_file))}; sleep 60"
        self.tmux("new-session", "-d", "-x", str(size[0]), "-y", str(size[1]), command)

    def tmux(self, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([self.tmux_path, "-L", self.socket, *args], capture_output=True, text=True, timeout=10)

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p").stdout

    def close(self) -> None:
        self.tmux("kill-server")
