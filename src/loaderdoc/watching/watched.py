"""What a real training run showed about one DataLoader: :class:`LoaderReport`, the watch
report's entry for it and the evidence the ``watch`` rules read (no parallel class).

``loaderdoc watch`` (and ``loaderdoc.watch(loader)``) build one per loader from the hook's records
and hand it to the rule catalogue beside the machine facts and the loader's settings, so a real run
is judged by the same rules, thresholds and policy as ``check`` and ``probe``; the app shows the same
object read back from a report. Plain numbers only: no torch, no textual, nothing read from the
machine here.

Definitions (every epoch of the loader, summed):

- ``wait_s``: time blocked in ``next()`` for every batch after an epoch's first (the first batch,
  worker start-up included, is the epoch's ``first_batch_s``);
- ``step_s``: time from a batch being returned to the next ``next()`` call;
- ``wait_share = wait_s / (wait_s + step_s)``: the share of the steady loop spent waiting for data.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from loaderdoc.policy import WATCH_MIN_BATCHES
from loaderdoc.watching.cpu_use import CpuUse, cpu_use
from loaderdoc.watching.io_use import IoUse, io_use
from loaderdoc.watching.stragglers import RankRun


def wait_share_of(wait_s: float, step_s: float) -> float | None:
    """The share of a loop's time spent waiting for data: wait / (wait + step); None for no time.
    The one definition the report, the rules and the app's Run view share."""
    total = wait_s + step_s
    return wait_s / total if total > 0 else None


def load_per_batch(workers: int, wait_per_batch_s: float, step_per_batch_s: float) -> float:
    """One batch's load time: in the loop (0 workers) it is the wait; n workers deliver a batch
    every wait + step, so each takes at most n times that (exactly that when they are starved).
    The watched loader's and tune's window's one estimate."""
    return wait_per_batch_s if workers == 0 else workers * (wait_per_batch_s + step_per_batch_s)


@dataclass
class WatchedEpoch:
    index: int
    steps: int = 0  # batches returned
    waits: int = 0  # batches after the first (wait_s sums their waits)
    wait_s: float = 0.0
    step_s: float = 0.0
    steps_timed: int = 0  # steps summed in step_s
    first_batch_s: float | None = None  # iter(loader) to the first batch (worker start-up included)
    wall_s: float | None = None  # iter(loader) to the epoch's end (or its last batch)
    iter_s: float | None = None  # iter(loader) itself: starting the workers (in first_batch_s)
    stop_s: float | None = None  # the call that raised StopIteration: shutting them down (after wall_s)
    # the epoch ended: its StopIteration, or the loader's next epoch began (Lightning never asks
    # for StopIteration)
    finished: bool = False
    workers_pss_max_bytes: int | None = None  # the workers' summed PSS, peak while it ran
    workers_heap_grown_bytes: int | None = None  # malloc heap they had grown by then (since forked or first seen)
    gpu_idle_s: float | None = None  # CUDA-event GPU idle during its waits; None without CUDA
    # CPU accounting (None: a records file from before it): the training process's CPU time
    # (every thread) during the waits and the steps; its whole CPU time over the epoch; the
    # workers'; what other processes took from its CPUs meanwhile; torch's thread count
    cpu_wait_s: float | None = None
    cpu_step_s: float | None = None
    cpu_wait_wall_s: float | None = None  # the wall time of the waits and steps CPU-timed (a sample)
    cpu_step_wall_s: float | None = None
    cpu_wait_loop_s: float | None = None  # ... the loop thread's own CPU time in them (None: recorded before it)
    cpu_step_loop_s: float | None = None
    proc_cpu_s: float | None = None
    workers_cpu_s: float | None = None
    workers_runq_s: float | None = None  # the workers' time runnable, waiting for a CPU
    workers_cpu_first_s: float | None = None  # ... both by the epoch's first batch (their start-up)
    workers_runq_first_s: float | None = None
    others_cpu_s: float | None = None
    torch_threads: int | None = None
    # reads, each [rchar, read calls, bytes from a block device] (None: not recorded): the training
    # process's own threads' over the epoch, its workers', and both by the first batch
    io_main: list[int] | None = None
    io_workers: list[int] | None = None
    io_first: list[int] | None = None
    io_traced: dict | None = None  # under --trace: the traced steps' reads, batches and seconds (left out)
    wait_p50_s: float | None = None  # the percentiles of its waits
    wait_p95_s: float | None = None
    number: int | None = None  # the epoch's number as recorded (None: not recorded)
    recorded: dict[str, Any] = field(default_factory=dict, repr=False)  # as the hook wrote it: what the report keeps

    @classmethod
    def from_record(cls, e: dict[str, Any], n: int) -> WatchedEpoch:
        """The ``n``-th epoch of a loader as the hook recorded it (or a report kept it)."""
        return cls(index=n if e.get("epoch") is None else int(e["epoch"]), steps=e.get("steps") or 0,
                   waits=e.get("waits") or 0, wait_s=e.get("wait_s", 0.0), step_s=e.get("step_s", 0.0),
                   steps_timed=e.get("steps_timed", 0), first_batch_s=e.get("first_batch_s"), wall_s=_wall(e),
                   iter_s=e.get("iter_s"), stop_s=e.get("stop_s"),
                   finished=bool(e.get("finished")) or e.get("end_s") is not None,
                   workers_pss_max_bytes=e.get("workers_pss_max_bytes"),
                   workers_heap_grown_bytes=e.get("workers_heap_grown_bytes"), gpu_idle_s=e.get("gpu_idle_s"),
                   wait_p50_s=e.get("wait_p50_s"), wait_p95_s=e.get("wait_p95_s"), number=e.get("epoch"),
                   recorded=e, **{name: e.get(name) for name in (*CPU_FIELDS, *IO_FIELDS)})


