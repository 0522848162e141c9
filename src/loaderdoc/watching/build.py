"""The ``loaderdoc.watch/1`` report: every process's records merged, per-loader totals and
timelines, memory, and the findings of the rule catalogue fed with the run's evidence.

Built from what :mod:`loaderdoc.watching.hook` recorded (one records dict per process), once, as a
typed :class:`~loaderdoc.watching.report.WatchReport`; no torch, no textual. Each loader
becomes a :class:`~loaderdoc.watching.watched.LoaderReport` and goes through
``advice.rules.evaluate`` with the machine facts and the loader's settings as the run used them,
so a run is judged by the same catalogue and policy as ``check`` and ``probe``: the ``watch-*``
rules read the measurements, the machine and settings rules the facts (the probe and context
rules stay silent: there is no probe report or training context here; the few machine rules a
run's measurement outranks stay silent when given one). The definitions of wait, step and share
are in :mod:`loaderdoc.watching.watched`.
"""

from __future__ import annotations

import os
from typing import Any

from loaderdoc import policy
from loaderdoc.advice.findings import Finding, new_findings, proposed_change
from loaderdoc.watching.report import WATCH_SCHEMA, WatchReport
from loaderdoc.watching.rules.run import HEALTHY_RULE, STARVED_RULE
from loaderdoc.watching.watched import LoaderReport, TimelinePoint, WatchedEpoch

__all__ = ["HEALTHY_RULE", "MIN_STEPS", "STARVED_RULE", "WATCH_SCHEMA", "build_report", "watch_report"]

MIN_STEPS = policy.WATCH_MIN_BATCHES  # steady batches (after the first of an epoch) before a loader is judged
PROCESS_KEYS = ("hostname", "rank", "local_rank", "world_size", "group_rank", "slurm_nodeid", "affinity_cpus")


def machine_info() -> dict[str, Any]:
    """The little the report shows about the machine, read without cpuinfo or torch."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"cpus": os.cpu_count(), "affinity": affinity}


def process_entry(records: dict[str, Any]) -> dict[str, Any]:
    proc = records.get("process") or {}
    return {"pid": records.get("pid"), **{k: proc.get(k) for k in PROCESS_KEYS}}


def timeline(samples: list[dict[str, Any]], number: Any) -> list[TimelinePoint]:
    """Per-interval deltas of one loader's cumulative (steps, wait_s, step_s) in the samples."""
    out, prev = [], (0, 0.0, 0.0)
    for sample in samples:
        cum = (sample.get("loaders") or {}).get(str(number))
        if not cum or len(cum) < 3:
            continue
        out.append(TimelinePoint(t_s=sample.get("t_s"), steps=max(0, cum[0] - prev[0]),
                                 wait_s=max(0.0, cum[1] - prev[1]), step_s=max(0.0, cum[2] - prev[2])))
        prev = (cum[0], cum[1], cum[2])
    return out


def loader_report(raw: dict[str, Any], records: dict[str, Any] | None = None) -> LoaderReport:
    """One DataLoader: where it ran, its settings, its epochs as recorded and its timeline."""
    records = records or {}
    io = _io_unread(records)  # the reads, once judged (here: why they were not measured, or None)
    return LoaderReport(
        number=raw.get("loader"), role=raw.get("role"), pid=records.get("pid"),
        rank=(records.get("process") or {}).get("rank"), cls=raw.get("class"), settings=dict(raw.get("settings", {})),
        # under --apply: what the script asked, the keys --apply changed, the tables that matched
        applied={k: raw[k] for k in ("asked", "applied", "apply_tables") if k in raw},
        epochs=[WatchedEpoch.from_record(e, n) for n, e in enumerate(raw.get("epochs", []))],
        timeline=timeline(records.get("samples") or [], raw.get("loader")),
        io=io, io_unreadable=(io or {}).get("reason"), replays=raw.get("replays"),
        iter_error=raw.get("iter_error"), init_error=raw.get("init_error"),
        init_site=raw.get("site") if raw.get("init_error") else None)


def _io_unread(records: dict[str, Any]) -> dict[str, Any] | None:
    io = records.get("io")
    if isinstance(io, dict) and io.get("readable") is False:
        return {"readable": False, "reason": io.get("reason")}
    return None


def memory_entry(records: dict[str, Any]) -> dict[str, Any]:
    samples = records.get("samples") or []
    keys = ("t_s", "main_pss_bytes", "workers", "workers_pss_bytes", "shm_used_bytes")
    totals = [s.get("shm_total_bytes") for s in samples if s.get("shm_total_bytes")]
    return {"pid": records.get("pid"), "rank": (records.get("process") or {}).get("rank"),
            "samples": [{k: s.get(k) for k in keys} for s in samples],
            "shm_peak_used_bytes": records.get("shm_peak_used_bytes"),
            "shm_total_bytes": totals[-1] if totals else None}


