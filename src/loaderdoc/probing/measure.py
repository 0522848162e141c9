"""The measurement of one DataLoader configuration, in the current process.

:func:`measure_in_process` builds the loader, lets its workers start, measures steady-state waits
and steps against the simulated training step, samples worker memory and /dev/shm, and times the
epoch restart. :mod:`loaderdoc.probing.isolate` runs it in a forked measuring process.

Inside the measuring process torch runs the training job's intra-op threads
(``LoadJob.torch_threads``, set by :mod:`loaderdoc.probing.isolate`); its workers run one, as
torch's own worker loop sets.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.instrument import busy_seconds, malloc_sums
from loaderdoc.probing.monitor import Monitor
from loaderdoc.probing.result import ConfigResult, StageTimes, WaitStats
from loaderdoc.system.shm import shm_used_bytes


@dataclass
class LoadJob:
    """What every configuration loads: built once in the parent, inherited by fork."""

    dataset: Any
    collate_fn: Callable[..., Any] | None = None
    step_ms: float = 20.0
    device: str = "cpu"  # "cuda" runs the GPU consumer in the measuring process
    seed: int = 0
    torch_threads: int = 1  # the training process's intra-op threads: the measuring process runs them
    recipe: Any = None  # probing.fresh.Recipe: how a new interpreter builds the dataset (None: pickle it)


# training steps every measured run takes, however short its windows: the one after the first
# batch, at least one in the warm-up and at least one in the steady window (each time cap is
# checked before a batch, so each phase can overrun its cap by one step)
STEPS_PER_RUN = 3


@dataclass
class RunPlan:
    """How long to measure one configuration, and when to give up on it."""

    window_s: float = 2.0  # steady-state measurement window
    min_batches: int = 3  # measure at least this many steady batches ...
    max_window_s: float | None = None  # ... unless that takes longer than this (default 2.5x window)
    warmup_cap_s: float | None = None  # longest warm-up (default 0.5x window)
    loader_timeout_s: float = 10.0  # DataLoader(timeout=...): a worker batch slower than this fails
    measure_restart: bool = True  # time the gap between this epoch's last batch and the next's first
    # measure the steady rate (warm-up, then the window); off for a run that only times the epoch
    # restart of a configuration whose rate is already known: it ends the epoch after the first batch
    steady: bool = True
    # with workers and persistent_workers off, also time that gap with persistent workers (a second
    # loader in the same run: cheaper than a whole second configuration)
    compare_persistent: bool = True
    # IterableDataset: after the measurement, see whether 2 workers yield the same batches (untimed)
    check_worker_streams: bool = False
    watchdog_override_s: float | None = None  # replace the computed watchdog (tests use short ones)

    @property
    def steady_cap_s(self) -> float:
        return self.max_window_s if self.max_window_s is not None else 2.5 * self.window_s

    @property
    def warmup_s(self) -> float:
        return self.warmup_cap_s if self.warmup_cap_s is not None else 0.5 * self.window_s

    def watchdog_s(self, step_ms: float) -> float:
        """Wall time after which the parent kills a configuration whose training step takes
        ``step_ms``: the windows, the steps no time cap can cut short, two DataLoader timeouts
        (start-up, drain) and 3 s for the rest. Shorter, a healthy run of a long step would be
        killed and reported as a hang."""
        if self.watchdog_override_s is not None:
            return self.watchdog_override_s
        steps = STEPS_PER_RUN * step_ms / 1000.0
        # the stream check: 2 workers' start-up and two rounds of batches, each within the timeout
        check = 2 * self.loader_timeout_s + 1.0 if self.check_worker_streams else 0.0
        return self.steady_cap_s + self.warmup_s + 2 * self.loader_timeout_s + 3.0 + steps + check

    @staticmethod
    def least_s(step_ms: float) -> float:
        """The shortest a measured configuration can take at this step: its steps alone."""
        return STEPS_PER_RUN * step_ms / 1000.0


# ---- parent side ------------------------------------------------------------------------------
class _StoppableSampler:
    """Random indices, epoch after epoch, until ``stop`` is set: then the epoch ends for real.

    Ending the epoch through the sampler lets the in-flight batches drain and the iterator hit
    StopIteration as at a true epoch boundary, so the restart cost measured is the real one.
    """

    def __init__(self, size: int, seed: int) -> None:
        import torch

        self.size = size
        self.generator = torch.Generator().manual_seed(seed)
        self.stop = False

    def __iter__(self):
        import torch

        while not self.stop:
            for index in torch.randperm(self.size, generator=self.generator).tolist():
                if self.stop:
                    return
                yield index


def _percentile(sorted_values: list[float], q: float) -> float:
    if len(sorted_values) == 1:
        return sorted_values[0]
    pos = (len(sorted_values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (pos - low)


def measure_in_process(
    workload: LoadJob, settings: LoaderSettings, plan: RunPlan, *, keep_alive: list[Any] | None = None
) -> ConfigResult:
    """The measurement itself, in the current process (the measuring child in normal use).

    With ``keep_alive`` the loader and its iterators are parked there instead of being shut
    down, for a caller that is about to kill the process group anyway.
    """
    import psutil
    from torch.utils.data import DataLoader, IterableDataset

    from loaderdoc.base.batches import batch_nbytes
    from loaderdoc.probing.consumer import make_consumer
    from loaderdoc.probing.instrument import Tally, wrap_collate, wrap_dataset

    consumer = make_consumer(workload.step_ms, workload.device)
    dataset = workload.dataset
    sampler = None if isinstance(dataset, IterableDataset) else _StoppableSampler(len(dataset), workload.seed)
    kwargs = settings.as_kwargs()
    kwargs.pop("shuffle", None)  # the sampler shuffles
    # whole tenths, so torch's "timed out after 2.7 seconds" reads cleanly. It need not grow with the
    # training step: it counts from the moment the loop asks for a batch, and workers keep loading
    # while the step runs, so a healthy worker's delivery time does not depend on the step.
    kwargs["timeout"] = round(plan.loader_timeout_s, 1) if settings.num_workers > 0 else 0
    tally = Tally(settings.num_workers)
    loader = DataLoader(wrap_dataset(dataset, tally), sampler=sampler,
                        collate_fn=wrap_collate(workload.collate_fn, tally), **kwargs)
    result = ConfigResult(settings=settings)
    clock = time.perf_counter
    rows = range(1, tally.rows) if settings.num_workers else range(0, 1)

    shm_baseline = shm_used_bytes()
    started = clock()
    iterator = iter(loader)
    batch = next(iterator)
    result.first_batch_s = clock() - started
    result.batch_bytes = batch_nbytes(batch)
    result.h2d_pinned_ms, result.h2d_pageable_ms = consumer.h2d_times_ms(batch)
    pin_ms = consumer.pin_ms(batch)  # the training process's pinning of each batch (CUDA)
    consumer.step(batch)
    monitor = Monitor(shm_baseline, malloc=(lambda: malloc_sums(tally.snapshot(), rows)) if settings.num_workers
                      else None)
    monitor.start()
    epoch_over = False
    ready = _ready_batches(iterator)
    waits: list[float] = []
    try:
        if plan.steady:
            epoch_over, result.warmup_batches = _warm_up(iterator, consumer, settings, plan, clock,
                                                         step_s=workload.step_ms / 1000.0)
        else:
            epoch_over = True  # no steady window: straight to the epoch restart
        steps: list[float] = []
        ready_waits: list[float] = []  # waits for a batch that was already in the queue: the transfer
        fetch_cpu = 0.0
        if plan.steady:  # the machine's CPU use over the window (walks the process tree): none without one
            psutil.cpu_percent(None)
            use_before = _cpu_use()
        before = tally.snapshot()
        steady_started = clock()
        while not epoch_over:
            elapsed = clock() - steady_started
            if elapsed >= plan.steady_cap_s:
                break
            if elapsed >= plan.window_s and len(waits) >= plan.min_batches and _every_worker_delivered(
                    before, tally.snapshot(), rows):
                break
            was_ready = ready()
            # the fetch's CPU share is judged with 0 workers only, where this thread does the loading
            cpu_before = busy_seconds() if not settings.num_workers else 0.0
            asked = clock()
            try:
                batch = next(iterator)
            except StopIteration:  # an IterableDataset (or a tiny one) ran out
                epoch_over = True
                break
            got = clock()
            if not settings.num_workers:
                fetch_cpu += busy_seconds() - cpu_before
            consumer.step(batch)
            waits.append(got - asked)
            if was_ready:
                ready_waits.append(got - asked)
            steps.append(clock() - got)
        steady = clock() - steady_started
        after = tally.snapshot()
        if settings.num_workers and plan.steady:
            # while the workers are alive: their memory through the window, their heaps now
            result.worker_memory_growth = monitor.growth(steady_started, steady_started + steady)
        if plan.steady:  # over no window these say nothing
            result.cpu_util_pct = psutil.cpu_percent(None)
            use_after = _cpu_use()
            result.other_cpus = _other_cpus(use_before, use_after, steady)
            result.loader_cpus = _loader_cpus(use_before, use_after, steady)
    finally:
        monitor.stop()

    result.batches = len(waits)
    if waits:
        ordered = sorted(waits)
        result.consumed_per_s = len(waits) / steady
        result.stages = _stages(before, after, rows, ready_waits, settings.num_workers, steady_started)
        if result.stages is not None and result.stages.receive_ms is None:
            # the step never found a batch waiting (starved): time the hand-over itself instead
            result.stages.receive_ms = _hand_over_ms(batch)
        if result.stages is not None:
            result.stages.pin_ms = pin_ms
        produced = result.stages.produced_per_s if result.stages else None
        result.batches_per_s = min(result.consumed_per_s, produced) if produced else result.consumed_per_s
        batch_size = kwargs.get("batch_size") or 1
        result.samples_per_s = result.batches_per_s * batch_size
        result.wait = WaitStats(
            p50_ms=_percentile(ordered, 0.50) * 1000,
            p95_ms=_percentile(ordered, 0.95) * 1000,
            max_ms=ordered[-1] * 1000,
            mean_ms=statistics.fmean(ordered) * 1000,
        )
        result.starvation_pct = 100.0 * sum(waits) / steady
        result.step_ms_achieved = statistics.fmean(steps) * 1000
        if settings.num_workers == 0 and sum(waits) > 0:
            result.fetch_cpu_pct = min(100.0, 100.0 * fetch_cpu / sum(waits))
    elif plan.steady:
        result.status = "failed"
        result.error = ("the dataset ran out before any steady batch could be measured; "
                        "give the probe a dataset with more samples (or an IterableDataset that runs longer)")
    if settings.num_workers == 0:
        result.worker_pss_bytes = result.worker_uss_bytes = result.worker_rss_bytes = 0
        result.shm_peak_bytes = 0
    else:
        result.worker_pss_bytes, result.worker_uss_bytes = monitor.pss, monitor.uss
        result.worker_rss_bytes, result.shm_peak_bytes = monitor.rss, monitor.shm_peak

    if plan.measure_restart and sampler is not None:
        result.epoch_restart_s, iterator = _epoch_restart(loader, iterator, sampler, clock)
        if plan.compare_persistent and settings.num_workers > 0 and not settings.persistent_workers:
            del iterator  # shut these workers down (not timed) before starting the persistent ones
            loader = DataLoader(loader.dataset, sampler=sampler, collate_fn=loader.collate_fn,
                                **{**kwargs, "persistent_workers": True})
            iterator = iter(loader)
            next(iterator)  # start-up: not part of the restart
            result.epoch_restart_persistent_s, iterator = _epoch_restart(loader, iterator, sampler, clock)
    if keep_alive is not None:
        keep_alive.extend([loader, iterator])
    else:
        del iterator
        _shutdown(loader)
    if plan.check_worker_streams and sampler is None:
        result.workers_repeat = _workers_repeat(dataset, workload, kwargs, keep_alive)
    return result


def _warm_up(iterator: Any, consumer: Any, settings: LoaderSettings, plan: RunPlan,
             clock: Callable[[], float], *, step_s: float) -> tuple[bool, int]:
    """Consume until the prefetch buffer is at equilibrium: the batches workers prepared during
    start-up would flatter the rate. It is there once a batch had to be waited for (the buffer ran
    dry: the step now gets what the workers produce) or once a whole buffer's worth went by without
    waiting (the step is the slower side). Returns (epoch over, batches consumed).

    A wait counts as the buffer running dry above 1 ms plus 5 % of the user's step (``step_s``,
    the workload's, whichever consumer runs it: the CUDA one keeps no host-side step time)."""
    started = clock()
    dry_after_s = 0.001 + 0.05 * step_s
    consumed = 0
    for _ in range(max(1, settings.batches_in_flight)):
        if clock() - started > plan.warmup_s:
            break
        asked = clock()
        try:
            batch = next(iterator)
        except StopIteration:
            return True, consumed
        consumed += 1
        waited = clock() - asked
        consumer.step(batch)
        if settings.num_workers and consumed > 1 and waited > dry_after_s:
            break
    return False, consumed


