"""What a probe measured: one :class:`ConfigResult` per DataLoader configuration tried.

These dataclasses are the contract between the probe (which fills them), the advice rules and
the TUI (which read them). They import neither torch nor textual and round-trip through JSON.
Fields that were not measured stay ``None``; nothing here is ever estimated.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loaderdoc.base._serde import Recorded
from loaderdoc.base.jsondoc import stamped
from loaderdoc.base.settings import LoaderSettings


@dataclass
class WaitStats:
    """How long the training step waited for each batch (milliseconds)."""

    p50_ms: float | None = None
    p95_ms: float | None = None
    max_ms: float | None = None
    mean_ms: float | None = None


@dataclass
class StageTimes:
    """Where one batch's loading time went, timed inside the process that loaded it (a worker, or the
    training process with 0 workers) by wrapping the dataset and the collate function. Per batch,
    milliseconds, averaged over the batches loaded during the steady window."""

    batches: int = 0  # batches loaded (collated) during the window, all workers together
    samples: int = 0  # samples fetched during the window
    dataset_ms: float | None = None  # Dataset.__getitem__ for one batch's samples, wall time
    dataset_cpu_ms: float | None = None  # ... of which this thread's CPU time
    dataset_queued_ms: float | None = None  # ... waiting for a CPU (runnable but not running; schedstat)
    dataset_read_bytes: float | None = None  # ... bytes read from storage, not the page cache (/proc io)
    collate_ms: float | None = None  # collate_fn, wall time
    collate_cpu_ms: float | None = None
    receive_ms: float | None = None  # training process: taking a batch that was ready (unpickle, map /dev/shm)
    pin_ms: float | None = None  # CUDA only: pinning one batch
    produced_per_s: float | None = None  # batches the workers finished per second in the window

    @property
    def load_ms(self) -> float | None:
        """One batch loaded by one process: its samples plus collate."""
        if self.dataset_ms is None:
            return None
        return self.dataset_ms + (self.collate_ms or 0.0)

    @property
    def load_cpu_ms(self) -> float | None:
        if self.dataset_cpu_ms is None:
            return None
        return self.dataset_cpu_ms + (self.collate_cpu_ms or 0.0)

    @property
    def dataset_wait_ms(self) -> float | None:
        """Wall minus CPU minus waiting for a CPU: storage, the network, a sleep, a lock."""
        if self.dataset_ms is None or self.dataset_cpu_ms is None:
            return None
        return max(0.0, self.dataset_ms - self.dataset_cpu_ms - (self.dataset_queued_ms or 0.0))


@dataclass
class MemoryGrowth:
    """The workers' summed PSS at the first and last memory samples of the steady window: a
    reading that climbs through the window has not settled, and a long run holds more."""

    first_bytes: int = 0
    last_bytes: int = 0
    seconds: float = 0.0  # between the two samples
    # the workers' malloc arenas grew by this in the window (mallinfo2 in each worker, every arena;
    # without it their [heap] mappings between the two samples)
    heap_rise_bytes: int | None = None
    malloc_arena_bytes: int | None = None  # the workers' malloc arenas at the window's end (mallinfo2) ...
    malloc_free_bytes: int | None = None  # ... of which free: kept by malloc for reuse, not given back
    # malloc heap (``[heap]``) the workers grew, at the window's last memory sample: each one's beyond the
    # smaller of the training process's (a fork starts with a copy) and its own when first sampled
    # (a spawned worker starts afresh): memory malloc holds for them (live, or freed and kept)
    heap_grown_bytes: int | None = None

    @property
    def per_s(self) -> float:
        return (self.last_bytes - self.first_bytes) / self.seconds if self.seconds > 0 else 0.0


@dataclass
class ConfigResult:
    settings: LoaderSettings = field(default_factory=LoaderSettings)
    status: str = "ok"  # "ok" | "failed" | "timeout" | "cancelled"
    error: str | None = None  # one line, for a failed configuration
    traceback: str | None = None  # the worker's traceback, when there was one
    batches: int = 0  # steady-state batches measured
    duration_s: float = 0.0  # wall time spent on this configuration
    first_batch_s: float | None = None  # iterator creation -> first batch (worker start-up)
    batches_per_s: float | None = None  # steady-state training steps per second
    samples_per_s: float | None = None
    wait: WaitStats = field(default_factory=WaitStats)
    starvation_pct: float | None = None  # share of steady wall time spent waiting for data
    step_ms_achieved: float | None = None  # the simulated training step, as measured
    epoch_restart_s: float | None = None  # next epoch's first batch (0 workers: just the fetch)
    # the same gap had persistent_workers been on (measured in the same run, same workers/prefetch)
    epoch_restart_persistent_s: float | None = None
    worker_pss_bytes: int | None = None  # summed PSS of the workers (honest shared-page split)
    worker_uss_bytes: int | None = None  # summed USS: memory only the workers hold
    worker_rss_bytes: int | None = None  # summed RSS, for comparison (double-counts)
    worker_memory_growth: MemoryGrowth | None = None  # the workers' PSS through the steady window
    shm_peak_bytes: int | None = None  # /dev/shm high-water mark above the baseline
    cpu_util_pct: float | None = None  # whole-machine CPU use while measuring
    # CPUs (of those this process may use) other processes kept busy in the window: with no
    # workers, what they demand; the workers would share the CPUs with them
    other_cpus: float | None = None
    # CPUs this process and its workers kept busy over the window (the rest of the budget stood idle
    # or went to other processes)
    loader_cpus: float | None = None
    h2d_pinned_ms: float | None = None  # host-to-device copy per batch, CUDA only
    h2d_pageable_ms: float | None = None
    batch_bytes: int | None = None  # tensor bytes of one collated batch, as measured
    fetch_cpu_pct: float | None = None  # 0 workers only: share of fetch time running or runnable (CPU), not I/O wait
    # IterableDataset only: True when 2 workers delivered the same batches (each replays the whole
    # stream: the dataset does not split it with get_worker_info()), False when they differed
    workers_repeat: bool | None = None
    # the steady rate is the lower of what the step consumed and what the workers produced in the
    # window: batches the workers had buffered during start-up flatter consumption, never production
    consumed_per_s: float | None = None
    warmup_batches: int = 0  # consumed before the window, until the prefetch buffer reached equilibrium
    stages: StageTimes | None = None
    purpose: str = ""  # why the search tried this configuration (evidence for the reasons)
    torch_threads: int | None = None  # the measuring process's intra-op threads, read back (None: failed)
    # the failure is loaderdoc's own measuring machinery's, not the dataset's (loaderdoc.probing.blame)
    loaderdoc_error: bool = False

    @property
    def memory_still_growing(self) -> bool:
        """Its workers' memory rose through the window by more than their batches explain
        (policy.still_growing): the core's judgement, which the text and the app only show."""
        from loaderdoc.policy import still_growing

        return still_growing(self)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


