"""Errors a user can fix, and the exit codes every command shares."""

from __future__ import annotations

# Exit codes, documented in README.md and `loaderdoc --help`.
EXIT_OK = 0  # healthy / done
EXIT_WARNING = 1  # check found warnings
EXIT_CRITICAL = 2  # check found something that will break or starve a run
EXIT_USAGE = 3  # bad command line, config file, dataset or export path: nothing was written
EXIT_FOR_STATUS = {"ok": EXIT_OK, "warning": EXIT_WARNING, "critical": EXIT_CRITICAL}  # a report's worst finding
EXIT_PROBE_FAILED = 4  # the probe could not measure any configuration
EXIT_INTERNAL = 70  # a bug in loaderdoc (sysexits' EX_SOFTWARE): never 0-2, which a job script acts on
EXIT_INTERRUPTED = 130  # Ctrl+C, SIGTERM, SIGHUP, SIGQUIT, SIGUSR2: stopped cleanly
# besides Ctrl+C (SIGINT), what a supervisor sends to stop a command (a scheduler, a closed SSH
# session, Ctrl+\): each stops it as Ctrl+C does, its processes reaped (exit 130)
STOP_SIGNALS = ("SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR2")
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE: the reader of stdout went away (`| head`), as `cat` reports it


class UserError(Exception):
    """A problem the user can fix. The CLI prints ``str(err)`` on one line, no traceback."""

    exit_code = EXIT_USAGE


class SettingsError(UserError):
    """A DataLoader setting or a config file is invalid."""


class ExportError(UserError):
    """An export could not be written; nothing was written."""
