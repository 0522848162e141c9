"""The search's answer: the recommended settings and the reasons, each with its evidence.

What the search measured goes through :func:`loaderdoc.policy.choose`; this module words the
choice (why these workers, this prefetch, persistence, pinning) for the report. Pure logic.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loaderdoc import policy
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import MiB
from loaderdoc.policy import NOT_STARVED_PCT, TOLERANCE
from loaderdoc.probing.model import breakdown, by_workers, prediction
from loaderdoc.probing.result import Breakdown, ConfigResult, Prediction
from loaderdoc.probing.search import persistence

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search


ITERABLE_SHUFFLE = ("shuffle=False: an IterableDataset decides its own order (DataLoader refuses shuffle=True "
                    "and a sampler for it); shuffle inside the stream (a shuffle buffer) if training needs it")


@dataclass
class SearchOutcome:
    results: list[ConfigResult] = field(default_factory=list)
    recommended: LoaderSettings | None = None
    reasons: list[str] = field(default_factory=list)
    stopped: str = ""
    breakdown: list[Breakdown] = field(default_factory=list)
    prediction: Prediction | None = None


# ---- the recommendation -----------------------------------------------------------------
def outcome(search: Search) -> SearchOutcome:
    outcome = SearchOutcome(results=search.results, stopped=search.stopped or "settled")
    table = search.throughputs()
    if not table:
        if outcome.stopped == "settled":
            outcome.stopped = "failures"
        outcome.reasons = ["no configuration could be measured"] + search.notes
        return outcome
    reasons: list[str] = []
    choice = search.choice()
    misfits = {k: why for k in table if (why := search.misfit(k))}
    for key, why in misfits.items():
        reasons.append(f"excluded num_workers={key[0]}, prefetch_factor={key[1]}: {why}")
    if choice is None:
        outcome.reasons = reasons + ["no measured configuration fits this machine's memory"] + search.notes
        return outcome
    for key, why in choice.excluded.items():
        if key not in misfits:
            reasons.append(f"not chosen: {policy.key_text(key)} ({table[key]:.1f} steps/s): {why}")
    candidate = choice.key
    fitting = {k: v for k, v in table.items() if k not in choice.excluded}
    best_key = choice.best_key
    best_rate, rate = choice.best_rate, choice.rate
    tol = choice.tolerance
    if round(tol * 100) > round(TOLERANCE * 100):
        reasons.append(f"tolerance {tol * 100:.0f} % instead of {TOLERANCE * 100:.0f} %: repeated runs of one "
                       "configuration differed that much here, so smaller gaps are noise")
    workers, prefetch = candidate
    settings = search.base.replace(num_workers=workers)
    if workers == 0:
        reasons.insert(0, f"num_workers=0: {rate:.1f} steps/s" + (
            " is the best measured" if best_key == candidate else
            f", within {tol * 100:.0f} % of the best ({best_rate:.1f} steps/s at num_workers={best_key[0]})"))
    else:
        count = len(search.measured(*candidate))
        where = "the best measured" if best_key == candidate else (
            f"within {tol * 100:.0f} % of the best ({best_rate:.1f} steps/s at num_workers={best_key[0]}, "
            f"prefetch_factor={best_key[1]})")
        reasons.insert(0, f"num_workers={workers}: {rate:.1f} steps/s (mean of {count} run{'s' * (count > 1)}), {where}; "
                          "the fewest workers that fast")
        if choice.oversubscribed and choice.beyond_cpus is not None:
            reasons.insert(1, f"num_workers={workers} is more than the {search.limits.cpu_budget:g} CPUs because "
                              + choice.beyond_cpus.text(search.limits.cpu_budget))
        fewer = [k for k in fitting if k[0] < workers]
        if fewer:
            k = max(fewer)
            reasons.append(f"num_workers={k[0]} reached only {fitting[k]:.1f} steps/s")
        settings = settings.replace(prefetch_factor=prefetch)
        alt = [k for k in fitting if k[0] == workers and k[1] != prefetch]
        if alt:
            k = alt[0]
            reasons.append(f"prefetch_factor={prefetch}: {rate:.1f} steps/s vs {fitting[k]:.1f} with prefetch_factor={k[1]}")
        else:
            rows = search.measured(*candidate)
            starved = statistics.fmean(r.starvation_pct or 0 for r in rows)
            reasons.append(f"prefetch_factor={prefetch}: torch's default; a deeper queue was not needed "
                           f"(the step waited {starved:.0f} % of the time, waits steady)"
                           if starved < NOT_STARVED_PCT else
                           f"prefetch_factor={prefetch}: torch's default (a deeper queue was not measured)")
        settings = settings.replace(persistent_workers=_choose_persistent(search, candidate, rate, reasons))
        settings = settings.replace(in_order=_choose_in_order(search, reasons))
    if search.limits.cuda:
        pinned = [r for r in search.results if r.ok and r.settings.pin_memory]
        settings = settings.replace(pin_memory=True)
        if pinned and pinned[-1].h2d_pinned_ms is not None:
            r = pinned[-1]
            reasons.append(f"pin_memory=True: a batch copies to the GPU in {r.h2d_pinned_ms:.2f} ms pinned "
                           f"vs {r.h2d_pageable_ms:.2f} ms pageable")
        else:
            reasons.append("pin_memory=True: CUDA is present and pinned copies can overlap the step (not measured)")
    else:
        reasons.append("pin_memory=False: no CUDA device, pinning would only cost RAM (torch warns and ignores it)")
    if search.limits.iterable:
        reasons.append(ITERABLE_SHUFFLE)
    chosen_starved = statistics.fmean(r.starvation_pct or 0 for r in search.measured(*candidate))
    if search.stopped in ("budget", "cancelled", "interrupted") and chosen_starved >= NOT_STARVED_PCT:
        # the best so far is not an answer when the search was cut short while still starved
        reasons.insert(1, f"provisional: the probe stopped ({search.stopped}) while the step still waited "
                          f"{chosen_starved:.0f} % of the time; this is the best measured so far, not what "
                          "the data needs: rerun with a larger --budget")
    if len(table) == 1 and search.stopped == "budget":
        reasons.append(f"only num_workers={next(iter(table))[0]} could be measured within the "
                       f"{search.limits.budget_s:.0f} s budget; a larger budget lets the probe try other sizes")
    outcome.breakdown = _breakdowns(search, candidate)
    if search.model is not None:
        measured = {n: round(v, 3) for n, v in by_workers(table).items()}
        outcome.prediction = prediction(search.model, measured, workers)
        p = outcome.prediction
        if p.pick_predicted_per_s and p.pick_measured_per_s is not None:
            reasons.append(f"predicted {p.pick_predicted_per_s:.1f} steps/s at num_workers={workers} from the 0-worker "
                           f"run, measured {p.pick_measured_per_s:.1f} ({p.error_pct:+.0f} %); the model predicted "
                           f"num_workers={p.workers}")
    if search.stopped == "settled":
        reasons.append(f"settled after {len(search.results)} runs in {search.elapsed:.0f} s of the "
                       f"{search.limits.budget_s:.0f} s budget: {search.settled_why or 'nothing left that could change the pick'}")
    outcome.recommended = settings
    outcome.reasons = reasons + search.notes
    return outcome


def _breakdowns(search: Search, key: tuple[int, int]) -> list[Breakdown]:
    """Where the step's time goes with 0 workers and at the pick (the pick's latest run)."""
    out = []
    zero = search.measured(0)
    if zero:
        out.append(breakdown(zero[-1], "baseline: num_workers=0", search.limits.cpu_budget))
    if key[0] > 0:
        rows = [r for r in search.measured(*key) if r.stages is not None] or search.measured(*key)
        if rows:
            out.append(breakdown(rows[-1], f"pick: {policy.key_text(key)}", search.limits.cpu_budget))
    return out


def _choose_in_order(search: Search, reasons: list[str]) -> bool:
    gain = search.in_order_gain()
    if gain is None:
        return True
    off, on, runs = gain
    mean = f"mean of {runs} runs" if runs > 1 else "one run"
    if off > on * (1 + search.tolerance()):
        reasons.append(f"in_order=False: {off:.1f} steps/s ({mean}) vs at most {on:.1f} in order "
                       f"({off / on - 1:+.0%}): a slow batch no longer holds back the ready ones (batch order then "
                       "varies between runs)")
        return False
    reasons.append(f"in_order=True: in_order=False measured {off:.1f} steps/s ({mean}) vs up to {on:.1f} in order, "
                   f"not faster by more than {search.tolerance():.0%}: keeping the reproducible order costs nothing here")
    return True

def _choose_persistent(search: Search, key: tuple[int, int], rate: float, reasons: list[str]) -> bool:
    """persistent_workers from what restarting the workers costs against the user's epoch.

    The saving is :func:`loaderdoc.policy.restart_saving`'s (a timed restart, else the start-up
    less one batch's loading), the same the ``persistent-workers-off`` rule reads. Weighed against one
    epoch at the pick's rate: worth it from :data:`~loaderdoc.policy.PERSISTENT_PAYS_SHARE` of an
    epoch; below that, keeping workers (and their memory) alive between epochs buys nothing."""
    pss = max((r.worker_pss_bytes or 0 for r in search.measured(*key)), default=0)
    growing = ", or more: it was still growing" if any(policy.still_growing(r) for r in search.measured(*key)) else ""
    measured = policy.restart_saving(search.results, key)
    if measured is None:
        reasons.append("persistent_workers=True: avoids forking the workers again every epoch (not measured)")
        return True
    saving, what = measured.saving_s, measured.text()
    if not measured.timed:
        why_not = ("an IterableDataset's epoch ends with its stream, which the probe cannot end" if search.limits.iterable
                   else "the start-up decides it" if persistence.clear(search, key) is not None
                   else "within the budget")
        what += f" (restart not timed: {why_not})"
    steps = search.limits.epoch_steps
    if not steps or not rate:
        reasons.append(f"persistent_workers=True: {what}; without it that is paid every epoch (epoch length "
                       "unknown, so not weighed)")
        return True
    epoch_s = steps / rate
    share = policy.restart_share(saving, epoch_s)
    line, factor = policy.PERSISTENT_PAYS_SHARE, policy.PERSISTENT_CLOSE_FACTOR
    close = (f"; close to the {line:.0%} line, so either setting gains or loses little"
             if line / factor <= share < line * factor else "")
    if share >= policy.PERSISTENT_PAYS_SHARE:
        reasons.append(f"persistent_workers=True: {what}; that is {share:.1%} of a {steps}-step epoch "
                       f"({epoch_s:.0f} s at {rate:.1f} steps/s), saved every epoch{close}")
        return True
    reasons.append(f"persistent_workers=False: {what}; that is only {share:.2%} of a {steps}-step epoch "
                   f"({epoch_s:.0f} s at {rate:.1f} steps/s), not worth keeping the workers' {pss / MiB:.0f} MiB "
                   f"(PSS{growing}) alive between epochs{close}")
    return False
