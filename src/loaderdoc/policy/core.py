"""The sizing policy's thresholds and its plain questions: what "the same configuration" is, how
many workers a rank's CPUs allow, when a measurement is trusted, the steady rates of a set of
measurements. Part of :mod:`loaderdoc.policy`, which re-exports every name here: import it from
there. The memory side, the scaling past the CPUs, the restarts and the pick (:mod:`.choice`) are
modules of their own that read these.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from loaderdoc.base.units import MiB, fmt_bytes, fmt_cpus

if TYPE_CHECKING:  # data contracts only; the policy never calls into the probe
    from loaderdoc.base.settings import LoaderSettings
    from loaderdoc.policy.measurement import Measurement
    from loaderdoc.system.facts import MachineFacts


# ---- thresholds -------------------------------------------------------------------------------
# Comparing measurements
TOLERANCE = 0.03  # "as fast as the best": within 3 % of its steps/s (a cheaper config within it wins)
MAX_NOISE = 0.10  # repeated runs may widen the tolerance, never past 10 %: larger gaps are real
BUSY_SHARE = 0.25  # other processes kept >= a quarter of the rank's CPUs busy in a measurement: a busy
#                    machine, said first; tune then measures the user's settings and its pick again in
#                    turns, so that a neighbour's load during one trial is not read as a gain
CLOSE_SPREADS = 2.0  # two candidates closer than twice the spread seen between or within runs are
#                      measured again in turns before either is called faster
REPEAT_BELOW = 1.5  # a gain under 1.5x is claimed against two runs of the user's settings: first runs of
#                     one configuration differed by a quarter on the quiet VM (the ImageNet script's 0-worker
#                     runs: 3.5 to 4.4 steps/s); below it, or beside a load, one run of theirs is no baseline
# How much the step waits for data, the one ladder every judgement uses: below NOT_STARVED_PCT more
# loading capacity cannot help (the probe stops adding workers, watch and tune call the loop fed);
# the probe's rules warn from STARVED_WARN_PCT (utilisation under the usual 80 % target, and only
# where a measured configuration waits less than half as much), watch's from NOT_STARVED_PCT (its
# measurement is the real loop's); both are critical from STARVED_CRIT_PCT, where the step waits
# more than it computes
NOT_STARVED_PCT = 5.0
NOT_STARVED_SHARE = NOT_STARVED_PCT / 100
STARVED_WARN_PCT = 20.0
STARVED_CRIT_PCT = 50.0
SPIKY_LOAD_RATIO = 2.0  # batches whose load time p95 >= 2 x p50: a few slow samples hold batches back
QUEUE_DRY_PCT = 20.0  # the step waits >= 20 % on average: the workers produce below its rate, their
#                       prefetch queue is empty most of the time and a deeper one mostly runs dry too
PERSISTENT_PAYS_SHARE = 0.01  # persistent_workers when restarting workers costs >= 1 % of an epoch
PERSISTENT_CLEAR_BAND = 1.5  # the start-up's estimate of that cost decides unless within 1.5x of it
#                              either way: then the probe times a real restart (a run of its own that
#                              forks the workers twice: 2-5 s, for a choice worth under 1.5 % of an epoch)
PERSISTENT_CLOSE_FACTOR = 2.0  # within 2x of the line either way the reason says either setting is fine:
#                               the start-up estimate's noise (two noisy times subtracted) could tip it
BURSTY_RATIO = 3.0  # wait p95 >= 3 x p50 ...
BURSTY_FLOOR_MS = 10.0  # ... and p95 >= the step (this when no step is known): stalls, not jitter
# CPU
UNMEASURED_WORKER_CAP = 16  # facts only: more workers rarely pay for their memory until measured
BEYOND_CPUS_PAYS = 1.2  # more workers than CPUs must measure >= 20 % faster than as many as the
#                         CPUs allow: run-to-run noise of probe windows on a busy machine is ~10 %
CPU_BUSY_SHARE = 0.7  # a 0-worker fetch that is >= 70 % CPU time is CPU work: extra workers contend
CPU_IDLE_SHARE = 0.3  # < 30 % CPU time: the fetch waits on storage or the network
CONTENDED_CPUS = 0.5  # other processes kept >= half a CPU busy beside the 0-worker run: the kernel
#                       shares CPU time per runnable thread, so more workers win more of it
COLD_READ_BYTES = 256 * 1024  # a 0-worker run that read >= 256 KiB a batch from storage (not the page
COLD_WAIT_SHARE = 0.1  #         cache) and waited >= 10 % of its loading: cold files, which the probe's
#                       next runs read again warm (they load the same indices); measured again once
SCALING_SLACK = 1.3  # W workers deliver at most W times what the training process loaded alone with 0
#                      workers (each worker does the same work, and hands its batch over besides); that
#                      0-worker rate differed by up to ~20 % between probes of one workload here (cold
#                      caches, noise), so a size is ruled out unmeasured only when 1.3x its bound still
#                      falls short, and past the CPUs the bound is evidence only 1.3 x 1.2 above it
# Memory
SHM_SAFE_SHARE = 0.5  # batches in flight may fill half of free /dev/shm: workers also allocate
#                       transient tensors there, the batch being consumed is still mapped, and other
#                       processes on the node share it
RAM_SAFE_SHARE = 0.8  # workers' PSS plus batches in flight may use 80 % of the memory budget
#                       (available RAM capped by the cgroup); above 100 % the OOM killer acts
DEFAULT_PREFETCH = 2  # torch's default prefetch_factor
HEAP_HELD_SHARE = 0.5  # the workers' heaps grew by >= half as much as their memory did: malloc holds it
MALLOC_MMAP_THRESHOLD = 128 * 1024  # glibc's starting mmap threshold, set as fixed: never raised, so
#                                     buffers above it are mmapped and given back on free
# A real run, measured by `loaderdoc watch` (the growth ratio and floor also judge a probe's window)
WATCH_MIN_BATCHES = 20  # steady batches (after each epoch's first) before a loader's wait is judged
WORKER_GROWTH_RATIO = 1.25  # workers' PSS peak in the last epoch (or at the end of a probe's steady
#                             window) >= 1.25 x the first epoch's (the window's start) ...
WORKER_GROWTH_MIN_BYTES = 64 * MiB  # ... and >= 64 MiB above it ...
WORKER_GROWTH_EPOCHS = 3  # ... over >= 3 epochs, never falling back: copy-on-read (reference counts
#                           written into Python objects copy the pages they live on) grows as the
#                           workers touch more of a shuffled dataset; one epoch's rise is workers warming
#                           up (imports, caches), a few MiB is the allocator
SHM_PEAK_WARN_SHARE = 0.8  # measured /dev/shm peak >= 80 % of its size: unlike SHM_SAFE_SHARE (a margin on
#                           a computed need) the peak already holds the transient tensors and other
#                           processes, so one more worker or a larger batch is what is left
SHM_PEAK_CRIT_SHARE = 0.95  # >= 95 %: the next larger batch gets 'Bus error' / 'No space left on device'
STRAGGLER_RATIO = 2.0  # a rank waiting >= 2 x the other ranks' median per batch ...
STRAGGLER_FLOOR_S = 0.001  # ... and >= 1 ms a batch more (0.3 ms against 0.1 ms is noise at any ratio)

ZERO_WORKERS: dict[str, Any] = {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False,
                                "multiprocessing_context": None}

Key = tuple[int, int]  # (num_workers, effective prefetch_factor): what decides steady throughput


# ---- what "the same configuration" means -------------------------------------------------------
def stream_key(settings: LoaderSettings) -> Key:
    """Configurations whose steady throughput should match: same workers and prefetch depth.

    persistent_workers only changes the start of an epoch, pin_memory only the copy to a GPU;
    neither changes how fast batches stream on the CPU side."""
    return settings.num_workers, settings.effective_prefetch_factor


def same_throughput(a: LoaderSettings, b: LoaderSettings) -> bool:
    """Two settings whose steady throughput is one: same workers and prefetch (persistence and
    pinning do not change it), so a row of either is evidence for the other's rate."""
    return stream_key(a) == stream_key(b)


