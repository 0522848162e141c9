"""Before ``loaderdoc tune`` concludes (issue 57: a model proposes, a measurement decides): the
pick's neighbours measured whatever the model predicts, your settings and the pick measured again in
turns where other processes' load or the noise could decide, and the noise the pick is said with.
Functions over a :class:`~loaderdoc.tuning.search.TuneSearch`'s public members; no torch."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from loaderdoc import policy
from loaderdoc.tuning.result import Trial, TrialSettings

if TYPE_CHECKING:
    from loaderdoc.tuning.search import TuneSearch


def mean(trials: list[Trial]) -> float:
    return sum(t.steps_per_s for t in trials) / len(trials)


def same(a: TrialSettings, b: TrialSettings) -> bool:
    """One configuration: workers, prefetch depth, persistence and the training process's threads."""
    return a.key == b.key and a.persistent == b.persistent and a.torch_threads == b.torch_threads


def neighbour(search: TuneSearch):
    """The pick's nearest alternatives, measured before the search concludes rather than ruled
    out by the model: one worker fewer and one more (first the way the loop leans: more where
    it still waited for data), then the training process's other thread count. On
    pytorch/examples' ImageNet script the model priced a worker's share of the CPUs above what
    it cost the step, predicted 1 worker at 2.5 steps/s against 3.7 measured at 0, and the search
    stopped after one trial, where the issue's grid had 1 worker 1.1x faster (issue 57)."""
    nxt = unmeasured_neighbours(search)
    return nxt[0] if nxt else None


def unmeasured_neighbours(search: TuneSearch) -> list[tuple[TrialSettings, str, float | None]]:
    """The pick's neighbours not yet measured, in the order they would be (see :func:`neighbour`): its
    threads and persistence kept, one worker either side; then its workers at the other thread count.
    Of the pick itself, a thread or persistent twin included: beside a busy process the ImageNet
    script's pick was 1 worker at 1 thread, and its neighbours at torch's 2 threads ran 0.1 steps/s."""
    pick = search.pick()
    if pick is None:
        return []
    base = pick.settings
    n = base.num_workers
    runs = search.runs_like(base)
    use = search.uses.get(runs[0].number) if runs else None
    waits = use is None or use.idle_share >= policy.NOT_STARVED_SHARE
    out = []
    for m in ((n + 1, n - 1) if waits else (n - 1, n + 1)):
        if m < 0:
            continue
        near = search.settings_for(m)  # the script's persistence where the pick has no workers to keep
        settings = replace(near, torch_threads=base.torch_threads,
                           persistent_workers=(base.persistent_workers if base.num_workers else near.persistent_workers)
                           if m else None)
        if _tried(search, settings):
            continue
        predicted = search.predicted(m) if base.torch_threads is None else None
        said = f"; the model predicts {predicted:.1f} steps/s" if predicted is not None else ""
        out.append((settings, f"neighbour: {policy.workers_text(m)}, one {'more' if m > n else 'fewer'} than "
                              f"the pick's {n}, measured before concluding{said}", predicted))
    threads = other_threads(search, pick, runs[0] if runs else None)
    if threads is not None and not _tried(search, threads[0]):
        out.append(threads)
    return out


def _tried(search: TuneSearch, settings: TrialSettings) -> bool:
    """Some trial ran these settings, measured or not (a failed one is not run again)."""
    return any(same(t.settings, settings) for t in search.trials)


