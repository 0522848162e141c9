"""One report for a job watched on several nodes: ``loaderdoc watch --merge node0.json node1.json``.

A ``loaderdoc watch`` sees the ranks of its own node (their records are files in its private
directory). On several nodes each node's watch writes its report; merging them puts every rank in
one ``ranks`` table and looks for stragglers across the whole job. Each node's own findings were
judged against that node's machine and are kept as they are (a finding two nodes share, once);
only the straggler rule runs again, on the merged table. Processes, loaders and memory entries
carry ``source`` (the index of the report they came from): process ids repeat across machines,
containers above all. No torch, no textual.
"""

from __future__ import annotations

from typing import Any

from loaderdoc.advice.findings import Finding, findings_from_json, new_findings
from loaderdoc.errors import UserError
from loaderdoc.watching.report import assemble, evidence_of, gpu_entry, rank_table

STRAGGLER_RULE = "watch-straggler-rank"


def _tagged(items: list[dict[str, Any]], source: int) -> list[dict[str, Any]]:
    return [{**item, "source": source} for item in items]


def stragglers(ranks: list[dict[str, Any]], loaders: list[dict[str, Any]]) -> list[Finding]:
    """The straggler rule over a merged rank table (each rank's training loader is its evidence)."""
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.advice.stragglers import rank_runs
    from loaderdoc.system.facts import MachineFacts

    job = rank_runs(ranks)
    by_key = {(e.get("source"), e.get("pid"), e.get("loader")): e for e in loaders}
    out: list[Finding] = []
    for row in ranks:
        entry = by_key.get((row.get("source"), row["pid"], row["loader"]))
        if entry is None:
            continue
        watch = evidence_of(entry, None, where=True)
        watch.rank, watch.job = row["rank"], job
        # the straggler rule reads the run alone; machine rules were judged on each node already
        out += [f for f in evaluate(MachineFacts(), None, watch=watch) if f.rule_id == STRAGGLER_RULE]
    return out


def merge_reports(reports: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """One ``loaderdoc.watch/1`` report from several (``names``: where each came from)."""
    processes, loaders, memory = [], [], []
    kept: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    where_rank: dict[int, str] = {}
    for source, report in enumerate(reports):
        for proc in report.get("processes") or []:
            rank = proc.get("rank")
            if rank is not None and where_rank.setdefault(rank, names[source]) != names[source]:
                raise UserError(f"watch --merge: rank {rank} is in both {where_rank[rank]} and {names[source]}: "
                                "merge the reports of one job, one per node")
        processes += _tagged(report.get("processes") or [], source)
        loaders += _tagged(report.get("loaders") or [], source)
        memory += _tagged(report.get("memory") or [], source)
        kept += new_findings([f for f in findings_from_json(report.get("findings") or [])
                              if f.rule_id != STRAGGLER_RULE], seen)
    ranks = rank_table(loaders, processes, memory,
                       {i: (r.get("machine") or {}).get("cpu_quota") for i, r in enumerate(reports)})
    findings = sorted(kept + stragglers(ranks, loaders), key=lambda f: -f.rank)
    codes = [r.get("exit_code") for r in reports if r.get("exit_code") is not None]
    report = assemble(command=None, exit_code=max(codes, key=abs) if codes else None,  # the worst node's
                      processes=processes, ranks=ranks, loaders=loaders, memory=memory, gpu=gpu_entry(reports),
                      findings=findings, machine=reports[0].get("machine") if reports else None)
    return {**report, "merged_from": list(names), "commands": [r.get("command") for r in reports],
            "machines": [r.get("machine") for r in reports]}