def same_stream(a: LoaderSettings, b: LoaderSettings) -> bool:
    """Two settings the probe would measure as one: same workers, prefetch, pinning and batch
    size (an unset batch size matches any)."""
    return (
        stream_key(a) == stream_key(b)
        and a.pin_memory == b.pin_memory
        and (a.batch_size == b.batch_size or a.batch_size is None or b.batch_size is None)
    )


def workers_text(n: int) -> str:
    return f"{n} worker" + ("" if n == 1 else "s")


def key_text(key: Key) -> str:
    return "num_workers=0" if key[0] == 0 else f"num_workers={key[0]}, prefetch_factor={key[1]}"


def fewer_workers(n: int) -> dict[str, Any]:
    """A settings change to ``n`` workers that LoaderSettings accepts (0 clears worker-only keys)."""
    return dict(ZERO_WORKERS) if n <= 0 else {"num_workers": n}


def key_change(settings: LoaderSettings, key: Key) -> dict[str, Any]:
    """The smallest settings change that moves ``settings`` onto ``key``."""
    if key[0] == 0:
        return dict(ZERO_WORKERS) if settings.num_workers else {}
    change: dict[str, Any] = {}
    if settings.num_workers != key[0]:
        change["num_workers"] = key[0]
    if (settings.prefetch_factor or DEFAULT_PREFETCH) != key[1]:
        change["prefetch_factor"] = key[1]
    return change


