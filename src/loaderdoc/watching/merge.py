"""One report for a job watched on several nodes: ``loaderdoc watch --merge node0.json node1.json``.

A ``loaderdoc watch`` sees the ranks of its own node (their records are files in its private
directory). On several nodes each node's watch writes its report; merging them puts every rank in
one ``ranks`` table and looks for stragglers across the whole job. Each node's own findings were
judged against that node's machine and are kept as they are (a finding two nodes share, once);
only the straggler rule runs again, on the merged table. Processes, loaders and memory entries
carry ``source`` (the index of the report they came from): process ids repeat across machines,
containers above all. Works on typed reports (:class:`~loaderdoc.watching.report.WatchReport`,
as :mod:`.report_file` reads them). No torch, no textual.
"""

from __future__ import annotations

from typing import Any

from loaderdoc.advice.findings import Finding, new_findings
from loaderdoc.base.errors import UserError
from loaderdoc.watching.build import gpu_entry, rank_table
from loaderdoc.watching.report import WatchReport
from loaderdoc.watching.watched import LoaderReport

STRAGGLER_RULE = "watch-straggler-rank"


def _tagged(items: list[dict[str, Any]], source: int) -> list[dict[str, Any]]:
    return [{**item, "source": source} for item in items]


def stragglers(ranks: list[dict[str, Any]], loaders: list[LoaderReport]) -> list[Finding]:
    """The straggler rule over a merged rank table (each rank's training loader is its evidence)."""
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.system.facts import MachineFacts
    from loaderdoc.watching import rules  # noqa: F401  (the watch rules join the catalogue)
    from loaderdoc.watching.stragglers import rank_runs

    job = rank_runs(ranks)
    by_key = {(lo.source, lo.pid, lo.number): lo for lo in loaders}
    out: list[Finding] = []
    for row in ranks:
        loader = by_key.get((row.get("source"), row["pid"], row["loader"]))
        if loader is None:
            continue
        # the rule reads the run alone, the loader named with its rank, with no node's /dev/shm
        # (machine rules were judged on each node already)
        loader.named_with_rank, loader.job = True, job
        loader.shm_peak_used_bytes = loader.shm_total_bytes = None
        out += [f for f in evaluate(MachineFacts(), None, watch=loader) if f.rule_id == STRAGGLER_RULE]
    return out


def program_of(command: list[str] | None) -> str | None:
    """The program a command runs: the first ``*.py`` argument's file name, or the module after
    ``-m`` (``torch.distributed.run``'s own skipped: its script is the program); None where unknown."""
    args = list(command or [])
    for i, arg in enumerate(args):
        if arg == "-m" and i + 1 < len(args) and args[i + 1] not in ("torch.distributed.run", "torch.distributed.launch"):
            return args[i + 1]
        if arg.endswith(".py"):
            return arg.rsplit("/", 1)[-1]
    return None


def _one_program(reports: list[WatchReport], names: list[str]) -> None:
    """Every report's command runs the same program (a job's nodes run one script)."""
    programs = [(program_of(r.command), name) for r, name in zip(reports, names, strict=True)]
    known = [(p, name) for p, name in programs if p is not None]
    for program, name in known[1:]:
        if program != known[0][0]:
            raise UserError(f"watch --merge: {known[0][1]} ran {known[0][0]} and {name} ran {program}: two "
                            "programs, not one job's nodes; merge the reports of one job")


def _no_run_twice(reports: list[WatchReport], names: list[str]) -> None:
    """No run in two reports: two runs never time their loaders' waits and steps to the same
    figures, so equal figures are one run, whatever else of a copy was edited (a host, a rank)."""
    where: dict[tuple, str] = {}
    for report, name in zip(reports, names, strict=True):
        measured = tuple((lo.totals.steps, lo.totals.wait_s, lo.totals.step_s) for lo in report.loaders)
        if not any(steps for steps, _, _ in measured):
            continue
        if where.setdefault(measured, name) != name:
            raise UserError(f"watch --merge: {where[measured]} and {name} are the same run (their loaders' waits "
                            "and steps are timed alike to the last digit); merge each node's report once")


def merge(reports: list[WatchReport], names: list[str]) -> WatchReport:
    """One report from several (``names``: where each came from)."""
    processes, loaders, memory = [], [], []
    kept: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    where_rank: dict[int, str] = {}
    _one_program(reports, names)
    for source, report in enumerate(reports):
        for proc in report.processes:
            rank = proc.get("rank")
            if rank is not None and where_rank.setdefault(rank, names[source]) != names[source]:
                raise UserError(f"watch --merge: rank {rank} is in both {where_rank[rank]} and {names[source]}: "
                                "merge the reports of one job, one per node")
        processes += _tagged(report.processes, source)
        for loader in report.loaders:
            loader.source = source
        loaders += report.loaders
        memory += _tagged(report.memory, source)
        kept += new_findings([f for f in report.findings if f.rule_id != STRAGGLER_RULE], seen)
    _no_run_twice(reports, names)  # after the ranks: a copy left as it was is first a rank twice
    ranks = rank_table(loaders, processes, memory,
                       {i: (r.machine or {}).get("cpu_quota") for i, r in enumerate(reports)})
    findings = sorted(kept + stragglers(ranks, loaders), key=lambda f: -f.rank)
    codes = [r.exit_code for r in reports if r.exit_code is not None]
    return WatchReport(command=None, exit_code=max(codes, key=abs) if codes else None,  # the worst node's
                       processes=processes, ranks=ranks, loaders=loaders, memory=memory,
                       gpu=gpu_entry([{"gpu": r.gpu} for r in reports]), findings=findings,
                       machine=reports[0].machine if reports else None, merged_from=list(names),
                       commands=[r.command for r in reports], machines=[r.machine for r in reports])


def merge_reports(reports: list[dict[str, Any]], names: list[str]) -> dict[str, Any]:
    """The merged ``loaderdoc.watch/1`` document of report documents (each checked as the app reads it)."""
    from loaderdoc.watching.report_file import watch_report_from

    return merge([watch_report_from(r, name) for r, name in zip(reports, names, strict=True)], names).to_json()
