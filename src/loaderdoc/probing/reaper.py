"""Every process a dataset starts is stopped with the probe, in whatever session it went to.

A dataset (its ``__getitem__`` in a worker, or the ``--dataset`` factory) may start processes that
leave the probe's process group: ``subprocess.Popen(..., start_new_session=True)``, ``os.setsid()``
in a forked child, a daemon's double fork. Killing the process group misses them, and one whose
parent has exited is reparented to init, out of reach of any walk down the process tree.

Linux's *child subreaper* attribute (``prctl(PR_SET_CHILD_SUBREAPER)``) closes that gap: an orphan
below a subreaper is reparented to it instead of init. So while a subreaper lives, everything
started below it stays among its descendants, whatever session or group it moved to, and a walk
down the tree (psutil) finds it. That is more robust than recording pids as they appear (a
process can fork and exit between two looks) and needs no cooperation from the dataset.

* Each **measuring process** (``isolate.py``) is a subreaper and never exits on its own: the probe
  stops it (SIGSTOP), so it keeps adopting orphans but forks nothing more, kills every live
  descendant until none is left, then kills it (:func:`kill_tree`).
* The **CLI** is a subreaper while it may run a user's factory or probe (:func:`contained`): what
  the factory starts, and anything orphaned by a measuring process that died of a signal, is
  killed when the command ends, normally, on an error or on Ctrl+C / SIGTERM.

The library API (``loaderdoc.probe()``) does not touch the caller's process: there the measuring
processes' own containment applies. Elsewhere than Linux the attribute does not exist; the tree
walk still finds every descendant whose parent is alive.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


def _prctl(option: int, arg: int) -> int | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        zero = ctypes.c_ulong(0)
        return int(libc.prctl(ctypes.c_int(option), ctypes.c_ulong(arg), zero, zero, zero))
    except (OSError, AttributeError):
        return None


def set_subreaper(on: bool) -> bool | None:
    """Make this process a child subreaper (or stop being one); its previous setting, None where
    there is no such thing."""
    was = ctypes.c_int(0)
    if _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(was)) != 0:
        return None
    if _prctl(PR_SET_CHILD_SUBREAPER, int(on)) != 0:
        return None
    return bool(was.value)


def _alive(proc: Any) -> bool:
    """Running and not a zombie (a zombie holds nothing; whoever adopted it reaps it)."""
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _live_descendants(root: int, spare: set[int]) -> list[Any]:
    import psutil

    try:
        below = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    return [p for p in below if p.pid not in spare and _alive(p)]


def kill_descendants(root: int, *, spare: set[int] | None = None, wait_s: float = 3.0) -> set[int]:
    """SIGKILL every live descendant of ``root`` (but ``spare``) until a look finds none; the pids
    killed. A process forked meanwhile by one being killed is below ``root`` too (in its parent's
    place, or adopted by ``root`` when that is a subreaper), so the next look finds it."""
    import psutil

    spare = spare or set()
    killed: set[int] = set()
    deadline = time.monotonic() + wait_s
    while True:
        below = _live_descendants(root, spare)
        if not below or time.monotonic() > deadline:
            return killed
        for proc in below:
            with contextlib.suppress(psutil.Error):
                proc.kill()
                killed.add(proc.pid)
        # a killed process takes a moment to exit: wait for these before looking again
        while below and time.monotonic() < deadline:
            below = [p for p in below if _alive(p)]
            if below:
                time.sleep(0.01)


def reap(pids: set[int]) -> None:
    """Collect the exit status of those of ``pids`` that are dead children of this process (as a
    subreaper it adopts the killed ones); never waits, never touches another child."""
    for pid in pids:
        with contextlib.suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def kill_tree(pid: int, *, wait_s: float = 3.0) -> int | None:
    """Kill a measuring process (a subreaper, the leader of its process group) and everything below
    it; its wait status, None when unknown. No DataLoader worker, nor anything the dataset started
    in another session, is left running."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGSTOP)  # it forks no more, and still adopts the orphans of those killed
    killed = kill_descendants(pid, wait_s=wait_s)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)  # the group's members it no longer parents, if it died first
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
    try:
        _, status = os.waitpid(pid, 0)
    except ChildProcessError:
        status = None
    reap(killed)  # the killed reparent to this process if it is a subreaper, else to init
    return status


@contextlib.contextmanager
def interrupts_deferred() -> Iterator[None]:
    """Ctrl+C or SIGTERM arriving inside is raised (KeyboardInterrupt) when it ends, not in the
    middle of a cleanup that must finish. Main thread only: elsewhere Python runs no handler."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    # a signal the process was started ignoring (a background job's SIGINT) stays ignored: catching
    # it here would honour a Ctrl+C only when it happened to arrive during a cleanup
    from loaderdoc.base.errors import STOP_SIGNALS

    stops = [signal.SIGINT, *(getattr(signal, name) for name in STOP_SIGNALS if hasattr(signal, name))]
    saved = {sig: handler for sig in stops if (handler := signal.getsignal(sig)) is not signal.SIG_IGN}
    for sig in saved:
        signal.signal(sig, lambda signum, frame: arrived.append(signum))
    try:
        yield
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
    if arrived:
        raise KeyboardInterrupt


@contextlib.contextmanager
def contained() -> Iterator[None]:
    """Inside, this process is a child subreaper; on the way out (normally, on an exception, on
    Ctrl+C) every process started below it meanwhile is killed, whatever its session."""
    import psutil

    me = os.getpid()
    before = {p.pid for p in psutil.Process(me).children(recursive=True)}
    was = set_subreaper(True)
    try:
        yield
    finally:
        with interrupts_deferred():
            reap(kill_descendants(me, spare=before))
            if was is False:
                set_subreaper(False)
