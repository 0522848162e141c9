"""The job report's producer: each rank's `check` report grouped by node, one table of the facts
that must agree across nodes, and findings naming the node that is the odd one out, built once
into a :class:`~loaderdoc.cluster.job_report.JobReport`.

Pure: it works on the ranks' reports as gathered (plain dicts), so it is tested with recorded
facts of several nodes and never needs torch or more than one machine.

What "odd one out" means: for a number where more is better (CPUs per rank, /dev/shm, the
open-file limit), a node is flagged when it is below the median of the nodes by more than the
field's tolerance (free memory and free /dev/shm move while a job runs, sizes do not); for a
build or a model (driver, torch, CUDA build, GPU model) a node is flagged when it differs from
the value most nodes share, and when no value has a majority the nodes' values are listed.
A node's value is its worst rank's, since the slowest rank sets the pace of the whole job.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loaderdoc.advice.findings import WARNING, Finding, worst
from loaderdoc.base.units import cpus_text, fmt_bytes, fmt_cpus, ranges
from loaderdoc.cluster.job_report import JobFact, JobNode, JobRank, JobReport, node_label
from loaderdoc.system.facts import MachineFacts

UNLIMITED = math.inf


@dataclass
class RankEntry:
    """What one rank sends to rank 0: where it sits and its own `check --json` report."""

    rank: int
    node: int | None  # the launcher's node rank; None: told apart by hostname
    node_source: str
    local_rank: int | None
    hostname: str
    check: dict = field(default_factory=dict)

    @property
    def node_id(self) -> int | str:
        return self.node if self.node is not None else self.hostname

    def facts(self) -> MachineFacts:
        return MachineFacts.from_dict(self.check.get("machine", {}))


@dataclass
class Field:
    """One row of the job table, and how nodes are compared on it."""

    key: str
    label: str
    cell: Callable[[MachineFacts], str]  # what the table shows
    value: Callable[[MachineFacts], Any] = lambda f: None  # what is compared; None: unknown
    kind: str = "show"  # "more" (a number, more is better) | "same" (must match) | "show"
    tolerance: float = 0.0  # "more": a node is flagged below median * (1 - tolerance)
    what: str = "{}"  # "/dev/shm {}": the value as the symptom says it
    fmt: Callable[[Any], str] = str
    cause: str = ""
    fix: str = ""
    implied_by: str = ""  # a node flagged on that field is not flagged again on this one


def _known(reading, unset=None):
    """A reading's value; ``unset`` for a known "not set" (no limit); None when unknown."""
    if not reading.known:
        return None
    return unset if reading.value is None else reading.value


def _limit(n: float) -> str:
    return "unlimited" if n == UNLIMITED else fmt_bytes(n)


def _gpus(f: MachineFacts) -> str | None:
    if not f.gpu.devices:  # no NVML (no NVIDIA driver) is no GPU to train on, as on the other nodes
        return "none"
    names = Counter(str(d.name.get("?")).removeprefix("NVIDIA ") for d in f.gpu.devices)
    return ", ".join(f"{n}x {name}" for name, n in names.items())


def _pcie_width(f: MachineFacts) -> int | None:
    widths = [d.pcie_width_current.get() for d in f.gpu.devices if d.pcie_width_current.get()]
    return min(widths) if widths else None


def _pcie(f: MachineFacts) -> str:
    if not f.gpu.devices:
        return "-"
    d = f.gpu.devices[0]
    gen, width = d.pcie_gen_current.get(), _pcie_width(f)
    if gen is None and width is None:
        return "unknown"
    return f"gen{gen or '?'} x{width or '?'}"


def _cuda_build(f: MachineFacts) -> str | None:
    if not f.torch.cuda_build.known or not f.torch.installed.get():
        return None
    return f"CUDA {f.torch.cuda_build.value}" if f.torch.cuda_build.value else "CPU only"


