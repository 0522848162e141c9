"""A real run, measured by ``loaderdoc watch``: data wait, epoch start, worker memory, /dev/shm.

These rules read :class:`~loaderdoc.advice.watched.WatchEvidence` (one loader of the run) and stay
silent without it, so ``check`` and ``probe`` never see them fire. Their thresholds are the
policy's, shared with the probe's decisions: a run and a probe judge a loader alike.
"""

from __future__ import annotations

import math
from itertools import pairwise

from loaderdoc import policy
from loaderdoc.advice.findings import CRITICAL, OK, WARNING, Finding
from loaderdoc.advice.rules.memory import MALLOC_CAUSE, malloc_fix
from loaderdoc.advice.rules.registry import STARVED_CRIT_PCT, Inputs, found, rule
from loaderdoc.advice.stragglers import find_stragglers
from loaderdoc.advice.watched import WatchEvidence
from loaderdoc.units import cpus_text, fmt_bytes, fmt_seconds

STARVED_RULE = "watch-data-starved"
HEALTHY_RULE = "watch-loader-healthy"
_JUDGED = f"over >= {policy.WATCH_MIN_BATCHES} steady batches (loaderdoc.policy.WATCH_MIN_BATCHES)"


def _judged(w: WatchEvidence | None) -> WatchEvidence | None:
    """The evidence when it has enough steady batches to judge the data wait."""
    if w is None or w.waits < policy.WATCH_MIN_BATCHES or w.wait_share is None:
        return None
    return w


def _wait_line(w: WatchEvidence) -> str:
    return (f"waited {100 * w.wait_share:.1f} % of its steady time for data over {w.waits} batches "
            f"({fmt_seconds(w.wait_per_batch_s)} per batch waiting, {fmt_seconds(w.step_per_batch_s)} per step)")


def _workers_needed(w: WatchEvidence) -> int | None:
    load, step = w.load_per_batch_s, w.step_per_batch_s
    if load is None or not step:
        return None
    return max(1, math.ceil(round(load / step, 6)))  # 4.0000001 workers are 4


@rule(STARVED_RULE, CRITICAL, "The training loop waits for data (measured in the run)", "watch",
      f"measured in the run: the loop waits >= {policy.NOT_STARVED_PCT:g} % of its steady time for batches "
      f"(loaderdoc.policy.NOT_STARVED_PCT; below it more loading capacity cannot help; critical "
      f">= {STARVED_CRIT_PCT:g} %: it waits more than it computes), {_JUDGED}")
def _watch_starved(i: Inputs) -> Finding | None:
    w = _judged(i.watch)
    if w is None or 100 * w.wait_share < policy.NOT_STARVED_PCT:
        return None
    pct = 100 * w.wait_share
    evidence = [_wait_line(w)]
    if w.wait_p50_s is not None:
        evidence.append(f"wait per batch p50 {fmt_seconds(w.wait_p50_s)}, p95 {fmt_seconds(w.wait_p95_s)} "
                        f"(epoch {w.percentile_epoch})")
    needed = _workers_needed(w)
    if needed is not None:
        evidence.append(f"one batch takes about {fmt_seconds(w.load_per_batch_s)} to load with num_workers={w.workers}: "
                        f"about {policy.workers_text(needed)} would keep up with the {fmt_seconds(w.step_per_batch_s)} step")
    suggested = max(w.workers + 1, needed or 0)
    fix = f"raise num_workers from {w.workers} to {suggested}"
    cpus = i.per_rank
    if cpus and suggested > cpus:
        fix += (f" (more than the {cpus_text(cpus)} this rank may use: if loading is CPU work, make it cheaper "
                "or move it off the step's machine)")
    fix += "; size it on this machine with 'loaderdoc probe'"
    return found(
        CRITICAL if pct >= STARVED_CRIT_PCT else WARNING,
        f"{w.name} is data-starved: the loop waited {pct:.0f} % of the time for batches",
        evidence,
        ("the batch is loaded in the training process, between steps" if w.workers == 0 else
         f"{policy.workers_text(w.workers)} load batches slower than the step consumes them"),
        fix,
        policy.fewer_workers(suggested),
    )


@rule(HEALTHY_RULE, OK, "The loader keeps up with the training loop (measured in the run)", "watch",
      f"measured in the run: the loop waits < {policy.NOT_STARVED_PCT:g} % of its steady time for batches "
      f"(loaderdoc.policy.NOT_STARVED_PCT), {_JUDGED}; reported as ok, never as a warning")