@dataclass
class WorkloadInfo:
    name: str = ""  # preset name or "module:factory"
    description: str = ""
    dataset_len: int | None = None
    iterable: bool = False  # an IterableDataset: no shuffle, no sampler, no epoch the probe can end
    batch_size: int = 1
    sample_bytes: int | None = None  # measured from a real sample
    batch_bytes: int | None = None  # measured from a real collated batch
    step_ms: float = 0.0  # the training step the user asked to simulate
    consumer: str = "cpu-sleep"  # "cuda-kernel" | "cpu-sleep"
    # the training process's intra-op threads the measuring process ran with, and why that many
    torch_threads: int | None = None
    torch_threads_source: str = ""


# where the probe's training step is a sleep: why `loaderdoc tune` on the real job may measure less
SLEEP_STEP_NOTE = ("the step is simulated with a sleep, which leaves the CPUs to the workers; a training step that "
                   "uses the CPUs (or a GPU's host threads) will be slower: `loaderdoc tune -- python train.py` "
                   "measures the settings on the real job")


# where it is a GPU kernel: what a real training process pays per batch that the kernel does not
GPU_STEP_NOTE = ("the step is a GPU kernel of the given length after the batch's copy (its pinning is priced "
                 "above); a real training process also launches its model's kernels and runs the optimizer on "
                 "the host, and its threads compete with the workers for the CPUs, none of which the kernel "
                 "does: a ResNet-50 job over JPEGs on an H200 ran at 0.44x and 0.71x the rate the probe measured "
                 "for its pick; `loaderdoc tune -- python train.py` measures the settings on the real job")


