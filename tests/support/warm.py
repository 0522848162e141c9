"""A warm interpreter for the loaderdoc commands a test starts that import torch.

``import torch`` costs about 1 CPU-s a process (1.0-1.4 measured here); the fault tests start some
fifty commands that import it (a probe, a ``--dataset``), a sixth of what the suite spends on 2
cores. Each pytest worker keeps one process that has imported
torch as the ``loaderdoc`` program does (the collector paused meanwhile, the result frozen: see
``loaderdoc.base.torchload``) and nothing of loaderdoc; a command is a fork of it that then runs as
``python -m loaderdoc ARGS`` runs after its first ``import torch``: its own process with its own
pid, standard streams (pipes), environment, working directory, ``sys.path`` and argv, the signal
dispositions a Python process starts with, ``runpy``'s ``-m`` entry, and the interpreter's own exit
(atexit, flushed streams, the exit code, or death by a signal).

What only a fresh interpreter shows stays with real processes (the tests that start
``python -m loaderdoc`` themselves, a command given a prefix, one :func:`server_for` turns away, and
every command under ``LOADERDOC_TESTS_FRESH=1``): the import of torch and of loaderdoc before it, the
time to first output, ``--help`` without torch.

A fork carries the warm process's own environment in ``/proc/PID/environ`` (what the tests' leak
check reads) and the command's in ``os.environ`` (what it passes on to a program it executes): the
warm process has a tag of its own (``Warm.tag``), and ``faults_support`` looks for both after a command.
One fork-waiter per command (itself a fork of the warm process) forks the command, sends its pid and
then its exit code, so commands of one test may run at once.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

FRESH_VAR = "LOADERDOC_TESTS_FRESH"  # set (to anything but empty) to start every command as a fresh interpreter
# what a command's environment may change and still meet the warm interpreter's torch as it would
# its own: what loaderdoc reads as it runs (and the tag), not what Python or torch read as they start
_RUNTIME_ONLY = {"NO_COLOR", "COLUMNS", "LINES", "PYTEST_CURRENT_TEST"}
# The CPU seconds of this worker's commands run warm, with what they started and waited for: not
# children of the worker, so not in its RUSAGE_CHILDREN (benchmarks/suite_cpu.py adds them)
CPU_S = [0.0]

_SERVER = r'''
import gc, json, os, selectors, signal, socket, struct, sys

gc.disable()
import torch  # noqa: F401  (as loaderdoc.base.torchload imports it for the program)
gc.enable()
gc.freeze()

def serve(path, lifeline):
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(16)
    server = os.fork()
    if server:  # the test's child ends here: a child it left running would be counted as left behind
        print(server, flush=True)
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.close(devnull)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # the fork-waiters are reaped by the kernel
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(lifeline, selectors.EVENT_READ)
    while True:
        for key, _ in selector.select():
            if key.fileobj == lifeline:  # the pytest worker is gone
                os._exit(0)
            conn, _ = listener.accept()
            if os.fork() == 0:  # a fork-waiter for this command
                selector.close()
                listener.close()
                os.close(lifeline)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                return wait_for_command(conn)
            conn.close()

def recv_exact(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            os._exit(0)  # the test went away
        data += chunk
    return data

def wait_for_command(conn):
    header, fds, _, _ = socket.recv_fds(conn, 4, 3)
    request = json.loads(recv_exact(conn, struct.unpack("!I", header)[0]))
    pid = os.fork()
    if pid == 0:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        for fd in fds:
            os.close(fd)
        conn.close()
        return request
    for fd in fds:
        os.close(fd)
    conn.sendall(struct.pack("!i", pid))
    _, status, usage = os.wait4(pid, 0)  # its CPU with that of what it started and waited for
    conn.sendall(struct.pack("!id", os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime))
    os._exit(0)

request = serve(sys.argv[1], int(sys.argv[2]))
# from here on this process is the command: as `python -m loaderdoc ARGS` started in request["cwd"]
os.chdir(request["cwd"])
os.environ.clear()
os.environ.update(request["env"])
# sys.path: this process started without PYTHONPATH; its '' becomes the working directory and the command's
sys.path[:1] = [os.getcwd(), *(p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p)]
sys.argv = ["-m", *request["args"]]
del request, serve, recv_exact, wait_for_command
import runpy
runpy._run_module_as_main("loaderdoc")  # what -m runs
'''


class Warm:
    """This pytest worker's warm interpreter: not its child (tests count their children), and gone
    when the worker is (it waits on a pipe only the worker holds open)."""

    def __init__(self) -> None:
        from faults_support import TAG_VAR

        self.folder = tempfile.mkdtemp(prefix="ld-warm-")
        self.path = os.path.join(self.folder, "sock")
        self.tag = uuid.uuid4().hex
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # each command brings its own
        self.env = dict(env)
        self.runtime_only = _RUNTIME_ONLY | {TAG_VAR}
        env[TAG_VAR] = self.tag
        lifeline, self._lifeline = os.pipe()
        try:
            starter = subprocess.run([sys.executable, "-c", _SERVER, self.path, str(lifeline)], env=env,
                                     cwd=self.folder, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     pass_fds=[lifeline], timeout=120)
        finally:
            os.close(lifeline)
        if starter.returncode != 0 or not starter.stdout.strip().isdigit():
            raise RuntimeError(f"the warm interpreter did not start (exit {starter.returncode})")
        self.pid = int(starter.stdout)  # the starter's fork, which listens
        atexit.register(self.close)

    def fits(self, env: dict, cwd) -> bool:
        """Whether a command of ``env`` and ``cwd`` imports the torch this interpreter imported, as it
        did: no ``torch`` of its own first on its path, nothing changed that Python or torch read as
        they start (what the command sets before it imports torch, this one could not)."""
        changed = {k for k in set(env) | set(self.env) if env.get(k) != self.env.get(k)} - {"PYTHONPATH"}
        if any(k not in self.runtime_only and not k.startswith("LOADERDOC_") for k in changed):
            return False
        first = [os.fspath(cwd or os.getcwd()), *env.get("PYTHONPATH", "").split(os.pathsep)]
        return not any(p and (os.path.exists(os.path.join(p, "torch")) or os.path.exists(os.path.join(p, "torch.py")))
                       for p in first)

    def alive(self) -> bool:
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def close(self) -> None:
        if self._lifeline is not None:
            os.close(self._lifeline)  # the warm interpreter ends
            self._lifeline = None
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        with contextlib.suppress(OSError):
            os.rmdir(self.folder)

    def run(self, args: list[str], *, env: dict, cwd, timeout: float, on_timeout) -> subprocess.CompletedProcess:
        """``python -m loaderdoc ARGS`` as ``subprocess.run(capture_output=True, text=True)`` runs it,
        forked from here. Past ``timeout`` the command is killed, ``on_timeout()`` called and
        ``subprocess.TimeoutExpired`` raised."""
        cmd = [sys.executable, "-m", "loaderdoc", *args]
        request = json.dumps({"args": args, "env": env, "cwd": os.fspath(cwd or os.getcwd())}).encode()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self.path)
            socket.send_fds(conn, [struct.pack("!I", len(request))], [0, out_w, err_w])
            conn.sendall(request)
        finally:
            os.close(out_w)
            os.close(err_w)
        deadline = time.monotonic() + timeout
        chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
        answer = b""  # the command's pid, then its exit code and CPU seconds
        try:
            with selectors.DefaultSelector() as selector:
                for fileobj in (out_r, err_r, conn):
                    selector.register(fileobj, selectors.EVENT_READ)
                while selector.get_map():
                    left = deadline - time.monotonic()
                    if left <= 0:
                        if len(answer) >= 4:
                            os.kill(struct.unpack("!i", answer[:4])[0], signal.SIGKILL)
                        on_timeout()
                        raise subprocess.TimeoutExpired(cmd, timeout, b"".join(chunks[out_r]),
                                                        b"".join(chunks[err_r]))
                    for key, _ in selector.select(left):
                        data = conn.recv(16) if key.fileobj is conn else os.read(key.fd, 65536)
                        if not data:
                            selector.unregister(key.fileobj)
                        elif key.fileobj is conn:
                            answer += data
                        else:
                            chunks[key.fd].append(data)
        finally:
            os.close(out_r)
            os.close(err_r)
            conn.close()
        if len(answer) != 16:
            raise RuntimeError("the warm interpreter's fork-waiter ended without the command's exit code")
        code, cpu = struct.unpack("!id", answer[4:])
        CPU_S[0] += cpu
        return subprocess.CompletedProcess(cmd, code, _text(b"".join(chunks[out_r])),
                                           _text(b"".join(chunks[err_r])))


def _text(data: bytes) -> str:
    """As ``subprocess`` decodes captured output with ``text=True``."""
    import locale

    return data.decode(locale.getpreferredencoding(False)).replace("\r\n", "\n").replace("\r", "\n")


_warm: list[Warm] = []


def available() -> bool:
    """Whether commands run warm here: fork and fd passing (Linux, macOS), and not asked otherwise."""
    return not os.environ.get(FRESH_VAR) and hasattr(socket, "send_fds") and hasattr(os, "fork")


def warm() -> Warm | None:
    """This worker's warm interpreter; None where every command starts fresh."""
    if not available():
        return None
    if not _warm or not _warm[0].alive():
        _warm[:] = [Warm()]
    return _warm[0]