def _affinity(f: MachineFacts) -> str:
    cpus = f.cpu.affinity.get()
    if cpus is None:
        return "unknown"
    return f"{len(cpus)}: {ranges(cpus)}" if len(ranges(cpus)) <= 12 else f"{len(cpus)} CPUs"


def _quota(f: MachineFacts) -> str:
    quota = _known(f.cpu.cgroup_quota, "none")
    return "unknown" if quota is None else quota if isinstance(quota, str) else fmt_cpus(quota)


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 2)


def _text(value: Any) -> str:
    return "unknown" if value is None else str(value)


SHM_FIX = ("give that node a /dev/shm as large as the others': docker run --shm-size=<size>, a Kubernetes "
           "emptyDir with medium: Memory mounted at /dev/shm, or mount -o remount,size=<size> /dev/shm")
SAME_BUILD_FIX = "install the same version on every node (one container image for the whole job)"

FIELDS: list[Field] = [
    Field("cpus_per_rank", "CPUs per rank", lambda f: fmt_cpus(_rounded(f.cpus_per_rank)),
          lambda f: _rounded(f.cpus_per_rank), "more", 0.1, "{} per rank",
          cpus_text,
          cause="each rank's DataLoader workers share this budget; the slowest node's ranks hold every "
                "step of the others at the barrier",
          fix="give that node's ranks as many CPUs as the others: check its CPU quota (docker --cpus, Kubernetes "
              "limits.cpu), its affinity (taskset, Slurm --cpus-per-task, cpuset) and its ranks per node"),
    Field("affinity", "affinity", _affinity),
    Field("cgroup_quota", "cgroup quota", _quota),
    Field("ram", "RAM", lambda f: _limit(_known(f.memory.total)) if _known(f.memory.total) else "unknown",
          lambda f: _known(f.memory.total), "more", 0.1, "{} of RAM", _limit,
          cause="a node with less memory is the first to swap or be killed by the OOM killer",
          fix="run the job on nodes of one size, or size workers and prefetching for the smallest"),
    Field("memory_limit", "memory limit", lambda f: _limit(_known(f.memory.cgroup_limit, UNLIMITED))
          if _known(f.memory.cgroup_limit, UNLIMITED) is not None else "unknown",
          lambda f: _known(f.memory.cgroup_limit, UNLIMITED), "more", 0.1, "a memory limit of {}", _limit,
          cause="the cgroup kills the rank's process tree when its workers pass the limit",
          fix="give that node's container the same memory limit as the others (docker --memory, Kubernetes "
              "limits.memory, Slurm --mem)"),
    Field("shm_size", "/dev/shm size", lambda f: _limit(_known(f.shm.total)) if _known(f.shm.total) else "unknown",
          lambda f: _known(f.shm.total), "more", 0.1, "/dev/shm {}", _limit,
          cause="workers pass every batch through /dev/shm; when it fills, they die with a bus error",
          fix=SHM_FIX),
    Field("shm_free", "/dev/shm free", lambda f: _limit(_known(f.shm.free)) if _known(f.shm.free) else "unknown",
          lambda f: _known(f.shm.free), "more", 0.5, "{} free in /dev/shm", _limit,
          cause="files left in /dev/shm (a crashed job's segments) take the room batches need",
          fix="remove stale files from that node's /dev/shm (ls -la /dev/shm), or give it a larger one",
          implied_by="shm_size"),
    Field("nofile", "open files", lambda f: _text(_known(f.limits.nofile_soft, "unlimited")),
          lambda f: _known(f.limits.nofile_soft, UNLIMITED), "more", 0.0, "an open-file limit of {}",
          lambda v: "unlimited" if v == UNLIMITED else str(v),
          cause="each batch a worker sends holds file descriptors; a low limit fails with 'Too many open files'",
          fix="raise it to the others' value in the job script (ulimit -n), docker --ulimit nofile=, or "
              "systemd LimitNOFILE"),
    Field("gpus", "GPUs", lambda f: _text(_gpus(f)), _gpus, "same", what="GPUs {}",
          cause="ranks on different GPUs step at different speeds", fix="run the job on nodes of one GPU type"),
    Field("driver", "GPU driver", lambda f: f.gpu.driver_version.get("-") or "-",
          lambda f: f.gpu.driver_version.get(), "same", what="driver {}",
          cause="different drivers behave and perform differently", fix=SAME_BUILD_FIX),
    Field("pcie", "PCIe link", _pcie, _pcie_width, "more", 0.0, "PCIe link {}", lambda v: f"x{v}",
          cause="a GPU on a narrower link copies batches to the device more slowly",
          fix="check that node's GPU seating and BIOS link settings (nvidia-smi -q | grep -A3 'Link Width')"),
    Field("torch", "torch", lambda f: _text(f.torch.version.get()), lambda f: f.torch.version.get(), "same",
          what="torch {}", cause="ranks on different torch builds can disagree in collectives", fix=SAME_BUILD_FIX),
    Field("cuda_build", "CUDA build", lambda f: _text(_cuda_build(f)), _cuda_build, "same", what="torch build {}",
          cause="a CPU-only torch on one node cannot use its GPUs", fix=SAME_BUILD_FIX),
]