def gpu_entry(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    blocks = [r["gpu"] for r in runs if isinstance(r.get("gpu"), dict)]
    timed = [b for b in blocks if b.get("timing") == "cuda-events"]
    return (timed or blocks or [None])[0]


def loader_settings(raw: dict[str, Any]):
    """The settings the run used, as the catalogue's LoaderSettings (None when one is not a plain
    value: a rule then judges the machine only, as ``check`` does for a setting computed at run time)."""
    from loaderdoc.base.errors import SettingsError
    from loaderdoc.base.settings import LoaderSettings

    known = {k: v for k, v in raw.items() if v is not None}
    try:
        return LoaderSettings.from_mapping(known, where="the run: ", strict=False)
    except (SettingsError, TypeError, ValueError):
        return None


def node_facts(facts, processes: list[dict[str, Any]]):
    """The launcher's facts, told how many ranks ran on this node when the launcher's own
    environment does not say (torchrun sets LOCAL_WORLD_SIZE in the ranks, not around them)."""
    import socket

    from loaderdoc.system.facts import Reading

    host = socket.gethostname()
    here = {p["rank"] for p in processes if p.get("rank") is not None and p.get("hostname") in (host, None)}
    if len(here) > 1 and facts.distributed.local_world_size.get() is None:
        facts.distributed.local_world_size = Reading.of(len(here), "ranks whose records loaderdoc watch read")
    return facts


def node_shm(memory: list[dict[str, Any]], processes: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    """Per pid, the /dev/shm peak of its node: the highest any process on that host saw (they share
    one /dev/shm, and each sampled it at its own moments)."""
    host = {p["pid"]: p.get("hostname") for p in processes}
    best: dict[Any, dict[str, Any]] = {}
    for m in memory:
        h = host.get(m["pid"])
        if m.get("shm_peak_used_bytes") is not None and (
                h not in best or m["shm_peak_used_bytes"] > best[h]["shm_peak_used_bytes"]):
            best[h] = m
    return {m["pid"]: best.get(host.get(m["pid"]), m) for m in memory}


def node_of(process: dict[str, Any]) -> str | None:
    """The node a process ran on: torchrun's node rank, SLURM's node id, else the host name
    (containers on different hosts may share one)."""
    for key in ("group_rank", "slurm_nodeid"):
        if process.get(key) is not None:
            return str(process[key])
    return process.get("hostname")


def rank_table(entries: list[LoaderReport], processes: list[dict[str, Any]],
               memory: list[dict[str, Any]], quotas: dict[Any, float | None] | None = None) -> list[dict[str, Any]]:
    """One row per rank (when the run had two or more): its training loader (the one with the most
    waited batches) with the wait and the facts the straggler rule compares. Empty otherwise.
    ``quotas``: the cgroup CPU quota of each report's node (by ``source``; None: one node): a rank
    may use the least of its affinity and its node's quota."""
    quotas = quotas or {}
    def key(item: dict[str, Any]) -> tuple[Any, Any]:  # source: which node's report, once merged
        return item.get("source"), item.get("pid")

    by_pid = {key(p): p for p in processes}
    shm = {key(m): m.get("shm_total_bytes") for m in memory}
    main: dict[int, LoaderReport] = {}
    for entry in entries:
        rank = entry.rank
        if rank is not None and (rank not in main or entry.waits > main[rank].waits):
            main[rank] = entry
    if len(main) < 2:
        return []
    rows = []
    for rank, entry in sorted(main.items()):
        proc, t = by_pid.get((entry.source, entry.pid), {}), entry.totals
        workers = entry.settings.get("num_workers")
        row = {"rank": rank, "node": node_of(proc), "pid": entry.pid, "loader": entry.number,
               "wait_share": t.wait_share, "wait_per_batch_s": t.wait_per_batch_s,
               "steps": t.steps, "cpus": _least(proc.get("affinity_cpus"), quotas.get(entry.source)),
               "shm_total_bytes": shm.get((entry.source, entry.pid)),
               "num_workers": workers if isinstance(workers, int) else None}
        if entry.source is not None:
            row["source"] = entry.source
        rows.append(row)
    return rows


def _least(*values: float | None) -> float | None:
    known = [v for v in values if v is not None]
    return min(known) if known else None


def cpu_entry(use) -> dict[str, Any] | None:
    """The loader's CPU accounting as the report shows it (None: not recorded)."""
    if use is None:
        return None
    return {"budget_cpus": use.budget, "load_cpu_per_batch_s": use.load_cpu_s, "load_is_cpu": use.load_is_cpu,
            "load_queued_per_batch_s": use.load_queued_s,
            "step_cpu_per_step_s": use.step_cpu_s, "step_wall_per_step_s": use.step_wall_s,
            "step_is_cpu": use.step_is_cpu, "step_threads": use.step_threads, "torch_threads": use.torch_threads,
            "handover_per_batch_s": use.handover_cpu_s, "idle_wait_share": use.idle_share,
            "cpu_per_batch_s": use.cpu_per_batch_s, "used_cpus": use.used_cpus, "others_cpus": use.others_cpus,
            "saturated": use.saturated, "rate_per_s": use.rate, "ceiling_per_s": use.ceiling,
            "ceiling_matters": use.ceiling_matters,
            # the loop's own thread apart from the process's others (None: recorded before it)
            "loop_wait_cpu_per_batch_s": use.wait_loop_cpu_s, "loop_step_cpu_per_step_s": use.step_loop_cpu_s,
            "others_wait_cpu_per_batch_s": use.others_wait_cpu_s, "spin_per_batch_s": use.spin_s,
            "spin_cpus": use.spin_cpus, "work_cpus": use.work_cpus, "parallel_share": use.parallel_share}


def io_entry(reads, use, watch: LoaderReport) -> dict[str, Any] | None:
    """The loader's reads as the report shows them, with what they say (None: not recorded)."""
    if reads is None:
        return None
    share = use.idle_share if use is not None else watch.wait_share
    waiting = watch.waits >= MIN_STEPS and share is not None and 100 * share >= policy.NOT_STARVED_PCT

    def counts(c):
        return None if c is None else {"rchar_bytes": c[0], "read_calls": c[1], "read_bytes": c[2]}

    return {"readable": True, "main": counts(reads.main), "workers": counts(reads.workers),
            "steady_batches": reads.batches, "steady_s": reads.seconds,
            "rchar_per_batch_bytes": reads.rchar_per_batch, "read_calls_per_batch": reads.calls_per_batch,
            "read_bytes_per_batch": reads.device_per_batch, "rchar_per_s": reads.rchar_per_s,
            "read_bytes_per_s": reads.device_per_s, "device_share": reads.device_share,
            "bytes_per_read_call": reads.bytes_per_call, "epoch_read_bytes": list(reads.epoch_device),
            "reads_from": reads.reads_from, "verdict": reads.verdict(waiting, use.load_is_cpu if use else None)}


def judge(entries: list[LoaderReport], memory: dict[Any, dict[str, Any]], facts,
          ranks: list[dict[str, Any]] | None = None) -> list[Finding]:
    """Every loader through the catalogue; a finding two loaders share (a machine rule, the node's
    /dev/shm) once. ``ranks``: the rank table, handed to each rank's training loader."""
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.watching import rules  # noqa: F401  (the watch rules join the catalogue)
    from loaderdoc.watching.stragglers import rank_runs

    where = len({e.pid for e in entries}) > 1
    job = rank_runs(ranks or [])
    trains = {(r["pid"], r["loader"]) for r in ranks or []}
    out: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    budget = facts.cpus_per_rank
    ranks = max(1, facts.distributed.ranks_on_this_node)
    for entry in entries:
        mem = memory.get(entry.pid) or {}
        entry.shm_peak_used_bytes, entry.shm_total_bytes = mem.get("shm_peak_used_bytes"), mem.get("shm_total_bytes")
        entry.named_with_rank = where
        use = entry.cpu_use(budget, ranks)
        entry.cpu = cpu_entry(use)
        entry.io = io_entry(entry.io_use(), use, entry) or entry.io
        if (entry.pid, entry.number) in trains:
            entry.job = job
        fired = evaluate(facts, loader_settings(entry.settings), watch=entry, with_ok=True)
        entry.proposed = proposed_change(fired)
        out += new_findings(fired, seen)
    return sorted(out, key=lambda f: -f.rank)


def build_report(records: dict[str, Any] | list[dict[str, Any]] | None, *, command: list[str] | None,
                 exit_code: int | None, machine: dict[str, Any] | None = None, facts=None) -> dict[str, Any]:
    """The ``loaderdoc.watch/1`` document of :func:`watch_report` (``loaderdoc.watch(loader).report()``)."""
    return watch_report(records, command=command, exit_code=exit_code, machine=machine, facts=facts).to_json()


def watch_report(records: dict[str, Any] | list[dict[str, Any]] | None, *, command: list[str] | None,
                 exit_code: int | None, machine: dict[str, Any] | None = None, facts=None) -> WatchReport:
    """The report for one run from every process's records (a dict: one process; None or [] when
    the run iterated no DataLoader). ``facts``: the machine the rules judge (detected when None)."""
    runs = [records] if isinstance(records, dict) else list(records or [])
    machine = machine if machine is not None else machine_info()
    processes = [process_entry(r) for r in runs]
    memory = [memory_entry(r) for r in runs]
    loaders = [loader_report(raw, r) for r in runs for raw in r.get("loaders", [])]
    findings: list[Finding] = []
    ranks: list[dict[str, Any]] = []
    if loaders:
        if facts is None:
            from loaderdoc.system.detect import detect

            facts = detect()
        machine = {**machine, "cpu_quota": facts.cpu.cgroup_quota.get()}  # what --merge compares across nodes
        ranks = rank_table(loaders, processes, memory, {None: machine["cpu_quota"]})
        findings = judge(loaders, node_shm(memory, processes), node_facts(facts, processes), ranks)
    traces = [{"pid": r.get("pid"), "rank": (r.get("process") or {}).get("rank"), **r["trace"]}
              for r in runs if isinstance(r.get("trace"), dict)]
    return WatchReport(command=list(command) if command is not None else None, exit_code=exit_code,
                       processes=processes, ranks=ranks, loaders=loaders, memory=memory, gpu=gpu_entry(runs),
                       findings=findings, machine=machine, traces=traces or None)  # traces: under --trace only
