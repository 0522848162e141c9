"""Reading what the hook wrote: one ``records-<pid>.json`` per process in the launcher's directory.

:func:`child_env` is the environment a watched (or tuned) command runs with, :func:`exit_code_of` the code it ended with. Every Python process of the watched command that iterated a DataLoader writes its own file
(``torchrun`` ranks, a launcher script and its children), replacing it atomically every few
seconds while it runs; the launcher reads them all, at the end and on SIGUSR1 mid-run. A file of
another schema (an older loaderdoc's hook on the child's path) or one that cannot be parsed is
skipped with one line on stderr, said once per file. No torch, no textual.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from loaderdoc.watching.hook import RECORDS_SCHEMA

PATTERN = "records-*.json"


class RecordsReader:
    """Reads every process's records in ``directory``; warns once per unusable file."""

    def __init__(self, directory: Path, *, stderr=None) -> None:
        self.directory = Path(directory)
        self._stderr = stderr
        self._warned: set[str] = set()

    def read(self) -> list[dict[str, Any]]:
        """The records of every process so far, in pid order."""
        out = []
        for path in sorted(self.directory.glob(PATTERN)):
            records = self._read_one(path)
            if records is not None:
                out.append(records)
        return sorted(out, key=lambda r: (r.get("pid") or 0))

    def _read_one(self, path: Path) -> dict[str, Any] | None:
        try:
            records = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:  # its process replaced it between the listing and the read
            return None
        except (OSError, ValueError) as exc:
            self._warn(path, f"cannot read {path.name}: {exc}")
            return None
        if not isinstance(records, dict) or records.get("schema") != RECORDS_SCHEMA:
            found = records.get("schema") if isinstance(records, dict) else None
            self._warn(path, f"{path.name} is {found or 'not a records file'}, not {RECORDS_SCHEMA}; ignored")
            return None
        return records

    def _warn(self, path: Path, message: str) -> None:
        if path.name in self._warned:
            return
        self._warned.add(path.name)
        print(f"loaderdoc watch: {message}", file=self._stderr or sys.stderr)


def child_env(records_dir: str, environ: dict[str, str] | None = None, apply: str | None = None,
              trace: tuple[str, int] | None = None) -> dict[str, str]:
    """The child's environment: the hook's directory first on PYTHONPATH, the user's after it;
    ``apply``: --apply's tables (JSON) for the hook, else none (not even one inherited);
    ``trace``: --trace's folder and steps, else no trace (not even one inherited)."""
    import os

    from loaderdoc import watching
    from loaderdoc.watching.apply import ENV_APPLY
    from loaderdoc.watching.hook import ENV_DIR

    env = dict(os.environ if environ is None else environ)
    sitedir = str(Path(watching.__file__).resolve().parent / "sitedir")
    env["PYTHONPATH"] = sitedir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[ENV_DIR] = records_dir
    env.pop(ENV_APPLY, None)
    if apply is not None:
        env[ENV_APPLY] = apply
    from loaderdoc.watching.trace import ENV_TRACE, ENV_TRACE_AFTER, ENV_TRACE_STEPS

    for name in (ENV_TRACE, ENV_TRACE_STEPS, ENV_TRACE_AFTER):
        env.pop(name, None)
    if trace is not None:
        env[ENV_TRACE], env[ENV_TRACE_STEPS] = trace[0], str(trace[1])
    return env


def exit_code_of(returncode: int) -> int:
    """A shell's view of the child's status: its code, or 128 + N when signal N killed it."""
    return returncode if returncode >= 0 else 128 - returncode
