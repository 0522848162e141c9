"""Reading what the hook wrote: one ``records-<pid>.json`` per process in the launcher's directory.

Every Python process of the watched command that iterated a DataLoader writes its own file
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
