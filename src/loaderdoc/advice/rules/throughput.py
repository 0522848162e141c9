"""What the probe measured: starvation, transform cost, spikes, worker start-up, worker memory."""

from __future__ import annotations

import math
from typing import Any

from loaderdoc import policy
from loaderdoc.advice.findings import CRITICAL, WARNING, Finding
from loaderdoc.advice.rules.registry import (
    PERSISTENT_SHARE,
    STARVED_CRIT_PCT,
    STARVED_WARN_PCT,
    Inputs,
    describe,
    found,
    rule,
)
from loaderdoc.base.units import fmt_bytes, fmt_num
from loaderdoc.policy import (
    BURSTY_RATIO,
    CPU_BUSY_SHARE,
    CPU_IDLE_SHARE,
    RAM_SAFE_SHARE,
    ZERO_WORKERS,
    fewer_workers,
    workers_text,
)


def _consumer(i: Inputs) -> str:
    return "GPU" if i.on_gpu else "training step"


@rule("data-starved", CRITICAL, "The step waits for data, and a measured configuration feeds it better", "probe",
      f"the probe's measurement of these settings: the step waits >= {STARVED_WARN_PCT:g}% of the time "
      f"(GPU utilisation under the common 80% target; critical >= {STARVED_CRIT_PCT:g}%) while the configuration "
      "the policy picks from the measurements (the cheapest within noise of the fastest that fits the CPU budget, "
      "/dev/shm and memory) waits less than half as much")
def _data_starved(i: Inputs) -> Finding | None:
    mine = i.subject
    if i.probe is None or mine is None or not mine.ok or mine.starvation_pct is None:
        return None
    if mine.starvation_pct < STARVED_WARN_PCT:
        return None
    choice = i.choice
    if choice is None or choice.key == policy.stream_key(mine.settings):
        return None  # these settings are the pick: nothing measured feeds it better (see transform-bound)
    rows = [r for r in i.probe.ok_results if policy.stream_key(r.settings) == choice.key
            and r.starvation_pct is not None]
    if not rows:
        return None
    waited = sum(r.starvation_pct for r in rows) / len(rows)
    if waited > mine.starvation_pct / 2:
        return None  # the pick waits about as much: not a better configuration, just another one
    who = _consumer(i)
    evidence = [f"{describe(mine.settings)}: the {who} waited {mine.starvation_pct:.0f}% of the time"
                + (f", {mine.batches_per_s:.1f} batches/s" if mine.batches_per_s else "")]
    evidence.append(f"{policy.key_text(choice.key)}: waited {waited:.0f}%, {choice.rate:.1f} batches/s"
                    + (" (the fastest measured)" if choice.key == choice.best_key else
                       f" (within {choice.tolerance:.0%} of the fastest, {policy.key_text(choice.best_key)} at "
                       f"{choice.best_rate:.1f} batches/s)"))
    if choice.beyond_cpus is not None and choice.oversubscribed:
        evidence.append("more workers than CPUs: " + choice.beyond_cpus.text(choice.per_rank))
    change = policy.key_change(mine.settings, choice.key)
    severity = CRITICAL if mine.starvation_pct >= STARVED_CRIT_PCT else WARNING
    return found(
        severity,
        f"The {who} sits idle {mine.starvation_pct:.0f}% of the time waiting for batches",
        evidence,
        f"With {workers_text(mine.settings.num_workers)} the loader produces batches more slowly than the step "
        "consumes them; the probe measured a configuration that keeps up better.",
        f"Switch to {policy.key_text(choice.key)} (measured on this machine).",
        change,
    )


@rule("transform-bound", WARNING, "Even the best configuration can't feed the step", "probe",
      f"the fastest configuration the probe measured still waits >= {STARVED_WARN_PCT:g}% of the time, "
      "and adding workers stopped helping (or the CPU budget was reached)")