def _wall(epoch: dict[str, Any]) -> float | None:
    start, end = epoch.get("start_s"), epoch.get("end_s")
    if start is not None and end is not None:
        return end - start
    return epoch.get("wall_s")


# the CPU accounting's fields, named as the hook's records name them
CPU_FIELDS = ("cpu_wait_s", "cpu_step_s", "cpu_wait_wall_s", "cpu_step_wall_s", "cpu_wait_loop_s", "cpu_step_loop_s",
              "proc_cpu_s", "workers_cpu_s", "workers_runq_s", "workers_cpu_first_s", "workers_runq_first_s",
              "others_cpu_s", "torch_threads")
IO_FIELDS = ("io_main", "io_workers", "io_first", "io_traced")  # the read accounting's, likewise


@dataclass
class LoaderTotals:
    """A loader's figures over its epochs, in the order the report writes them; derived from the
    epochs once, by :meth:`of` (a report read back keeps the figures its producer wrote)."""

    epochs: int = 0
    steps: int = 0
    waits: int = 0
    wait_s: float = 0.0
    step_s: float = 0.0
    wall_s: float | None = None
    wait_share: float | None = None
    wait_per_batch_s: float | None = None
    step_per_batch_s: float | None = None
    first_batch_s: float | None = None  # the first epoch's (start-up included)
    later_first_batch_s: float | None = None  # the slowest later one
    workers_pss_max_bytes: int | None = None
    gpu_idle_s: float | None = None
    gpu_idle_share: float | None = None

    @property
    def per_batch_s(self) -> float | None:
        """A batch's wait and step together, from the per-batch figures (a report that predates
        them: from the sums); None where nothing was timed."""
        wait = self.wait_per_batch_s if self.wait_per_batch_s is not None else (
            self.wait_s / self.waits if self.waits else 0.0)
        step = self.step_per_batch_s if self.step_per_batch_s is not None else (
            self.step_s / self.steps if self.steps else 0.0)
        return wait + step or None

    @classmethod
    def of(cls, epochs: list[WatchedEpoch]) -> LoaderTotals:
        wait = sum(e.wait_s for e in epochs)
        step = sum(e.step_s for e in epochs)
        waits = sum(e.waits for e in epochs)
        timed = sum(e.steps_timed for e in epochs)
        first = [e.first_batch_s for e in epochs if e.first_batch_s is not None]
        pss = [e.workers_pss_max_bytes for e in epochs if e.workers_pss_max_bytes is not None]
        idle = [e.gpu_idle_s for e in epochs if e.gpu_idle_s is not None]
        gpu_idle = sum(idle) if idle else None
        return cls(epochs=len(epochs), steps=sum(e.steps for e in epochs), waits=waits, wait_s=wait, step_s=step,
                   wall_s=sum(e.recorded.get("wall_s", 0.0) for e in epochs), wait_share=wait_share_of(wait, step),
                   wait_per_batch_s=wait / waits if waits else None, step_per_batch_s=step / timed if timed else None,
                   first_batch_s=first[0] if first else None,
                   later_first_batch_s=max(first[1:]) if len(first) > 1 else None,
                   workers_pss_max_bytes=max(pss) if pss else None, gpu_idle_s=gpu_idle,
                   gpu_idle_share=gpu_idle / (wait + step) if gpu_idle is not None and wait + step > 0 else None)


