"""Which settings ``loaderdoc tune`` tries on the user's job, and which one it recommends.

Predict, then verify, as the probe does, but every measurement is a real run of the user's job:

1. The user's own settings. Its window's CPU accounting (``watching.cpu_use``: whether loading and the
   step are CPU work, the hand-over, what the CPUs allow) predicts the rate of every worker count.
2. **Predict**: the fewest workers whose predicted rate is within 1 % of the best the model sees
   (``CpuUse.best_workers``), never past the CPUs for CPU-bound loading. Measure it.
3. **Climb** while the fastest trial is the largest measured and still waits for data: the next
   size its own window predicts. Where loading is CPU work and that trial sits at the CPU count
   but the CPUs were not all used (the step or the hand-over leaves them idle), one size past the
   CPUs is measured, and kept only on the policy's evidence (``policy.beyond_cpus_evidence``: 20 %
   in one run, or repeated runs in turns, which are then measured).
4. **Lean**: the cheapest trial within the tolerance of the fastest, against fewer workers not yet
   measured (bisected down): a leaner configuration as fast wins (memory, /dev/shm, start-up).
5. **Persistent workers**: where the pick's workers start again each epoch and those restarts
   (priced as ``watch`` prices them: ``policy.restart_cost_s``) took at least 6 % of its loop's time, the pick with ``persistent_workers=True``; kept where it
   measures faster by more than the tolerance. Such trials are compared with their twin only, never
   pooled with the others by ``policy.choose`` (which reads them as repeats of one configuration).

The pick is ``policy.choose`` over the trials, as for the probe: the cheapest within tolerance of
the fastest allowed (memory and /dev/shm fits, evidence for more workers than CPUs). Pure logic:
``run(settings, purpose, predicted)`` runs a trial (the real one, or a fake in tests).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from loaderdoc import policy
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.policy import Room
from loaderdoc.tuning import verify
from loaderdoc.tuning.result import Pick, Trial, TrialSettings
from loaderdoc.tuning.window import Window
from loaderdoc.watching.cpu_use import CpuUse, cpu_use, fewest_near_best, fewest_workers_most_threads

MAX_TRIALS = 6
# epochs' start-ups >= 6 % of the loop: a persistent twin could beat the tolerance (3 %) with room
# to spare; less than that, one trial could not tell its gain from noise
RESTART_WORTH = 2 * policy.TOLERANCE
SATURATED = 0.9  # the process tree and others used >= 90 % of the CPUs: none left idle
# fewer intra-op threads are measured where the model's floor for them is >= 90 % of the fastest trial:
# the floor counts the pool's spin inside the step as work, which on the 2-CPU grid put one thread's step
# 10-20 % slow (issue 47); below 90 % even that error would not make them the fastest
THREAD_TRIAL_FLOOR = 0.9

RunTrial = Callable[[TrialSettings | None, str, float | None], Trial]


def window_cpu_use(w: Window, workers: int, budget: float | None, ranks: int = 1, on_gpu: bool = False) -> CpuUse | None:
    """The CPU accounting of one trial's window (the slowest rank's)."""
    tree = w.proc_cpu_s + w.workers_cpu_s if w.proc_cpu_s is not None else None
    return cpu_use(workers=workers, budget=budget, waits=w.waits, steps=w.steps, steps_timed=w.steps_timed,
                   wait_s=w.wait_s, step_s=w.step_s, cpu_wait_s=w.cpu_wait_s, cpu_step_s=w.cpu_step_s,
                   cpu_wait_wall_s=w.cpu_wait_wall_s, cpu_step_wall_s=w.cpu_step_wall_s,
                   cpu_wait_loop_s=w.cpu_wait_loop_s, cpu_step_loop_s=w.cpu_step_loop_s,
                   workers_cpu_s=w.workers_cpu_s if workers else None, workers_runq_s=w.workers_runq_s,
                   tree_cpu_s=tree, others_cpu_s=w.others_cpu_s, cpu_wall_s=w.wall_s, ranks=ranks, on_gpu=on_gpu,
                   torch_threads=w.torch_threads)


def measured(trial: Trial, use: CpuUse | None) -> policy.Measured:
    """A trial as the policy reads a measurement: what the real job showed, the rest unseen."""
    s = trial.settings
    fetch_cpu = None
    if s.num_workers == 0 and use is not None and use.wait_wall_s > 0:
        fetch_cpu = 100.0 * min(1.0, use.wait_cpu_s / use.wait_wall_s)
    return policy.Measured(
        settings=LoaderSettings(batch_size=None, num_workers=s.num_workers,
                                prefetch_factor=s.prefetch_factor if s.num_workers else None),
        batches_per_s=trial.steps_per_s, wait=policy.MeanWait(mean_ms=trial.wait_ms),
        starvation_pct=None if trial.wait_share is None else 100 * trial.wait_share,
        worker_pss_bytes=trial.workers_pss_bytes, shm_peak_bytes=trial.shm_peak_bytes,
        other_cpus=trial.others_cpus, fetch_cpu_pct=fetch_cpu)


@dataclass
class TuneSearch:
    run: RunTrial
    per_rank: float | None  # CPUs per rank
    room: Room = field(default_factory=Room)
    max_trials: int = MAX_TRIALS
    deadline: float | None = None  # time.monotonic() past which no trial starts (the runner cuts one there)
    trials: list[Trial] = field(default_factory=list)
    uses: dict[int, CpuUse] = field(default_factory=dict)  # trial number -> its CPU accounting
    stopped: str = ""

    # ---- the loop ------------------------------------------------------------------------------
    def search(self) -> Pick | None:
        first = self._run(None, "your settings", None)
        if not first.ok:
            self.stopped = "your settings could not be measured"
            return None
        while True:
            if len(self.trials) >= self.max_trials:
                self.stopped = "trials"
                break
            if self.deadline is not None and time.monotonic() > self.deadline:
                self.stopped = "budget"
                break
            nxt = self.next_trial()
            if nxt is None:
                self.stopped = "settled"
                break
            self._run(*nxt)
        return self.pick()

    def _run(self, settings: TrialSettings | None, purpose: str, predicted: float | None) -> Trial:
        trial = self.run(settings, purpose, predicted)
        trial.purpose = trial.purpose or purpose
        trial.predicted_per_s = predicted
        self.trials.append(trial)
        return trial

    def note_use(self, trial: Trial, use: CpuUse | None) -> None:
        if use is None:
            return
        self.uses[trial.number] = use
        trial.idle_share = use.idle_share
        trial.load_is_cpu = use.load_is_cpu
        trial.step_is_cpu = use.step_is_cpu

    # ---- what was measured ---------------------------------------------------------------------
    @property
    def ok(self) -> list[Trial]:
        return [t for t in self.trials if t.ok]

    def results(self) -> list[policy.Measured]:
        keys = {t.settings.key for t in self.ok if not self.twin(t)}
        return [measured(t, self.uses.get(t.number)) for key in sorted(keys) for t in self.runs_of(key)]

    def runs_like(self, settings: TrialSettings) -> list[Trial]:
        """The measured trials of exactly these settings (workers, prefetch, persistence, threads)."""
        return self._quiet([t for t in self.ok if verify.same(t.settings, settings)])

    def _quiet(self, runs: list[Trial]) -> list[Trial]:
        """Runs of one configuration, less those beside other processes' load (:func:`policy.busy`)
        where a quieter run of it exists: a neighbour's load only slows a run, so the mean of a
        disturbed run and a quiet one is neither (issue 57)."""
        quiet = [t for t in runs if not policy.busy(t.others_cpus, self.per_rank)]
        return quiet or runs

    def twin(self, trial: Trial) -> bool:
        """A trial that turned persistent workers on where the script has them off, or changed the
        training process's threads: kept out of the policy's pool (it reads the workers
        and prefetch depth alone, and would take them for repeats of one configuration); :meth:`pick`
        weighs it against the pick."""
        return ((trial.settings.persistent and not self.trials[0].settings.persistent)
                or trial.settings.torch_threads is not None)

    def tried(self) -> set[tuple[int, int]]:
        return {t.settings.key for t in self.trials}

    def runs_of(self, key: tuple[int, int]) -> list[Trial]:
        """The measured runs of a pooled configuration (the quiet ones where some ran beside a load)."""
        return self._quiet([t for t in self.ok if t.settings.key == key and not self.twin(t)])

    def choice(self) -> policy.Choice | None:
        return policy.choose(self.results(), per_rank=self.per_rank, room=self.room)

    def settings_for(self, workers: int) -> TrialSettings:
        """``workers`` workers at the script's own prefetch factor (torch's default where it had none) and
        its own persistence: a trial that leaves persistent_workers out of its table runs the script's
        (timm passes True), and was shown and compared as a non-persistent one (measured twice, issue 57)."""
        user = self.trials[0].settings
        if workers == 0:
            return TrialSettings(num_workers=0)
        return TrialSettings(num_workers=workers, prefetch_factor=user.prefetch_factor if user.num_workers else None,
                             persistent_workers=True if user.persistent else None)

    def _model(self) -> tuple[Trial, CpuUse] | None:
        """The trial whose window tells how long loading takes (one that waited for data, or ran
        without workers), with the most workers: its calibration is the closest to the pick."""
        known = [(t, self.uses[t.number]) for t in self.ok if t.number in self.uses
                 and self.uses[t.number].load_wall_s is not None]
        return max(known, key=lambda tu: (tu[0].settings.num_workers, tu[0].number)) if known else None

    def predicted(self, workers: int) -> float | None:
        model = self._model()
        return model[1].predict(workers) if model else None

    # ---- the next trial ------------------------------------------------------------------------
    def next_trial(self) -> tuple[TrialSettings, str, float | None] | None:
        # as many workers as CPUs first: a faster trial past them counts only against it
        return (self._at_cpu_limit() or self._predicted_best() or self._after_failure() or self._climb()
                or self._repeat_beyond() or self._threads() or self._leaner() or self._persistent()
                or verify.neighbour(self) or verify.repeat_close(self) or verify.third_trial(self))

    def _after_failure(self):
        """A trial with more workers than any measured one failed (too many processes, memory, a
        worker that crashes): the size half way between it and the largest measured below it."""
        failed = [t for t in self.trials[1:] if not t.ok]
        if not failed:
            return None
        worst = failed[-1]
        nf = worst.settings.num_workers
        below = [t.settings.num_workers for t in self.ok if t.settings.num_workers < nf]
        if not below:
            return None
        lo = max(below)
        m = (lo + nf) // 2
        settings = self.settings_for(m)
        if m <= lo or settings.key in self.tried():
            return None
        fastest = self._fastest()
        predicted = self.predicted(m)
        if predicted is not None and fastest is not None and predicted < fastest.steps_per_s * (1 + policy.TOLERANCE):
            return None
        return settings, (f"trial {worst.number} ({worst.settings.text()}) failed: {policy.workers_text(m)}, half "
                          f"way from the {lo} measured"), predicted

    def _threads(self):
        """Fewer intra-op threads in the training process, once: where a trial's window says how its
        step scales, the (workers, threads) whose predicted floor (``CpuUse.fewer_threads``) comes within
        10 % of the fastest trial; where none can, the pick's workers (or the fastest trial whose threads
        and workers crowd the CPUs) with as many threads as its workers leave (``policy.thread_target``),
        where its loading or its step is CPU work."""
        choice = self.choice()
        if choice is None or self.per_rank is None:
            return None
        runs = self.runs_of(choice.key)
        if not runs or any(t.settings.torch_threads is not None for t in self.trials):
            return None
        base = runs[0]
        threads = base.torch_threads
        if not threads or threads <= 1:
            return None
        if not self._crowded(threads, base.settings.num_workers):
            # the pick's threads fit beside its workers; the fastest trial with workers that did not fit
            # may be what fewer threads free (workers that lost to the step's threads)
            crowded = [t for t in self.ok if not self.twin(t) and t.settings.num_workers
                       and self._crowded(t.torch_threads or threads, t.settings.num_workers)]
            if crowded:
                base = max(crowded, key=lambda t: t.steps_per_s)
                threads = base.torch_threads or threads
        n = base.settings.num_workers
        models = [t for t in self.ok if t.number in self.uses and self.uses[t.number].threads_known]
        k = predicted = why = None
        if models:
            # the model's rate for fewer threads is a floor (the step's CPU time counts the pool's spin
            # between ops as work): a floor near the fastest trial is worth a measurement
            use, fastest = self.uses[models[0].number], self._fastest()
            floors = use.fewer_threads(range(0, (use.worker_cap or policy.cpu_limit(self.per_rank)) + 1))
            if floors and fastest is not None:
                (m, j), floor = fewest_near_best(floors, order=fewest_workers_most_threads)
                if floor >= THREAD_TRIAL_FLOOR * fastest.steps_per_s:
                    base, n, k, predicted = None, m, j, floor
                    why = (f"trial {models[0].number}'s window predicts at least {predicted:.1f} steps/s with "
                           f"{policy.workers_text(m)} and {k} intra-op thread{'s' if k > 1 else ''} (a floor: "
                           "the pool's spin counts as the step's work)")
        elif self._crowded(threads, n) and self._wants_cpu(base):
            # no window says how the step scales: the CPUs' count decides, where the pool's threads would
            # compete with CPU work (workers that sleep on I/O beside a GPU step leave them the CPUs)
            k = policy.thread_target(self.per_rank, n)
            why = (f"{threads} intra-op threads and {policy.workers_text(n)} want more than the "
                   f"{self.per_rank:g} CPUs")
        if k is None or k >= threads:
            return None
        if base is None:  # a worker count of the model's choosing
            settings = self.settings_for(n)
            settings.torch_threads = k
        else:
            settings = TrialSettings(base.settings.num_workers, base.settings.prefetch_factor,
                                     base.settings.persistent_workers, torch_threads=k)
        return settings, f"fewer threads: {why}", predicted

    def _crowded(self, threads: int, workers: int) -> bool:
        """The training process's intra-op threads and its workers want more than the rank's CPUs."""
        return threads + workers > self.per_rank + 0.05

    def _wants_cpu(self, trial: Trial) -> bool:
        """The trial's loading or its step is CPU work (its window's accounting; unknown: assume so)."""
        use = self.uses.get(trial.number)
        return use is None or use.load_is_cpu or use.step_is_cpu

    def _persistent(self):
        choice = self.choice()
        if choice is None or choice.key[0] == 0:
            return None
        runs = self.runs_of(choice.key)
        shares = [t.restart_share for t in runs if t.restart_share is not None]
        if not shares or max(shares) < RESTART_WORTH or any(t.settings.persistent for t in self.trials[1:]
                                                             if t.settings.key == choice.key):
            return None
        base = runs[0].settings
        settings = TrialSettings(base.num_workers, base.prefetch_factor, persistent_workers=True)
        share = max(shares)
        # the share and its gain are watch's for the same run (loaderdoc.policy.restart_cost_s)
        return settings, (f"persistent workers: restarting the workers each epoch took {share:.0%} of the loop's "
                          f"time at {base.text()} (expected {policy.restart_gain(share):.2f}x)"), None

    def _predicted_best(self):
        model = self._model()
        if model is None:
            return None
        trial, use = model
        best = use.best_workers(use.workers_to_keep_up)
        if best is None:
            return None
        n, rate = best
        settings = self.settings_for(n)
        if settings.key in self.tried() or rate < trial.steps_per_s * (1 + policy.TOLERANCE):
            return None  # measured, or no gain the tolerance would tell from noise
        return settings, (f"predicted from trial {trial.number}: the fewest workers near the best rate its "
                          f"window allows ({rate:.1f} steps/s)"), rate

    def _at_cpu_limit(self):
        """A trial past the CPUs is the fastest, without the policy's evidence that more workers than
        CPUs pay: as many workers as the CPUs is measured (against it the evidence is judged)."""
        if self.per_rank is None:
            return None
        best = self._fastest()
        if best is None or not policy.oversubscribed(best.settings.num_workers, self.per_rank):
            return None
        settings = self.settings_for(policy.cpu_limit(self.per_rank))
        if settings.key in self.tried():
            return None
        return (settings, f"as many workers as CPUs: {best.settings.num_workers} (trial {best.number}) is past "
                          f"the {self.per_rank:g} CPUs and counts only if it beats this", self.predicted(settings.num_workers))

    def _fastest(self) -> Trial | None:
        ok = [t for t in self.ok if not self.twin(t)]
        return max(ok, key=lambda t: t.steps_per_s) if ok else None

    def _climb(self):
        best = self._fastest()
        if best is None or self.per_rank is None:
            return None
        use = self.uses.get(best.number)
        n = best.settings.num_workers
        if use is None or use.idle_share < policy.NOT_STARVED_SHARE or n < max(t.settings.num_workers for t in self.ok):
            return None
        limit = policy.cpu_limit(self.per_rank)
        if use.load_is_cpu and n >= limit:
            used = (use.work_cpus or 0.0) + (use.others_cpus or 0.0)
            if n > limit or used >= SATURATED * use.budget:
                return None  # the CPUs are full, or one past them was measured already
            settings = self.settings_for(limit + 1)
            if settings.key in self.tried():
                return None
            return settings, (f"one past the CPUs: {n} CPU-bound workers still left {use.budget - used:.1f} of "
                              f"{use.budget:g} CPUs idle while the loop waited {use.idle_share:.0%}; kept only on "
                              "the policy's evidence"), None
        step = use.best_workers(use.workers_to_keep_up)
        if step is not None and step[1] < best.steps_per_s * (1 + policy.TOLERANCE):
            return None  # its own window predicts no gain past it
        target = step[0] if step else n + max(1, n // 2)
        if use.load_is_cpu:
            target = min(target, limit)
        settings = self.settings_for(max(target, n + 1))
        if settings.key in self.tried():
            return None
        return settings, (f"climb: trial {best.number} ({best.settings.num_workers} workers) is the fastest and "
                          f"still waited {use.idle_share:.0%} for data"), step[1] if step else None

    def _repeat_beyond(self):
        """More workers than CPUs looked faster in one run each but short of the policy's 20 %: the
        two are measured again, in turns, so repeated runs decide (what a busy machine's noise cannot fake)."""
        if self.per_rank is None or len(self.trials) + 2 > self.max_trials:
            return None
        choice = self.choice()
        if choice is None or choice.beyond_cpus is not None:
            return None
        limit = policy.cpu_limit(self.per_rank)
        at = self.runs_of(self.settings_for(limit).key)
        past = [t for t in self.ok if policy.oversubscribed(t.settings.num_workers, self.per_rank)]
        if not at or not past:
            return None
        fast = max(past, key=lambda t: t.steps_per_s)
        at_rate = sum(t.steps_per_s for t in at) / len(at)
        if fast.steps_per_s <= at_rate * (1 + choice.tolerance):
            return None
        mine = self.runs_of(fast.settings.key)
        if len(at) >= 2 and len(mine) >= 2:
            return None
        if len(at) <= len(mine):
            return self.settings_for(limit), f"again, in turns with {fast.settings.num_workers} workers (repeated runs decide)", None
        return fast.settings, f"again, in turns with {limit} workers (repeated runs decide)", None

    def _leaner(self):
        choice = self.choice()
        if choice is None or choice.key[0] == 0:
            return None
        n = choice.key[0]
        tol = choice.tolerance
        slower = [t.settings.num_workers for t in self.ok if t.settings.num_workers < n
                  and t.steps_per_s < choice.best_rate * (1 - tol)]
        lo = max(slower) if slower else -1
        if n - lo <= 1:
            return None
        candidates = [m for m in range(lo + 1, n) if self.settings_for(m).key not in self.tried()]
        if not candidates:
            return None
        # the fewest the model predicts within tolerance, else half way down
        model = self._model()
        m = None
        if model is not None:
            predicted = {c: model[1].predict(c) for c in candidates}
            if all(r is not None for r in predicted.values()) and not any(
                    r >= choice.best_rate * (1 - tol) for r in predicted.values()):
                return None  # the model says every leaner one is slower: no trial spent on it
            near = [c for c, r in predicted.items() if r is not None and r >= choice.best_rate * (1 - tol)]
            m = min(near) if near else None
        if m is None:
            m = candidates[len(candidates) // 2] if lo >= 0 else max(0, n // 2)
            if self.settings_for(m).key in self.tried():
                m = candidates[-1]
        return (self.settings_for(m), f"leaner: {policy.workers_text(m)} instead of {n}, as fast for less memory?",
                model[1].predict(m) if model is not None else None)

    def settled_reason(self) -> str | None:
        """Why no further trial was worth running, from the fastest trial's CPU accounting."""
        best = self._fastest()
        use = self.uses.get(best.number) if best is not None else None
        if use is None:
            return None
        n = best.settings.num_workers
        if use.idle_share < policy.NOT_STARVED_SHARE:
            return (f"at {policy.workers_text(n)} the loop waited {use.idle_share:.0%} of the time for a batch "
                    "not yet loaded: more loading capacity cannot make it faster")
        busy = (use.work_cpus or 0.0) + (use.others_cpus or 0.0)  # work: a spinning pool's CPU is not
        if busy >= SATURATED * use.budget:
            what = "loading and the step" if use.load_is_cpu and use.step_is_cpu else "loading" if use.load_is_cpu else "the step" if use.step_is_cpu else "this job and other processes"
            # a ceiling is an estimate: never stated below a rate some trial measured
            allows = (f"the CPUs allow about {use.ceiling:.1f} steps/s against the {best.steps_per_s:.1f} measured, so "
                      if use.ceiling is not None and use.ceiling >= best.steps_per_s else "")
            return (f"{what} kept the {use.budget:g} CPUs {min(1.0, busy / use.budget):.0%} busy at {policy.workers_text(n)}: "
                    f"{allows}more workers would only share the same CPUs")
        pred = use.best_workers(use.workers_to_keep_up)
        if pred is not None:
            return (f"the fastest trial's window predicts at most {pred[1]:.1f} steps/s ({policy.workers_text(pred[0])}), "
                    f"within the {policy.TOLERANCE:.0%} tolerance of the {best.steps_per_s:.1f} measured")
        return None

    # ---- the pick -------------------------------------------------------------------------------
    def pick(self) -> Pick | None:
        choice = self.choice()
        if choice is None:
            return None
        trial = self.runs_of(choice.key)[0]
        best = self.runs_of(choice.best_key)[0]
        user = self.trials[0]
        user_runs = self.runs_of(user.settings.key) if not self.twin(user) else self.runs_like(user.settings)
        user_rate = verify.mean(user_runs) if user_runs else 0.0
        within = user.ok and user_rate >= choice.best_rate * (1 - choice.tolerance)
        rate = choice.rate
        reason = (f"{trial.settings.text()}: {rate:.1f} steps/s measured, the fewest workers within "
                  f"{choice.tolerance:.0%} of the fastest trial ({best.settings.text()}, {choice.best_rate:.1f})")
        # a persistent twin of the pick, or a thread trial at any worker count (fewer threads can free the
        # CPUs another worker count needed): kept where it measured faster by more than the tolerance
        twins = [t for t in self.ok if self.twin(t)
                 and (t.settings.key == choice.key or t.settings.torch_threads is not None)]
        # a twin measured more than once counts at its mean, as the pooled configurations do
        twin_rate = {t.number: verify.mean(self.runs_like(t.settings)) for t in twins}
        if twins and max(twin_rate.values()) > rate * (1 + choice.tolerance):
            # among twins as fast as the fastest, the fewest workers (then the most threads), as choose does
            top = max(twin_rate.values())
            near = [t for t in twins if twin_rate[t.number] >= top * (1 - choice.tolerance)]
            twin = min(near, key=lambda t: (t.settings.num_workers, -(t.settings.torch_threads or 0), t.number))
            changed = twin.settings
            if changed.torch_threads is not None:
                reason += (f"; {changed.text()}: {twin_rate[twin.number]:.1f} steps/s (trial {twin.number}): the "
                           "training process's intra-op threads "
                           f"{'from ' + str(trial.torch_threads) + ' ' if trial.torch_threads else ''}to "
                           f"{changed.torch_threads} (OMP_NUM_THREADS={changed.torch_threads})")
            else:
                reason += (f"; with persistent_workers=True {twin_rate[twin.number]:.1f} steps/s (trial {twin.number}): "
                           "the workers no longer start again each epoch")
            trial, rate = twin, twin_rate[twin.number]
            # your settings are judged against the twin now: within its tolerance or not
            within = user.ok and user_rate >= rate * (1 - choice.tolerance)
        if choice.beyond_cpus is not None and self.per_rank is not None and policy.oversubscribed(trial.settings.num_workers, self.per_rank):
            reason += "; more workers than CPUs: " + choice.beyond_cpus.text(self.per_rank)
        excluded = {policy.key_text(k): why for k, why in choice.excluded.items()}
        gain = rate / user_rate if user.ok and user_rate else None
        # no gain inside the noise seen (between or within runs) is worth changing
        noise = verify.spread(self, capped=False)
        within = within or (gain is not None and gain <= 1 + noise)
        repeated = sorted({t.number for g in (user.settings, trial.settings)
                           if len(runs := [t for t in self.ok if verify.same(t.settings, g)]) >= 2 for t in runs})
        return Pick(settings=trial.settings, steps_per_s=rate, trial=trial.number, reason=reason,
                    predicted_per_s=trial.predicted_per_s, best_trial=best.number, tolerance=choice.tolerance,
                    gain=gain, user_within_tolerance=within, excluded=excluded,
                    noise=noise, repeated=repeated)
