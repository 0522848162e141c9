"""CPU-bound loading beside other busy processes: which sizes to measure, with no climb.

A function of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.prefetch` is): the search
calls :func:`measure` instead of its climb when the 0-worker fetch was CPU work, other processes
kept CPUs busy beside it, and the model predicts more workers than CPUs. Pure logic.

The kernel shares CPU time per runnable thread, so the model says every worker more wins time from
the other processes and the curve keeps rising towards the CPUs. Measured curves flatten sooner:
each worker costs the others something (caches, memory bandwidth, handing batches over). The share
alone predicted busy torchvision 24-30 % too fast at 11 workers, and a run of many workers is the
costliest of all (their start-up on shared CPUs, and a window in which each finishes two batches).
So the model is calibrated on two cheaper sizes first (:func:`~loaderdoc.probing.model.fit_contention`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc import policy
from loaderdoc.probing.model import ContentionFit, by_workers, fit_contention

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search


def measure(search: Search, predicted: int) -> None:
    """The CPU count first (the reference any gain past the CPUs is judged against), half way to
    the ``predicted`` size, then the size the model calibrated on those two predicts where that is
    fewer than ``predicted``, else ``predicted`` itself (each only if not measured yet). Where either
    calibration run failed, nothing larger is started: many workers are what failed or would cost most."""
    limit = policy.cpu_limit(search.limits.cpu_budget)
    half = max(limit + 1, (predicted + limit) // 2)
    for n, purpose in ((limit, f"verify: as many workers as the {search.limits.cpu_budget:g} CPUs allow"),
                       (half, f"verify: half way to the predicted {predicted}")):
        if 1 <= n <= search.max_workers and not search.measured(n):
            result = search.try_config(search.settings_for(n), purpose)
            if result is None or search.halted():
                return
            if not result.ok:
                search.notes.append(f"num_workers={n} failed ({result.error}); no larger size measured")
                return
    measured = by_workers(search.fitting_throughputs())
    fit = fit_contention(search.model, measured, limit, half) if search.model is not None else None
    nxt, purpose = predicted, "verify: the predicted size"
    if fit is not None:
        pick, top = fit.pick(search.tolerance())
        if pick < predicted:
            nxt, purpose = pick, f"verify: the prediction calibrated on {limit} and {half} workers"
        search.notes.append(_fit_text(fit, measured, pick, top, predicted, search.tolerance()))
    if 1 <= nxt <= search.max_workers and not search.measured(nxt):
        search.try_config(search.settings_for(nxt), purpose)


def _fit_text(fit: ContentionFit, measured: dict[int, float], pick: int, top: int, predicted: int,
              tolerance: float) -> str:
    head = (f"num_workers={fit.low} and {fit.high} ran at {measured[fit.low]:.1f} and {measured[fit.high]:.1f} "
            f"steps/s, where the CPUs' share alone predicted {fit.expected_high:.1f} for {fit.high}")
    if pick >= predicted:
        # a fit of two small sizes that says "more" extrapolates noise (large samples beside a burnt
        # core: 2 -> 3 workers gained more than the share, and the fit said 11 where 4 were fastest);
        # measured curves only flatten sooner than the model, so its own size is the most measured
        held = "the share held" if fit.contention <= 0 else f"each worker past the CPUs costs about {fit.contention:.1%}"
        return (f"{head}: {held}, and the calibrated curve tops out no sooner than the model's, so the next "
                f"size measured is the model's own {policy.workers_text(predicted)} (measured curves flatten "
                "sooner than the model, never later)")
    return (f"{head}: each worker past the CPUs costs about {fit.contention:.1%} of the rate, so the curve tops "
            f"out near {top} workers and about {policy.workers_text(pick)} reach within {tolerance:.0%} of it")