def _nodes_text(ids: list[int | str]) -> str:
    return ("node " if len(ids) == 1 else "nodes ") + ", ".join(str(i) for i in ids)


def _ranks_text(ranks: list[int]) -> str:
    return ranges(ranks) if ranks else "-"


def build_job_report(entries: list[RankEntry], *, launcher: str = "", world_size: int | None = None,
                     store: dict[str, Any] | None = None) -> JobReport:
    """The job report (schema ``loaderdoc.job/1``) from every rank's entry; ``store``: where the
    job's store listened (``check --distributed`` says it)."""
    nodes: dict[int | str, list[RankEntry]] = {}
    for entry in sorted(entries, key=lambda e: e.rank):
        nodes.setdefault(entry.node_id, []).append(entry)
    order = sorted(nodes, key=lambda n: (isinstance(n, str), n))
    facts = {e.rank: e.facts() for e in entries}
    node_rows = []
    values: dict[str, dict[int | str, Any]] = {f.key: {} for f in FIELDS}
    for node in order:
        ranks = nodes[node]
        cells = {}
        for fl in FIELDS:
            pick = ranks[0]
            if fl.kind == "more":  # the worst rank shows and counts for its node
                known = [(v, e) for e in ranks if (v := fl.value(facts[e.rank])) is not None]
                if known:
                    value, pick = min(known, key=lambda item: item[0])
                    values[fl.key][node] = value
            elif fl.kind == "same":
                value = fl.value(facts[pick.rank])
                if value is not None:
                    values[fl.key][node] = value
            cells[fl.key] = fl.cell(facts[pick.rank])
        node_rows.append(JobNode(node=node, node_source=ranks[0].node_source,
                                 hostnames=sorted({e.hostname for e in ranks}), ranks=[e.rank for e in ranks],
                                 status=worst([f for e in ranks for f in _findings(e)]), cells=cells))
    odd = odd_ones_out(values, {n: [e.rank for e in nodes[n]] for n in order})
    for row in node_rows:  # a node that is the odd one out is not "ok" either
        row.status = worst([f for f, named in odd if row.node in named] + [Finding("", row.status, "")])
        # the fields on which it is: the cells the app highlights (the findings say it only in words)
        row.odd = list(dict.fromkeys(f.rule_id.removeprefix("job-") for f, named in odd if row.node in named))
    return JobReport(
        launcher=launcher, world_size=world_size if world_size is not None else len(entries),
        fields=[JobFact(f.key, f.label) for f in FIELDS], nodes=node_rows,
        findings=[f for f, _ in odd] + node_findings(nodes, order),
        ranks=[JobRank(rank=e.rank, node=e.node_id, local_rank=e.local_rank, hostname=e.hostname,
                       status=e.check.get("status", "ok"), findings=e.check.get("findings", []),
                       machine=e.check.get("machine", {})) for e in sorted(entries, key=lambda e: e.rank)],
        store=store)


