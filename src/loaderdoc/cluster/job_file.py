"""Reading back a ``loaderdoc.job/1`` report (``check --distributed --json`` on rank 0): the one
checked reader, returning the same typed :class:`~loaderdoc.cluster.job_report.JobReport` the
job built.

The app shows the job table (one column per node, the odd node's cells marked) and leads its
diagnoses with the job's findings. As for a watch report (watching/report_file.py), a file that
is not such a report is refused before the app starts, in one line naming the file and the key;
only the keys the table and the findings use are checked (the ranks' own reports and the store
are carried as written). The job's status and exit code are its findings' (the keys are checked
all the same). No torch, no textual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loaderdoc.advice.findings import SEVERITY_ORDER, Finding, findings_from_json
from loaderdoc.base.errors import UserError
from loaderdoc.base.jsondoc import Bad, get, load_json, obj, read_document
from loaderdoc.cluster.job_report import JOB_SCHEMA, JobFact, JobNode, JobRank, JobReport

HOW_TO_WRITE = "write one with 'torchrun ... -m loaderdoc check --distributed --json > job.json'"


class JobReportError(UserError):
    """The file is not a job report this build can read; the message names the file and the key."""


def load_job_report(path: str | Path) -> JobReport:
    """The job in ``path``; JobReportError (exit 3) for a file that is missing, unreadable, not
    JSON or not a ``loaderdoc.job/1`` report."""
    path = Path(path)
    return job_report_from(load_json(path, what="job report", error=JobReportError, how_to_write=HOW_TO_WRITE),
                           path)


def job_report_from(data: Any, path: str | Path) -> JobReport:
    """The job in a parsed report (``path`` names it in the errors and the app)."""
    return read_document(data, path, schema=JOB_SCHEMA, what="a job report", error=JobReportError,
                         how_to_write=HOW_TO_WRITE, build=lambda doc: _job(doc, str(path)))


def _status(value: Any, where: str) -> str:
    if value not in SEVERITY_ORDER:
        raise Bad(f"{where}: expected one of {', '.join(SEVERITY_ORDER)}, got {value!r}"[:200])
    return value


def _job(data: dict, path: str) -> JobReport:
    fields = []
    for i, raw in enumerate(get(data, "fields", list, "")):
        where = f"fields[{i}]"
        obj(raw, where)
        fields.append(JobFact(get(raw, "key", str, where), get(raw, "label", str, where)))
    keys = {f.key for f in fields}
    nodes = [_node(raw, f"nodes[{i}]", keys) for i, raw in enumerate(get(data, "nodes", list, ""))]
    findings = findings_from_json(data.get("findings"))
    launcher = get(data, "launcher", str, "", optional=True) or ""
    world_size = get(data, "world_size", int, "", optional=True) or sum(len(n.ranks) for n in nodes)
    _status(data.get("status"), "status")  # the job's status and exit code are its findings'
    get(data, "exit_code", int, "", optional=True, signed=True)
    for node, raw in zip(nodes, data["nodes"], strict=True):
        if "odd" not in raw:  # a report written before the key: read from the findings
            node.odd = _odd_from_findings(node, keys, findings)
    ranks = data.get("ranks")
    store = data.get("store")
    return JobReport(
        launcher=launcher, world_size=world_size, fields=fields, nodes=nodes, findings=findings,
        ranks=[_rank(r) for r in ranks if isinstance(r, dict)] if isinstance(ranks, list) else [],
        store=store if isinstance(store, dict) else None, path=path)


def _node(raw: Any, where: str, keys: set[str]) -> JobNode:
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
    out = JobNode(node=node, node_source=get(raw, "node_source", str, where, optional=True) or "-",
                  hostnames=hostnames, ranks=ranks, status=_status(raw.get("status"), f"{where}.status"),
                  cells=cells)
    odd = get(raw, "odd", list, where, optional=True)
    if odd is not None:
        out.odd = [k for k in odd if k in keys]
    return out


def _odd_from_findings(node: JobNode, keys: set[str], findings: list[Finding]) -> list[str]:
    """The fields on which ``node`` is the odd one out, for a report written before nodes had an
    ``odd`` key: the findings ``job-<field>`` naming the node before the colon (or no node)."""
    out = []
    for f in findings:
        key = str(f.rule_id).removeprefix("job-")
        named = str(f.symptom).split(": ", 1)[0]
        if key in keys and (named.startswith("no two nodes agree")
                            or str(node.node) in named.removeprefix("nodes ").removeprefix("node ").split(", ")):
            out.append(key)
    return out


def _rank(raw: dict[str, Any]) -> JobRank:
    """A rank's own report, as written (see :class:`JobRank`)."""
    return JobRank(rank=raw.get("rank"), node=raw.get("node"), local_rank=raw.get("local_rank"),
                   hostname=raw.get("hostname"), status=raw.get("status"), findings=raw.get("findings"),
                   machine=raw.get("machine"))