def step_note(consumer: str) -> str:
    """What a probe's simulated step leaves out of its predicted and measured rates."""
    if consumer == "cpu-sleep":
        return SLEEP_STEP_NOTE
    return GPU_STEP_NOTE if consumer == "cuda-kernel" else ""


@dataclass
class StageCost:
    """One stage of a step in the breakdown: its time per batch and the rate it alone would allow."""

    stage: str  # "dataset (CPU)", "dataset (waiting)", "collate", "transfer", "training step", ...
    ms: float  # per batch, in the process that pays it
    per_s: float | None = None  # batches per second this stage could sustain at this configuration
    note: str = ""


@dataclass
class Breakdown:
    """Where a training step's time goes at one configuration (the 0-worker baseline, the pick)."""

    settings: LoaderSettings = field(default_factory=LoaderSettings)
    label: str = ""  # "baseline (num_workers=0)", "pick (num_workers=3)"
    stages: list[StageCost] = field(default_factory=list)
    measured_per_s: float | None = None  # steady training steps per second
    wait_ms: float | None = None  # the step's mean wait for a batch
    bottleneck: str = ""  # the stage with the lowest rate
    why: str = ""  # one sentence naming the bottleneck with its numbers


@dataclass
class CurvePoint:
    workers: int
    predicted_per_s: float
    measured_per_s: float | None = None  # mean of the runs at this size (default prefetch), if measured
    limit: str = ""  # what caps the prediction at this size


@dataclass
class Prediction:
    """The throughput curve over num_workers predicted from the 0-worker baseline, and the check."""

    curve: list[CurvePoint] = field(default_factory=list)
    workers: int = 0  # the size the model predicted as the fewest workers at the top of the curve
    model: str = ""  # the model's inputs in words
    pick_workers: int | None = None  # what was recommended after measuring
    pick_predicted_per_s: float | None = None
    pick_measured_per_s: float | None = None
    step_note: str = ""  # what the simulated step means for these rates (:func:`step_note`)

    @property
    def error_pct(self) -> float | None:
        """Measured vs predicted at the pick, in percent of the prediction (negative: slower)."""
        if not self.pick_predicted_per_s or self.pick_measured_per_s is None:
            return None
        return 100.0 * (self.pick_measured_per_s / self.pick_predicted_per_s - 1.0)


@dataclass
class ProbeReport(Recorded):
    schema: str = "loaderdoc.probe/2"
    workload: WorkloadInfo = field(default_factory=WorkloadInfo)
    results: list[ConfigResult] = field(default_factory=list)
    recommended: LoaderSettings | None = None
    reasons: list[str] = field(default_factory=list)  # evidence for each recommended choice
    budget_s: float = 0.0
    elapsed_s: float = 0.0
    stopped: str = ""  # why the search stopped: "settled", "budget", "not starved", "cancelled", ...
    device: str = "cpu"
    epoch_steps: int | None = None  # steps per epoch the start-up cost was weighed against
    breakdown: list[Breakdown] = field(default_factory=list)
    prediction: Prediction | None = None

    def to_dict(self) -> dict:
        return stamped(super().to_dict())

    def is_pick(self, result: ConfigResult) -> bool:
        """A measured row of the recommended settings (policy.same_throughput): the pick's evidence."""
        from loaderdoc.policy import same_throughput

        return self.recommended is not None and result.ok and same_throughput(result.settings, self.recommended)

    @property
    def ok_results(self) -> list[ConfigResult]:
        return [r for r in self.results if r.ok]

    @property
    def best(self) -> ConfigResult | None:
        ok = [r for r in self.ok_results if r.batches_per_s is not None]
        return max(ok, key=lambda r: r.batches_per_s) if ok else None
