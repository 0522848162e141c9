"""Which configurations to measure within a time budget, and which one to recommend.

Pure logic: :class:`Search` calls a ``measure(settings, purpose, restart)`` function (the real
runner, or a fake in tests) and never imports torch.

The strategy, in order, each step only while the budget lasts:

1. ``num_workers=0``. If the training step is not starved, workers cannot help: stop.
2. Guess the workers needed from that run: one batch took ``fetch`` seconds to load serially and
   the step takes ``step``, so about ``fetch / step`` workers keep up -- unless loading is CPU
   work, in which case no more than the CPU budget divided by the CPU share of loading can run
   at once. Not capped at the core count: waiting on I/O uses no CPU.
3. Climb from that guess while the step is starved and throughput still rises by 5 %.
4. If it went past the CPU budget, measure as many workers as the CPUs allow: more than that is
   recommended only when measured 20 % faster (:func:`loaderdoc.policy.beyond_cpus_evidence`).
5. Narrow down (interpolate, then bisect) to the fewest workers within tolerance of the best.
6. ``prefetch_factor=4`` if the waits are bursty (a deeper queue smooths bursts, not averages).
7. Measure the close contenders again (short windows on a small machine are noisy).
8. ``persistent_workers`` on/off at the chosen size, timing the restart between epochs.
9. ``pin_memory`` only with CUDA (without it pinning does nothing).

Which configuration wins, what fits memory and what counts as noise is :mod:`loaderdoc.policy`'s
call (:func:`~loaderdoc.policy.choose`), the same the rules judge the pick with.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from loaderdoc import policy
from loaderdoc.policy import NOT_STARVED_PCT
from loaderdoc.probing.outcome import SearchOutcome, outcome
from loaderdoc.probing.result import ConfigResult
from loaderdoc.settings import LoaderSettings

MIN_GAIN = 0.05  # climbing stops when more workers add less than 5 %
MAX_CONSECUTIVE_FAILURES = 3

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

    # ---- bookkeeping ------------------------------------------------------------------------
    @property
    def elapsed(self) -> float:
        return self.clock() - self._started

    def _expected_cost(self, restart: bool) -> float:
        durations = [r.duration_s for r in self.results if r.duration_s > 0]
        if not durations:
            return self.limits.expected_cost_s
        guess = max(durations[-3:])  # pessimistic: overrunning the budget is worse than one config less
        return guess * (2.2 if restart else 1.0)  # a restart run also drains and starts a second loader

    def _halted(self) -> bool:
        return bool(self.stopped) and self.stopped not in ("not starved",)

    def settings_for(self, workers: int, prefetch: int | None = None, **changes) -> LoaderSettings:
        if workers == 0:
            return self.base.replace(**changes)
        return self.base.replace(num_workers=workers, prefetch_factor=prefetch or 2, **changes)

    def try_config(
        self, settings: LoaderSettings, purpose: str, *, restart: bool = False, reserve: bool = True
    ) -> ConfigResult | None:
        """Measure one configuration if the budget allows; None when it did not run.

        ``reserve`` keeps time back for the two epoch-restart measurements at the end.
        """
        if self.cancel is not None and self.cancel.is_set():
            self.stopped = "cancelled"
            return None
        if self._failures_in_a_row >= MAX_CONSECUTIVE_FAILURES:
            self.stopped = "failures"
            return None
        choice = self.choice() if reserve else None
        # time for the persistence run at the end, which only a pick with workers gets
        held_back = self._expected_cost(True) if choice is not None and choice.workers > 0 else 0.0
        if self.results and self.elapsed + self._expected_cost(restart) + held_back > self.limits.budget_s:
            if not self.stopped or self.stopped == "not starved":
                self.stopped = "budget" if not self.stopped else self.stopped
            return None
        if self.on_progress is not None:
            self.on_progress(min(1.0, self.elapsed / self.limits.budget_s), f"measuring {policy.key_text(policy.stream_key(settings))}")
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
        return [r for r in self.results if r.ok and r.batches_per_s and group_key(r.settings) == (workers, pf)]

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
        base0 = self.try_config(self.settings_for(0), "baseline: load in the training process", reserve=False)
        if base0 is not None and base0.ok and (base0.starvation_pct or 0) < NOT_STARVED_PCT:
            self.stopped = "not starved"
            self.notes.append(
                f"with num_workers=0 the step waited for data only {base0.starvation_pct:.1f} % of the time: "
                "workers cannot speed this up, they would only add memory and start-up time"
            )
        elif not self._halted():
            self._climb(base0)
            self._cpu_reference()
            self._refine()
            self._prefetch()
            self._repeat_contenders()
        if self.stopped not in ("cancelled", "failures"):
            self._persistence()
        return self._outcome()

    def _cpu_ceiling(self, base0: ConfigResult | None) -> int | None:
        """The most workers worth measuring for CPU work: as many as the CPUs allow.

        When the 0-worker fetch was mostly CPU time the policy never picks more workers than CPUs
        (:func:`loaderdoc.policy.beyond_cpus_evidence` is vetoed), so measuring past them only
        spends the budget."""
        cpus = self.limits.cpu_budget
        if cpus is None or base0 is None or not base0.ok or base0.fetch_cpu_pct is None:
            return None
        if base0.fetch_cpu_pct <= 100 * policy.CPU_BUSY_SHARE:
            return None
        return policy.cpu_limit(cpus)

    def _first_guess(self, base0: ConfigResult | None) -> int:
        if base0 is None or not base0.ok or not base0.wait.mean_ms:
            return 2
        step_ms = max(base0.step_ms_achieved or 0.0, 1.0)
        fetch_ms = base0.wait.mean_ms
        needed = math.ceil(fetch_ms / step_ms)
        reason = f"num_workers=0: loading one batch took {fetch_ms:.0f} ms against a {step_ms:.0f} ms step, so about {needed} worker{'s' if needed != 1 else ''} keep{'s' if needed == 1 else ''} up"
        cpu_share = (base0.fetch_cpu_pct or 0.0) / 100.0
        guess = needed
        cpus = self.limits.cpu_budget
        if cpu_share > 0.2 and cpus is not None:
            cpu_cap = math.ceil(cpus / cpu_share)
            if cpu_cap < needed:
                reason += (f"; but loading is {cpu_share * 100:.0f} % CPU and the CPU budget is "
                           f"{cpus:g}, so no more than ~{cpu_cap} can run at once")
                guess = cpu_cap
        elif cpu_share:
            reason += f" (loading is only {cpu_share * 100:.0f} % CPU, mostly waiting: more workers than cores can help)"
        ceiling = self._cpu_ceiling(base0)
        if ceiling is not None and guess > ceiling:
            reason += (f"; loading is CPU work, so no more workers than the {cpus:g} CPUs allow ({ceiling}) are "
                       "measured: more would only take turns")
            guess = ceiling
        self.notes.append(reason)
        cap = min(self.limits.max_workers, self.shm_cap_workers(base0.batch_bytes))
        return max(1, min(guess, cap))

    def _climb(self, base0: ConfigResult | None) -> None:
        workers = self._first_guess(base0)
        best = base0.batches_per_s if base0 is not None and base0.ok and base0.batches_per_s else 0.0
        cap = min(self.limits.max_workers, self.shm_cap_workers(base0.batch_bytes if base0 else None))
        cpu_share = (base0.fetch_cpu_pct or 0.0) / 100.0 if base0 is not None and base0.ok else 0.0
        ceiling = self._cpu_ceiling(base0)
        if ceiling is not None:
            cap = min(cap, ceiling)
        elif cpu_share > 0.5 and self.limits.cpu_budget is not None:
            # partly CPU work: far more processes than CPUs only adds contention and memory
            cap = min(cap, max(2 * workers, math.ceil(self.limits.cpu_budget) + 2))
        best_workers = 0
        tried: set[int] = set()
        while True:
            tried.add(workers)
            result = self.try_config(self.settings_for(workers), "climb: more workers while the step is starved")
            if result is None:
                return
            if not result.ok:
                self.notes.append(f"num_workers={workers} failed ({result.error}); not trying more")
                return
            rate = result.batches_per_s or 0.0
            if (result.starvation_pct or 0) < NOT_STARVED_PCT:
                self.notes.append(
                    f"num_workers={workers}: the step waited for data only {result.starvation_pct:.1f} % of the time"
                )
                return
            if rate < best * (1 + MIN_GAIN):
                self.notes.append(
                    f"num_workers={workers} gave {rate:.1f} steps/s against {best:.1f} before: "
                    "more workers do not help any more (CPU or I/O saturated)"
                )
                # the first step may have overshot into contention: look once below it
                fewer = workers // 2
                if best_workers == 0 and fewer > 0 and fewer not in tried:
                    self.try_config(self.settings_for(fewer), "climb overshot? fewer workers")
                return
            best, best_workers = rate, workers
            if workers >= cap:
                return
            step_rate = 1000.0 / max(result.step_ms_achieved or 1.0, 1.0)
            scale = step_rate / rate if rate else 2.0
            workers = min(cap, max(workers + 1, min(2 * workers, math.ceil(workers * scale * 1.1))))

    def _cpu_reference(self) -> None:
        """Measure as many workers as the CPUs allow when the climb went past them.

        The policy recommends more workers than CPUs only when they measure clearly faster than
        that many (I/O-bound data); without the reference point the pick would fall back to what
        was measured below it."""
        per_rank = self.limits.cpu_budget
        if per_rank is None or self._halted():
            return
        table = self.fitting_throughputs()
        if not any(policy.oversubscribed(k[0], per_rank) for k in table):
            return
        if policy.beyond_cpus_evidence(self.results, per_rank) is not None:
            return
        limit = policy.cpu_limit(per_rank)
        if self.measured(limit):
            return
        self.try_config(self.settings_for(limit), f"the CPU budget: as many workers as the {per_rank:g} CPUs allow",
                        reserve=False)

    def _refine(self) -> None:
        """Narrow down to the fewest workers within tolerance of the best (default prefetch).

        Below saturation throughput grows about linearly with workers, so the next size tried is
        interpolated between the largest size that was too slow and the cheapest that is fast
        enough; after a guess that was fast enough (a wide plateau), plain bisection.
        """
        interpolate = True
        while not self._halted():
            candidate = self.cheapest_near_best()
            if candidate is None or candidate[0] <= 1:
                return
            table = self.throughputs()
            below = [k for k in table if k[0] < candidate[0] and k[1] in (0, 2)]
            lower = max(below, default=(0, 0))
            if candidate[0] - lower[0] <= 1:
                return
            best = max(self.fitting_throughputs().values())
            target = best * (1 - self.tolerance())
            low_rate, high_rate = table.get(lower, 0.0), table[candidate]
            if interpolate and high_rate > low_rate:
                share = (target - low_rate) / (high_rate - low_rate)
                size = lower[0] + math.ceil(share * (candidate[0] - lower[0]))
            else:
                size = (lower[0] + candidate[0]) // 2
            size = min(candidate[0] - 1, max(lower[0] + 1, size))
            result = self.try_config(self.settings_for(size), "narrow down: fewer workers, as fast?")
            if result is None:
                return
            interpolate = not (result.ok and (result.batches_per_s or 0) >= target)

    def _prefetch(self) -> None:
        candidate = self.cheapest_near_best()
        if candidate is None or candidate[0] == 0 or self._halted():
            return
        rows = self.measured(*candidate)
        last = rows[-1]
        starved = (last.starvation_pct or 0) >= NOT_STARVED_PCT
        p50, p95 = last.wait.p50_ms or 0.0, last.wait.p95_ms or 0.0
        bursty = policy.bursty(p50, p95, last.step_ms_achieved)
        if not bursty:
            # a deeper queue smooths bursts; it cannot raise the average rate the workers produce at
            if starved:
                self.notes.append(f"{policy.key_text(policy.stream_key(last.settings))}: waits are steady (p95 {p95:.0f} ms, p50 {p50:.0f} ms), "
                                  "so a deeper prefetch queue would not feed the step faster; not tried")
            return
        if candidate[0] > self.shm_cap_workers(last.batch_bytes, prefetch=4):
            self.notes.append("prefetch_factor=4 would not fit in /dev/shm; not tried")
            return
        why = f"bursty waits: p95 {p95:.0f} ms vs p50 {p50:.0f} ms"
        self.try_config(self.settings_for(candidate[0], 4), f"prefetch: deeper queue ({why})")

    def _repeat_contenders(self) -> None:
        """Measure the best and the cheapest-near-best again: one short window can mislead."""
        table = self.fitting_throughputs()
        if len(table) < 2 or self._halted():
            return
        best = max(table, key=table.get)
        candidate = self.cheapest_near_best()
        contenders = {best, candidate} if candidate else {best}
        # also anything within 10 % that is cheaper than the best: it may be the real winner
        contenders |= {k for k, v in table.items() if v >= table[best] * 0.9 and k[0] < best[0]}
        for key in sorted(contenders):
            if len(self.measured(*key)) >= 2:
                continue
            if self.try_config(self.settings_for(key[0], key[1] or None), "repeat: confirm a close contender") is None:
                return
        # bisecting again can matter when the repeat moved the best
        self._refine()

    def _persistence(self) -> None:
        candidate = self.cheapest_near_best()
        if candidate is None or candidate[0] == 0:
            return
        workers, prefetch = candidate
        settings = self.settings_for(workers, prefetch)
        done = [r for r in self.results if r.ok and r.settings == settings and r.epoch_restart_s is not None]
        # an IterableDataset's epoch ends when its stream does, not when the probe asks: no restart to time
        if not done and not self.limits.iterable and self.try_config(settings, "epoch restart, persistent_workers off and on", restart=True,
                                        reserve=False) is None:
            return
        if self.limits.cuda:
            self.try_config(self.settings_for(workers, prefetch, pin_memory=True), "pin_memory on (CUDA)",
                            reserve=False)

    def _outcome(self) -> SearchOutcome:
        return outcome(self)