def other_threads(search: TuneSearch, pick, base: Trial | None):
    """The pick's workers with the training process's other intra-op thread count: where the pick
    changed the threads, the script's own; else as many as its workers leave of the CPUs where it ran
    more, or half as many. Without workers too: other processes compete for the CPUs as well (beside a
    process spinning on one of the 2 CPUs, the ImageNet script's 0-worker run at torch's 2 threads
    measured 0.1 steps/s against 4.2 quiet: each parallel region waits for a thread the kernel took away)."""
    if base is None or search.per_rank is None:
        return None
    settings = pick.settings
    n = settings.num_workers
    if settings.torch_threads is not None:  # the script's own count at these workers
        own = replace(settings, torch_threads=None)
        return own, (f"the other thread count: {policy.workers_text(n)} with the script's own intra-op threads "
                     f"instead of {settings.torch_threads}, measured before concluding"), None
    threads = base.torch_threads
    if not threads or any(t.settings.torch_threads is not None and t.settings.num_workers == n for t in search.trials):
        return None
    target = policy.thread_target(search.per_rank, n)
    if threads > target:
        k = target
    elif threads > 1:
        k = max(1, threads // 2)
    else:
        return None
    return replace(settings, torch_threads=k), (f"the other thread count: {policy.workers_text(n)} with {k} intra-op "
                                                f"thread{'s' if k > 1 else ''} instead of {threads}, measured before "
                                                "concluding"), None


def neighbours_text(search: TuneSearch) -> str:
    """The pick's neighbours as measured (workers one either side at its threads, its workers at the
    other thread count), with their rates: what a "settled" search rests on."""
    pick = search.pick()
    if pick is None:
        return ""
    base = pick.settings
    n = base.num_workers
    near = [t for t in search.ok if (abs(t.settings.num_workers - n) == 1 and t.settings.torch_threads == base.torch_threads)
            or (t.settings.num_workers == n and t.settings.torch_threads != base.torch_threads)]
    seen: dict[str, Trial] = {}
    for t in near:
        seen.setdefault(t.settings.text(), t)
    if not seen:
        return ""
    parts = [f"{text} {mean(search.runs_like(t.settings)):.1f} steps/s (trial {t.number})" for text, t in seen.items()]
    return f"next to the pick's {pick.steps_per_s:.1f} steps/s ({base.text()}) were measured " + ", ".join(parts)


def spread(search: TuneSearch, capped: bool = True) -> float:
    """The noise seen on this machine: half the largest spread between repeated runs of one
    configuration (its runs beside a load set aside for quieter ones), where any was repeated;
    else half the largest spread between a run's two halves. Repeats are the direct measure: on
    ImageNet's script a 0-worker run's halves differed by 28 % where two such runs agreed within 2 %.
    Never past ``policy.MAX_NOISE``."""
    groups: list[list[Trial]] = []
    for t in search.ok:
        if not any(same(t.settings, g[0].settings) for g in groups):
            groups.append(search.runs_like(t.settings))
    repeats = [g for g in groups if len(g) >= 2]
    if repeats:
        seen = max(policy.half_spread([t.steps_per_s for t in g]) for g in repeats)
    else:
        seen = max((t.spread for g in groups for t in g if t.spread is not None), default=0.0) / 2
    # the tolerance a pick may take is capped (larger gaps between configurations are real); the noise
    # said, and what a gain must clear to be worth changing, is the one measured
    return min(policy.MAX_NOISE, seen) if capped else seen


def busy(search: TuneSearch) -> bool:
    """Other processes kept a share of the CPUs busy in some trial (:func:`policy.busy`)."""
    return any(policy.busy(t.others_cpus, search.per_rank) for t in search.ok)


def repeat_close(search: TuneSearch):
    """Your settings measured again before a gain over them is claimed, then the pick again (in turns:
    A ... B A B) where some trial ran beside other processes' load (:func:`policy.busy`) or the two
    differ by less than :data:`policy.CLOSE_SPREADS` times the spread seen. One run of each is no
    comparison: on a busy machine a pick was called 1.97x faster that ran 0.91x of the user's settings
    on the quiet machine (issue 57), and on the quiet VM one 0-worker run of the ImageNet script
    measured 3.5 steps/s where the grid's two measured 3.85 and 4.14 (a 1.22x "gain" for 2 workers,
    1.04x on the grid)."""
    pick = search.pick()
    user = search.trials[0]
    if pick is None or not user.ok or search.max_trials - len(search.trials) < 1:
        return None
    mine, theirs = search.runs_like(user.settings), search.runs_like(pick.settings)
    loaded, gain = busy(search), pick.gain or 1.0
    if len(mine) < 2 and (loaded or gain < policy.REPEAT_BELOW):
        # your settings as the pick too: one lucky run of theirs makes every other trial look slower
        # (timm's train.py: 6.3 steps/s in tune's first trial, 4.1-4.6 in the grid's two)
        why = ("other processes used the CPUs during the trials" if loaded
               else "a comparison with them rests on two runs of theirs, whose spread is the noise it must clear")
        return None, f"again: your settings ({why})", None
    if same(pick.settings, user.settings) or len(theirs) >= 2:
        return None
    noise = spread(search)
    if not (loaded or abs(gain - 1) < policy.CLOSE_SPREADS * noise):
        return None
    why = ("other processes used the CPUs during the trials" if loaded
           else f"the two differ by less than {policy.CLOSE_SPREADS:g}x the {noise:.0%} spread seen")
    return replace(pick.settings), f"again: the pick ({pick.settings.text()}), in turns with your settings ({why})", None


def set_aside(search: TuneSearch) -> list[tuple[Trial, list[int]]]:
    """Runs left out of the comparison for a quieter run of the same settings, with those runs' numbers."""
    out = []
    for t in search.ok:
        if policy.busy(t.others_cpus, search.per_rank):
            quiet = [u.number for u in search.runs_like(t.settings) if u.number != t.number]
            if quiet and t not in search.runs_like(t.settings):
                out.append((t, quiet))
    return out


def third_trial(search: TuneSearch):
    """Three trials at least, where ``--trials`` allows: a search that would end on your settings and one
    other measured measures your settings again, so that the noise between repeats of one configuration
    is known before anything is concluded (issue 57: the budget is shared so that three trials are measured)."""
    user = search.trials[0]
    if len(search.trials) >= 3 or search.max_trials < 3 or not user.ok or len(search.runs_like(user.settings)) >= 2:
        return None
    return None, "again: your settings, a third trial (the noise between repeats of one configuration)", None
