"""Reading back a ``loaderdoc.job/1`` report (``check --distributed --json`` on rank 0) for the app.

The app shows the job table (one column per node, the odd node's cells marked) and leads its
diagnoses with the job's findings. As for a watch report (watching/report_file.py), a file that
is not such a report is refused before the app starts, in one line naming the file and the key;
only the keys the table and the findings use are checked. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderdoc._serde import to_dict
from loaderdoc.advice.findings import SEVERITY_ORDER, Finding, findings_from_json
from loaderdoc.cluster.job import JOB_SCHEMA, JobTable, job_table
from loaderdoc.errors import UserError
from loaderdoc.jsondoc import Bad, get, load_json, obj, read_document

HOW_TO_WRITE = "write one with 'torchrun ... -m loaderdoc check --distributed --json > job.json'"


class JobReportError(UserError):
    """The file is not a job report this build can read; the message names the file and the key."""


@dataclass
class JobRun:
    """What the app shows of one job report."""

    path: str
    launcher: str
    world_size: int
    status: str
    exit_code: int
    findings: list[Finding]
    report: dict = field(default_factory=dict)  # the checked report: what cluster.job.job_table reads

    @property
    def table(self) -> JobTable:
        return job_table(self.report)

    @property
    def node_source(self) -> str:
        nodes = self.report["nodes"]
        return nodes[0]["node_source"] if nodes else "-"


def load_job_report(path: str | Path) -> JobRun:
    """The job in ``path``; JobReportError (exit 3) for a file that is missing, unreadable, not
    JSON or not a ``loaderdoc.job/1`` report."""
    path = Path(path)
    return job_run_from(load_json(path, what="job report", error=JobReportError, how_to_write=HOW_TO_WRITE), path)


def job_run_from(data: Any, path: str | Path) -> JobRun:
    """The job in a parsed report (``path`` names it in the errors and the app)."""
    return read_document(data, path, schema=JOB_SCHEMA, what="a job report", error=JobReportError,
                         how_to_write=HOW_TO_WRITE, build=lambda doc: _job(doc, str(path)))


def _status(value: Any, where: str) -> str:
    if value not in SEVERITY_ORDER:
        raise Bad(f"{where}: expected one of {', '.join(SEVERITY_ORDER)}, got {value!r}"[:200])
    return value


def _job(data: dict, path: str) -> JobRun:
    fields = []
    for i, raw in enumerate(get(data, "fields", list, "")):
        where = f"fields[{i}]"
        obj(raw, where)
        fields.append({"key": get(raw, "key", str, where), "label": get(raw, "label", str, where)})
    keys = {f["key"] for f in fields}
    nodes = []
    for i, raw in enumerate(get(data, "nodes", list, "")):
        where = f"nodes[{i}]"
        obj(raw, where)
        node = raw.get("node")
        if isinstance(node, bool) or not isinstance(node, (int, str)):
            raise Bad(f"{where}.node: expected a node rank or a hostname, got {node!r}"[:200])
        ranks = get(raw, "ranks", list, where)
        hostnames = get(raw, "hostnames", list, where)
        if not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in ranks):
            raise Bad(f"{where}.ranks: expected a list of whole numbers >= 0")
        if not all(isinstance(h, str) for h in hostnames):
            raise Bad(f"{where}.hostnames: expected a list of strings")
        cells = get(raw, "cells", dict, where)
        for key in keys:
            if not isinstance(cells.get(key, "-"), str):
                raise Bad(f"{where}.cells.{key}: expected a string, got {cells[key]!r}"[:200])
        row = {"node": node, "node_source": get(raw, "node_source", str, where, optional=True) or "-",
               "ranks": ranks, "hostnames": hostnames, "cells": cells,
               "status": _status(raw.get("status"), f"{where}.status")}
        odd = get(raw, "odd", list, where, optional=True)
        if odd is not None:  # written by builds that record it; older reports: read from the findings
            row["odd"] = [k for k in odd if k in keys]
        nodes.append(row)
    findings = findings_from_json(data.get("findings"))
    report = {"schema": JOB_SCHEMA, "launcher": get(data, "launcher", str, "", optional=True) or "",
              "world_size": get(data, "world_size", int, "", optional=True) or sum(len(n["ranks"]) for n in nodes),
              "status": _status(data.get("status"), "status"),
              "exit_code": get(data, "exit_code", int, "", optional=True, signed=True) or 0,
              "fields": fields, "nodes": nodes, "findings": [to_dict(f) for f in findings]}
    return JobRun(path=path, launcher=report["launcher"], world_size=report["world_size"], status=report["status"],
                  exit_code=report["exit_code"], findings=findings, report=report)
