"""``in_order=False``: where batches load unevenly, ready batches may overtake a slow one.

Functions of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.persistence` is): the search
calls :func:`measure` after the prefetch depth, the outcome words the choice with :func:`gain`.
Pure logic.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from loaderdoc import policy
from loaderdoc.probing.result import ConfigResult

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search


def measure(search: Search, base0: ConfigResult | None) -> None:
    """``in_order=False`` where batches take very unequal times to load (the 0-worker run's
    waits, each one batch's load): a slow batch then no longer holds back the ready ones behind
    it. Measured beside the pick (in turns), recommended only when it is faster by more than
    the tolerance. Bursty waits *with* workers are no trigger: beside other processes they come
    from the CPUs being shared (large samples beside a burnt core: p95 4x p50 at the pick, even
    loads with 0 workers), and keeping batches in order costs nothing there."""
    candidate = search.cheapest_near_best()
    if candidate is None or candidate[0] < 2 or search.halted() or not search.limits.in_order_supported:
        return
    if base0 is None or not base0.ok or not policy.spiky_loading(base0.wait.p50_ms, base0.wait.p95_ms):
        return
    why = f"batches load unevenly with 0 workers (p95 {base0.wait.p95_ms:.0f} ms vs p50 {base0.wait.p50_ms:.0f} ms)"
    settings = search.settings_for(candidate[0], candidate[1] or None, in_order=False)
    off = search.try_config(settings, f"in_order=False: {why}")
    if off is None or not off.ok or not off.batches_per_s:
        return
    if off.batches_per_s <= search.throughputs()[candidate] * (1 + search.tolerance()):
        return  # no faster than in order: one run shows it cannot pay
    # faster: the in-order twin again, beside it, so a change in the machine's load hits both alike
    search.try_config(search.settings_for(candidate[0], candidate[1] or None), "in_order=True again, beside it")


def gain(search: Search) -> tuple[float, float, int] | None:
    """(in_order=False mean, in_order=True fastest window) steps/s at the pick and the runs of
    the first, when both were measured. Against the fastest in-order window, not the mean: a
    later repeat that lowers the in-order mean is no evidence for the other setting."""
    choice = search.choice()
    if choice is None:
        return None
    off = [r.batches_per_s for r in search.results if r.ok and r.batches_per_s and not r.settings.in_order
           and policy.stream_key(r.settings) == choice.key]
    if not off:
        return None
    on = max(r.batches_per_s for r in search.measured(*choice.key))
    return statistics.fmean(off), on, len(off)
