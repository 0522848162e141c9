"""A real run, measured by ``loaderdoc watch``: data wait, epoch start, worker memory, /dev/shm.

These rules read :class:`~loaderdoc.watching.watched.LoaderReport` (one loader of the run) and stay
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
from loaderdoc.base.units import cpus_text, fmt_bytes, fmt_seconds
from loaderdoc.watching.cpu_use import (
    CPU_WORK_SHARE,
    GAIN_WORTH,
    SATURATED_SHARE,
    SATURATED_STEP_SHARE,
    CpuUse,
)
from loaderdoc.watching.io_use import DEVICE_MIN_PER_BATCH, DISK, DISK_SHARE, REREAD_SHARE, SMALL_READ, IoUse
from loaderdoc.watching.stragglers import find_stragglers
from loaderdoc.watching.watched import LoaderReport

STARVED_RULE = "watch-data-starved"
HEALTHY_RULE = "watch-loader-healthy"
_JUDGED = f"over >= {policy.WATCH_MIN_BATCHES} steady batches (loaderdoc.policy.WATCH_MIN_BATCHES)"


def _judged(w: LoaderReport | None) -> LoaderReport | None:
    """The evidence when it has enough steady batches to judge the data wait (never a loader whose
    workers replayed its stream: its waits are of data counted again, watch-stream-replayed says so)."""
    if w is None or w.waits < policy.WATCH_MIN_BATCHES or w.wait_share is None or w.replays:
        return None
    return w


def _wait_line(w: LoaderReport) -> str:
    return (f"waited {100 * w.wait_share:.1f} % of its steady time for data over {w.waits} batches "
            f"({fmt_seconds(w.wait_per_batch_s)} per batch waiting, {fmt_seconds(w.step_per_batch_s)} per step)")


def _wait_lines(w: LoaderReport, use: CpuUse | None) -> list[str]:
    """The evidence a starved and a healthy loader both open with: the wait, and with workers and
    CPU time recorded, the hand-over inside it."""
    return [_wait_line(w)] + ([_handover_line(use)] if use is not None and use.workers else [])


def workers_needed(w: LoaderReport) -> int | None:
    load, step = w.load_per_batch_s, w.step_per_batch_s
    if load is None or not step:
        return None
    return max(1, math.ceil(round(load / step, 6)))  # 4.0000001 workers are 4


def _idle_share(w: LoaderReport, use: CpuUse | None) -> float:
    """The share of the steady time the loop waited for a batch not yet loaded: the wait beyond
    the hand-over of a ready batch (which no worker count removes), where CPU time was recorded."""
    return use.idle_share if use is not None else w.wait_share


def _starved(w: LoaderReport, use: CpuUse | None) -> bool:
    """The loop waits for data (policy.NOT_STARVED_PCT): the one judgement the starved, healthy and
    on-disk rules and the read verdict share."""
    return 100 * _idle_share(w, use) >= policy.NOT_STARVED_PCT


def _handover_line(use: CpuUse) -> str:
    return (f"{fmt_seconds(use.handover_cpu_s)} of the {fmt_seconds(use.wait_wall_s)} wait per batch is the "
            f"loop's own CPU work taking a ready batch (the hand-over no worker count removes); "
            f"beyond it the loop waited {100 * use.idle_share:.1f} % of its steady time")


def cpu_lines(use: CpuUse) -> list[str]:
    """Where the CPU time went, and the ceiling the CPUs allow."""
    where = "its workers" if use.workers else "the training process, between steps"
    load = (f"loading: {fmt_seconds(use.load_cpu_s)} of CPU per batch in {where} "
            f"({'CPU work' if use.load_is_cpu else 'mostly waiting: I/O or sleeps, not CPU'})")
    if use.load_queued_s and use.load_queued_s >= 0.1 * use.load_cpu_s:
        load += f"; the workers also waited {fmt_seconds(use.load_queued_s)} per batch for a free CPU"
    step = f"the step: {fmt_seconds(use.step_cpu_s)} of CPU per {fmt_seconds(use.step_wall_s)} step"
    if use.step_is_cpu:
        step += f" (CPU work on about {use.step_threads:.1f} CPUs"
        step += f", torch's {use.torch_threads} threads)" if use.torch_threads else ")"
    else:
        step += " (the step waits, e.g. for a GPU: little CPU)"
    lines = [load, step]
    if use.spin_s > 0.0:
        lines.append(spin_line(use))
    if use.used_cpus is not None:
        busy = f"this process and its workers kept {use.used_cpus:.2f} of the {cpus_text(use.budget)} busy"
        if use.spin_cpus >= 0.05:
            busy += f" ({use.work_cpus:.2f} of it work, {use.spin_cpus:.2f} torch's threads spinning)"
        if use.others_cpus:
            busy += f", other processes {use.others_cpus:.2f}"
        lines.append(busy + (": the CPUs were saturated" if use.saturated else ""))
    if use.ceiling_matters:
        lines.append(f"ceiling: one trained batch needed {fmt_seconds(use.cpu_per_batch_s)} of CPU in this run, so at "
                     f"most about {use.ceiling:.1f} steps/s on {cpus_text(use.budget)} at these settings (the run reached "
                     f"{use.rate:.1f}; other settings spend other CPU time a batch)")
    return lines


def threads_fix(use: CpuUse, threads: int) -> str:
    """The words of a change to the training process's intra-op threads."""
    return (f"cap the training process's intra-op threads from {use.torch_threads} to {threads} "
            f"(OMP_NUM_THREADS={threads} in the job's environment, or torch.set_num_threads({threads}))")