def _watch_healthy(i: Inputs) -> Finding | None:
    w = _judged(i.watch)
    if w is None or 100 * w.wait_share >= policy.NOT_STARVED_PCT:
        return None
    return found(
        OK,
        f"{w.name} keeps up: the loop waited {100 * w.wait_share:.1f} % of the time for data",
        [_wait_line(w)],
        "batches were ready when the step asked for them",
        "nothing to change for speed; fewer workers may do as well ('loaderdoc probe' measures)",
    )


@rule("watch-slow-epoch-start", WARNING, "Every epoch waits for its workers to start again (measured)", "watch",
      f"measured in the run, workers not persistent: the later epochs' first batch, less one batch's load, is "
      f">= {2 * policy.PERSISTENT_PAYS_SHARE:.0%} of those epochs' time (twice "
      "loaderdoc.policy.PERSISTENT_PAYS_SHARE, from which the probe picks persistent_workers=True: the load "
      "estimate is an upper bound, so the saving is a lower one)")
def _watch_slow_start(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or w.workers == 0 or w.persistent_workers is not False:
        return None
    later = [e for e in w.epochs[1:] if e.finished and e.first_batch_s is not None and e.wall_s]
    load = w.load_per_batch_s
    if not later or load is None:
        return None
    saving = sum(max(0.0, e.first_batch_s - load) for e in later)
    wall = sum(e.wall_s for e in later)
    share = saving / wall
    if share < 2 * policy.PERSISTENT_PAYS_SHARE:
        return None
    firsts = ", ".join(f"{e.first_batch_s:.2f} s" for e in later[:5]) + (" ..." if len(later) > 5 else "")
    return found(
        WARNING,
        f"{w.name}: each epoch spends {share:.0%} of its time starting {policy.workers_text(w.workers)} again",
        [f"first batch of epochs 2..{len(later) + 1}: {firsts} (a steady batch loads in about {fmt_seconds(load)})",
         f"{saving:.2f} s of start-up over {wall:.1f} s of those {len(later)} epochs"],
        "With persistent_workers=False every epoch shuts the workers down and the next starts new ones "
        "(re-importing, re-opening files, copying the dataset object into each).",
        "Set persistent_workers=True (the workers and their memory stay alive between epochs).",
        {"persistent_workers": True},
    )


@rule("watch-worker-memory-growing", WARNING, "Worker memory grows epoch after epoch (measured)", "watch",
      f"measured in the run: the workers' summed PSS peak rises over >= {policy.WORKER_GROWTH_EPOCHS} epochs, "
      f"never falling, to >= {policy.WORKER_GROWTH_RATIO:g} x the first epoch's and "
      f">= {fmt_bytes(policy.WORKER_GROWTH_MIN_BYTES)} above it (loaderdoc.policy.WORKER_GROWTH_*); malloc is "
      f"named when the workers' heaps grew by >= {policy.HEAP_HELD_SHARE:.0%} of that rise over the same epochs")
def _watch_memory_growing(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or w.workers == 0:
        return None
    peaks = [(e.index, e.workers_pss_max_bytes) for e in w.epochs if e.workers_pss_max_bytes]
    if len(peaks) < policy.WORKER_GROWTH_EPOCHS:
        return None
    values = [v for _, v in peaks]
    first, last = values[0], values[-1]
    rising = all(b >= a for a, b in pairwise(values))
    if not rising or not policy.memory_growing(first, last):
        return None
    shown = ", ".join(fmt_bytes(v) for v in values[:6]) + (" ..." if len(values) > 6 else "")
    evidence = [f"workers' PSS peak per epoch: {shown} ({last / first:.2f}x over {len(values)} epochs)"]
    budget = i.facts.memory.budget
    if budget:
        evidence.append(f"the last epoch's peak is {last / budget:.0%} of the {fmt_bytes(budget)} memory budget")
    # (PSS peak, heap grown then) of the epochs that have both: the two rises over the same epochs
    both = [(e.workers_pss_max_bytes, e.workers_heap_grown_bytes) for e in w.epochs
            if e.workers_pss_max_bytes and e.workers_heap_grown_bytes is not None]
    if len(both) >= 2 and policy.heap_held(both[-1][1] - both[0][1], both[-1][0] - both[0][0]):
        # not the dataset's pages: heap the workers' own allocations grew (and malloc kept)
        evidence.append(f"over the same epochs the workers' malloc heaps ([heap] in /proc/<pid>/maps) grew by "
                        f"{fmt_bytes(both[-1][1] - both[0][1])}, to {fmt_bytes(both[-1][1])} since they started")
        cause, fix = MALLOC_CAUSE, malloc_fix("`loaderdoc watch` the run again with it")
    else:
        cause = ("Copy-on-read: each worker is a fork of the training process; reading a Python object (a list or "
                 "dict of samples, paths, annotations) writes its reference count, which copies the page it lives "
                 "on into the worker. As the workers touch more of the dataset every epoch, each ends up with its "
                 "own copy.")
        fix = ("Hold the dataset's index in numpy arrays (or Arrow / a memory-mapped file) instead of lists and "
               "dicts of Python objects: arrays are a few objects, so reading them copies nothing.")
    return found(
        WARNING,
        f"{w.name}: worker memory grew from {fmt_bytes(first)} to {fmt_bytes(last)} over {len(values)} epochs",
        evidence, cause, fix,
    )


@rule("watch-shm-nearly-full", CRITICAL, "/dev/shm was nearly full during the run (measured)", "watch",
      f"measured in the run: /dev/shm's peak use >= {policy.SHM_PEAK_WARN_SHARE:.0%} of its size "
      f"(loaderdoc.policy.SHM_PEAK_WARN_SHARE; critical >= {policy.SHM_PEAK_CRIT_SHARE:.0%})")
def _watch_shm_full(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or not w.shm_peak_used_bytes or not w.shm_total_bytes:
        return None
    share = w.shm_peak_used_bytes / w.shm_total_bytes
    if share < policy.SHM_PEAK_WARN_SHARE:
        return None
    evidence = [f"/dev/shm peak use {fmt_bytes(w.shm_peak_used_bytes)} of {fmt_bytes(w.shm_total_bytes)} "
                f"({share:.0%}), the highest any process of the run saw on this node"]
    if i.ranks > 1:
        evidence.append(f"{i.ranks} ranks on this node share it")
    change = {}
    if w.workers and i.settings is not None and i.settings.effective_prefetch_factor > 1:
        change = {"prefetch_factor": 1}
    return found(
        CRITICAL if share >= policy.SHM_PEAK_CRIT_SHARE else WARNING,
        f"/dev/shm was {share:.0%} full during the run: a larger batch or one more worker ends in 'Bus error'",
        evidence,
        "Workers hand every batch to the training process through /dev/shm; the batches in flight of every "
        "loader (and every rank) on the node share it.",
        f"Give the container more shared memory (docker run --shm-size=..., or --ipc=host), or hold fewer "
        f"batches in flight: fewer workers, or a smaller prefetch_factor{' (prefetch_factor=1)' if change else ''}.",
        change,
    )


@rule("watch-straggler-rank", WARNING, "One rank waits for data far more than the others (measured)", "watch",
      f"measured in the run: a rank's wait per batch >= {policy.STRAGGLER_RATIO:g}x the other ranks' median "
      f"(loaderdoc.policy.STRAGGLER_RATIO) and >= {1000 * policy.STRAGGLER_FLOOR_S:g} ms more "
      f"(STRAGGLER_FLOOR_S), while it waits >= {policy.NOT_STARVED_PCT:g} % of its time (NOT_STARVED_PCT)")
def _watch_straggler(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or w.rank is None or len(w.job) < 2:
        return None
    mine = [s for s in find_stragglers(w.job) if s.rank == w.rank]
    if not mine:
        return None
    s = mine[0]
    shown = sorted(w.job, key=lambda r: (r.rank != s.rank, r.rank))[:8]
    evidence = [f"rank {r.rank}" + (f" (node {r.node})" if r.node is not None else "") +
                f": waited {100 * (r.wait_share or 0):.1f} % of its time, {fmt_seconds(r.wait_per_batch_s)} per batch"
                f" over {r.steps} batches" for r in shown]
    if len(w.job) > len(shown):
        evidence.append(f"... {len(w.job) - len(shown)} more ranks in the report's 'ranks'")
    if s.differences:
        fix = (f"Give rank {s.rank} what the others have ({'; '.join(s.differences)}): the CPUs its process may "
               "use come from taskset / srun --cpu-bind / the container's quota, /dev/shm from --shm-size.")
    else:
        fix = (f"Compare what rank {s.rank} reads with the others': its shard of the data (larger or slower "
               "samples), its storage or network mount; then raise its loading capacity (num_workers) if it is "
               "CPU-bound.")
    return found(
        WARNING,
        s.text(),
        evidence,
        "Every rank waits for the slowest at each gradient all-reduce: one rank starved for data holds the "
        "whole job to its pace (the others' time shows up as a longer step, not as data wait).",
        fix,
    )
