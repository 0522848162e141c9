"""What a real training run showed about one DataLoader: the evidence the ``watch`` rules read.

``loaderdoc watch`` (and ``loaderdoc.watch(loader)``) build one :class:`WatchEvidence` per loader
from the hook's records and hand it to the rule catalogue beside the machine facts and the
loader's settings, so a real run is judged by the same rules, thresholds and policy as ``check``
and ``probe``. Plain numbers only: no torch, no textual, nothing read from the machine here.

Definitions (every epoch of the loader, summed):

- ``wait_s``: time blocked in ``next()`` for every batch after an epoch's first (the first batch,
  worker start-up included, is the epoch's ``first_batch_s``);
- ``step_s``: time from a batch being returned to the next ``next()`` call;
- ``wait_share = wait_s / (wait_s + step_s)``: the share of the steady loop spent waiting for data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loaderdoc.advice.cpu_use import CpuUse, cpu_use
from loaderdoc.advice.io_use import IoUse, io_use
from loaderdoc.advice.stragglers import RankRun


def wait_share_of(wait_s: float, step_s: float) -> float | None:
    """The share of a loop's time spent waiting for data: wait / (wait + step); None for no time.
    The one definition the report, the rules and the app's Run view share."""
    total = wait_s + step_s
    return wait_s / total if total > 0 else None


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


# the CPU accounting's fields, named as the hook's records name them
CPU_FIELDS = ("cpu_wait_s", "cpu_step_s", "cpu_wait_wall_s", "cpu_step_wall_s", "proc_cpu_s", "workers_cpu_s",
              "workers_runq_s", "workers_cpu_first_s", "workers_runq_first_s", "others_cpu_s", "torch_threads")
IO_FIELDS = ("io_main", "io_workers", "io_first", "io_traced")  # the read accounting's, likewise


@dataclass
class WatchEvidence:
    """One DataLoader of a real run and the /dev/shm of the node it ran on."""

    name: str  # "loader 1 (DataLoader, num_workers=2, batch_size=64)": how findings name it
    workers: int = 0
    persistent_workers: bool | None = None
    epochs: list[WatchedEpoch] = field(default_factory=list)
    wait_p50_s: float | None = None  # of the epoch with the most waits
    wait_p95_s: float | None = None
    percentile_epoch: int | None = None  # which epoch the percentiles are from
    shm_peak_used_bytes: int | None = None  # /dev/shm high-water mark seen while the run sampled
    shm_total_bytes: int | None = None
    # a distributed run: this loader's rank and, on the loader each rank trained from, every
    # rank's (the straggler rule compares them); empty on other loaders and single-process runs
    rank: int | None = None
    job: list[RankRun] = field(default_factory=list)
    io_unreadable: str | None = None  # why the run's reads were not measured (None: they were, or an older record)

    @property
    def waits(self) -> int:
        return sum(e.waits for e in self.epochs)

    @property
    def wait_s(self) -> float:
        return sum(e.wait_s for e in self.epochs)

    @property
    def step_s(self) -> float:
        return sum(e.step_s for e in self.epochs)

    @property
    def wait_share(self) -> float | None:
        return wait_share_of(self.wait_s, self.step_s)

    @property
    def wait_per_batch_s(self) -> float | None:
        return self.wait_s / self.waits if self.waits else None

    @property
    def step_per_batch_s(self) -> float | None:
        timed = sum(e.steps_timed for e in self.epochs)
        return self.step_s / timed if timed else None

    @property
    def load_per_batch_s(self) -> float | None:
        """One batch's load time: in the loop (0 workers) it is the wait; n workers deliver a batch
        every wait + step, so each takes at most n times that (exactly that when they are starved)."""
        wait, step = self.wait_per_batch_s, self.step_per_batch_s
        if wait is None or step is None:
            return None
        return wait if self.workers == 0 else self.workers * (wait + step)

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
        return cpu_use(
            workers=self.workers, budget=budget, waits=self.waits, steps=sum(e.steps for e in epochs),
            steps_timed=sum(e.steps_timed for e in epochs), wait_s=self.wait_s, step_s=self.step_s,
            cpu_wait_s=sum(e.cpu_wait_s for e in epochs), cpu_step_s=sum(e.cpu_step_s for e in epochs),
            cpu_wait_wall_s=sum(e.wait_s if e.cpu_wait_wall_s is None else e.cpu_wait_wall_s for e in epochs),
            cpu_step_wall_s=sum(e.step_s if e.cpu_step_wall_s is None else e.cpu_step_wall_s for e in epochs),
            workers_cpu_s=_steady(epochs, "workers_cpu_s", "workers_cpu_first_s"),
            workers_runq_s=_steady(epochs, "workers_runq_s", "workers_runq_first_s"),
            tree_cpu_s=tree, others_cpu_s=sum(others) if len(others) == len(ended) else None,
            cpu_wall_s=sum(e.wall_s for e in ended) if ended else None,
            torch_threads=max(threads) if threads else None, ranks=ranks,
            on_gpu=any(e.gpu_idle_s is not None for e in epochs))


def _steady(epochs: list[WatchedEpoch], total: str, first: str) -> float | None:
    """The workers' time past each epoch's first batch, summed (None: none recorded)."""
    known = [e for e in epochs if getattr(e, total) is not None]
    if not known:
        return None
    return sum(max(0.0, getattr(e, total) - (getattr(e, first) or 0.0)) for e in known)