def spin_line(use: CpuUse) -> str:
    """What the training process's other threads burnt while the loop waited: spinning, not work."""
    doing = "loaded the batch itself" if not use.workers else "waited for a batch"
    return (f"torch's intra-op pool ({use.torch_threads} threads): {fmt_seconds(use.spin_s)} of CPU per batch "
            f"while the loop {doing} ({fmt_seconds(use.wait_loop_cpu_s or 0.0)} in the loop's own thread): "
            "its threads spin waiting for the next op, CPU time that is not work")


def io_line(reads: IoUse, verdict: str) -> str:
    """What the loader read per batch and where it came from, and what that says."""
    return f"reads: {reads.line()}: {verdict}"


def _waits_idle_on_disk(i: Inputs) -> tuple[LoaderReport, IoUse] | None:
    """The loop waits for batches whose loading is not CPU work, and the reads came from a disk."""
    w = _judged(i.watch)
    reads = i.io_use if w is not None else None
    if reads is None or reads.reads_from != DISK:
        return None
    use = i.cpu_use
    if not _starved(w, use) or (use is not None and use.load_is_cpu):
        return None
    return w, reads


def _verdict(i: Inputs, w: LoaderReport, reads: IoUse) -> str:
    use = i.cpu_use
    return reads.verdict(_starved(w, use), use.load_is_cpu if use else None)


@rule(STARVED_RULE, CRITICAL, "The training loop waits for data (measured in the run)", "watch",
      f"measured in the run: the loop waits >= {policy.NOT_STARVED_PCT:g} % of its steady time for batches "
      f"not yet loaded (the hand-over of a ready batch, the loop's own CPU time while it waits with workers, "
      f"is not counted) (loaderdoc.policy.NOT_STARVED_PCT; below it more loading capacity cannot help; "
      f"critical >= {STARVED_CRIT_PCT:g} %: it waits more than it computes), {_JUDGED}; more workers are "
      f"proposed only where the CPU accounting expects >= {GAIN_WORTH - 1:.0%} more steps/s, never more "
      "than the rank's CPUs for loading that is CPU work")
