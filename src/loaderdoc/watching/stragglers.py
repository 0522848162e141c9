"""Stragglers in a distributed run: the rank whose data wait is far above the others', and why.

In a DDP job every rank waits for the slowest at each gradient all-reduce, so one rank starved
for data slows them all: the slow rank's time goes to waiting for batches, the others' time goes
to the all-reduce (their "step" grows). A rank is a straggler when its wait per batch is at least
``policy.STRAGGLER_RATIO`` times the median of the *other* ranks' (the median of the others, so that
with two ranks the slow one is compared with the fast one, not with a median it pulls up), its loop
waits at least ``policy.NOT_STARVED_PCT`` of its time, and the gap is at least
``policy.STRAGGLER_FLOOR_S`` a batch.

The explanation compares what the hook recorded about each rank's process and loader: CPUs it
may use, /dev/shm, workers. When none of those differ, it says so: the cause is then in what the
rank reads (its shard of the data, its storage), which the records cannot see.

No torch, no textual.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

from loaderdoc import policy
from loaderdoc.base.units import cpus_text, fmt_bytes

LESS_SHARE = 0.8  # a fact counts as "less" below 80 % of the other ranks' median


@dataclass
class RankRun:
    """One rank's training loader, as the records of its process tell it."""

    rank: int
    node: str | None  # the node it ran on (node rank, SLURM node id or host name)
    wait_share: float | None
    wait_per_batch_s: float | None
    steps: int
    cpus: float | None = None  # CPUs its process may use (affinity, cgroup quota)
    shm_total_bytes: int | None = None
    num_workers: int | None = None


@dataclass
class Straggler:
    rank: int
    node: str | None
    wait_share: float
    others_wait_share: float  # the median of the other ranks'
    ratio: float  # its wait per batch / the other ranks' median (inf: the others never wait)
    differences: list[str] = field(default_factory=list)  # what about it is less than the others

    def text(self) -> str:
        where = f" on node {self.node}" if self.node is not None else ""
        why = ("; " + "; ".join(self.differences)) if self.differences else (
            "; its CPUs, /dev/shm and workers match the others': look at what it reads "
            "(its shard of the data, its storage)")
        how = ("waits for data where the other ranks do not" if self.ratio == float("inf") else
               f"waits {self.ratio:.1f}x the other ranks' median for data")
        return (f"rank {self.rank}{where} {how} ({self.wait_share * 100:.0f} % of its time against "
                f"{self.others_wait_share * 100:.0f} %){why}")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def _differences(run: RankRun, others: list[RankRun]) -> list[str]:
    """What this rank has less of than the other ranks' median, in words."""
    out: list[str] = []
    cpus = _median([o.cpus for o in others if o.cpus is not None])
    if run.cpus is not None and cpus and run.cpus < LESS_SHARE * cpus:
        out.append(f"its process may use {cpus_text(run.cpus)} where the others have {cpus_text(cpus)}")
    shm = _median([o.shm_total_bytes for o in others if o.shm_total_bytes is not None])
    if run.shm_total_bytes is not None and shm and run.shm_total_bytes < LESS_SHARE * shm:
        out.append(f"its /dev/shm is {fmt_bytes(run.shm_total_bytes)} where the others have {fmt_bytes(shm)}")
    workers = _median([o.num_workers for o in others if o.num_workers is not None])
    if run.num_workers is not None and workers is not None and run.num_workers < LESS_SHARE * workers:
        out.append(f"its loader has {policy.workers_text(run.num_workers)} where the others have "
                   f"{policy.workers_text(int(workers))}")
    return out


def find_stragglers(runs: list[RankRun]) -> list[Straggler]:
    """The ranks that wait for data far more than the others (none with fewer than two ranks)."""
    timed = [r for r in runs if r.wait_per_batch_s is not None and r.wait_share is not None]
    found: list[Straggler] = []
    for run in timed:
        others = [o for o in timed if o.rank != run.rank]
        base = _median([o.wait_per_batch_s for o in others])
        share = _median([o.wait_share for o in others])
        if base is None or share is None:
            continue
        if run.wait_share * 100 < policy.NOT_STARVED_PCT or run.wait_per_batch_s - base < policy.STRAGGLER_FLOOR_S:
            continue
        ratio = run.wait_per_batch_s / base if base > 0 else float("inf")
        if ratio < policy.STRAGGLER_RATIO:
            continue
        found.append(Straggler(run.rank, run.node, run.wait_share, share, ratio, _differences(run, others)))
    return sorted(found, key=lambda s: -s.ratio)


def rank_runs(ranks: list[dict[str, Any]]) -> list[RankRun]:
    """RankRun objects from plain dicts with the same keys (a report's ``ranks`` entries)."""
    names = set(RankRun.__dataclass_fields__)
    return [RankRun(**{k: v for k, v in r.items() if k in names}) for r in ranks]