# ---- batch bytes ---------------------------------------------------------------------------
def batch_bytes_for(batch_size: int | None, sample_bytes: int | None) -> int | None:
    if batch_size is None or sample_bytes is None:
        return None
    return batch_size * sample_bytes


def scale_batch_bytes(measured_bytes: int | None, measured_batch: int | None, batch_size: int | None) -> int | None:
    """Bytes of a batch of ``batch_size`` from one measured batch of ``measured_batch`` samples."""
    if not measured_bytes:
        return None
    if not batch_size or not measured_batch or batch_size == measured_batch:
        return measured_bytes
    return measured_bytes * batch_size // measured_batch


# ---- CPU ------------------------------------------------------------------------------------
def oversubscribed(workers: int, per_rank: float | None) -> bool:
    """More workers than CPUs for this rank (torch's own check counts the affinity set only)."""
    return per_rank is not None and workers > per_rank


def cpu_limit(per_rank: float) -> int:
    """The most workers that are not oversubscribed (at least one: a single worker on a fraction
    of a CPU still overlaps loading with the step)."""
    return max(1, math.floor(per_rank))


def worker_target(per_rank: float) -> int:
    """Workers that leave one CPU of the rank's budget to the training process itself."""
    if per_rank >= 2:
        return math.floor(per_rank) - 1
    return 1 if per_rank >= 1 else 0


def threads_oversubscribed(threads: int, per_rank: float | None) -> bool:
    """The training process's intra-op pool alone wants more CPUs than the rank has (torch sizes
    it from the affinity set, blind to a quota and to the ranks that share the CPUs); a pool that
    fits leaves the split between it and the workers to a measurement (``loaderdoc tune``)."""
    return per_rank is not None and threads > 1 and threads > per_rank


def thread_target(per_rank: float, workers: int) -> int:
    """Intra-op threads for the training process: the rank's whole CPUs its workers leave (the
    calling thread is one of them), at least 1; with 0 workers, the whole budget."""
    return max(1, math.floor(per_rank) - max(0, workers))


def workers_for_cpus(facts: MachineFacts) -> tuple[int, str]:
    """Workers from the facts alone, and why: one CPU for the training process, real cores only
    (hyper-threads add little to CPU-bound decoding), at most :data:`UNMEASURED_WORKER_CAP`."""
    cpu = facts.cpu
    per_rank = facts.cpus_per_rank
    ranks = facts.distributed.ranks_on_this_node
    budget = f"CPU budget {fmt_cpus(cpu.budget)} ({cpu.budget_source})"
    if ranks > 1:
        budget += f" / {ranks} local ranks = {fmt_cpus(per_rank)} per rank"
    if per_rank is None:
        return 0, "0: no CPU count could be read; torch's default until a probe measures what workers pay"
    usable = math.floor(per_rank)
    if usable <= 1:
        return 0, f"0: {budget}; the training process needs that CPU itself, workers would only contend"
    workers = worker_target(per_rank)
    reason = f"{workers}: {budget}, one CPU left for the training process"
    physical = cpu.physical.get()
    if physical:
        physical_per_rank = max(1, math.floor(physical / ranks))
        if physical_per_rank < workers:
            workers = physical_per_rank
            reason = f"{workers}: {budget}, but {physical} physical cores" + (
                f" / {ranks} ranks" if ranks > 1 else ""
            ) + " (hyper-threads add little to CPU-bound loading; a probe can show I/O-bound data wants more)"
    if workers > UNMEASURED_WORKER_CAP:
        workers = UNMEASURED_WORKER_CAP
        reason = f"{workers}: {budget}; capped at {UNMEASURED_WORKER_CAP} until a probe shows more helps"
    return workers, reason


