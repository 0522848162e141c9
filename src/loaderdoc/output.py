"""What every command does when its standard output breaks: the convention of ``cat`` and ``head``.

- The reader went away (``loaderdoc probe | head -1``: EPIPE): stop quietly, exit 141 as a
  shell reports a program killed by SIGPIPE.
- Any other failed write (stdout closed with ``>&-``, on a full device, an I/O error): one line
  on stderr naming the problem, exit 3.
- A terminal or ``PYTHONIOENCODING`` that cannot encode a character (a non-ASCII path under
  ``ascii``): the character is written as a backslash escape, never a crash.

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

from loaderdoc.errors import UserError


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
        return self._call("write", text)

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
                return self._stream.write(text)
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
    os._exit(code)


def discard_stdout() -> None:
    """After EPIPE: point fd 1 at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
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