def _watch_starved(i: Inputs) -> Finding | None:
    w = _judged(i.watch)
    if w is None:
        return None
    use = i.cpu_use
    if not _starved(w, use):
        return None
    pct = 100 * _idle_share(w, use)
    evidence = _wait_lines(w, use)
    if w.wait_p50_s is not None:
        evidence.append(f"wait per batch p50 {fmt_seconds(w.wait_p50_s)}, p95 {fmt_seconds(w.wait_p95_s)} "
                        f"(epoch {w.percentile_epoch})")
    if i.io_use is not None:
        evidence.append(io_line(i.io_use, _verdict(i, w, i.io_use)))
    needed = workers_needed(w)
    if needed is not None:
        evidence.append(f"one batch takes about {fmt_seconds(w.load_per_batch_s)} to load with num_workers={w.workers}: "
                        f"about {policy.workers_text(needed)} would keep up with the {fmt_seconds(w.step_per_batch_s)} step"
                        + (" if nothing else needed the CPUs" if use is not None and use.load_is_cpu else ""))
    cause = ("the batch is loaded in the training process, between steps" if w.workers == 0 else
             f"{policy.workers_text(w.workers)} load batches slower than the step consumes them")
    severity = CRITICAL if pct >= STARVED_CRIT_PCT else WARNING
    symptom = f"{w.name} is data-starved: the loop waited {pct:.0f} % of the time for batches"
    if use is None:  # a records file without CPU time: the wait alone, as before
        suggested = max(w.workers + 1, needed or 0)
        fix = f"raise num_workers from {w.workers} to {suggested}"
        cpus = i.per_rank
        if cpus and suggested > cpus:
            fix += (f" (more than the {cpus_text(cpus)} this rank may use: if loading is CPU work, make it cheaper "
                    "or move it off the step's machine)")
        return found(severity, symptom, evidence, cause, fix + "; size it on this machine with 'loaderdoc probe'",
                     policy.fewer_workers(suggested))
    evidence += cpu_lines(use)
    best = use.best_setting(needed)
    # beside other processes' load a run's rate moves by up to their share of the CPUs: a gain inside
    # it is not worth a change (issue 57: an I/O-bound loader beside a neighbour was offered 1.06x)
    busy = policy.busy(use.others_cpus, use.budget)
    worth = max(GAIN_WORTH, 1 + use.others_cpus / use.budget) if busy else GAIN_WORTH
    if busy and best is not None and GAIN_WORTH * use.rate <= best[2] < worth * use.rate:
        n, threads, rate = best
        fix = (f"no change proposed: the {rate / use.rate:.2f}x expected from {policy.workers_text(n)} is inside what "
               f"other processes' load ({use.others_cpus:.1f} of the {cpus_text(use.budget)}) moves a run's rate; "
               "watch it again on a quiet machine, or 'loaderdoc tune', which measures settings in turns")
        return found(severity, symptom, evidence, cause, fix)
    if best is not None and best[2] >= worth * use.rate:
        n, threads, rate = best
        gain = rate / use.rate
        change = policy.fewer_workers(n) if n != w.workers else {}
        fix = f"raise num_workers from {w.workers} to {n}" if n != w.workers else f"keep num_workers={n}"
        if threads is not None:
            fix += f" and {threads_fix(use, threads)}"
            change = {**change, "torch_threads": threads}
        fix += (f": expected about {rate:.1f} steps/s, {gain:.2f}x the {use.rate:.1f} measured (the CPU "
                "accounting's estimate")
        if use.worker_cap is not None and n == use.worker_cap:
            fix += f"; loading is CPU work, so no more workers than the {cpus_text(use.budget)}"
        fix += ")"
        if use.step_is_cpu and use.step_threads > 1.2 and not use.threads_known:
            fix += (f"; the step runs on {use.step_threads:.1f} CPUs and will share them with the workers, so expect "
                    "less than that")
        fix += "; check it with 'loaderdoc watch --apply'"
        return found(severity, symptom, evidence, cause, fix, change, expected_gain=gain)
    # no worker count is expected to help: say what limits the loop instead of proposing one
    if use.threads_known and best is not None and use.load_is_cpu:
        n, threads, rate = best
        fewer = ("beside other processes' load no model tells what fewer threads would do: see threads-oversubscribed"
                 if busy else "fewer threads, predicted no better, lose the step's parallel speed-up")
        fix = (f"no worker count is expected to help: beside {policy.workers_text(n)} the step's "
               f"{use.torch_threads} intra-op threads would share their CPUs with the loading (predicted "
               f"{rate:.1f} steps/s against the {use.rate:.1f} measured; {fewer}); make loading cheaper (smaller or "
               "pre-resized images, a faster decoder, caching decoded samples) or give the job more CPUs")
    elif use.load_is_cpu:
        fix = (f"no worker count is expected to help: loading is CPU work and, at this run's CPU time a batch, the "
               f"CPUs allow at most about {use.ceiling:.1f} steps/s (an estimate; 'loaderdoc tune' measures other "
               "settings); make loading cheaper (smaller or pre-resized images, a faster decoder, caching decoded "
               "samples) or give the job more CPUs")
    else:
        fix = ("no worker count is expected to help: the step and the hand-over of each batch set the pace; "
               "make the batches cheaper to hand over (fewer, larger tensors) or 'loaderdoc probe' your dataset")
    return found(severity, symptom, evidence, cause, fix)


