"""What `probe`, `watch` and `tune` check before they start any process, each in one line.

- The working directory still exists: in a deleted one torch cannot even be imported (its MKL
  loader looks it up), so every measuring process, and the user's command, would die at once.
- A temporary directory can be written: workers pass tensors through sockets made there, and
  `watch` and `tune` keep the command's records in one.
- The command can be started: "command not found" is said only of a command that is not there;
  one whose ``#!`` interpreter is missing, a directory, a file without the execute bit, and one
  that is neither a program nor has a ``#!`` line each get their own words.

No torch here.
"""

from __future__ import annotations

import errno
import os
import shutil

from loaderdoc.base.errors import UserError


def check_workplace(verb: str) -> None:
    """UserError when the working directory is gone or no temporary directory can be written."""
    import tempfile

    try:
        os.getcwd()
    except OSError as exc:
        reason = "it was deleted" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
        raise UserError(f"{verb}: the working directory cannot be used ({reason}); cd to an existing directory "
                        "and run it again") from None
    try:
        tempfile.gettempdir()  # tries TMPDIR, TEMP, TMP, /tmp, /var/tmp, /usr/tmp, then the working directory
    except OSError:
        tmpdir = os.environ.get("TMPDIR")
        given = f"TMPDIR={tmpdir}, " if tmpdir else ""
        raise UserError(f"{verb}: no writable temporary directory ({given}/tmp, /var/tmp, /usr/tmp and the working "
                        "directory were tried); set TMPDIR to a writable directory") from None


def check_startable(verb: str, command: list[str]) -> None:
    """UserError, before anything runs, when ``command`` could not be started."""
    program = command[0]
    path = program if "/" in program else shutil.which(program)
    if path is None or not os.path.lexists(path):
        raise UserError(f"{verb}: command not found: {program}")
    if os.path.isdir(path):
        raise UserError(f"{verb}: cannot run {program}: it is a directory")
    if not os.access(path, os.X_OK):
        raise UserError(f"{verb}: cannot run {program}: permission denied (not executable: chmod +x {program}, "
                        f"or run it as python {program})")
    problem = _interpreter_problem(path)
    if problem:
        raise UserError(f"{verb}: {program}: {problem}")
    if not _has_a_format(path):
        raise UserError(_NO_FORMAT.format(verb=verb, program=program))


def cannot_start(verb: str, program: str, exc: OSError) -> UserError:
    """The one line for ``program`` that failed to start with ``exc`` (what ``Popen`` raised)."""
    path = program if "/" in program else shutil.which(program)
    if exc.errno == errno.ENOENT and path and os.path.isfile(path):
        problem = _interpreter_problem(path) or ("it exists but could not be started: the loader or a library "
                                                 "it needs is missing")
        return UserError(f"{verb}: {program}: {problem}")
    if exc.errno == errno.ENOENT:
        return UserError(f"{verb}: command not found: {program}")
    if exc.errno == errno.ENOEXEC:  # an ELF for another machine, a damaged one
        return UserError(f"{verb}: cannot run {program}: exec format error (not a program for this machine)")
    if exc.errno == errno.EACCES:
        return UserError(f"{verb}: cannot run {program}: permission denied")
    return UserError(f"{verb}: cannot run {program}: {exc.strerror or exc}")


_NO_FORMAT = ("{verb}: cannot run {program}: not a program and no #! line; run it through its interpreter "
              "(python {program})")
_BINFMT_MISC = "/proc/sys/fs/binfmt_misc"


def _has_a_format(path: str) -> bool:
    """Whether the kernel can execute the file: a ``#!`` line or an ELF header; anything where
    binfmt_misc registers other formats (the kernel then decides at exec)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4)
    except OSError:
        return True  # unreadable but executable: the kernel decides
    if head[:2] == b"#!" or head == b"\x7fELF":
        return True
    try:
        return any(name not in ("register", "status") for name in os.listdir(_BINFMT_MISC))
    except OSError:
        return False


def _interpreter_problem(path: str) -> str | None:
    """Why the ``#!`` line of the file at ``path`` names no interpreter that exists; None if it does
    or the file has none."""
    try:
        with open(path, "rb") as fh:
            first = fh.readline(256)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].split()
    if not words:
        return "its #! line names no interpreter"
    interpreter = os.fsdecode(words[0])
    if not os.path.exists(interpreter):
        return f"its interpreter {interpreter} (from the #! line) was not found; install it or fix the #! line"
    if not os.access(interpreter, os.X_OK) or os.path.isdir(interpreter):
        return f"its interpreter {interpreter} (from the #! line) cannot be run"
    return None