def _cpu_work(results: Iterable[Measurement]) -> bool:
    """A 0-worker fetch was mostly CPU time (:data:`CPU_BUSY_SHARE`)."""
    zero = [r.fetch_cpu_pct for r in results if r.ok and r.settings.num_workers == 0 and r.fetch_cpu_pct]
    return bool(zero) and max(zero) > 100 * CPU_BUSY_SHARE


def single_windows_trusted(busy_cpus: float, fetch_cpu_pct: float | None) -> bool:
    """Whether one window per configuration is evidence enough, or close contenders must be
    measured again in turns: other processes kept less than :data:`CONTENDED_CPUS` busy in every
    run, or the loading waits (a 0-worker fetch under :data:`CPU_IDLE_SHARE` CPU time), so what
    the others take of the CPUs barely moves its rate (repeated windows of I/O-bound and spiky
    data beside a burnt core differed by a median 1-2 % here, as on a quiet machine; CPU-bound
    data by 3-6 %, up to 18 %)."""
    if busy_cpus < CONTENDED_CPUS:
        return True
    return fetch_cpu_pct is not None and fetch_cpu_pct < 100 * CPU_IDLE_SHARE


def idle_cpu_share(result: Measurement, per_rank: float) -> float | None:
    """The share of the rank's CPUs that stood idle in a run's window: what this process and its
    workers (and other processes) left of ``per_rank``; the whole machine's idle share where the
    process tree's use was not read (no CPU affinity to read it on). None where neither was read."""
    if result.loader_cpus is not None and per_rank > 0:
        return max(0.0, 1.0 - (result.loader_cpus + (result.other_cpus or 0.0)) / per_rank)
    if result.cpu_util_pct is not None:
        return max(0.0, 1.0 - result.cpu_util_pct / 100.0)
    return None


def cold_read(result: Measurement | None) -> str | None:
    """How much a run read from storage a batch, in words, when that made it wait (cold files:
    :data:`COLD_READ_BYTES`, :data:`COLD_WAIT_SHARE`); None for a warm run."""
    st = result.stages if result is not None and result.ok else None
    if st is None or not st.dataset_read_bytes or not st.load_ms:
        return None
    if st.dataset_read_bytes < COLD_READ_BYTES or (st.dataset_wait_ms or 0.0) < COLD_WAIT_SHARE * st.load_ms:
        return None
    return fmt_bytes(int(st.dataset_read_bytes))


def contended(other_cpus: float | None) -> float:
    """CPUs other processes kept busy, 0 below :data:`CONTENDED_CPUS` (no contention to speak of)."""
    return other_cpus if other_cpus is not None and other_cpus >= CONTENDED_CPUS else 0.0


def contention(results: Iterable[Measurement]) -> float:
    """CPUs other processes kept busy beside the 0-worker runs (mean), 0 below :data:`CONTENDED_CPUS`."""
    seen = [r.other_cpus for r in results if r.ok and r.settings.num_workers == 0 and r.other_cpus is not None]
    return round(contended(statistics.fmean(seen) if seen else 0.0), 2)


def restart_share(saving_s: float, epoch_s: float) -> float:
    """The share of an epoch (with its restart) that keeping the workers alive saves; worth it from
    :data:`PERSISTENT_PAYS_SHARE`."""
    return saving_s / (epoch_s + saving_s) if epoch_s + saving_s > 0 else 0.0


# ---- choosing among measurements -----------------------------------------------------------
def bursty(p50_ms: float | None, p95_ms: float | None, step_ms: float | None) -> bool:
    """Waits that stall now and then: p95 >= 3 x p50 and p95 at least a whole step."""
    if p50_ms is None or p95_ms is None:
        return False
    return p95_ms >= BURSTY_RATIO * max(p50_ms, 0.0) and p95_ms >= (step_ms or BURSTY_FLOOR_MS)