@rule(HEALTHY_RULE, OK, "The loader keeps up with the training loop (measured in the run)", "watch",
      f"measured in the run: the loop waits < {policy.NOT_STARVED_PCT:g} % of its steady time for batches not "
      f"yet loaded (loaderdoc.policy.NOT_STARVED_PCT; the hand-over of a ready batch not counted), {_JUDGED}; "
      "reported as ok, never as a warning")
def _watch_healthy(i: Inputs) -> Finding | None:
    w = _judged(i.watch)
    if w is None:
        return None
    use = i.cpu_use
    if _starved(w, use):
        return None
    share = _idle_share(w, use)
    evidence = _wait_lines(w, use)
    if use is not None:
        evidence += cpu_lines(use)
    return found(
        OK,
        f"{w.name} keeps up: the loop waited {100 * share:.1f} % of the time for data",
        evidence,
        "batches were ready when the step asked for them",
        "nothing to change for speed; fewer workers may do as well ('loaderdoc probe' measures)",
    )


@rule("watch-cpu-shared", WARNING, "Loading and a CPU-trained step compete for the CPUs (measured)", "watch",
      f"measured in the run: the step is CPU work (its CPU time >= {CPU_WORK_SHARE:.0%} of its wall time, "
      f"{SATURATED_STEP_SHARE:.0%} where >= {SATURATED_SHARE:.0%} of the rank's CPUs were busy) and so is "
      "loading (loaderdoc.watching.cpu_use); it proposes no change: it says what the CPUs allow")
def _watch_cpu_shared(i: Inputs) -> Finding | None:
    w = _judged(i.watch)
    use = i.cpu_use if w is not None else None
    if use is None or not (use.step_is_cpu and use.load_is_cpu):
        return None
    evidence = cpu_lines(use)
    threads = use.torch_threads or use.step_threads
    alone = use.step_cpu_s / max(1.0, min(threads, use.budget))
    if use.workers and use.step_wall_s > 1.3 * alone:
        evidence.append(f"each step took {fmt_seconds(use.step_wall_s)} for {fmt_seconds(use.step_cpu_s)} of CPU on "
                        f"{threads:g} threads: about {fmt_seconds(use.step_wall_s - alone)} of it waited for CPUs "
                        "the workers held (the loading's cost moved into the step)")
    return found(
        WARNING,
        f"{w.name}: loading and the training step share {cpus_text(use.budget)}: at most about "
        f"{use.ceiling:.1f} steps/s at this run's CPU time a batch",
        evidence,
        "The model trains on the CPU, so each batch's loading and its step need the same CPUs: a worker's "
        "gain is the step's loss, and past the ceiling no DataLoader setting helps.",
        "Keep the workers at or below the CPUs (more only slow the step); to go faster make loading cheaper "
        "(pre-resized images, caching decoded samples), train on a GPU, or give the job more CPUs.",
    )