@dataclass
class TimelinePoint:
    """One interval of the sampler's timeline: the loader's batches, wait and step since the last."""

    t_s: float
    steps: int
    wait_s: float
    step_s: float


@dataclass
class Interval:
    """One stretch of a loader's run as the app charts it: a timeline interval or a whole epoch."""

    label: str  # "at 12.0 s" (the end of the interval) or "epoch 3"
    x: float  # where it sits on the chart's x axis: seconds into the run, or the epoch number
    steps: int
    wait_s: float
    step_s: float

    @property
    def wait_share(self) -> float | None:
        return wait_share_of(self.wait_s, self.step_s)


@dataclass
class LoaderReport:
    """One DataLoader of a watched run: the report's entry for it and what the ``watch`` rules read.

    Built once from the hook's records (``watching/build.py``) or read back from a report
    (``watching/report_file.py``); every figure over its epochs is in :attr:`totals`."""

    number: int | None = None  # the hook's loader number ("loader" in the report)
    role: str | None = None  # "train", "val", ... from the framework hook that built it; None
    pid: int | None = None
    rank: int | None = None
    cls: str | None = None  # the loader's class ("class"); None: an iterable
    settings: dict[str, Any] = field(default_factory=dict)  # as the run used them
    applied: dict[str, Any] = field(default_factory=dict)  # under --apply: asked, applied, apply_tables
    epochs: list[WatchedEpoch] = field(default_factory=list)
    totals: LoaderTotals | None = None  # None: derived from the epochs
    timeline: list[TimelinePoint] = field(default_factory=list)
    cpu: dict[str, Any] | None = None  # the CPU accounting, once judged
    io: dict[str, Any] | None = None  # the reads, once judged (or why they were not measured)
    proposed: dict[str, Any] | None = None  # what its findings propose, once judged
    source: int | None = None  # a merged report's: the index of the node's report it came from
    # its workers each yielded the whole stream (True), split it (False), or it is unknown (None:
    # a map-style dataset, fewer than 2 workers, a stream that never changes): watching/replays.py
    replays: bool | None = None
    iter_error: str | None = None  # what iter(loader) raised: its epoch never began (watching/epochs.py)
    init_error: str | None = None  # what DataLoader(...) raised: torch refused the settings it was built with
    init_site: str | None = None  # ... at this line of the program ("train.py:4")
    # what the rules read beside the loader, never written: the /dev/shm of its node, whether its
    # name says its rank (several processes), why its reads were not measured, and on the loader
    # each rank trained from, every rank's (the straggler rule compares them)
    shm_peak_used_bytes: int | None = None  # /dev/shm high-water mark seen while the run sampled
    shm_total_bytes: int | None = None
    named_with_rank: bool = False
    io_unreadable: str | None = None
    job: list[RankRun] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.totals is None:
            self.totals = LoaderTotals.of(self.epochs)

    def title(self, where: bool = False) -> str:
        """``train loader (DataLoader, num_workers=0, batch_size=4)`` where the framework hook that
        built it said its role, else ``loader 1 (...)``; ``where`` adds the rank (or pid)."""
        s = self.settings
        knobs = [f"{k}={s[k]}" for k in ("num_workers", "batch_size") if s.get(k) is not None]
        if s.get("num_workers"):
            knobs += [f"{k}={s[k]}" for k in ("prefetch_factor", "persistent_workers") if s.get(k) is not None]
        head = []
        if where:
            head.append(f"rank {self.rank}" if self.rank is not None else f"pid {self.pid}")
        name = f"{self.role} loader" if isinstance(self.role, str) and self.role else f"loader {self.number}"
        return f"{name} ({', '.join([*head, self.cls or 'iterable', *knobs])})"

    @property
    def name(self) -> str:
        """How findings name it: "loader 1 (DataLoader, num_workers=2, batch_size=64)"."""
        return self.title(self.named_with_rank)

    @property
    def workers(self) -> int:
        workers = self.settings.get("num_workers")
        return workers if isinstance(workers, int) else 0

    @property
    def persistent_workers(self) -> bool | None:
        persistent = self.settings.get("persistent_workers")
        return persistent if isinstance(persistent, bool) else None

    @property
    def judged(self) -> bool:
        """Enough steady batches for the rules to judge it."""
        return self.waits >= WATCH_MIN_BATCHES

    @property
    def steps(self) -> int:
        return self.totals.steps

    @property
    def waits(self) -> int:
        return self.totals.waits

    @property
    def wait_s(self) -> float:
        return self.totals.wait_s

    @property
    def step_s(self) -> float:
        return self.totals.step_s

    @property
    def wait_share(self) -> float | None:
        return self.totals.wait_share

    @property
    def wait_per_batch_s(self) -> float | None:
        return self.totals.wait_per_batch_s

    @property
    def step_per_batch_s(self) -> float | None:
        return self.totals.step_per_batch_s

    @property
    def longest_epoch(self) -> WatchedEpoch | None:
        """The epoch with the most waits: its percentiles are the ones shown."""
        return max(self.epochs, key=lambda e: e.waits, default=None)

    @property
    def wait_p50_s(self) -> float | None:
        return self.longest_epoch.wait_p50_s if self.longest_epoch else None

    @property
    def wait_p95_s(self) -> float | None:
        return self.longest_epoch.wait_p95_s if self.longest_epoch else None

    @property
    def percentile_epoch(self) -> int | None:
        return self.longest_epoch.number if self.longest_epoch else None

    @property
    def per(self) -> str:
        """What one point of the app's chart is: "interval" (the timeline) or "epoch"."""
        return "interval" if self.timeline else "epoch"

    @property
    def intervals(self) -> list[Interval]:
        """The stretches the app charts: the timeline's intervals, else the epochs."""
        if self.timeline:
            return [Interval(f"at {p.t_s:.1f} s", p.t_s, p.steps, p.wait_s, p.step_s) for p in self.timeline]
        return [Interval(f"epoch {e.index}", float(e.index), e.steps, e.wait_s, e.step_s) for e in self.epochs]

    def to_json(self) -> dict[str, Any]:
        """The loader's entry of a ``loaderdoc.watch/1`` report."""
        out = {"loader": self.number, "role": self.role, "pid": self.pid, "rank": self.rank, "class": self.cls,
               "settings": self.settings, **self.applied, "epochs": [e.recorded for e in self.epochs],
               "totals": {f.name: getattr(self.totals, f.name) for f in fields(LoaderTotals)},
               "timeline": [{f.name: getattr(p, f.name) for f in fields(TimelinePoint)} for p in self.timeline],
               "judged": self.judged, "cpu": self.cpu, "io": self.io, "proposed": self.proposed}
        if self.source is not None:
            out["source"] = self.source
        if self.replays is not None:
            out["replays"] = self.replays
        if self.iter_error is not None:
            out["iter_error"] = self.iter_error
        if self.init_error is not None:
            out["init_error"] = self.init_error
            out["init_site"] = self.init_site
        return out

    @property
    def load_per_batch_s(self) -> float | None:
        """One batch's load time (:func:`load_per_batch`); None before any wait and step."""
        wait, step = self.wait_per_batch_s, self.step_per_batch_s
        if wait is None or step is None:
            return None
        return load_per_batch(self.workers, wait, step)

    def io_use(self) -> IoUse | None:
        """The loader's reads over its steady batches (None: not recorded)."""
        return io_use(self.epochs, self.waits)

    def cpu_use(self, budget: float | None, ranks: int = 1) -> CpuUse | None:
        """The loader's CPU accounting against ``budget`` CPUs, this rank's share of the node's
        among ``ranks`` ranks (None: not recorded)."""
        epochs = self.epochs
        if any(e.cpu_wait_s is None or e.cpu_step_s is None for e in epochs):
            return None
        ended = [e for e in epochs if e.proc_cpu_s is not None and e.wall_s]
        tree = sum(e.proc_cpu_s + (e.workers_cpu_s or 0.0) for e in ended) if ended else None
        others = [e.others_cpu_s for e in ended if e.others_cpu_s is not None]
        threads = [e.torch_threads for e in epochs if e.torch_threads]
        loop = None not in [x for e in epochs for x in (e.cpu_wait_loop_s, e.cpu_step_loop_s)]
        return cpu_use(
            workers=self.workers, budget=budget, waits=self.waits, steps=sum(e.steps for e in epochs),
            steps_timed=sum(e.steps_timed for e in epochs), wait_s=self.wait_s, step_s=self.step_s,
            cpu_wait_s=sum(e.cpu_wait_s for e in epochs), cpu_step_s=sum(e.cpu_step_s for e in epochs),
            cpu_wait_loop_s=sum(e.cpu_wait_loop_s for e in epochs) if loop else None,
            cpu_step_loop_s=sum(e.cpu_step_loop_s for e in epochs) if loop else None,
            cpu_wait_wall_s=sum(e.wait_s if e.cpu_wait_wall_s is None else e.cpu_wait_wall_s for e in epochs),
            cpu_step_wall_s=sum(e.step_s if e.cpu_step_wall_s is None else e.cpu_step_wall_s for e in epochs),
            workers_cpu_s=_steady(epochs, "workers_cpu_s", "workers_cpu_first_s"),
            workers_runq_s=_steady(epochs, "workers_runq_s", "workers_runq_first_s"),
            tree_cpu_s=tree, others_cpu_s=sum(others) if len(others) == len(ended) else None,
            cpu_wall_s=sum(e.wall_s for e in ended) if ended else None,
            torch_threads=max(threads) if threads else None, ranks=ranks,
            on_gpu=any(e.gpu_idle_s is not None for e in epochs),
            pin_memory=bool((self.settings or {}).get("pin_memory")))


def _steady(epochs: list[WatchedEpoch], total: str, first: str) -> float | None:
    """The workers' time past each epoch's first batch, summed (None: none recorded)."""
    known = [e for e in epochs if getattr(e, total) is not None]
    if not known:
        return None
    return sum(max(0.0, getattr(e, total) - (getattr(e, first) or 0.0)) for e in known)
