"""The reports the app opens (``loaderdoc --report FILE``): a watched run (``loaderdoc.watch/1``)
or a job (``loaderdoc.job/1``), told apart by their "schema" key.

The file is read and parsed once here, then checked by its own reader; anything else is refused
in one line naming both kinds, before the app (or textual) starts. No torch, no textual.
"""

from __future__ import annotations

from pathlib import Path

from loaderdoc.cluster.job import JOB_SCHEMA
from loaderdoc.cluster.job_file import JobRun, job_run_from
from loaderdoc.errors import UserError
from loaderdoc.jsondoc import load_json, not_schema
from loaderdoc.watching.report import WATCH_SCHEMA
from loaderdoc.watching.report_file import WatchRun, watch_run_from

HOW_TO_WRITE = ("write one with 'loaderdoc watch --report run.json -- python train.py' or "
                "'torchrun ... -m loaderdoc check --distributed --json > job.json'")


class ReportError(UserError):
    """The file is neither a watch report nor a job report."""


def open_report(path: str | Path) -> WatchRun | JobRun:
    """The run or the job in ``path``; a UserError (exit 3) in one line for anything else."""
    path = Path(path)
    data = load_json(path, what="watch or job report", error=ReportError, how_to_write=HOW_TO_WRITE)
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == WATCH_SCHEMA:
        return watch_run_from(data, path)
    if schema == JOB_SCHEMA:
        return job_run_from(data, path)
    bad = not_schema(data, f"{WATCH_SCHEMA} or {JOB_SCHEMA}", "a watch or job report", HOW_TO_WRITE)
    raise ReportError(f"{path}: {bad}")