def _transform_bound(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    best = i.probe.best
    if best is None or best.starvation_pct is None or best.starvation_pct < STARVED_WARN_PCT:
        return None
    ok = [r for r in i.probe.ok_results if r.batches_per_s is not None]
    max_workers = max(r.settings.num_workers for r in ok)
    per_rank = i.per_rank
    reached_budget = per_rank is not None and max_workers >= math.floor(per_rank)
    more = [r for r in ok if r.settings.num_workers > best.settings.num_workers]
    plateau = bool(more)  # configurations with more workers exist and none was faster than best
    if not (reached_budget or plateau):
        return None  # the probe didn't look far enough to say
    who = _consumer(i)
    evidence = [f"best measured: {describe(best.settings)}: {best.batches_per_s:.1f} batches/s, the {who} "
                f"still waited {best.starvation_pct:.0f}% of the time"]
    if plateau:
        top = max(more, key=lambda r: r.settings.num_workers)
        evidence.append(f"{describe(top.settings)}: {top.batches_per_s:.1f} batches/s (no faster)")
    if reached_budget:
        evidence.append(f"workers tried up to {max_workers}; CPU budget per rank {fmt_num(per_rank)}")
    # Is the work CPU or waiting? psutil's whole-machine CPU figure is only ours outside containers
    # and quotas (inside, /proc/stat counts the host's other tenants too); without workers the probe
    # can split a fetch into CPU time and waiting instead.
    io_bound: bool | None = None
    own_machine = i.facts.container.kind.get() is None and i.facts.cpu.cgroup_quota.get() is None
    zero = [r for r in ok if r.settings.num_workers == 0 and getattr(r, "fetch_cpu_pct", None) is not None]
    if best.cpu_util_pct is not None and i.facts.cpu.logical.get() and own_machine:
        cpu_busy = best.cpu_util_pct / 100 * float(i.facts.cpu.logical.value)
        evidence.append(f"CPUs busy while measuring: {cpu_busy:.1f} of {fmt_num(i.facts.cpu.budget)} available")
        share = cpu_busy / i.facts.cpu.budget
        io_bound = True if share < CPU_IDLE_SHARE else False if share > CPU_BUSY_SHARE else None
    elif zero:
        cpu_share = zero[0].fetch_cpu_pct / 100
        evidence.append(f"num_workers=0: {cpu_share:.0%} of the fetch time was CPU work, the rest waiting")
        # CPU contention also lowers this share, so only clear cases decide
        io_bound = True if cpu_share < CPU_IDLE_SHARE else False if cpu_share > CPU_BUSY_SHARE else None
    cpu_fix = ("run augmentations on the GPU (NVIDIA DALI, Kornia), pre-compute deterministic transforms "
               "(decode/resize once and store the result), use cheaper transforms or faster decoders "
               "(Pillow-SIMD, libjpeg-turbo, nvJPEG)")
    io_fix = ("copy the data to local SSD or RAM, use sequential shard formats (WebDataset tar shards, FFCV "
              ".beton, LMDB) instead of many small files; a deeper prefetch hides only short stalls")
    if io_bound:
        cause = ("Producing a batch takes longer than the step even in parallel, yet the CPUs are mostly idle: "
                 "the workers wait on storage or the network, not on computation.")
        fix = f"Make reads cheaper: {io_fix}."
    elif io_bound is False:
        cause = ("Producing a batch (decode + transforms) costs more CPU time than the step, and the CPUs "
                 "available can't do it faster in parallel.")
        fix = f"Take work off the CPU: {cpu_fix}."
    else:
        cause = ("Producing a batch (reading, decoding, transforming) takes longer than the step even with "
                 "the most parallel configuration measured.")
        fix = f"If the CPUs are busy: {cpu_fix}. If they are idle (waiting on storage): {io_fix}."
    return found(
        WARNING,
        f"Even the best configuration measured leaves the {who} waiting {best.starvation_pct:.0f}% of the time",
        evidence, cause, fix, {},
    )


@rule("spiky-batches", WARNING, "Batch wait times spike (p95 far above the median)", "probe",
      f"wait p95 >= {BURSTY_RATIO:g} x p50 and p95 >= the step time (so 1 in 20 steps loses at least a "
      f"whole step; {policy.BURSTY_FLOOR_MS:g} ms when no step is simulated) while the step waits < "
      f"{policy.QUEUE_DRY_PCT:g}% on average: occasional stalls a buffer can absorb, not a throughput shortfall; "
      "a deeper prefetch is proposed only where it fits /dev/shm and the probe did not already measure it")
def _spiky(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    r = i.subject if i.settings is not None else i.probe.best
    if r is None or not r.ok or r.wait.p95_ms is None or r.wait.p50_ms is None:
        return None
    step = r.step_ms_achieved or i.step_ms or policy.BURSTY_FLOOR_MS
    p50, p95 = r.wait.p50_ms, r.wait.p95_ms
    if not policy.bursty(p50, p95, step):
        return None
    if r.starvation_pct is not None and r.starvation_pct >= policy.QUEUE_DRY_PCT:
        # starved on average: workers deliver in bursts and the median wait is short, but the real
        # problem is throughput (data-starved / transform-bound); a deeper buffer would just run dry
        return None
    s = r.settings
    evidence = [f"{describe(s)}: wait per batch p50 {p50:.1f} ms, p95 {p95:.1f} ms"
                + (f", max {r.wait.max_ms:.0f} ms" if r.wait.max_ms is not None else ""),
                f"training step {step:.1f} ms"]
    change: dict[str, Any] = {}
    if s.num_workers > 0:
        deeper = s.effective_prefetch_factor * 2
        fits = True
        free = i.room.shm_free
        need = policy.in_flight_bytes(s.num_workers, deeper, i.batch_bytes, i.ranks)
        if need is not None and free is not None:
            fits = policy.shm_level(need, free) == "fits"
            evidence.append(f"prefetch_factor {deeper}: {s.num_workers} x {deeper} x {fmt_bytes(i.batch_bytes)} = "
                            f"{fmt_bytes(need / i.ranks)} of /dev/shm ({fmt_bytes(free)} free)")
        tried = [x for x in i.probe.ok_results if policy.stream_key(x.settings)[0] == s.num_workers
                 and policy.stream_key(x.settings)[1] > s.effective_prefetch_factor and x.batches_per_s]
        if tried:
            # measurement outranks the rule: a deeper queue was measured here and not picked
            t = max(tried, key=lambda x: x.batches_per_s)
            evidence.append(f"measured with prefetch_factor {t.settings.effective_prefetch_factor}: "
                            f"{t.batches_per_s:.1f} batches/s against {r.batches_per_s or 0:.1f}")
        elif fits:
            change = {"prefetch_factor": deeper}
    return found(
        WARNING,
        f"Most batches arrive in {p50:.1f} ms, but 1 in 20 takes {p95:.0f} ms or more",
        evidence,
        "Occasional slow reads (network or disk stalls, cache misses, many small files) hold up one "
        "worker's batch while the others are already used up.",
        (("Buffer more: raise prefetch_factor" + (f" to {change['prefetch_factor']}; " if change else "; ")
          if change or not any("measured with prefetch_factor" in e for e in evidence) else "")
         + "cache the data on local disk; store it in sequential shards (WebDataset, FFCV) so reads are large "
           "and streaming." if s.num_workers > 0 else
         "Use workers (num_workers > 0) so reads overlap the step; cache locally; use sequential shards "
         "(WebDataset, FFCV)."),
        change,
    )


@rule("persistent-workers-off", WARNING, "Workers restart every epoch and that is a large share of it", "probe",
      f"what persistent workers save each epoch (a timed restart, else the start-up less one batch's loading, "
      f"as the probe weighs it) >= {PERSISTENT_SHARE:.0%} of the epoch time computed from the probe's "
      "throughput and the dataset length")
def _persistent_off(i: Inputs) -> Finding | None:
    s = i.settings
    if s is None or i.probe is None or s.num_workers == 0 or s.persistent_workers:
        return None
    n_samples = i.context.dataset_len or i.probe.workload.dataset_len
    batch = s.batch_size or i.probe.workload.batch_size
    mine = i.subject
    if mine is None or not mine.ok or not mine.batches_per_s or not n_samples or not batch:
        return None
    # what persistent workers would save: the policy's figure, the one the probe chose by
    saved = policy.restart_saving(i.probe.results, policy.stream_key(s))
    if saved is None:
        return None
    n_batches = n_samples // batch if s.drop_last else math.ceil(n_samples / batch)
    if i.world_size and i.context.distributed:
        n_batches = math.ceil(n_batches / i.world_size)
    epoch_s = n_batches / mine.batches_per_s
    share = policy.restart_share(saved.saving_s, epoch_s)
    if share < PERSISTENT_SHARE:
        return None
    return found(
        WARNING,
        f"Each epoch spends {saved.saving_s:.1f} s ({share:.0%}) restarting {s.num_workers} workers",
        [f"measured: {saved.text()}",
         f"epoch: {n_batches} batches / {mine.batches_per_s:.1f} batches/s = {epoch_s:.1f} s"],
        "With persistent_workers=False every epoch ends by shutting the workers down and the next starts "
        "new ones (re-importing, re-opening files, re-building the dataset copy).",
        "Set persistent_workers=True (the workers keep their memory between epochs).",
        {"persistent_workers": True},
    )


@rule("workers-only-add-ipc", WARNING, "Cheap in-memory data: workers only add inter-process cost", "probe",
      "the policy's pick from the probe's measurements is num_workers=0: loading in the training process is "
      f"within noise ({policy.TOLERANCE:.0%}, up to {policy.MAX_NOISE:.0%} when repeats differ) of the fastest "
      "configuration with workers (measured with at least as many workers as the settings, or the settings "
      "themselves)")
def _workers_only_ipc(i: Inputs) -> Finding | None:
    if i.settings is None or i.settings.num_workers == 0 or i.probe is None or not i.same_batch_as_probe:
        return None
    ok = [r for r in i.probe.ok_results if r.batches_per_s]
    zero = [r for r in ok if r.settings.num_workers == 0]
    with_workers = [r for r in ok if r.settings.num_workers > 0]
    if not zero or not with_workers:
        return None
    if max(r.settings.num_workers for r in with_workers) < i.settings.num_workers and i.subject is None:
        return None  # nothing measured with as many workers as these settings use
    choice = i.choice
    if choice is None or choice.key[0] != 0:
        return None
    z = max(zero, key=lambda r: r.batches_per_s)
    # "as fast" against every worker count that fits, oversubscribed ones too: the CPU budget
    # limits the pick, it does not make a measured speed-up disappear
    fitting = [r for r in with_workers
               if policy.misfit(i.probe.results, policy.stream_key(r.settings), i.room, i.batch_bytes) is None]
    if not fitting:
        return None
    w = max(fitting, key=lambda r: r.batches_per_s)
    if z.batches_per_s < (1 - choice.tolerance) * w.batches_per_s:
        return None
    waited = f", waited {z.starvation_pct:.0f}%" if z.starvation_pct is not None else ""
    evidence = [f"{describe(z.settings)}: {z.batches_per_s:.1f} batches/s{waited}",
                f"best with workers, {describe(w.settings)}: {w.batches_per_s:.1f} batches/s"]
    if w.worker_pss_bytes:
        evidence.append(f"{workers_text(w.settings.num_workers)} held {fmt_bytes(w.worker_pss_bytes)} (PSS)")
    change = dict(ZERO_WORKERS)
    if z.settings.pin_memory != i.settings.pin_memory:
        change["pin_memory"] = z.settings.pin_memory
    return found(
        WARNING,
        f"{workers_text(i.settings.num_workers)} give no speed-up: loading in the main process is as fast",
        evidence,
        ("Fetching a sample is cheaper than sending it between processes (pickling, shared memory, queues); "
         "typical for tensors already in RAM with light transforms.")
        if z.starvation_pct is not None and z.starvation_pct < STARVED_WARN_PCT / 2 else
        ("Extra processes add no parallel work here: the CPUs are already taken (by the training step or "
         "other processes), or passing batches between processes costs as much as it saves."),
        "Use num_workers=0 (no worker memory, no start-up, no /dev/shm), or a sampler that yields whole "
        "batches to cut per-sample overhead.",
        change,
    )


@rule("ram-pressure", CRITICAL, "Worker memory close to what the machine or cgroup allows", "probe",
      f"measured PSS per worker x num_workers (x ranks) plus the batches in flight at or above {RAM_SAFE_SHARE:.0%} "
      "of the memory budget (available RAM, capped by the cgroup limit; critical above 100%: the OOM killer)")
def _ram_pressure(i: Inputs) -> Finding | None:
    s = i.settings
    if s is None or s.num_workers == 0 or i.probe is None:
        return None
    budget = i.facts.memory.budget
    per_worker = policy.per_worker_pss(i.probe.results)
    if budget is None or per_worker is None:
        return None
    one_rank, how = policy.workers_pss_at(i.probe.results, s.num_workers)
    workers_bytes = one_rank * i.ranks
    inflight = policy.in_flight_bytes(s.num_workers, s.effective_prefetch_factor, i.batch_bytes, i.ranks) or 0
    key = policy.stream_key(s)
    need = policy.memory_need(i.probe.results, key, i.batch_bytes, i.ranks)
    level = policy.ram_level(need, budget)
    if level == "fits":
        return None
    mem = i.facts.memory
    evidence = [f"workers' PSS with {workers_text(s.num_workers)}: {fmt_bytes(one_rank)} ({how})"
                + (f" x {i.ranks} ranks = {fmt_bytes(workers_bytes)}" if i.ranks > 1 else "")]
    mine = [r for r in i.probe.results if r.ok and policy.same_stream(r.settings, s)]
    if any(policy.still_growing(r) for r in (mine or i.probe.results)):
        evidence.append("the workers' memory was still rising when the probe measured it (worker-memory-growing): "
                        "these figures are a floor")
    if inflight:
        evidence.append(f"batches in flight: {fmt_bytes(inflight)}")
    line = f"memory budget: {fmt_bytes(budget)} (available {fmt_bytes(mem.available.get())}"
    if mem.cgroup_limit.get() is not None:
        line += f", cgroup limit {fmt_bytes(mem.cgroup_limit.value)}"
    evidence.append(line + ")")
    fit = next((k for k in range(s.num_workers - 1, 0, -1)
                if policy.ram_level(policy.memory_need(i.probe.results, (k, key[1]), i.batch_bytes, i.ranks),
                                    budget) == "fits"), 0)
    uss = [r.worker_uss_bytes / r.settings.num_workers for r in i.probe.results
           if r.worker_uss_bytes and r.settings.num_workers]
    cause = "Every worker holds its own copy of whatever it touches."
    if uss and sum(uss) / len(uss) >= 0.5 * per_worker:
        cause += (f" Most of it is private ({fmt_bytes(sum(uss) / len(uss))} USS per worker): typical of Python "
                  "lists/dicts of objects, whose reference counts turn copy-on-write pages into copies.")
    critical = level == "over"
    return found(
        CRITICAL if critical else WARNING,
        f"Workers would use {fmt_bytes(need)} of {fmt_bytes(budget)} available memory"
        + (": the OOM killer ends the run" if critical else ""),
        evidence,
        cause,
        "Keep the dataset's bulk in numpy arrays or tensors (one buffer, no per-object refcounts), read "
        f"lazily from disk, or use fewer workers ({fit} fit in {RAM_SAFE_SHARE:.0%} of the budget).",
        fewer_workers(fit),
    )