def spiky_loading(p50_ms: float | None, p95_ms: float | None) -> bool:
    """Batches that take very unequal times to load (with 0 workers each wait is one batch's load)."""
    return bool(p50_ms and p95_ms and p95_ms >= SPIKY_LOAD_RATIO * p50_ms)


def memory_growing(first_bytes: int, last_bytes: int, swing_bytes: int = 0) -> bool:
    """Workers' memory that rose to >= :data:`WORKER_GROWTH_RATIO` x where it was and
    >= :data:`WORKER_GROWTH_MIN_BYTES` above it (and above ``swing_bytes``, what it may move by
    without growing): not settled, a longer run holds more."""
    return (last_bytes >= WORKER_GROWTH_RATIO * first_bytes
            and last_bytes - first_bytes >= max(WORKER_GROWTH_MIN_BYTES, swing_bytes))


def still_growing(result: Measurement) -> bool:
    """A measured configuration whose workers' memory rose through its steady window by more
    than the batches they may hold while building them (one a worker: in /dev/shm, counted in
    their PSS while it is theirs) could account for."""
    g = result.worker_memory_growth
    if not result.ok or g is None:
        return False
    return memory_growing(g.first_bytes, g.last_bytes, result.settings.num_workers * (result.batch_bytes or 0))


def heap_held(heap_rise_bytes: int | None, memory_rise_bytes: int, free_bytes: int | None = None) -> bool:
    """Most of the workers' memory growth is their malloc heaps growing over the same stretch (not
    pages of the training process copied on write, not /dev/shm), and, where malloc's own count
    says how much of its arenas is free, most of that growth is free memory malloc kept (not live
    objects: a cache)."""
    if heap_rise_bytes is None or memory_rise_bytes <= 0 or heap_rise_bytes < HEAP_HELD_SHARE * memory_rise_bytes:
        return False
    return free_bytes is None or free_bytes >= HEAP_HELD_SHARE * heap_rise_bytes


def queue_runs_dry(starvation_pct: float | None, zero_p50_ms: float | None, zero_p95_ms: float | None) -> bool:
    """A deeper prefetch queue cannot feed the step faster: it waited >= :data:`QUEUE_DRY_PCT`
    on average (the workers produce below its rate, so batches are taken as soon as they are
    ready), and batches loaded evenly with 0 workers (``zero_*``: no slow batch holds ready ones
    back while the other workers' queues fill up). Bursty waits then come from workers finishing
    their batches together. Unknown 0-worker loads: it might help."""
    if starvation_pct is None or starvation_pct < QUEUE_DRY_PCT or not zero_p50_ms or zero_p95_ms is None:
        return False
    return not spiky_loading(zero_p50_ms, zero_p95_ms)


def _rates(results: Iterable[Measurement]) -> dict[Key, list[float]]:
    """The steps/s of every measured run, by configuration."""
    groups: dict[Key, list[float]] = {}
    for r in results:
        # in_order=False is judged against its in-order twin (same workers and prefetch), not pooled
        if r.ok and r.batches_per_s and r.settings.in_order:
            groups.setdefault(stream_key(r.settings), []).append(r.batches_per_s)
    return groups


def throughputs(results: Iterable[Measurement]) -> dict[Key, float]:
    """Mean measured steps/s per configuration."""
    return {k: statistics.fmean(v) for k, v in sorted(_rates(results).items())}


def half_spread(rates: list[float]) -> float:
    """Half the relative spread of one configuration's repeated rates (0 for fewer than two)."""
    return (max(rates) - min(rates)) / (2 * statistics.fmean(rates)) if len(rates) >= 2 else 0.0


def noise(results: Iterable[Measurement]) -> float:
    """Half the largest relative spread between repeated runs of one configuration, capped at
    :data:`MAX_NOISE`: on a small or shared machine two windows of one configuration differ, and
    differences smaller than that between configurations are not evidence."""
    return min(MAX_NOISE, max((half_spread(v) for v in _rates(results).values()), default=0.0))


def tolerance(results: Iterable[Measurement]) -> float:
    return max(TOLERANCE, noise(results))


def busy(other_cpus: float | None, per_rank: float | None) -> bool:
    """Other processes kept at least :data:`BUSY_SHARE` of the rank's CPUs busy (unknown: not said busy)."""
    return other_cpus is not None and bool(per_rank) and other_cpus >= BUSY_SHARE * per_rank
