"""What every command does when its standard output breaks: the convention of ``cat`` and ``head``.

- The reader went away (``loaderdoc probe | head -1``: EPIPE): stop quietly, exit 141 as a
  shell reports a program killed by SIGPIPE.
- Any other failed write (stdout closed with ``>&-``, on a full device, an I/O error): one line
  on stderr naming the problem, exit 3.
- A terminal or ``PYTHONIOENCODING`` that cannot encode a character (a non-ASCII path under
  ``ascii``): the character is written as a backslash escape, never a crash.
- A control character (an escape sequence in a command line, a path, a user's error message):
  written as a backslash escape (:mod:`loaderdoc.base.visible`), to a terminal, a pipe or a file alike.
  Every text command prints data through here; loaderdoc's own text has no control character
  but newline and tab. Only the probe's progress bar, which draws with them, writes to
  :func:`raw_stderr`.

``standard_streams_guarded()`` installs this around a command; the CLI maps the errors to codes.

A command that leaves a thread blocked in native code (torch's store, which ignores its own timeout
facing a service that is not a store) calls :func:`end_without_finalizing`: the CLI then flushes
the standard streams and ends the process at once. A daemon thread that returns from C++ while
Python finalizes is stopped by ``pthread_exit``, whose unwinding aborts the process (SIGABRT,
"terminate called without an active exception") in place of the command's exit code.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from loaderdoc.base.errors import UserError
from loaderdoc.base.visible import visible


class OutputError(UserError):
    """Standard output cannot be written (closed, full, failing); nothing more can be shown."""


class _StreamProxy:
    """A standard stream stand-in; ``stream`` is None when the command started with it closed."""

    name = "stream"

    def __init__(self, stream) -> None:
        self._stream = stream

    @property
    def wrapped(self):
        return self._stream

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def write(self, text: str) -> int:  # pragma: no cover - overridden
        raise NotImplementedError

    def __getattr__(self, name: str):
        if self._stream is None:
            raise AttributeError(f"{self.name} is closed ({name})")
        return getattr(self._stream, name)


class GuardedStdout(_StreamProxy):
    """Standard output whose write failures become :class:`OutputError` (or BrokenPipeError):
    closed at start, the first write fails with a clear message, not an AttributeError deep in a command."""

    name = "standard output"

    def write(self, text: str) -> int:
        self._call("write", visible(text))
        return len(text)

    def flush(self) -> None:
        if self._stream is not None:
            self._call("flush")

    def _call(self, method: str, *args):
        if self._stream is None:
            raise OutputError("standard output is closed; run it with output to a terminal, a file or a pipe")
        try:
            return getattr(self._stream, method)(*args)
        except BrokenPipeError:
            raise
        except OSError as exc:
            raise OutputError(f"cannot write to standard output: {exc.strerror or exc}") from None


class QuietStderr(_StreamProxy):
    """Standard error that never raises: when even stderr fails, the exit code is all that is left."""

    name = "standard error"

    def write(self, text: str) -> int:
        with contextlib.suppress(OSError, ValueError):
            if self._stream is not None:
                self._stream.write(visible(text))
        return len(text)

    def flush(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            if self._stream is not None:
                self._stream.flush()


@contextlib.contextmanager
def standard_streams_guarded():
    """Install the policy on ``sys.stdout`` / ``sys.stderr`` for one command, then restore them."""
    saved = sys.stdout, sys.stderr
    guard_standard_streams()
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def guard_standard_streams() -> None:
    """Install the policy on ``sys.stdout`` / ``sys.stderr`` (idempotent)."""
    _occupy_closed_descriptors()
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(OSError, ValueError):
                reconfigure(errors="backslashreplace")
    if not isinstance(sys.stdout, GuardedStdout):
        sys.stdout = GuardedStdout(sys.stdout)
    if not isinstance(sys.stderr, QuietStderr):
        sys.stderr = QuietStderr(sys.stderr)


def raw_stderr():
    """Standard error without the escaping, for a drawing that moves the cursor (rich's progress
    bar); what it shows from data must be made :func:`~loaderdoc.base.visible.visible` first."""
    return sys.stderr.wrapped if isinstance(sys.stderr, QuietStderr) else sys.stderr


class _UserOutputRouter:
    """Standard output once the user's code runs (:func:`route_user_output_to_stderr`): loaderdoc's
    own writes (this process, its main thread, outside the user's code) go to the real standard
    output, through ``ours``; the rest (the factory, a thread it started, a forked measuring process
    or worker) to ``theirs``, the old stream, whose fd 1 now leads to standard error."""

    def __init__(self, ours, theirs, user_code_running) -> None:
        self.ours = ours
        self.theirs = theirs
        self.user_code_running = user_code_running  # () -> bool: the main thread runs the user's code
        self.pid = os.getpid()

    def _target(self):
        if (os.getpid() == self.pid and threading.current_thread() is threading.main_thread()
                and not self.user_code_running()):
            return self.ours
        return self.theirs

    def write(self, text: str) -> int:
        target = self._target()
        written = target.write(text)
        if target is self.theirs:
            # it now reaches standard error, which is not buffered: a worker the probe stops at its
            # budget's end (killed, never flushing) would otherwise lose what it printed
            with contextlib.suppress(OSError, ValueError):
                target.flush()
        return written

    def flush(self) -> None:
        target = self._target()
        if target is self.ours:  # theirs too, so that lines keep their order on a shared terminal
            with contextlib.suppress(OSError, ValueError):
                self.theirs.flush()
        target.flush()

    def isatty(self) -> bool:
        return self.ours.isatty()

    def fileno(self) -> int:
        return self._target().fileno()

    def __getattr__(self, name: str):
        return getattr(self.ours, name)


def route_user_output_to_stderr(user_code_running) -> None:
    """From now to the end of the command, fd 1 leads to standard error, and only loaderdoc's own
    writes to ``sys.stdout`` reach the real standard output (idempotent): those of this process's
    main thread while ``user_code_running()`` is false. Nothing is lost: what
    was buffered is flushed first."""
    guarded = sys.stdout if isinstance(sys.stdout, GuardedStdout) else None
    current = guarded.wrapped if guarded is not None else sys.stdout
    if isinstance(current, _UserOutputRouter) or current is None:
        return
    with contextlib.suppress(OSError, ValueError):
        current.flush()
    try:
        real = os.dup(1)  # not inherited by what the user's code starts (os.dup is close-on-exec)
    except OSError:
        return  # no stdout to protect (closed): nothing of ours can reach it anyway
    ours = os.fdopen(real, "w", encoding=getattr(current, "encoding", None) or "utf-8", errors="backslashreplace")
    ours.reconfigure(line_buffering=bool(getattr(current, "line_buffering", False)))
    try:
        os.dup2(2, 1)
    except OSError:
        ours.close()
        return
    router = _UserOutputRouter(ours, current, user_code_running)
    sys.stdout = GuardedStdout(router) if guarded is not None else router


def _our_stdout_fd() -> int:
    """The descriptor loaderdoc's own output goes to: 1, or the router's copy of the real standard
    output once the user's output goes to stderr."""
    stream = sys.stdout.wrapped if isinstance(sys.stdout, GuardedStdout) else sys.stdout
    if isinstance(stream, _UserOutputRouter):
        with contextlib.suppress(OSError, ValueError):
            return stream.ours.fileno()
    return 1


def stdout_columns(fallback: int = 80) -> int:
    """``$COLUMNS``, else the width of the terminal standard output is (the real one, also once the
    user's output goes to stderr), else ``fallback`` (a pipe, a file)."""
    with contextlib.suppress(ValueError):
        if int(os.environ.get("COLUMNS", "0")) > 0:
            return int(os.environ["COLUMNS"])
    fd = _our_stdout_fd()
    try:
        return os.get_terminal_size(fd).columns or fallback
    except (OSError, ValueError):
        return fallback


def finish_output() -> None:
    """Flush standard output now, inside the command, so a failure gets the policy's exit code."""
    sys.stdout.flush()


_end_without_finalizing = False


def end_without_finalizing() -> None:
    """Ask the CLI to end the process without Python's finalization (see the module's docstring)."""
    global _end_without_finalizing
    _end_without_finalizing = True


def exit_now_if_asked(code: int) -> None:
    """``os._exit(code)`` after flushing the standard streams, where a command asked for it."""
    if not _end_without_finalizing:
        return
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):  # a broken stdout already has its exit code
            stream.flush()
    # the real one: while the user's code runs, usercode puts a guard in os._exit's place
    getattr(os._exit, "_loaderdoc_real", os._exit)(code)


def discard_stdout() -> None:
    """After EPIPE: point standard output (fd 1, or the router's own descriptor) at /dev/null so the
    interpreter's final flush cannot fail again."""
    fd = _our_stdout_fd()
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    except OSError:
        pass


def _occupy_closed_descriptors() -> None:
    """A closed fd 0/1/2 would be reused by the next file opened (an export, a worker's pipe),
    and output meant for the terminal would land in it: park /dev/null there instead."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            try:
                opened = os.open(os.devnull, os.O_RDWR)
            except OSError:
                return
            if opened != fd:
                os.dup2(opened, fd)
                os.close(opened)
