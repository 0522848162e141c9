"""A first recommendation from machine facts alone (the probe refines it with measurements).

Every choice carries a one-line reason naming the fact that decided it. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderdoc import policy
from loaderdoc.advice.findings import Finding, proposers
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import cpus_text
from loaderdoc.policy import DEFAULT_PREFETCH, batch_bytes_for
from loaderdoc.probing.result import ProbeReport
from loaderdoc.system.facts import MachineFacts


@dataclass
class Recommendation:
    settings: LoaderSettings
    reasons: dict[str, str] = field(default_factory=dict)  # setting name -> why
    batch_bytes: int | None = None  # the batch size in bytes the sizing used, if known
    source: str = "facts"  # "facts" or "probe"


def recommend(
    facts: MachineFacts,
    *,
    batch_size: int | None = None,
    sample_bytes: int | None = None,
    probe: ProbeReport | None = None,
) -> Recommendation:
    """Recommend DataLoader settings for this machine, for batches of ``batch_size`` samples of
    ``sample_bytes`` each. With a probe report, its measured choice is the starting point (the
    workers, prefetch depth, ``persistent_workers`` and ``in_order``, and ``pin_memory`` where it
    ran on the same kind of device) and only the memory limits and the CPU budget are enforced on
    top: a rule of thumb never replaces what the probe measured."""
    reasons: dict[str, str] = {}
    base: LoaderSettings | None = None  # the probe's pick, where a probe chose one
    if probe is not None and probe.recommended is not None:
        base = probe.recommended
        batch_size = batch_size or base.batch_size
        if sample_bytes is None and probe.workload.batch_bytes and probe.workload.batch_size:
            sample_bytes = probe.workload.batch_bytes // probe.workload.batch_size
        workers = base.num_workers
        reasons["num_workers"] = _probe_reason(probe, "num_workers", workers)
        prefetch = base.effective_prefetch_factor or DEFAULT_PREFETCH
        source = "probe"
        per_rank = facts.cpus_per_rank
        if policy.oversubscribed(workers, per_rank):
            beyond = policy.beyond_cpus_evidence(probe.results, per_rank)
            if beyond is None:
                # a pick made for another machine, or without the measurement that justifies it
                workers = policy.cpu_limit(per_rank)
                reasons["num_workers"] = (
                    f"{workers}: the probe chose {base.num_workers}, but this rank has {cpus_text(per_rank)} and no "
                    "measurement showed more workers than CPUs paying off")
            else:
                reasons["num_workers"] += f"; more workers than CPUs because {beyond.text(per_rank)}"
    else:
        workers, reasons["num_workers"] = policy.workers_for_cpus(facts)
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
    workers, prefetch, limited_key, memory_reason = policy.fit_in_flight(
        workers, prefetch, batch_bytes, policy.Room.of(facts))
    if limited_key:
        reasons[limited_key] = memory_reason
        if limited_key == "num_workers" and workers > 0:
            reasons["prefetch_factor"] = "1: memory-bound, see num_workers"
    if source == "probe" and workers > 0:
        reasons.setdefault("prefetch_factor", _probe_reason(probe, "prefetch_factor", prefetch))

    usable = facts.usable_gpus
    pin = usable > 0
    if base is not None and probe.device.startswith("cuda") == pin:
        # the probe's choice on this kind of device (with CUDA it also times pinned and pageable copies)
        pin = base.pin_memory
        reasons["pin_memory"] = _probe_reason(probe, "pin_memory", pin)
    elif pin:
        reasons["pin_memory"] = f"true: {usable} usable CUDA GPU(s); pinned pages copy to the GPU faster and asynchronously"
    elif facts.gpu.count and not usable:
        reasons["pin_memory"] = "false: GPUs are present but this torch build has no CUDA, so pinning only costs RAM"
    else:
        reasons["pin_memory"] = f"false: no usable GPU ({_gpu_absence(facts)}); pinning does nothing without one"

    persistent = workers > 0
    if workers > 0:
        if base is not None:
            # measured: the workers' start-up against the epoch (a rule of thumb does not outrank it)
            persistent = base.persistent_workers
            reasons["persistent_workers"] = _probe_reason(probe, "persistent_workers", persistent)
        else:
            reasons["persistent_workers"] = "true: keeps the workers between epochs instead of paying start-up again"
        reasons.setdefault(
            "prefetch_factor",
            f"{prefetch}: torch's default depth"
            + ("" if batch_bytes else " (not sized against /dev/shm: pass --batch-size and --sample-shape)"),
        )
    else:
        reasons["persistent_workers"] = "false: there are no workers to keep (torch rejects it with 0 workers)"
        reasons["prefetch_factor"] = "unset: only valid with workers"
    # torch refuses shuffle=True (and any sampler) for an IterableDataset, which the probe knows it measured
    iterable = probe is not None and probe.workload.iterable
    reasons["shuffle"] = ("false: an IterableDataset decides its own order and DataLoader refuses shuffle=True "
                          "(and a sampler) for it; shuffle inside the stream (a shuffle buffer) if training needs it"
                          if iterable else
                          "true: a training loader reshuffles every epoch (set false for evaluation)")
    reasons["drop_last"] = "false: torch's default; set true with BatchNorm or DDP so every step sees a full batch"
    reasons["timeout"] = "0 (wait forever): torch's default; a few minutes turns a hung worker into an error"

    # in_order=False only as measured: the probe's worker count, and a torch that takes it (>= 2.6)
    in_order = True
    if base is not None and not base.in_order and workers == base.num_workers >= 2 and _torch_takes_in_order(facts):
        in_order = False
        reasons["in_order"] = _probe_reason(probe, "in_order", in_order)
    settings = LoaderSettings(
        batch_size=batch_size,
        shuffle=not iterable,
        num_workers=workers,
        pin_memory=pin,
        persistent_workers=persistent,
        prefetch_factor=prefetch if workers > 0 else None,
        in_order=in_order,
    ).validate()
    return Recommendation(settings=settings, reasons=reasons, batch_bytes=batch_bytes, source=source)


def _torch_takes_in_order(facts: MachineFacts) -> bool:
    """torch >= 2.6 (DataLoader(in_order=...)), from the detected version ("2.13.0+cpu")."""
    version = facts.torch.version.get()
    try:
        major, minor = (int(part) for part in str(version).split("+")[0].split(".")[:2])
    except (TypeError, ValueError):
        return False
    return (major, minor) >= (2, 6)


def _gpu_absence(facts: MachineFacts) -> str:
    nvml = facts.gpu.nvml
    if not nvml.known:
        return nvml.unknown or "no NVIDIA driver"
    return "NVML reports no visible GPU"


def _probe_reason(probe: ProbeReport, key: str, value: object) -> str:
    """The probe's own reason for ``key``, else that it chose ``value`` (booleans as TOML writes them)."""
    for reason in probe.reasons:
        if reason.startswith(key):
            return reason
    shown = str(value).lower() if isinstance(value, bool) else value
    return f"{shown}: chosen by the probe"