_ON_DISK = (f"the loop waits >= {policy.NOT_STARVED_PCT:g} % of its steady time (as {STARVED_RULE}), loading is "
            f"not CPU work, and a block device served >= {DISK_SHARE:.0%} of the bytes loading read and >= "
            f"{fmt_bytes(DEVICE_MIN_PER_BATCH)} a batch (/proc/<pid>/io: read_bytes against rchar; "
            "loaderdoc.watching.io_use)")


@rule("watch-waits-on-disk", WARNING, "The loop waits for data read from the disk (measured)", "watch",
      f"measured in the run: {_ON_DISK}; small reads: < {fmt_bytes(SMALL_READ)} per read call")
def _watch_waits_on_disk(i: Inputs) -> Finding | None:
    found_on_disk = _waits_idle_on_disk(i)
    if found_on_disk is None:
        return None
    w, reads = found_on_disk
    evidence = [io_line(reads, _verdict(i, w, reads)), _wait_line(w)]
    per_call = fmt_bytes(reads.bytes_per_call)
    if reads.small_reads:
        cause = (f"Loading waits for the disk, {per_call} per read call: many small files (or small reads of big "
                 "ones) cost the disk a seek or a request each, so its latency, not its bandwidth, sets the pace.")
        fix = ("Shard the data: pack the samples into large files read front to back (tar shards with WebDataset, "
               "or one array / Arrow file per few hundred MB), or copy the data set to a local SSD or into memory "
               "before training. Meanwhile more workers keep more reads in flight (a worker waiting on the disk "
               "takes no CPU): try them with 'loaderdoc watch --apply'.")
    else:
        cause = (f"Loading waits for the disk's bandwidth: {fmt_bytes(reads.device_per_s)}/s came from the device "
                 f"in large reads ({per_call} per read call).")
        fix = ("Copy the data set to a faster local disk (NVMe) or into memory before training, or store it "
               "smaller (compressed or pre-resized) where decoding costs less than reading.")
    if reads.rereads:
        fix += " It is read from the disk again every epoch: see watch-rereads-from-disk."
    return found(WARNING, f"{w.name} waits on the disk: {fmt_bytes(reads.device_per_batch)} per batch came from "
                 "the device", evidence, cause, fix)


@rule("watch-rereads-from-disk", WARNING, "Every epoch reads the data from the disk again (measured)", "watch",
      f"measured in the run: {_ON_DISK}, and every later finished epoch fetched >= {REREAD_SHARE:.0%} of the "
      "first epoch's bytes from the device again (>= 1 MiB in the first)")
def _watch_rereads(i: Inputs) -> Finding | None:
    found_on_disk = _waits_idle_on_disk(i)
    if found_on_disk is None or not found_on_disk[1].rereads:
        return None
    w, reads = found_on_disk
    shown = ", ".join(fmt_bytes(d) for d in reads.epoch_device[:6]) + (" ..." if len(reads.epoch_device) > 6 else "")
    evidence = [f"bytes fetched from the disk per epoch: {shown}", io_line(reads, _verdict(i, w, reads))]
    budget = i.facts.memory.budget
    if budget:
        share = reads.epoch_device[0] / budget
        evidence.append(f"one epoch's data is {share:.1%} of the {fmt_bytes(budget)} memory budget: " + (
            "it would fit in the page cache, so something evicts it" if share < 0.5 else
            "more than the page cache can keep beside the job"))
    return found(
        WARNING,
        f"{w.name} reads its data from the disk again every epoch ({fmt_bytes(reads.epoch_device[0])} in the first)",
        evidence,
        "The page cache did not keep the data between epochs (a data set larger than the memory the kernel "
        "could spare, or something that evicts it), so every epoch waits for the disk again.",
        "Cache it: copy the data set once to a local SSD, or into memory (/dev/shm) where it fits, or keep "
        "the loaded samples in a cache the workers share (a numpy memmap written in the first epoch); then only "
        "the first epoch waits.",
    )


