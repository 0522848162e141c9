"""Which configurations to measure within a time budget, and which one to recommend.

Pure logic: :class:`Search` calls a ``measure(settings, purpose, restart)`` function (the real
runner, or a fake in tests) and never imports torch.

Predict, then verify:

1. ``num_workers=0``, instrumented. If the training step is not starved, workers cannot help: stop.
2. **Predict** the throughput curve over ``num_workers`` from that run's stage timings
   (:mod:`.model`): waiting overlaps across workers, CPU work saturates at the CPU budget, the
   step (and taking batches from workers) caps everything; memory and ``/dev/shm`` cap the
   workers through :mod:`loaderdoc.policy`. The model names the fewest workers at the top. The
   same run bounds every size (``policy.linear_bound``): sizes that cannot reach the target are
   never measured, and one far past it beyond the CPUs needs no run at the CPU count.
3. **Measure the prediction**, then climb while the top size is the fastest (by more than the
   tolerance), short of the ceiling and still waited for, each step calibrated on the rate per
   worker the top size measured. CPU work beside other busy processes has no climb: the CPU
   count, half way to the prediction, then the size the model calibrated on those two predicts
   where that is fewer workers than the prediction, else the prediction.
4. CPU work whose climb stopped at as many workers as CPUs (the model's CPU ceiling) gets one
   worker more where that size left room: the step still waited and part of the CPUs stood idle
   in its window, each by enough to be worth the tolerance. Measurement outranks the rule of
   thumb, but the policy's evidence bar stays: past the CPUs a size is kept only on repeated runs
   in turns (step 7). If a size past the CPU budget is among them without evidence, measure as
   many workers as the CPUs allow.
5. Narrow down (the straight line's knee, interpolation, one less, bisection) to the fewest
   workers within tolerance of the best (to one worker, or an eighth of the pick past 16).
6. ``prefetch_factor=4`` if the waits are bursty, unless the step is starved on average and
   batches load evenly (a deeper queue mostly runs dry too); ``in_order=False`` if single batches took far
   longer than others to load with 0 workers (torch >= 2.6), against the pick measured again
   beside it when it looks faster.
7. Where the machine is busy (noise could decide), measure the close contenders again, in turns,
   until the pick stops changing: a repeated, interleaved comparison is what a busy machine's
   noise cannot fake. On a quiet machine one window per size is trusted.
8. ``persistent_workers`` from the workers' start-up against the user's epoch; a restart is timed
   at the pick only when that estimate is too close to the line to call.
9. ``pin_memory`` only with CUDA (without it pinning does nothing).

The search stops early once the pick is confirmed ("settled"), and otherwise when the budget
would be overrun by the next configuration ("budget"). Which configuration wins, what fits memory
and what counts as noise is :mod:`loaderdoc.policy`'s call (:func:`~loaderdoc.policy.choose`),
the same the rules judge the pick with.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loaderdoc import policy
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.policy import NOT_STARVED_PCT
from loaderdoc.probing.model import LoadModel, by_workers, model_from
from loaderdoc.probing.result import ConfigResult
from loaderdoc.probing.search import in_order, past_cpus, persistence, prefetch, repeats, shared_cpus
from loaderdoc.probing.search.outcome import SearchOutcome, outcome

MAX_CONSECUTIVE_FAILURES = 3

# what limits a predicted rate, in words
_LIMITS = {"workers": "workers' loading", "CPU": "CPU budget", "step": "training step",
           "loading and the step take turns": "serial loading"}

Measure = Callable[[LoaderSettings, str, bool], ConfigResult]


@dataclass
class SearchLimits:
    budget_s: float = 30.0
    cpu_budget: float | None = 1.0  # CPUs this rank may use (affinity, cgroup quota, / local ranks); None: unknown
    memory_budget_bytes: int | None = None  # RAM available to the process tree
    shm_free_bytes: int | None = None  # free /dev/shm
    ranks: int = 1  # loader processes on this node sharing /dev/shm and RAM
    cuda: bool = False
    iterable: bool = False  # an IterableDataset: no shuffle, and no epoch restart to measure
    in_order_supported: bool = False  # torch >= 2.6 takes DataLoader(in_order=...)
    epoch_steps: int | None = None  # steps in one of the user's epochs: weighs the workers' start-up
    max_workers: int = 64
    expected_cost_s: float = 3.0  # guess for one configuration before any was measured


group_key = policy.stream_key


class Search:
    def __init__(
        self,
        measure: Measure,
        base: LoaderSettings,
        limits: SearchLimits,
        *,
        clock: Callable[[], float] = time.monotonic,
        cancel: threading.Event | None = None,
        on_result: Callable[[ConfigResult], None] | None = None,
        on_progress: Callable[[float, str], None] | None = None,
    ) -> None:
        self.measure = measure
        self.base = base.replace(num_workers=0, prefetch_factor=None, persistent_workers=False, pin_memory=False)
        self.limits = limits
        self.clock = clock
        self.cancel = cancel
        self.on_result = on_result
        self.on_progress = on_progress
        self.results: list[ConfigResult] = []
        self.stopped = ""
        self.notes: list[str] = []  # evidence gathered on the way, for the reasons
        self._started = clock()
        self._failures_in_a_row = 0
        self.model: LoadModel | None = None  # predicted from the 0-worker run
        self.predicted = 0  # the workers the model predicted
        self.max_workers = limits.max_workers
        self._ruled_out_noted: set[int] = set()
        self.settled_why = ""  # what settled the pick, for the reasons

    # ---- bookkeeping ------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return self.clock() - self._started

    def _expected_cost(self, restart: bool) -> float:
        durations = [r.duration_s for r in self.results if r.duration_s > 0]
        if not durations:
            return self.limits.expected_cost_s
        guess = max(durations[-3:])  # pessimistic: overrunning the budget is worse than one config less
        # a restart run skips the window but drains, forks the workers again and starts a second loader
        return guess * (1.5 if restart else 1.0)

    def halted(self) -> bool:
        return bool(self.stopped) and self.stopped not in ("not starved",)

    def settings_for(self, workers: int, prefetch: int | None = None, **changes) -> LoaderSettings:
        if workers == 0:
            return self.base.replace(**changes)
        return self.base.replace(num_workers=workers, prefetch_factor=prefetch or 2, **changes)

    def try_config(self, settings: LoaderSettings, purpose: str, *, restart: bool = False) -> ConfigResult | None:
        """Measure one configuration if the budget allows; None when it did not run."""
        if self.cancel is not None and self.cancel.is_set():
            self.stopped = "cancelled"
            return None
        if self._failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
            self.stopped = "failures"
            return None
        if self.results and self.elapsed + self._expected_cost(restart) > self.limits.budget_s:
            if not self.stopped:
                self.stopped = "budget"
            return None
        if self.on_progress is not None:
            self.on_progress(min(1.0, self.elapsed / self.limits.budget_s),
                             f"measuring {policy.key_text(policy.stream_key(settings))}")
        result = self.measure(settings, purpose, restart)
        result.purpose = result.purpose or purpose
        self.results.append(result)
        if result.status == "cancelled":
            self.stopped = "cancelled"
        self._failures_in_a_row = 0 if result.ok else self._failures_in_a_row + 1
        if self.on_result is not None:
            self.on_result(result)
        return result

    def measured(self, workers: int, prefetch: int | None = None) -> list[ConfigResult]:
        pf = 0 if workers == 0 else (prefetch or 2)
        return [r for r in self.results
                if r.ok and r.batches_per_s and r.settings.in_order and group_key(r.settings) == (workers, pf)]

    def throughputs(self) -> dict[tuple[int, int], float]:
        return policy.throughputs(self.results)

    # ---- the policy's view of what was measured ------------------------------------------------
    @property
    def room(self) -> policy.Room:
        return policy.Room(shm_free=self.limits.shm_free_bytes, memory_budget=self.limits.memory_budget_bytes,
                           ranks=self.limits.ranks)

    @property
    def batch_bytes(self) -> int | None:
        return next((r.batch_bytes for r in self.results if r.batch_bytes), None)

    def choice(self) -> policy.Choice | None:
        return policy.choose(self.results, per_rank=self.limits.cpu_budget, room=self.room,
                             batch_bytes=self.batch_bytes)

    def misfit(self, key: tuple[int, int]) -> str | None:
        """Why a measured configuration does not fit this machine's RAM or /dev/shm, if it doesn't."""
        return policy.misfit(self.results, key, self.room, self.batch_bytes)

    def fitting_throughputs(self) -> dict[tuple[int, int], float]:
        return {k: v for k, v in self.throughputs().items() if self.misfit(k) is None}

    def noise(self) -> float:
        return policy.noise(self.results)

    def tolerance(self) -> float:
        return policy.tolerance(self.results)

    def cheapest_near_best(self) -> tuple[int, int] | None:
        choice = self.choice()
        return None if choice is None else choice.key

    def shm_cap_workers(self, batch_bytes: int | None, prefetch: int = 2) -> int:
        """Most workers whose batches in flight fit the policy's share of free /dev/shm."""
        room = self.room.shm_room
        if room is None or not batch_bytes:
            return self.limits.max_workers
        fits = int(room // (batch_bytes * prefetch * self.room.ranks))
        return max(1, min(self.limits.max_workers, fits))

    # ---- the search -------------------------------------------------------------------------
    def run(self) -> SearchOutcome:
        base0 = self.try_config(self.settings_for(0), "baseline: load in the training process")
        cold = policy.cold_read(base0)
        if cold is not None and not self.halted():
            # the files were not in the page cache yet: the runs after this one read them warm
            again = self.try_config(self.settings_for(0), f"baseline again: the first one read {cold} a batch from "
                                                         "storage (files not yet in the page cache)")
            if again is not None and again.ok and (again.batches_per_s or 0) > (base0.batches_per_s or 0):
                base0 = again
        if base0 is not None and base0.ok and (base0.starvation_pct or 0) < NOT_STARVED_PCT:
            self.stopped = "not starved"
            self.notes.append(
                f"with num_workers=0 the step waited for data only {base0.starvation_pct:.1f} % of the time: "
                "workers cannot speed this up, they would only add memory and start-up time"
            )
        elif not self.halted():
            self._predict(base0)
            self._verify()
            self._past_cpus()
            self._cpu_reference()
            self.refine()
            self._prefetch(base0)
            self._in_order(base0)
            self._repeat_contenders()
            if not self.stopped:
                self.stopped = "settled"
        if self.stopped not in ("cancelled", "failures"):
            self._persistence()
        return self._outcome()

    def _cap(self, base0: ConfigResult | None) -> int:
        """The most workers worth measuring: /dev/shm's share, and for CPU work one past the CPUs
        (the policy recommends more than that only on repeated evidence, which one more shows)."""
        cap = min(self.limits.max_workers, self.shm_cap_workers(base0.batch_bytes if base0 else None))
        ceiling = self.cpu_ceiling(base0)
        if ceiling is None:
            return cap
        if self.others:  # CPU work gains past the CPUs by taking time from other processes: measure that
            return min(cap, policy.UNMEASURED_WORKER_CAP)
        return min(cap, ceiling + 1)

    def cpu_ceiling(self, base0: ConfigResult | None) -> int | None:
        """As many workers as the CPUs allow, when the 0-worker fetch was mostly CPU time."""
        cpus = self.limits.cpu_budget
        if cpus is None or base0 is None or not base0.ok or base0.fetch_cpu_pct is None:
            return None
        if base0.fetch_cpu_pct <= 100 * policy.CPU_BUSY_SHARE:
            return None
        return policy.cpu_limit(cpus)

    @property
    def _shared_cpu_work(self) -> bool:
        """CPU-bound loading beside other busy processes: its curve only flattens towards the CPUs."""
        base0 = next(iter(self.measured(0)), None)
        return bool(self.others) and self.limits.cpu_budget is not None and self.cpu_ceiling(base0) is not None

    @property
    def others(self) -> float:
        """CPUs other processes kept busy beside the 0-worker run (0 below the policy's threshold)."""
        return policy.contention(self.results)

    def _predict(self, base0: ConfigResult | None) -> None:
        """The model from the baseline, and the size it predicts (2 when there is no model)."""
        self.max_workers = self._cap(base0)
        self.model = (model_from(base0, self.limits.cpu_budget, self.max_workers, others=self.others)
                      if base0 is not None else None)
        if self.others and self.limits.cpu_budget is not None:
            self.notes.append(
                f"other processes kept {self.others:.1f} of the {self.limits.cpu_budget:g} CPUs busy beside the 0-worker "
                "run: CPU time is shared per runnable thread, so workers past the CPUs may win time from them; measured "
                f"up to {self.max_workers} workers")
        if self.model is None:
            self.predicted = min(2, self.max_workers)
            self.notes.append("no stage timings from num_workers=0: measuring around 2 workers")
            return
        m = self.model
        self.predicted = max(1, min(self.max_workers, m.pick()))
        rate, limit = m.rate(self.predicted)
        capped = " (capped by /dev/shm)" if self.max_workers < m.workers_for(1.0) and self.max_workers == self.predicted else ""
        self.notes.append(
            f"prediction from num_workers=0: {m.describe()}; so about {policy.workers_text(self.predicted)} "
            f"reach{'es' * (self.predicted == 1)} {rate:.1f} steps/s, where the {_LIMITS[limit]} limits it{capped}")

    def _verify(self) -> None:
        """Measure the predicted size; climb while a bigger size may still pay.

        Each step up is calibrated on what the top size measured: at its rate per worker (real
        curves bend below the model's straight line), how many workers reach the ceiling the step
        or the CPUs set. No climb once the top is within tolerance of that ceiling, the step
        barely waited at the top, a bigger size measured no faster or faster by less than the
        tolerance, or the next size is within an eighth of the top."""
        w = self.predicted
        if self._shared_cpu_work and w > policy.cpu_limit(self.limits.cpu_budget):
            shared_cpus.measure(self, w)
            return
        if 1 <= w <= self.max_workers and not self.measured(w):
            result = self.try_config(self.settings_for(w), "verify: the predicted size")
            if result is not None and not result.ok:
                self.notes.append(f"num_workers={w} failed ({result.error})")
        while not self.halted():
            table = {n: v for n, v in by_workers(self.fitting_throughputs()).items() if n > 0}
            if not table:
                return
            top = max(table)
            if top >= self.max_workers or max(table, key=table.get) != top:
                return  # at the cap, or a bigger size measured no faster: the plateau
            if self._near_ceiling(table[top]):
                self.notes.append(self._ceiling_text(top, table[top]))
                return
            if self._barely_waits(top) or self._levelled_off(table, top):
                return
            nxt = self._calibrated_size(top, table[top])
            if nxt <= top + top // 8:
                return  # an eighth more workers of many is not worth a run
            nxt = min(self.max_workers, nxt, 2 * top)
            self.notes.append(f"num_workers={top} ran at {table[top]:.1f} steps/s, {table[top] / top:.2f} per worker: "
                              f"measuring {nxt}, about the fewest at that rate per worker to reach the ceiling")
            if self.try_config(self.settings_for(nxt), "verify: more workers may still pay") is None:
                return

    def _barely_waits(self, top: int) -> bool:
        """The step waited so little at ``top`` workers that removing every wait would not make it
        faster by the tolerance: the measured form of the step's ceiling (the model's misses the
        loop's own cost, e.g. 6.42 steps/s against 6.66 for a 150 ms step, with 2.8 % waiting)."""
        rows = self.measured(top)
        starved = statistics.fmean(r.starvation_pct or 0.0 for r in rows) if rows else 100.0
        if starved >= 100.0 or 1.0 / (1.0 - starved / 100.0) - 1.0 >= self.tolerance():
            return False
        self.notes.append(f"num_workers={top}: the step waited only {starved:.1f} % of the time, so no loader can make "
                          f"it more than {self.tolerance():.0%} faster; no bigger size measured")
        return True

    def _levelled_off(self, table: dict[int, float], top: int) -> bool:
        """The last step up gained less than the tolerance over the next smaller size (with
        workers): the curve has levelled off, and gaps that small are noise to the policy."""
        below = [n for n in table if 0 < n < top]
        if not below:
            return False
        prev = max(below)
        if table[top] >= table[prev] * (1 + self.tolerance()):
            return False
        self.notes.append(f"num_workers={top} ran at {table[top]:.1f} steps/s, {table[top] / table[prev] - 1:+.1%} on "
                          f"num_workers={prev}: within {self.tolerance():.0%}, the curve has levelled off; no bigger "
                          "size measured")
        return True

    def _ceiling(self) -> float | None:
        """The rate no loader configuration can pass: the step's (measured), or the CPUs' for CPU work."""
        if self.model is None:
            return None
        if self.cpu_ceiling(next(iter(self.measured(0)), None)) is not None and not self.others:
            return self.model.ceiling
        return self.model.step_per_s() if self.model.step_ms > 0 else None

    def _near_ceiling(self, rate: float) -> bool:
        ceiling = self._ceiling()
        return ceiling is not None and rate >= ceiling * (1 - self.tolerance())

    def _ceiling_text(self, workers: int, rate: float) -> str:
        ceiling = self._ceiling() or 0.0
        what = (f"the {self.model.step_ms:.0f} ms step allows" if self.model and ceiling >= self.model.step_per_s() - 1e-9
                else f"the {self.limits.cpu_budget:g} CPUs allow at the 0-worker run's CPU time a batch")
        return (f"num_workers={workers} ran at {rate:.1f} steps/s, within {self.tolerance():.0%} of the {ceiling:.1f} "
                f"{what}: more workers cannot be faster, none measured")

    def _calibrated_size(self, top: int, rate: float) -> int:
        """Workers that reach the ceiling at the rate per worker ``top`` workers measured."""
        ceiling = self._ceiling()
        if ceiling is None or rate <= 0:
            return top + max(1, round(0.5 * top))
        return math.ceil((1 - self.tolerance()) * ceiling * top / rate - 1e-9)

    def _past_cpus(self) -> None:
        past_cpus.measure(self)

    def _cpu_reference(self) -> None:
        """Measure as many workers as the CPUs allow when the climb went past them.

        The policy recommends more workers than CPUs only when they measure clearly faster than
        that many (I/O-bound data); without the reference point the pick would fall back to what
        was measured below it."""
        per_rank = self.limits.cpu_budget
        if per_rank is None or self.halted():
            return
        table = self.fitting_throughputs()
        if not any(policy.oversubscribed(k[0], per_rank) for k in table):
            return
        if policy.beyond_cpus_evidence(self.results, per_rank) is not None:
            return
        limit = policy.cpu_limit(per_rank)
        if self.measured(limit):
            return
        self.try_config(self.settings_for(limit), f"the CPU budget: as many workers as the {per_rank:g} CPUs allow")

    def refine(self) -> None:
        """Narrow down to the fewest workers within tolerance of the best (default prefetch).

        Sizes whose linear bound (the 0-worker loading, times the workers, with slack: see
        :func:`loaderdoc.policy.ruled_out_below`) cannot reach the target are never measured. Above
        them, the next size is the knee of that straight line (the fewest workers at the 0-worker
        rate per worker), or interpolated between the largest size measured too slow and the
        cheapest fast enough; after a guess that was fast enough, one worker less, then bisection.
        """
        interpolate, walked = True, False
        while not self.halted():
            candidate = self.cheapest_near_best()
            if candidate is None or candidate[0] <= 1:
                return
            table = self.throughputs()
            best = max(self.fitting_throughputs().values())
            target = best * (1 - self.tolerance())
            slow = [k for k in table if 0 < k[0] < candidate[0] and k[1] == policy.DEFAULT_PREFETCH]
            lower = max(slow, default=(0, 0))
            ruled_out = policy.ruled_out_below(self.results, target, candidate[0])
            floor = max(lower[0], ruled_out)
            # to within one worker, or an eighth of many: a worker more of 16 is not worth a run
            if candidate[0] - floor <= max(1, candidate[0] // 8):
                if ruled_out > lower[0] and ruled_out not in self._ruled_out_noted:
                    self._ruled_out_noted.add(ruled_out)
                    self.notes.append(self._ruled_out_text(ruled_out, target))
                return
            knee = self._knee(target)
            high_rate = table[candidate]
            if interpolate and lower[0] == floor and lower[0] > 0 and high_rate > table[lower]:
                share = (target - table[lower]) / (high_rate - table[lower])
                size = lower[0] + math.ceil(share * (candidate[0] - lower[0]))
            elif interpolate and knee is not None:
                size = knee
            elif not walked:
                size, walked = candidate[0] - 1, True
            else:
                size = (floor + candidate[0]) // 2
            size = min(candidate[0] - 1, max(floor + 1, size))
            result = self.try_config(self.settings_for(size), "narrow down: fewer workers, as fast?")
            if result is None:
                return
            interpolate = not (result.ok and (result.batches_per_s or 0) >= target)

    def _knee(self, target: float) -> int | None:
        """Fewest workers reaching ``target`` at the 0-worker run's rate per worker (a straight line)."""
        one = policy.linear_bound(self.results, 1)
        return math.ceil(target / one - 1e-9) if one else None

    def _ruled_out_text(self, workers: int, target: float) -> str:
        bound = policy.linear_bound(self.results, workers) or 0.0
        return (f"num_workers={workers} and fewer not measured: even {policy.SCALING_SLACK:g}x their most "
                f"({bound:.1f} steps/s at the 0-worker loading rate per worker) stays below {target:.1f}, "
                "the least the pick must reach")

    def _prefetch(self, base0: ConfigResult | None) -> None:
        prefetch.measure(self, base0)

    def _in_order(self, base0: ConfigResult | None) -> None:
        in_order.measure(self, base0)

    def in_order_gain(self) -> tuple[float, float, int] | None:
        return in_order.gain(self)

    def _repeat_contenders(self) -> None:
        repeats.repeat_contenders(self)

    def busy_cpus(self) -> float:
        """The most CPUs other processes kept busy during any run (0 when none was read)."""
        return max((r.other_cpus for r in self.results if r.ok and r.other_cpus is not None), default=0.0)

    def _persistence(self) -> None:
        persistence.measure(self)

    def _outcome(self) -> SearchOutcome:
        return outcome(self)