def keep_stated(rec: Recommendation, stated: dict[str, tuple[Any, str]], findings: list[Finding]) -> Recommendation:
    """``rec`` keeping what a config states (``stated``: setting -> (the value its run gets, where the
    file sets it)) unless a finding proposes another value for it, which then wins with its rule
    named (issue 50: a file's ``drop_last = true`` was recommended as ``false``, "torch's default").
    Worker-only settings follow the workers the result has."""
    by = {k: f for k, f in proposers(findings).items() if k in stated}
    proposed = {k: f.settings_change[k] for k, f in by.items()}
    changes: dict[str, Any] = {}
    reasons = dict(rec.reasons)
    for setting, (value, where) in stated.items():
        if setting == "batch_size" or setting not in LoaderSettings.__dataclass_fields__:
            continue  # the batch is the run's, already; torch_threads is no DataLoader argument
        if setting in proposed:
            changes[setting] = proposed[setting]
            reasons[setting] = f"{proposed[setting]!r}: {by[setting].rule_id} (the run gets {value!r} from the file, {where})"
        else:
            changes[setting] = value
            reasons[setting] = f"{value!r}: as the run gets it from the file ({where}); no finding says to change it"
    settings = rec.settings.replace(**changes)
    if not settings.num_workers:  # torch takes neither without workers
        settings = settings.replace(prefetch_factor=None, persistent_workers=False)
        reasons["persistent_workers"] = "false: there are no workers to keep (torch rejects it with 0 workers)"
        reasons["prefetch_factor"] = "unset: only valid with workers"
    return Recommendation(settings=settings.validate(), reasons=reasons, batch_bytes=rec.batch_bytes,
                          source=rec.source)


def settled_for_machine(settings: LoaderSettings, facts: MachineFacts,
                        measured: tuple[str, ...]) -> tuple[LoaderSettings, list[str]]:
    """``settings`` with what this machine's findings propose for the settings no measurement decided
    (``measured``: the ones a tune measured), and a line for each change naming its rule: tune's
    export kept the script's ``pin_memory=True`` on a machine with no usable GPU, which watch flags
    on every run (issue 57). The training process's threads are a measurement's, never changed here."""
    from loaderdoc.advice.rules import evaluate

    by = proposers(evaluate(facts, settings))
    change = {k: f.settings_change[k] for k, f in by.items() if k not in measured and k != "torch_threads"
              and hasattr(settings, k) and getattr(settings, k) != f.settings_change[k]}
    if not change:
        return settings, []
    notes = [f"{k}={v!r} ({by[k].rule_id}: {by[k].symptom})" for k, v in change.items()]
    return settings.replace(**change), notes