def _cpu_use() -> tuple[float, float] | None:
    """(CPU seconds the CPUs this process may run on have been busy, CPU seconds this process and
    its workers have used), or None where the system does not say."""
    import psutil

    try:
        allowed = os.sched_getaffinity(0)
        per_cpu = psutil.cpu_times(percpu=True)
        busy = sum(t.user + t.nice + t.system + t.irq + t.softirq for i, t in enumerate(per_cpu) if i in allowed)
        me = psutil.Process()
        ours = 0.0
        for proc in [me, *me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                ours += t.user + t.system
            except psutil.Error:  # a worker that exited in between: its time is not counted
                continue
        return busy, ours
    except (OSError, AttributeError, psutil.Error):
        return None


def _other_cpus(before: tuple[float, float] | None, after: tuple[float, float] | None, wall_s: float) -> float | None:
    """How many of this process's CPUs other processes kept busy over ``wall_s``: their demand,
    which the workers would compete with (CPU time is shared per runnable thread)."""
    if before is None or after is None or wall_s <= 0:
        return None
    return round(max(0.0, (after[0] - before[0]) - (after[1] - before[1])) / wall_s, 2)


def _loader_cpus(before: tuple[float, float] | None, after: tuple[float, float] | None, wall_s: float) -> float | None:
    """How many CPUs this process and its workers kept busy over ``wall_s``."""
    if before is None or after is None or wall_s <= 0:
        return None
    return round(max(0.0, after[1] - before[1]) / wall_s, 2)


def _ready_batches(iterator: Any) -> Callable[[], bool]:
    """A test for "a batch is already waiting in the queue" (torch's worker result queue; private,
    so anything unexpected answers False and only the transfer estimate goes without)."""
    queue = getattr(iterator, "_data_queue", None)
    if queue is None or not hasattr(queue, "qsize"):
        return lambda: False

    def ready() -> bool:
        try:
            return queue.qsize() > 0
        except (NotImplementedError, OSError):
            return False

    return ready


def _hand_over_ms(batch: Any, repeats: int = 3) -> float | None:
    """Median time to pass ``batch`` through a torch multiprocessing queue and take it out again:
    the pickling of its /dev/shm storages (file descriptors handed over) and the rebuild that a
    worker's batch goes through. None if it cannot be done here."""
    import torch.multiprocessing as tmp

    queue = tmp.get_context("fork").Queue()
    times = []
    try:
        for _ in range(repeats):
            started = time.perf_counter()
            queue.put(batch)
            queue.get(timeout=5.0)
            times.append(time.perf_counter() - started)
    except Exception:
        return None
    finally:
        queue.close()
        queue.join_thread()
    return statistics.median(times) * 1000


def _every_worker_delivered(before: list[dict[str, float]], now: list[dict[str, float]], rows: range) -> bool:
    """Every loading process finished at least two batches in the window, so each one's rate spans
    at least one whole batch interval."""
    return all(now[r]["batches"] - before[r]["batches"] >= 2 for r in rows)


def _stages(before: list[dict[str, float]], after: list[dict[str, float]], rows: range,
            ready_waits: list[float], workers: int, started: float) -> StageTimes | None:
    from loaderdoc.probing.instrument import window

    w = window(before, after, rows, started)
    if w.batches < 1:
        return None
    per = 1000.0 / w.batches
    receive = None
    if workers == 0:
        receive = 0.0
    elif ready_waits:
        # the lower quartile: a queued batch can still be one the loader must hold back (in order)
        receive = _percentile(sorted(ready_waits), 0.25) * 1000
    return StageTimes(
        batches=w.batches, samples=w.samples, dataset_ms=w.dataset_s * per, dataset_cpu_ms=w.dataset_cpu_s * per,
        dataset_queued_ms=w.dataset_queued_s * per, dataset_read_bytes=w.dataset_read_bytes / w.batches,
        collate_ms=w.collate_s * per,
        collate_cpu_ms=w.collate_cpu_s * per, receive_ms=receive,
        produced_per_s=w.produced_per_s if workers else None,
    )


def _workers_repeat(dataset: Any, workload: LoadJob, kwargs: dict[str, Any], keep_alive: list[Any] | None) -> bool | None:
    """Whether 2 workers of this IterableDataset yield the same batches: two rounds from a loader
    of its own, after the measurement (its monitor has stopped: these workers count nowhere).
    Anything going wrong (the stream ends, a timeout) is no verdict, not a failed configuration."""
    from torch.utils.data import DataLoader

    from loaderdoc.base.batches import batch_digest, repeated_streams

    workers = 2
    loader = DataLoader(dataset, collate_fn=workload.collate_fn,
                        **{**kwargs, "num_workers": workers, "prefetch_factor": 2, "persistent_workers": False})
    iterator = None
    digests: list[str | None] = []
    try:
        iterator = iter(loader)
        digests = [batch_digest(next(iterator)) for _ in range(2 * workers)]
    except Exception:
        digests = []
    finally:
        if keep_alive is not None:
            keep_alive.extend([loader, iterator])  # killed with the measuring process, never joined
        else:
            del iterator
            _shutdown(loader)
    return repeated_streams(digests, workers)


def _epoch_restart(
    loader: Any, iterator: Any, sampler: _StoppableSampler, clock: Callable[[], float]
) -> tuple[float, Any]:
    """End the epoch for real, then time from its last batch to the next epoch's first batch."""
    sampler.stop = True
    last = clock()
    for _ in iterator:  # drain the batches already in flight
        last = clock()
    sampler.stop = False
    iterator = iter(loader)  # persistent workers resume; otherwise new workers are forked
    next(iterator)
    return clock() - last, iterator


def _shutdown(loader: Any) -> None:
    """Stop persistent workers now rather than at interpreter exit (the group is killed anyway)."""
    iterator = getattr(loader, "_iterator", None)
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        with contextlib.suppress(Exception):
            iterator._shutdown_workers()
