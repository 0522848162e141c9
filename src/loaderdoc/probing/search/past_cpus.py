"""CPU work whose climb stopped at as many workers as CPUs: one worker more, where that size left room.

A function of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.repeats` is). Pure logic.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from loaderdoc import policy
from loaderdoc.probing.model import by_workers

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search


def measure(search: Search) -> None:
    """CPU work whose climb stopped at as many workers as CPUs: measure one worker more where
    that size left room, i.e. the step still waited for data while part of the CPUs stood idle
    (handing batches over, the training process unpickling them, workers waiting for indices,
    a sleeping step), each by enough that using it could be faster by the tolerance.

    The model's CPU ceiling says more workers cannot pay; measured, 3-16 pure-Python decode
    workers on 2 CPUs ran 12-18 % faster than 2. The size is kept only on the policy's evidence
    (:func:`~loaderdoc.policy.beyond_cpus_evidence`: for CPU work, repeated runs in turns,
    which :func:`~loaderdoc.probing.search.repeats.repeat_contenders` measures when it looks faster)."""
    per_rank = search.limits.cpu_budget
    if per_rank is None or search.halted() or search.others:
        return  # beside busy processes the climb already measures past the CPUs (shared_cpus)
    if search.cpu_ceiling(next(iter(search.measured(0)), None)) is None:
        return  # not CPU work: the climb is not capped at the CPUs
    limit = policy.cpu_limit(per_rank)
    more = limit + 1
    if more > search.max_workers or search.measured(more) or not search.measured(limit):
        return
    table = {n: v for n, v in by_workers(search.fitting_throughputs()).items() if n > 0}
    if max(table, key=table.get) != limit:
        return  # fewer workers were as fast: the curve has levelled off below the CPUs
    found = room(search, limit, per_rank)
    if found is None:
        return
    starved, idle = found
    search.notes.append(
        f"num_workers={limit} (as many as the {per_rank:g} CPUs allow) still waited for data {starved:.1f} % of "
        f"the time while {idle:.0%} of the CPUs stood idle: measuring {more}, one past the CPUs (recommended "
        "only if it measures faster in every repeated run)")
    search.try_config(search.settings_for(more), "past the CPUs: the CPUs stood idle while the step waited")

def room(search: Search, limit: int, per_rank: float) -> tuple[float, float] | None:
    """(the step's wait %, the CPUs' idle share) at ``limit`` workers, where removing either
    would make it faster by at least the tolerance; None where one of them leaves no room or
    was not read."""
    rows = search.measured(limit)
    starved = statistics.fmean(r.starvation_pct or 0.0 for r in rows)
    idle_shares = [policy.idle_cpu_share(r, per_rank) for r in rows]
    if any(share is None for share in idle_shares):
        return None
    idle = statistics.fmean(idle_shares)
    tolerance = search.tolerance()
    if starved >= 100.0 or idle >= 1.0:
        return None
    gains = (1.0 / (1.0 - starved / 100.0) - 1.0, 1.0 / (1.0 - idle) - 1.0)
    return (starved, idle) if min(gains) >= tolerance else None
