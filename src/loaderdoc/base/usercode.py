"""The user's code (a ``--dataset`` factory, its Dataset) runs inside loaderdoc's process and its
measuring processes; it must not own loaderdoc's output, its exit or its end.

Inside :func:`running_user_code`:

- **output**: whatever it writes to standard output goes to standard error. At the descriptor level
  (``print``, ``sys.stdout``, ``os.write(1, ...)``, C code, the DataLoader workers and any process
  it starts all write fd 1), fd 1 becomes a copy of fd 2, and loaderdoc's own output goes to the
  real standard output through a private descriptor (:mod:`loaderdoc.base.output`'s router). So
  ``probe --json`` and ``--export -`` stay valid whatever the dataset prints; kept to the end of
  the command (a thread the factory left may print at any time).
- **exit**: ``os._exit()`` called in loaderdoc's own process (not in a measuring process or a
  worker, whose exit the probe observes) raises :class:`UserCodeExit` in the main thread, which
  becomes one line and exit 3; called from another thread, it says so and ends loaderdoc with
  exit 3 at once. (``sys.exit()`` is SystemExit, which the callers already turn into one line.)

:func:`leave_past_user_threads`: once the command is done, a non-daemon thread the user's code
left running would keep the process alive for ever (Python joins every such thread at exit); the
command's exit code is then taken at once (no exit handler runs: one may join them), with one
line naming the threads. With only daemon threads left, the exit is taken at once too, without a
word: Python would not wait for them, but one still running while the interpreter finalizes can
crash it.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Iterator

from loaderdoc.base import output
from loaderdoc.base.errors import EXIT_USAGE

_state = {"ran": False, "depth": 0, "owner": None, "before": frozenset()}


class UserCodeExit(BaseException):
    """The user's code called ``os._exit(code)`` in loaderdoc's own process (a BaseException, as
    SystemExit is: a dataset's ``except Exception`` must not swallow it)."""

    def __init__(self, code) -> None:
        super().__init__(code)
        self.code = code

    def __str__(self) -> str:
        return f"called os._exit({self.code!r})"


@contextlib.contextmanager
def running_user_code() -> Iterator[None]:
    """The block runs the user's code: its standard output goes to stderr (from here to the end of
    the command), an ``os._exit()`` it calls is seen."""
    from loaderdoc.base import output

    output.route_user_output_to_stderr(inside)
    if not _state["ran"] or _state["owner"] != os.getpid():
        _state["before"] = frozenset(t.ident for t in threading.enumerate())  # not the user's
    _state["ran"] = True
    _state["owner"] = os.getpid()
    real_exit = os._exit
    if _state["depth"] == 0:
        os._exit = _observed_exit(real_exit)
    _state["depth"] += 1
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0 and getattr(os._exit, "_loaderdoc_real", None) is not None:
            os._exit = os._exit._loaderdoc_real


def inside() -> bool:
    """The user's code is running in this block (its writes are not loaderdoc's)."""
    return _state["depth"] > 0


def _observed_exit(real_exit):
    def _exit(status):
        if os.getpid() != _state["owner"]:  # a measuring process or a worker: the probe sees its end
            real_exit(status)
        if threading.current_thread() is threading.main_thread():
            raise UserCodeExit(status)
        with contextlib.suppress(Exception):
            sys.stderr.write(f"loaderdoc: error: the --dataset code called os._exit({status!r}) in thread "
                             f"{threading.current_thread().name!r}; loaderdoc stops with nothing written\n")
            sys.stderr.flush()
        real_exit(EXIT_USAGE)

    _exit._loaderdoc_real = real_exit  # type: ignore[attr-defined]
    return _exit


def leave_past_user_threads() -> None:
    """If the user's code ran and left threads running, have the CLI end the process without
    finalizing (:func:`loaderdoc.base.output.exit_now_if_asked`), saying so for the non-daemon ones it
    would otherwise wait for."""
    if not _state["ran"] or os.getpid() != _state["owner"]:
        return
    running = [t for t in threading.enumerate() if t.ident not in _state["before"] and t.is_alive()
               and t is not threading.current_thread()]
    if not running:
        return
    left = [t for t in running if not t.daemon]
    if left:
        names = ", ".join(repr(t.name) for t in left[:3]) + (f" and {len(left) - 3} more" if len(left) > 3 else "")
        with contextlib.suppress(Exception):
            sys.stderr.write(f"loaderdoc: the --dataset code left {len(left)} thread(s) running ({names}); "
                             "not waiting for them\n")
    # no exit handlers either: one of them may join those threads. A daemon thread is ended too: one
    # still running Python while the interpreter finalizes can crash it (a segfault, seen with a
    # dataset's thread that prints in a loop), and the command's exit code would be lost
    output.end_without_finalizing()