def odd_ones_out(values: dict[str, dict[int | str, Any]],
                 ranks: dict[int | str, list[int]]) -> list[tuple[Finding, list[int | str]]]:
    """Findings for the nodes whose value differs from the others' (see the module's docstring),
    each with the nodes it names."""
    out: list[tuple[Finding, list[int | str]]] = []
    flagged: dict[str, set[int | str]] = {}
    for fl in FIELDS:
        by_node = values.get(fl.key, {})
        if fl.kind == "show" or len(by_node) < 2 or len(set(by_node.values())) < 2:
            continue
        evidence = [f"{node_label(n)} (rank{'s' if len(ranks.get(n, [])) != 1 else ''} "
                    f"{_ranks_text(ranks.get(n, []))}): {fl.fmt(v)}" for n, v in by_node.items()]
        if fl.kind == "more":
            ref = statistics.median(by_node.values())
            low = {n: v for n, v in by_node.items() if v < ref * (1 - fl.tolerance) or (ref == UNLIMITED and v < ref)}
            flagged[fl.key] = set(low)
            groups = _group({n: v for n, v in low.items() if n not in flagged.get(fl.implied_by, ())})
            others = {n: v for n, v in by_node.items() if n not in low}
        else:
            counts = Counter(by_node.values()).most_common()
            if len(counts) > 1 and counts[0][1] == counts[1][1]:  # no majority: list them all
                listed = "; ".join(f"{_nodes_text(ids)}: {fl.what.format(fl.fmt(v))}" for v, ids in _group(by_node).items())
                out.append((Finding(f"job-{fl.key}", WARNING, f"no two nodes agree: {listed}",
                                    evidence, fl.cause, fl.fix), list(by_node)))
                continue
            majority = counts[0][0]
            groups = _group({n: v for n, v in by_node.items() if v != majority})
            others = {n: v for n, v in by_node.items() if v == majority}
        for value, ids in groups.items():
            where = f"{node_label(next(iter(others)))} has" if len(others) == 1 else "the others have"
            symptom = (f"{_nodes_text(ids)}: {fl.what.format(fl.fmt(value))} where {where} "
                       f"{_span(list(others.values()), fl.fmt)}")
            out.append((Finding(f"job-{fl.key}", WARNING, symptom, evidence, fl.cause, fl.fix), ids))
    return out


def _group(by_node: dict[int | str, Any]) -> dict[Any, list[int | str]]:
    out: dict[Any, list[int | str]] = {}
    for node, value in by_node.items():
        out.setdefault(value, []).append(node)
    return out


def _span(values: list[Any], fmt: Callable[[Any], str]) -> str:
    distinct = sorted(set(values), key=lambda v: (isinstance(v, str), v))
    if len(distinct) == 1:
        return fmt(distinct[0])
    if all(isinstance(v, (int, float)) for v in distinct):
        return f"{fmt(distinct[0])} to {fmt(distinct[-1])}"
    return " or ".join(fmt(v) for v in distinct)


def _findings(entry: RankEntry) -> list[Finding]:
    keys = Finding.__dataclass_fields__
    return [Finding(**{k: v for k, v in f.items() if k in keys}) for f in entry.check.get("findings", [])]


def node_findings(nodes: dict[int | str, list[RankEntry]], order: list[int | str]) -> list[Finding]:
    """Each rank's own check findings, once per symptom, naming the nodes that show it."""
    seen: dict[tuple[str, str], tuple[Finding, list[int | str]]] = {}
    for node in order:
        for entry in nodes[node]:
            for f in _findings(entry):
                first, where = seen.setdefault(f.key, (f, []))
                if node not in where:
                    where.append(node)
    out = []
    for first, where in seen.values():
        prefix = "all nodes" if len(where) == len(order) and len(order) > 1 else _nodes_text(where)
        out.append(Finding(first.rule_id, first.severity, f"{prefix}: {first.symptom}", first.evidence,
                           first.cause, first.fix, first.settings_change, first.threshold))
    return out
