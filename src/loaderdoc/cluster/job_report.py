"""The ``loaderdoc.job/1`` report as one typed value: :class:`JobReport`, its nodes
(:class:`JobNode`), its ranks (:class:`JobRank`) and its findings.

Built once, from every rank's entry, by :func:`loaderdoc.cluster.job.build_job_report`; read back,
checked, by :mod:`.job_file`; written by :meth:`JobReport.to_json`, the one serializer. The job's
status, its exit code and the job table (`check --distributed` prints it, the app's Job view shows
it) are properties, derived here and nowhere else. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderdoc.advice.findings import Finding, worst
from loaderdoc.base._serde import to_dict
from loaderdoc.base.errors import EXIT_FOR_STATUS
from loaderdoc.base.jsondoc import stamped
from loaderdoc.base.units import ranges

JOB_SCHEMA = "loaderdoc.job/1"


def node_label(node_id: int | str) -> str:
    return f"node {node_id}"


@dataclass
class JobFact:
    """One fact the nodes are compared on: a row of the job table."""

    key: str
    label: str

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label}


@dataclass
class JobNode:
    """One node of the job: its ranks, its cells of the table (its worst rank's values), its
    status (its ranks' findings and the odd-one-out findings naming it) and the fields on which
    it is the odd one out (the cells the app marks)."""

    node: int | str  # the launcher's node rank, or a hostname where there is none
    node_source: str  # where the node rank came from (GROUP_RANK, SLURM_NODEID, ...); "-": unknown
    hostnames: list[str]
    ranks: list[int]
    status: str
    cells: dict[str, Any]  # field key -> the cell as shown (a string; keys of fields a newer build adds kept)
    odd: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "node_source": self.node_source, "hostnames": self.hostnames,
                "ranks": self.ranks, "status": self.status, "cells": self.cells, "odd": self.odd}


@dataclass
class JobRank:
    """One rank as it reported itself: its own ``check`` status, findings and machine facts, kept
    as the rank sent them (a rank of another build may write keys this one does not know). Neither
    the app nor the printout reads them: a report read back carries them as written, unchecked."""

    rank: int
    node: int | str
    local_rank: int | None
    hostname: str
    status: str = "ok"
    findings: list[dict[str, Any]] = field(default_factory=list)  # its check report's, as written
    machine: dict[str, Any] = field(default_factory=dict)  # MachineFacts.to_dict(), as written

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "node": self.node, "local_rank": self.local_rank, "hostname": self.hostname,
                "status": self.status, "findings": self.findings, "machine": self.machine}


@dataclass
class JobTable:
    """The job table as `check --distributed` prints it and the app shows it: one column per
    node, one row per fact; ``odd`` holds the (row key, column index) cells of an odd node out."""

    columns: list[str]  # "node 0", ...
    rows: list[tuple[str, str, list[str]]]  # (key, label, one cell per node)
    odd: set[tuple[str, int]] = field(default_factory=set)


@dataclass
class JobReport:
    """One job: its nodes, the facts they are compared on, its findings and its ranks."""

    launcher: str = ""
    world_size: int = 0
    fields: list[JobFact] = field(default_factory=list)
    nodes: list[JobNode] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    ranks: list[JobRank] = field(default_factory=list)
    store: dict[str, Any] | None = None  # where the job's store listened (the live check's; see check_distributed)
    path: str | None = None  # the file it was read from (the app names it); never written

    @property
    def status(self) -> str:
        return worst(self.findings)

    @property
    def exit_code(self) -> int:
        return EXIT_FOR_STATUS[self.status]

    @property
    def node_source(self) -> str:
        return self.nodes[0].node_source if self.nodes else "-"

    @property
    def table(self) -> JobTable:
        nodes = self.nodes
        rows = [("ranks", "ranks", [ranges(n.ranks) for n in nodes]),
                ("host", "host", [", ".join(n.hostnames) for n in nodes])]
        rows += [(f.key, f.label, [str(n.cells.get(f.key, "-")) for n in nodes]) for f in self.fields]
        rows.append(("status", "status", [n.status for n in nodes]))
        odd = {(key, i) for i, n in enumerate(nodes) for key in n.odd}
        return JobTable([node_label(n.node) for n in nodes], rows, odd)

    def to_json(self) -> dict[str, Any]:
        """The ``loaderdoc.job/1`` document: what ``check --distributed --json`` prints."""
        out: dict[str, Any] = {
            "schema": JOB_SCHEMA, "status": self.status, "exit_code": self.exit_code, "launcher": self.launcher,
            "world_size": self.world_size, "fields": [f.to_json() for f in self.fields],
            "nodes": [n.to_json() for n in self.nodes], "findings": [to_dict(f) for f in self.findings],
            "ranks": [r.to_json() for r in self.ranks],
        }
        if self.store is not None:
            out["store"] = self.store
        return stamped(out)