def warm_pids() -> set[int]:
    return {w.pid for w in _warm}


def imports_torch(args) -> bool:
    """Whether ``loaderdoc ARGS`` gets as far as importing torch (a probe, a user's dataset): the
    commands a warm interpreter saves a second of CPU. Not ``check --distributed``: it sets
    TORCH_CPP_LOG_LEVEL before its import of torch, which the C++ logger reads as torch loads."""
    return bool(args) and (args[0] == "probe" or "--dataset" in args) and "--distributed" not in args


def server_for(args, env: dict, cwd) -> Warm | None:
    """The warm interpreter to run ``loaderdoc ARGS`` (in ``env`` and ``cwd``) from; None where the
    command starts fresh: it does not import torch, its environment does not fit, or none runs warm."""
    if not imports_torch(args):
        return None
    server = warm()
    return server if server is not None and server.fits(env, cwd) else None


def run_loaderdoc(args: list[str], *, env: dict, cwd=None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m loaderdoc ARGS`` to completion with its output captured as text: warm where
    :func:`server_for` allows, else a fresh process (``subprocess.run``)."""
    server = server_for(args, env, cwd)
    if server is None:
        return subprocess.run([sys.executable, "-m", "loaderdoc", *args], capture_output=True, text=True, env=env,
                              cwd=cwd, timeout=timeout)
    return server.run(list(args), env=env, cwd=cwd, timeout=timeout, on_timeout=lambda: None)
