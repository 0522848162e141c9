"""A first recommendation from machine facts alone (the probe refines it with measurements).

Every choice carries a one-line reason naming the fact that decided it. No torch, no textual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from loaderdoc.probe.result import ProbeReport
from loaderdoc.settings import LoaderSettings
from loaderdoc.system.facts import MachineFacts
from loaderdoc.units import fmt_bytes, fmt_cpus

# Without measurements, more workers than this rarely pays for its memory; the probe can
# justify more on a machine that has them.
UNMEASURED_WORKER_CAP = 16
# Batches in flight may use at most this share of free /dev/shm: workers also allocate
# transient tensors there, and other processes on the node share it.
SHM_SHARE = 0.5
# ...and at most this share of the RAM budget (each batch is also copied into the main process).
RAM_SHARE = 0.25
DEFAULT_PREFETCH = 2


@dataclass
class Recommendation:
    settings: LoaderSettings
    reasons: dict[str, str] = field(default_factory=dict)  # setting name -> why
    batch_bytes: int | None = None  # the batch size in bytes the sizing used, if known
    source: str = "facts"  # "facts" or "probe"


def batch_bytes_for(batch_size: int | None, sample_bytes: int | None) -> int | None:
    if batch_size is None or sample_bytes is None:
        return None
    return batch_size * sample_bytes


def recommend(
    facts: MachineFacts,
    *,
    batch_size: int | None = None,
    sample_bytes: int | None = None,
    probe: ProbeReport | None = None,
) -> Recommendation:
    """Recommend DataLoader settings for this machine, for batches of ``batch_size`` samples of
    ``sample_bytes`` each. With a probe report, its measured choice is the starting point and
    only the memory limits are enforced on top."""
    reasons: dict[str, str] = {}
    if probe is not None and probe.recommended is not None:
        base = probe.recommended
        batch_size = batch_size or base.batch_size
        if sample_bytes is None and probe.workload.batch_bytes and probe.workload.batch_size:
            sample_bytes = probe.workload.batch_bytes // probe.workload.batch_size
        workers = base.num_workers
        reasons["num_workers"] = _probe_reason(probe, "num_workers") or f"{workers}: chosen by the probe"
        prefetch = base.effective_prefetch_factor or DEFAULT_PREFETCH
        source = "probe"
    else:
        workers, reasons["num_workers"] = _workers_from_cpus(facts)
        prefetch = DEFAULT_PREFETCH
        source = "facts"

    if batch_size is None:
        batch_size = 32
        reasons["batch_size"] = (
            "32 is a placeholder: GPU memory and the model decide batch size; pass --batch-size"
        )
    else:
        reasons["batch_size"] = f"{batch_size}: as given"

    batch_bytes = batch_bytes_for(batch_size, sample_bytes)
    workers, prefetch, limited_key, memory_reason = _fit_memory(facts, workers, prefetch, batch_bytes)
    if limited_key:
        reasons[limited_key] = memory_reason
        if limited_key == "num_workers" and workers > 0:
            reasons["prefetch_factor"] = "1: memory-bound, see num_workers"
    if source == "probe" and workers > 0:
        reasons.setdefault(
            "prefetch_factor", _probe_reason(probe, "prefetch_factor") or f"{prefetch}: chosen by the probe"
        )

    usable = facts.usable_gpus
    pin = usable > 0
    if pin:
        reasons["pin_memory"] = f"true: {usable} usable CUDA GPU(s); pinned pages copy to the GPU faster and asynchronously"
    elif facts.gpu.count and not usable:
        reasons["pin_memory"] = "false: GPUs are present but this torch build has no CUDA, so pinning only costs RAM"
    else:
        reasons["pin_memory"] = f"false: no usable GPU ({_gpu_absence(facts)}); pinning does nothing without one"

    if workers > 0:
        reasons["persistent_workers"] = "true: keeps the workers between epochs instead of paying start-up again"
        reasons.setdefault(
            "prefetch_factor",
            f"{prefetch}: torch's default depth"
            + ("" if batch_bytes else " (not sized against /dev/shm: pass --batch-size and --sample-shape)"),
        )
    else:
        reasons["persistent_workers"] = "false: there are no workers to keep (torch rejects it with 0 workers)"
        reasons["prefetch_factor"] = "unset: only valid with workers"
    reasons["shuffle"] = "true: a training loader reshuffles every epoch (set false for evaluation)"
    reasons["drop_last"] = "false: torch's default; set true with BatchNorm or DDP so every step sees a full batch"
    reasons["timeout"] = "0 (wait forever): torch's default; a few minutes turns a hung worker into an error"

    settings = LoaderSettings(
        batch_size=batch_size,
        shuffle=True,
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=workers > 0,
        prefetch_factor=prefetch if workers > 0 else None,
    ).validate()
    return Recommendation(settings=settings, reasons=reasons, batch_bytes=batch_bytes, source=source)


def _workers_from_cpus(facts: MachineFacts) -> tuple[int, str]:
    cpu = facts.cpu
    per_rank = facts.cpus_per_rank
    ranks = facts.distributed.ranks_on_this_node
    budget = f"CPU budget {fmt_cpus(cpu.budget)} ({cpu.budget_source})"
    if ranks > 1:
        budget += f" / {ranks} local ranks = {fmt_cpus(per_rank)} per rank"
    usable = math.floor(per_rank)
    if usable <= 1:
        return 0, f"0: {budget}; the training process needs that CPU itself, workers would only contend"
    workers = usable - 1
    reason = f"{workers}: {budget}, one CPU left for the training process"
    physical = cpu.physical.get()
    if physical:
        # SMT siblings add little to CPU-bound decoding; without measurements stay on real cores
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


def _fit_memory(
    facts: MachineFacts, workers: int, prefetch: int, batch_bytes: int | None
) -> tuple[int, int, str, str]:
    """Shrink prefetch, then workers, until workers x prefetch batches fit /dev/shm and RAM.

    Returns (workers, prefetch, the setting the limit changed or "", why)."""
    if not batch_bytes or workers == 0:
        return workers, prefetch, "", ""
    limits = []
    shm_free = facts.shm.free.get()
    if shm_free is not None:
        limits.append((int(shm_free * SHM_SHARE), f"half of /dev/shm's {fmt_bytes(shm_free)} free"))
    ram = facts.memory.budget
    if ram is not None:
        limits.append((int(ram * RAM_SHARE), f"a quarter of the {fmt_bytes(ram)} RAM budget"))
    if not limits:
        return workers, prefetch, "", ""
    cap, cap_name = min(limits)
    max_batches = cap // batch_bytes
    if workers * prefetch <= max_batches:
        return workers, prefetch, "", ""
    held = f"{fmt_bytes(batch_bytes)} batches must fit {cap_name} ({fmt_bytes(cap)})"
    if workers <= max_batches:
        new_prefetch = max(1, max_batches // workers)
        return workers, new_prefetch, "prefetch_factor", f"{new_prefetch}: {workers} workers x {new_prefetch} x {held}"
    if max_batches >= 1:
        return max_batches, 1, "num_workers", f"{max_batches} workers (memory-bound): {max_batches} x 1 x {held}"
    return 0, prefetch, "num_workers", (
        f"0 workers (memory-bound): not even one {held}; enlarge /dev/shm (docker run --shm-size=8g "
        "or --ipc=host) or shrink the batch"
    )


def _gpu_absence(facts: MachineFacts) -> str:
    nvml = facts.gpu.nvml
    if not nvml.known:
        return nvml.unknown or "no NVIDIA driver"
    return "NVML reports no visible GPU"


def _probe_reason(probe: ProbeReport, key: str) -> str | None:
    for reason in probe.reasons:
        if reason.startswith(key):
            return reason
    return None
