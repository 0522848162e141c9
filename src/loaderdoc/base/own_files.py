"""The files loaderdoc rewrites run after run (``watch --report``, ``watch --fixes``, ``tune
--report``): an existing file there is replaced only where loaderdoc wrote it before, and never
where it is the command's own script or data, or the ``--apply`` input (issue 49: ``--report
train.py -- python train.py`` replaced the script, ``--fixes`` the file it had applied, its
comments lost).

What loaderdoc wrote is told by the file's first bytes: a report starts with its schema, a fixes
file with its header. Anything else needs ``--force``; the protected files are refused even then.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path

from loaderdoc.base.errors import ExportError

# the first bytes of each kind loaderdoc writes (reports: indented JSON whose first key is the schema)
KINDS = {
    "watch report": re.compile(rb'\A\s*\{\s*"schema"\s*:\s*"loaderdoc\.watch/'),
    "tune report": re.compile(rb'\A\s*\{\s*"schema"\s*:\s*"loaderdoc\.tune/'),
    "fixes file": re.compile(rb"\A# loaderdoc watch --fixes:"),
}
HEAD_BYTES = 256


def command_files(command: Iterable[str]) -> dict[Path, str]:
    """The existing regular files a command names (its script, its configs, its data), to protect."""
    out = {}
    for word in command:
        for text in (word, word.split("=", 1)[1] if word.startswith("--") and "=" in word else None):
            if text and os.path.isfile(text):
                out[Path(text)] = f"a file the command names ({text})"
    return out


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_replaceable(target: Path, *, kind: str, option: str, force: bool,
                      protected: dict[Path, str] | None = None) -> None:
    """Raise ExportError (exit 3, one line) where writing ``target`` would lose a file that is not
    an earlier ``kind`` loaderdoc wrote: without ``force`` for any such file, always for one in
    ``protected`` (path -> what it is). A missing file, a pipe or a device is fine."""
    for path, what in (protected or {}).items():
        if _same_file(target, path):
            raise ExportError(f"{option} {target}: that is {what}; loaderdoc never writes over it: give another path")
    if force or not os.path.isfile(target):  # missing, a pipe, a device (opening a FIFO would block)
        return
    try:
        with open(target, "rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return  # gone meanwhile, or unreadable: check_writable and the write say what is wrong
    if KINDS[kind].match(head):
        return
    raise ExportError(f"{option} {target}: the file exists and is not a loaderdoc {kind}, so it would be lost; "
                      "give another path, or add --force to replace it")