@rule("watch-slow-epoch-start", WARNING, "Every epoch waits for its workers to start again (measured)", "watch",
      f"measured in the run, workers not persistent: the later epochs' restarts (loaderdoc.policy.restart_cost_s: the "
      "shutdown before, iter(loader), the first batch beyond one batch's load) are "
      f">= {policy.WATCHED_RESTART_PAYS_SHARE:.0%} of those epochs' time (loaderdoc.policy.WATCHED_RESTART_PAYS_SHARE, "
      "twice the PERSISTENT_PAYS_SHARE from which the probe picks persistent_workers=True: the load "
      "estimate is an upper bound, so the saving is a lower one)")
def _watch_slow_start(i: Inputs) -> Finding | None:
    w = i.watch
    if w is None or w.workers == 0 or w.persistent_workers is not False:
        return None
    epochs = w.epochs
    later = [(e, epochs[i].stop_s) for i, e in enumerate(epochs[1:])
             if e.finished and e.first_batch_s is not None and e.wall_s]
    load = w.load_per_batch_s
    # the workers' CPU per batch over the run, as tune's window reads it: one run, one price
    timed = [e for e in epochs if e.workers_cpu_s is not None]
    cpu, steps = (sum(e.workers_cpu_s for e in timed) if timed else None), sum(e.steps for e in timed)
    restarts = policy.watched_restarts(
        ((e.iter_s, e.first_batch_s, stop, e.wall_s, policy.workers_setup_cpu_s(e.workers_cpu_first_s, w.workers,
                                                                                 cpu, steps))
         for e, stop in later), load) if load is not None else None
    if restarts is None or not restarts.pays:
        return None
    saving, wall, share = restarts.saving_s, restarts.wall_s, restarts.share
    firsts = ", ".join(f"{e.first_batch_s:.2f} s" for e, _ in later[:5]) + (" ..." if len(later) > 5 else "")
    evidence = [f"first batch of epochs 2..{len(later) + 1}: {firsts} (a steady batch loads in about "
                f"{fmt_seconds(load)})"]
    starts = [e.iter_s for e, _ in later if e.iter_s is not None]
    stops = [stop for _, stop in later if stop is not None]
    if starts:
        evidence.append(f"iter(loader) took {fmt_seconds(sum(starts) / len(starts))} an epoch to start the workers"
                        + (f", and the end of the epoch before {fmt_seconds(sum(stops) / len(stops))} to shut "
                           "them down" if stops else ""))
    evidence.append(f"{saving:.2f} s of restarts over {wall:.1f} s of those {len(later)} epochs")
    return found(
        WARNING,
        f"{w.name}: each epoch spends {share:.0%} of its time starting {policy.workers_text(w.workers)} again",
        evidence,
        "With persistent_workers=False every epoch shuts the workers down and the next starts new ones "
        "(a fork each, re-importing, re-opening files, copying the dataset object into each).",
        f"Set persistent_workers=True (the workers and their memory stay alive between epochs): expected "
        f"{restarts.expected_gain:.2f}x the epochs' pace (the {share:.0%} spent restarting workers saved).",
        {"persistent_workers": True},
        expected_gain=restarts.expected_gain,
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
        f"batches in flight: fewer workers, or a smaller prefetch_factor{' (prefetch_factor=1)' if change else ''}"
        + ("; expected about the same speed (a safety margin, not a speed-up)." if change else "."),
        change,
        expected_gain=1.0 if change else None,
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
