"""The watch launcher between a supervisor and the watched command: every signal that would end the
command if it ran bare reaches it, once, and the launcher outlives it to write the report.

SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR2 and SIGALRM (an IDE's stop button, ``timeout -s INT``, a
closed SSH session, a scheduler) are blocked in the launcher from before the command starts until
the report is out, and taken with ``sigwaitinfo``, which says who sent them:

- from the terminal (Ctrl+C, Ctrl+\\, a hangup; ``SI_KERNEL``): the kernel sent it to the whole
  foreground process group, the command included; forwarding it would deliver it twice (a second
  Ctrl+C cuts a graceful shutdown short), so it is not forwarded;
- from a process (``kill``, ``timeout``, a supervisor): forwarded to the command.

A signal the launcher was started ignoring (``nohup``'s SIGHUP, a background job's SIGINT) is left
alone: the command inherits the same disposition, as it would bare. SIGUSR1 is not forwarded: it
asks the launcher for the findings so far (``watching.launcher.on_sigusr1``). The command runs with
the mask the launcher had before (restored between fork and exec). A signal for the command that
arrives once it has ended has nothing left to reach and is dropped. Linux (``sigwaitinfo``); where it
is missing the signals are forwarded by handlers, SIGINT excepted.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import threading
from collections.abc import Iterator

SI_KERNEL = 0x80  # siginfo's si_code for a signal the kernel sent (a terminal's): Linux's value
NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR2", "SIGALRM")


def forwarded() -> set[int]:
    """The signals forwarded here: those of :data:`NAMES` this platform has and this process does not ignore."""
    sigs = {getattr(signal, name) for name in NAMES if hasattr(signal, name)}
    return {s for s in sigs if signal.getsignal(s) is not signal.SIG_IGN}


class Forwarder:
    """Within :func:`held`: start the command with :meth:`start`, then :meth:`wait` for its end."""

    def __init__(self, sigs: set[int], old_mask: set[int] | None) -> None:
        self.sigs = sigs
        self.old_mask = old_mask  # None: no sigwaitinfo here, handlers forward
        self.proc: subprocess.Popen | None = None
        self.pending: list[int] = []  # handlers only: arrived before the command started

    def start(self, command: list[str], env: dict[str, str]) -> subprocess.Popen:
        old = self.old_mask
        restore = None if old is None else (lambda: signal.pthread_sigmask(signal.SIG_SETMASK, old))
        self.proc = subprocess.Popen(command, env=env, preexec_fn=restore)  # the launcher has no other thread to upset
        for signum in self.pending:
            self.proc.send_signal(signum)
        return self.proc

    def wait(self) -> int:
        """The command's wait status (Popen.returncode), forwarding signals until it ends."""
        proc = self.proc
        if self.old_mask is None:
            return proc.wait()
        waited = self.sigs | {signal.SIGCHLD}
        while proc.poll() is None:
            info = signal.sigwaitinfo(waited)
            if info.si_signo != signal.SIGCHLD and info.si_code != SI_KERNEL:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(info.si_signo)
        return proc.returncode

    def _by_handler(self, signum, frame) -> None:
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signum)
        else:
            self.pending.append(signum)


@contextlib.contextmanager
def held() -> Iterator[Forwarder]:
    """Hold the forwarded signals (and SIGCHLD) for the command's whole run and the report after it."""
    sigs = forwarded()
    if threading.current_thread() is not threading.main_thread():  # only the main thread can take signals
        yield Forwarder(set(), None)
        return
    if not hasattr(signal, "sigwaitinfo"):
        forwarder = Forwarder(sigs - {signal.SIGINT}, None)
        saved = {s: signal.signal(s, forwarder._by_handler) for s in forwarder.sigs}
        saved[signal.SIGINT] = signal.signal(signal.SIGINT, lambda signum, frame: None)
        try:
            yield forwarder
        finally:
            for s, handler in saved.items():
                signal.signal(s, handler)
        return
    blocked = sigs | {signal.SIGCHLD}
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
    try:
        yield Forwarder(sigs, set(old_mask))
    finally:
        while signal.sigtimedwait(blocked, 0) is not None:  # for a command that has ended: dropped
            pass
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)
