"""Diagnoses: which symptom *this* machine and *this* loader show, with the numbers that prove it.

Every rule looks at the machine facts, optionally the user's DataLoader settings, the bytes of one
collated batch, a probe report and a :class:`TrainingContext`, and either returns a
:class:`~loaderdoc.advice.findings.Finding` (it fires) or ``None`` (it stays silent). A rule that
lacks the information it needs stays silent: advice that is wrong is worse than none.

``evaluate()`` is what ``loaderdoc check``, ``probe`` output and the export header call. It must
stay cheap: this module imports neither torch nor textual (a test checks that in a subprocess).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from loaderdoc import policy
from loaderdoc.advice.findings import CRITICAL, SEVERITY_ORDER, WARNING, Finding
from loaderdoc.policy import (
    BEYOND_CPUS_PAYS,
    BURSTY_RATIO,
    CPU_BUSY_SHARE,
    CPU_IDLE_SHARE,
    RAM_SAFE_SHARE,
    SHM_SAFE_SHARE,
    ZERO_WORKERS,
    fewer_workers,
    worker_target,
    workers_text,
)
from loaderdoc.probe.result import ConfigResult, ProbeReport
from loaderdoc.settings import LoaderSettings
from loaderdoc.system.facts import MachineFacts
from loaderdoc.units import GiB, MiB, cpus_text, fmt_bytes, fmt_num, shm_size_flag

# ---- thresholds (each rule's `threshold` text says where its number comes from) -----------
# Sizing thresholds (CPU budget, /dev/shm and memory shares, "as fast", bursts) live in
# loaderdoc.policy, shared with recommend and the probe's search; these are the rules' own.
STARVED_WARN_PCT = 20.0  # step waits >= 20% of the time: utilisation below the usual 80% target
STARVED_CRIT_PCT = 50.0  # the step waits more than it computes
SHM_SMALL_BYTES = 256 * MiB  # machine-level: too small for torch's default 2 workers x 2 batches
NOFILE_LINUX_DEFAULT = 1024  # the usual soft `ulimit -n` on Linux
PERSISTENT_SHARE = 0.10  # worker start-up >= 10% of an epoch
H2D_MIN_SAVING = 0.3  # pinned copies at least 30% faster ...
QUOTA_HIDDEN_RATIO = 0.5  # cgroup quota below half of os.cpu_count()
BN_SMALL_BATCH = 8  # last batches below this size degrade BatchNorm statistics

# torch's words for an exhausted /dev/shm; SIGBUS is how a worker dies when a shm page can't be backed
SHM_ERROR_MARKERS = ("shared memory", "bus error", "sigbus", "no space left on device", "/dev/shm")
OOM_MARKERS = ("sigkill", "signal: killed", "out of memory", "memoryerror")
NOFILE_ERROR_MARKERS = ("too many open files", "received 0 items of ancdata")


@dataclass
class TrainingContext:
    """What the training script does, which neither machine facts nor loader settings carry.

    Every field is optional; ``None`` means "not known", and rules that need a field stay silent
    while it is unknown.
    """

    device: str | None = None  # "cuda" | "cpu": where the training step runs
    uses_batchnorm: bool | None = None  # the model has BatchNorm layers (not SyncBatchNorm)
    distributed: bool | None = None  # DDP / FSDP: one process per GPU
    uses_distributed_sampler: bool | None = None  # a DistributedSampler (or equivalent) is passed
    calls_set_epoch: bool | None = None  # sampler.set_epoch(epoch) is called every epoch
    fixed_input_size: bool | None = None  # every batch has the same shape
    uses_convolutions: bool | None = None  # the model has conv layers (what cudnn.benchmark tunes)
    cudnn_benchmark: bool | None = None  # torch.backends.cudnn.benchmark as set by the script
    dataset_len: int | None = None  # samples in the (whole) training set
    tensors_per_batch: int | None = None  # tensors in one collated batch (images + labels = 2)

    FIELDS = {  # what each field means, for docs and the app's form
        "device": "where the training step runs: 'cuda' or 'cpu'",
        "uses_batchnorm": "the model has BatchNorm layers (SyncBatchNorm counts as not)",
        "distributed": "one process per GPU (DDP / FSDP)",
        "uses_distributed_sampler": "the DataLoader is given a DistributedSampler (or equivalent)",
        "calls_set_epoch": "sampler.set_epoch(epoch) is called at the start of every epoch",
        "fixed_input_size": "every batch has the same shape",
        "uses_convolutions": "the model has convolution layers (what cudnn.benchmark tunes)",
        "cudnn_benchmark": "torch.backends.cudnn.benchmark as the script sets it",
        "dataset_len": "samples in the whole training set",
        "tensors_per_batch": "tensors in one collated batch (images + labels = 2; detection targets add one per image)",
    }

    @classmethod
    def from_mapping(cls, data: dict[str, Any]) -> TrainingContext:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown training-context keys: {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class Inputs:
    """Everything a rule may look at, with the derived numbers several rules share."""

    facts: MachineFacts
    settings: LoaderSettings | None = None
    batch_bytes: int | None = None
    probe: ProbeReport | None = None
    context: TrainingContext = field(default_factory=TrainingContext)

    @property
    def ranks(self) -> int:
        """Loader processes on this node (each rank has its own DataLoader and workers)."""
        return max(1, self.facts.distributed.ranks_on_this_node)

    @property
    def world_size(self) -> int | None:
        ws = self.facts.distributed.world_size.get()
        return int(ws) if ws else None

    @property
    def subject(self) -> ConfigResult | None:
        """The probe's measurement of the user's own settings, if the probe tried them."""
        if self.probe is None or self.settings is None:
            return None
        matches = [r for r in self.probe.results if policy.same_stream(r.settings, self.settings)]
        ok = [r for r in matches if r.ok]
        if ok:  # measured more than once: the best run (rules then err towards silence)
            return max(ok, key=lambda r: r.batches_per_s or 0.0)
        return matches[0] if matches else None

    @property
    def same_batch_as_probe(self) -> bool:
        """The probe measured the batch size these settings use (or there are no settings)."""
        if self.settings is None or self.probe is None or self.settings.batch_size is None:
            return True
        return self.settings.batch_size == self.probe.workload.batch_size

    @property
    def step_ms(self) -> float | None:
        if self.probe is None:
            return None
        return self.probe.workload.step_ms or None

    @property
    def per_rank(self) -> float | None:
        """CPUs per rank, None when no CPU count was read."""
        return policy.cpus_per_rank(self.facts)

    @property
    def room(self) -> policy.Room:
        return policy.Room.of(self.facts)

    def choice(self) -> policy.Choice | None:
        """What the policy picks among the probe's measurements at these settings' batch size."""
        if self.probe is None:
            return None
        return policy.choose(self.probe.results, per_rank=self.per_rank, room=self.room,
                             batch_bytes=self.batch_bytes)

    @property
    def on_gpu(self) -> bool:
        if self.probe is not None and self.probe.device.startswith("cuda"):
            return True
        return self.context.device == "cuda"


def batch_bytes_from_probe(probe: ProbeReport | None, settings: LoaderSettings | None) -> int | None:
    """Bytes of one batch of ``settings.batch_size`` from the batch the probe measured (scaled per
    sample when the batch sizes differ)."""
    if probe is None:
        return None
    return policy.scale_batch_bytes(probe.workload.batch_bytes, probe.workload.batch_size,
                                    settings.batch_size if settings is not None else None)


def describe(s: LoaderSettings) -> str:
    """``num_workers=4, prefetch_factor=2, pin_memory=True``: the knobs the probe varies."""
    parts = [f"num_workers={s.num_workers}"]
    if s.num_workers:
        parts.append(f"prefetch_factor={s.effective_prefetch_factor}")
        parts.append(f"persistent_workers={s.persistent_workers}")
    parts.append(f"pin_memory={s.pin_memory}")
    return ", ".join(parts)


def gpu_absence_known(facts: MachineFacts) -> bool:
    """No usable GPU, and that is a reading (NVML answered or failed, or torch is a CPU build),
    not just an empty record."""
    if facts.usable_gpus > 0:
        return False
    torch = facts.torch
    return bool(facts.gpu.nvml.source or facts.gpu.nvml.unknown or torch.installed.get() is False
                or (torch.cuda_build.source and torch.cuda_build.known and not torch.cuda_build.value))


def change_text(change: dict[str, Any]) -> str:
    """``num_workers=1, prefetch_factor=1`` (a settings change as the user would write it)."""
    shown = {k: v for k, v in change.items() if not (k == "multiprocessing_context" and v is None)}
    return ", ".join(f"{k}={v}" for k, v in shown.items())


@dataclass(frozen=True)
class Rule:
    id: str
    severity: str  # the most severe level this rule can report
    title: str
    needs: str  # what must be known for it to speak: "machine", "settings", "probe", "context"
    threshold: str  # where its threshold comes from
    check: Callable[[Inputs], Finding | None] = field(repr=False, compare=False)

    def finding(self, severity: str, symptom: str, evidence: list[str], cause: str, fix: str,
                change: dict[str, Any] | None = None) -> Finding:
        return Finding(
            rule_id=self.id, severity=severity, symptom=symptom, evidence=evidence, cause=cause,
            fix=fix, settings_change=dict(change or {}), threshold=self.threshold,
        )


RULES: list[Rule] = []
_BY_ID: dict[str, Rule] = {}


def rule(id: str, severity: str, title: str, needs: str, threshold: str):
    """Register a check function as a catalogue entry."""

    def register(fn: Callable[[Inputs], Finding | None]) -> Callable[[Inputs], Finding | None]:
        r = Rule(id, severity, title, needs, threshold, fn)
        RULES.append(r)
        _BY_ID[id] = r
        return fn

    return register


def get_rule(rule_id: str) -> Rule:
    return _BY_ID[rule_id]


def evaluate(
    facts: MachineFacts,
    settings: LoaderSettings | None = None,
    *,
    batch_bytes: int | None = None,
    probe: ProbeReport | None = None,
    context: TrainingContext | None = None,
) -> list[Finding]:
    """The findings that fire for this machine (and settings, probe, context), most severe first.

    ``settings=None`` means no config was given: only machine-level rules speak. ``batch_bytes``
    falls back to what the probe measured for one collated batch.
    """
    if batch_bytes is None:
        batch_bytes = batch_bytes_from_probe(probe, settings)
    inputs = Inputs(facts, settings, batch_bytes, probe, context or TrainingContext())
    found: list[Finding] = []
    for r in RULES:
        f = r.check(inputs)
        if f is not None and f.severity in (WARNING, CRITICAL):
            found.append(f)
    # stable sort keeps catalogue order within a severity
    return sorted(found, key=lambda f: -SEVERITY_ORDER.get(f.severity, 0))


# =====================================================================================
# Settings torch refuses
# =====================================================================================
_REJECT_FIXES: dict[str, dict[str, Any]] = {
    "prefetch_factor": {"prefetch_factor": None},
    "persistent_workers": {"persistent_workers": False},
    "multiprocessing_context": {"multiprocessing_context": None},
    "num_workers": dict(ZERO_WORKERS),
    "timeout": {"timeout": 0.0},
    "batch_size": {"batch_size": 1},
}


@rule("settings-rejected", CRITICAL, "Settings torch refuses", "settings",
      "torch.utils.data.DataLoader's own argument checks (ValueError at construction)")
def _settings_rejected(i: Inputs) -> Finding | None:
    if i.settings is None:
        return None
    problems = i.settings.problems()
    if not problems:
        return None
    change: dict[str, Any] = {}
    for key, _ in problems:
        fix = dict(_REJECT_FIXES.get(key, {}))
        if key == "prefetch_factor" and i.settings.num_workers > 0:
            fix = {"prefetch_factor": 2}  # a value below 1; torch's default is 2
        change.update(fix)
    keys = ", ".join(dict.fromkeys(k for k, _ in problems))
    return get_rule("settings-rejected").finding(
        CRITICAL,
        f"DataLoader(...) will raise before the first batch: {keys}",
        [msg for _, msg in problems],
        "These combinations are refused by torch's DataLoader itself (prefetch_factor, "
        "persistent_workers and multiprocessing_context only mean something with worker processes).",
        "Remove the worker-only settings, or give the loader workers.",
        change,
    )


# =====================================================================================
# CPU
# =====================================================================================
def _cpu_evidence(i: Inputs) -> list[str]:
    cpu = i.facts.cpu
    out = [f"effective CPU budget: {cpus_text(cpu.budget)} (limited by {cpu.budget_source})"]
    if cpu.logical.get() is not None:
        out.append(f"os.cpu_count() = {cpu.logical.value} (what torch and most scripts count)")
    quota = cpu.cgroup_quota.get()
    if quota is not None:
        out.append(f"cgroup CPU quota: {cpus_text(float(quota))} ({cpu.cgroup_quota.source or 'cgroup'})")
    per_task = getattr(i.facts.distributed, "cpus_per_task", None)
    if per_task is not None and per_task.get():
        out.append(f"SLURM_CPUS_PER_TASK = {per_task.value} (each Slurm task owns its CPUs)")
    if i.ranks > 1:
        launcher = i.facts.distributed.launcher.get() or "launcher"
        out.append(f"{i.ranks} ranks on this node ({launcher}): {cpus_text(i.facts.cpus_per_rank)} per rank")
    return out


@rule("cpu-oversubscribed", WARNING, "More workers than CPUs", "settings",
      "num_workers above the CPUs one rank may use: the least of os.cpu_count(), the affinity set and "
      "the cgroup quota, divided by the ranks on this node (torch's own warning counts the affinity set only); "
      f"silent when the probe measured a worker count above that budget at least {BEYOND_CPUS_PAYS - 1:.0%} "
      "faster than one at or above it (I/O-bound workers: CPU-bound work cannot speed up past its CPUs; "
      f"{BEYOND_CPUS_PAYS - 1:.0%} clears the ~10% run-to-run noise of probe runs on a busy machine)")
def _cpu_oversubscribed(i: Inputs) -> Finding | None:
    if i.settings is None or i.settings.num_workers <= 0:
        return None
    per_rank = i.per_rank
    n = i.settings.num_workers
    if per_rank is None or not policy.oversubscribed(n, per_rank):
        return None  # no CPU count was read, or within the budget
    target = worker_target(per_rank)
    evidence = [f"num_workers = {n}"] + _cpu_evidence(i)
    if i.ranks > 1:
        evidence.append(f"{n} workers x {i.ranks} ranks = {n * i.ranks} worker processes on this node")
    if i.probe is not None:
        if policy.beyond_cpus_evidence(i.probe.results, per_rank) is not None:
            return None  # measured: throughput keeps rising past the CPU count (workers wait on I/O)
        measured = sorted((r for r in i.probe.ok_results if r.batches_per_s and r.settings.num_workers > 0),
                          key=lambda r: r.settings.num_workers)
        if measured:
            evidence.append("measured: " + ", ".join(
                f"{r.settings.num_workers} workers {r.batches_per_s:.1f} batches/s" for r in measured))
    fix_text = ("(one CPU left for the training process)" if per_rank >= 2
                else "(sharing the CPU with the training process)")
    change = fewer_workers(target)
    choice = i.choice() if i.same_batch_as_probe else None
    if choice is not None and choice.workers > 0 and not choice.oversubscribed:
        # measurement outranks the rule of thumb: the policy's pick among what the probe measured
        target = choice.workers
        fix_text = f"(the cheapest measured within {choice.tolerance:.0%} of the fastest that fits the CPUs)"
        change = policy.key_change(i.settings, choice.key)
    quota = i.facts.cpu.cgroup_quota.get()
    cause = (
        f"{n} workers (plus the training process) compete for {cpus_text(per_rank)}; they take turns, "
        "each batch takes longer, and the context switching and memory cost buys nothing."
    )
    if quota is not None and float(quota) < float(i.facts.cpu.logical.get(0) or 0):
        cause += " The cgroup quota throttles the container when it is exceeded; os.cpu_count() does not see it."
    return get_rule("cpu-oversubscribed").finding(
        WARNING,
        f"{n} workers{' per rank' if i.ranks > 1 else ''} on {cpus_text(per_rank)}: the loader is oversubscribed",
        evidence,
        cause,
        f"Use at most {workers_text(target)}{' per rank' if i.ranks > 1 else ''} {fix_text}"
        "; if the step still waits for data, make each batch cheaper rather than adding workers.",
        change,
    )


@rule("cpu-quota-hidden", WARNING, "A cgroup CPU quota far below os.cpu_count()", "machine",
      f"cgroup quota below {QUOTA_HIDDEN_RATIO:.0%} of os.cpu_count(): torch sizes its thread pool and most "
      "scripts size num_workers from the host count, which the quota does not change (machine-level: with "
      "a config, cpu-oversubscribed judges its num_workers instead)")
def _cpu_quota_hidden(i: Inputs) -> Finding | None:
    if i.settings is not None:
        return None
    quota = i.facts.cpu.cgroup_quota.get()
    logical = i.facts.cpu.logical.get()
    if quota is None or logical is None or float(quota) >= QUOTA_HIDDEN_RATIO * float(logical):
        return None
    q = float(quota)
    per_rank = i.facts.cpus_per_rank
    target = worker_target(per_rank)
    threads = max(1, int(math.floor(per_rank)))
    return get_rule("cpu-quota-hidden").finding(
        WARNING,
        f"This container may use {cpus_text(q)} but os.cpu_count() says {logical}",
        _cpu_evidence(i),
        "The CPU quota (CFS bandwidth limit) is invisible to os.cpu_count() and os.sched_getaffinity(): "
        f"code that sizes workers or thread pools from them starts ~{logical} of each and is throttled.",
        f"Size from the quota: num_workers <= {target} per rank, and set OMP_NUM_THREADS={threads} "
        "(or torch.set_num_threads) for the training process.",
        {},
    )


# =====================================================================================
# Shared memory
# =====================================================================================
def _shm_error(i: Inputs) -> ConfigResult | None:
    if i.probe is None:
        return None
    for r in i.probe.results:
        text = f"{r.error or ''}\n{r.traceback or ''}".lower()
        if r.status == "failed" and any(m in text for m in SHM_ERROR_MARKERS):
            return r
    return None


def _shm_command(i: Inputs, needed: float) -> str:
    size = shm_size_flag(needed)
    kind = i.facts.container.kind.get()
    if kind == "kubernetes":
        return (f"mount a memory-backed emptyDir at /dev/shm (emptyDir: {{medium: Memory, sizeLimit: {size[:-1]}Gi}}) "
                "in the pod spec")
    if kind == "podman":
        return f"podman run --shm-size={size} ... (or --ipc=host)"
    return f"docker run --shm-size={size} ... (or --ipc=host to share the host's /dev/shm)"


def _fit_in_shm(i: Inputs) -> dict[str, Any]:
    """The settings change that keeps the batches in flight within the policy's room (empty when
    these settings already fit: then the fix is more /dev/shm)."""
    assert i.settings is not None and i.batch_bytes
    n, pf = i.settings.num_workers, i.settings.effective_prefetch_factor
    workers, prefetch, limited, _ = policy.fit_in_flight(n, pf, i.batch_bytes, i.room)
    if not limited:
        return {}
    if workers == 0:
        return dict(ZERO_WORKERS)
    change: dict[str, Any] = {"num_workers": workers} if workers != n else {}
    change["prefetch_factor"] = prefetch
    return change


@rule("shm-too-small", CRITICAL, "/dev/shm too small for the batches in flight", "machine",
      "workers pass every batch through /dev/shm: num_workers x prefetch_factor x batch bytes (x ranks on "
      f"the node) must fit in free /dev/shm (critical) and in {SHM_SAFE_SHARE:.0%} of it (warning; the policy's "
      "margin for transient tensors and other processes); without a batch size, "
      f"/dev/shm under {fmt_bytes(SHM_SMALL_BYTES)} cannot hold torch's default 2 workers x 2 batches of "
      "64 x 3x224x224 float32 (4 x 36.8 MiB)")
def _shm_too_small(i: Inputs) -> Finding | None:
    r = get_rule("shm-too-small")
    shm = i.facts.shm
    free = shm.free.get(shm.total.get())
    total = shm.total.get()
    failed = _shm_error(i)
    shm_line = f"{shm.path}: {fmt_bytes(total)} total, {fmt_bytes(shm.free.get())} free"
    if shm.looks_like_docker_default:
        shm_line += " (Docker's 64 MiB default)"
    if failed is not None:
        evidence = [f"the probe's {describe(failed.settings)} failed: {failed.error or 'worker died'}", shm_line]
        batch = i.batch_bytes or getattr(failed, "batch_bytes", None)
        needed = (batch or 0) * max(1, failed.settings.batches_in_flight) * i.ranks
        if batch:
            evidence.append(f"{failed.settings.batches_in_flight} batches in flight x {fmt_bytes(batch)}"
                            f" = {fmt_bytes(needed / i.ranks)}")
        # critical for settings holding at least as many batches as the run that failed; settings
        # without workers never touch /dev/shm, so for them it only says workers are out of reach
        s = i.settings
        if s is not None and s.num_workers == 0:
            return r.finding(
                WARNING,
                "Workers can't be used on this machine yet: the probe's worker runs ran out of shared memory",
                evidence,
                "These settings load in the main process and don't use /dev/shm, but every batch a worker "
                "prepares must fit there.",
                f"To use workers, give the container more shared memory: {_shm_command(i, max(needed, GiB / 2))}.",
                {},
            )
        same_or_more = s is None or s.batches_in_flight >= failed.settings.batches_in_flight
        return r.finding(
            CRITICAL if same_or_more else WARNING,
            "DataLoader workers ran out of shared memory (Bus error / unable to allocate shared memory)",
            evidence,
            "Each worker hands its batches to the training process through /dev/shm; when the batches in "
            "flight don't fit, the worker is killed by SIGBUS or the allocation fails.",
            f"Give the container more shared memory: {_shm_command(i, max(needed, GiB / 2))}; "
            "or lower num_workers / prefetch_factor / batch_size.",
            _fit_in_shm(i) if (s and s.num_workers and i.batch_bytes and free is not None) else {},
        )
    if free is None:
        return None
    if i.settings is not None and i.settings.num_workers == 0:
        return None  # the main process loads; nothing goes through /dev/shm
    if i.settings is None and i.batch_bytes:
        # a batch size but no settings (`check --batch-size N --sample-shape ...`): judge the usual
        # start with workers, 2 workers x torch's prefetch 2; there are no settings to change
        usual = LoaderSettings(batch_size=None, num_workers=2, prefetch_factor=2)
        found = _shm_too_small(Inputs(i.facts, usual, i.batch_bytes, None, i.context))
        if found is not None:
            found.evidence.insert(0, "no DataLoader settings given: judged for 2 workers x prefetch_factor 2")
            found.settings_change = {}
        return found
    if i.settings is None or not i.batch_bytes:
        # machine-level: no batch size, so only a /dev/shm too small for any image batch speaks
        if total is None or total >= SHM_SMALL_BYTES:
            return None
        return r.finding(
            WARNING,
            f"/dev/shm is only {fmt_bytes(total)}: workers will crash with 'Bus error' on image-sized batches",
            [shm_line, "4 batches in flight (2 workers x prefetch 2) of 64 x 3x224x224 float32 "
             f"= 4 x {fmt_bytes(64 * 3 * 224 * 224 * 4)} = {fmt_bytes(4 * 64 * 3 * 224 * 224 * 4)}"],
            "DataLoader workers pass every batch through /dev/shm.",
            f"Enlarge it: {_shm_command(i, SHM_SMALL_BYTES)}; pass --batch-size and --sample-shape for an "
            "exact check.",
            {},
        )
    s = i.settings
    inflight = s.batches_in_flight
    per_rank = inflight * i.batch_bytes
    needed = per_rank * i.ranks
    if policy.shm_level(needed, free) == "fits":
        return None
    formula = (f"{s.num_workers} workers x prefetch {s.effective_prefetch_factor} x {fmt_bytes(i.batch_bytes)} "
               f"= {fmt_bytes(per_rank)}")
    evidence = [formula]
    if i.ranks > 1:
        evidence.append(f"x {i.ranks} ranks on this node sharing one /dev/shm = {fmt_bytes(needed)}")
    evidence.append(shm_line)
    critical = policy.shm_level(needed, free) == "over"
    fit = _fit_in_shm(i)
    return r.finding(
        CRITICAL if critical else WARNING,
        (f"The batches in flight ({fmt_bytes(needed)}) don't fit in /dev/shm ({fmt_bytes(free)} free): "
         "expect 'Bus error' / 'unable to allocate shared memory'") if critical else
        (f"The batches in flight take {needed / free:.0%} of free /dev/shm ({fmt_bytes(needed)} of "
         f"{fmt_bytes(free)}): little margin before 'Bus error'"),
        evidence,
        "Every batch a worker has prepared waits in /dev/shm until the training loop takes it; the batch "
        "being consumed (and other programs) need room too.",
        f"Give the container more shared memory: {_shm_command(i, needed)}"
        + (f"; or hold fewer batches in flight: {change_text(fit)} fits {SHM_SAFE_SHARE:.0%} of the free space."
           if fit else "."),
        fit,
    )


# =====================================================================================
# GPU / pinned memory
# =====================================================================================
@rule("pin-memory-without-gpu", WARNING, "pin_memory=True with no usable GPU", "settings",
      "facts.usable_gpus == 0 (NVML sees no GPU, or torch is a CPU-only build): torch only warns and "
      "skips pinning")
def _pin_without_gpu(i: Inputs) -> Finding | None:
    if i.settings is None or not i.settings.pin_memory or not gpu_absence_known(i.facts):
        return None
    evidence = [f"NVIDIA GPUs visible: {i.facts.gpu.count}"]
    if not i.facts.gpu.nvml.known:
        evidence.append(f"NVML: {i.facts.gpu.nvml.unknown}")
    build = i.facts.torch.cuda_build
    if i.facts.torch.installed.get() is False:
        evidence.append("torch is not installed in this environment")
    elif build.known:
        evidence.append(f"torch build: CUDA {build.value}" if build.value else "torch build: CPU-only")
    cause = "Pinned (page-locked) memory only speeds up copies to a GPU; there is none this process can use."
    if i.facts.gpu.count > 0:
        cause += " GPUs are visible, but the installed torch was built without CUDA."
    return get_rule("pin-memory-without-gpu").finding(
        WARNING,
        "pin_memory=True but no GPU is usable here: it does nothing except print a warning",
        evidence,
        cause,
        "Set pin_memory=False on this machine (keep it True where you train on a GPU)"
        + ("; or install a CUDA build of torch to use the GPUs." if i.facts.gpu.count > 0 else "."),
        {"pin_memory": False},
    )


@rule("gpu-without-cuda-torch", WARNING, "GPUs visible but torch is a CPU-only build", "machine",
      "NVML lists GPUs while the installed torch has no CUDA build (torch.version.cuda is None)")
def _gpu_without_cuda_torch(i: Inputs) -> Finding | None:
    t = i.facts.torch
    if i.facts.gpu.count == 0 or not (t.installed.get() and t.cuda_build.known) or t.cuda_build.value:
        return None
    name = i.facts.gpu.devices[0].name.get("GPU")
    return get_rule("gpu-without-cuda-torch").finding(
        WARNING,
        f"{i.facts.gpu.count} x {name} visible, but torch {t.version.get('?')} can't use them",
        [f"NVML: {i.facts.gpu.count} GPU(s), driver {i.facts.gpu.driver_version.get('?')}",
         f"torch {t.version.get('?')}: built without CUDA"],
        "A CPU-only torch wheel was installed (e.g. from the /whl/cpu index); training runs on the CPU.",
        "Install a CUDA build that the driver supports, e.g. `pip install torch --index-url "
        "https://download.pytorch.org/whl/cu128`.",
        {},
    )


@rule("cuda-torch-without-driver", WARNING, "Training on CUDA requested, but no NVIDIA driver answers", "context",
      "context.device == 'cuda' while NVML finds no GPU: the script will fail at .cuda() or fall back to CPU")
def _cuda_without_driver(i: Inputs) -> Finding | None:
    if i.context.device != "cuda" or i.facts.gpu.count > 0:
        return None
    t = i.facts.torch
    evidence = ["context: device = 'cuda'", f"NVIDIA GPUs visible: {i.facts.gpu.count}",
                f"NVML: {i.facts.gpu.nvml.unknown or 'no GPUs listed'}"]
    if t.cuda_build.known:
        evidence.append(f"torch build: CUDA {t.cuda_build.value}" if t.cuda_build.value else "torch build: CPU-only")
    return get_rule("cuda-torch-without-driver").finding(
        WARNING,
        "The training step is meant to run on CUDA, but this machine shows no usable NVIDIA GPU",
        evidence,
        "Without a loaded NVIDIA driver (or with CUDA_VISIBLE_DEVICES hiding the GPUs) torch.cuda is "
        "unavailable.",
        "Check `nvidia-smi`; in a container, start it with `--gpus all` (Docker) or request "
        "nvidia.com/gpu in the pod spec.",
        {},
    )


@rule("pin-memory-off-slow-copy", WARNING, "pin_memory off while host-to-device copies are slow", "probe",
      f"the probe's measured copy of one batch: pinned at least {H2D_MIN_SAVING:.0%} faster than pageable and "
      "the saving at least 10% of the step (or 1 ms when no step is simulated)")
def _pin_off_slow_copy(i: Inputs) -> Finding | None:
    # no GPU check: host-to-device copy times exist only where the probe had a CUDA device
    if i.settings is None or i.settings.pin_memory or i.probe is None or not i.same_batch_as_probe:
        return None
    pairs = [(r.h2d_pageable_ms, r.h2d_pinned_ms) for r in i.probe.results
             if r.h2d_pageable_ms is not None and r.h2d_pinned_ms is not None]
    if not pairs:
        return None
    pageable = sorted(p for p, _ in pairs)[len(pairs) // 2]
    pinned = sorted(q for _, q in pairs)[len(pairs) // 2]
    saving = pageable - pinned
    step = i.step_ms
    floor = 0.1 * step if step else 1.0
    if saving < H2D_MIN_SAVING * pageable or saving < floor:
        return None
    evidence = [f"copy of one {fmt_bytes(i.probe.workload.batch_bytes)} batch to the GPU: {pageable:.1f} ms pageable, "
                f"{pinned:.1f} ms pinned (measured by the probe)"]
    if step:
        evidence.append(f"simulated training step: {step:g} ms; pinning saves {saving / step:.0%} of it")
    return get_rule("pin-memory-off-slow-copy").finding(
        WARNING,
        f"Each batch spends {saving:.1f} ms more than needed on its way to the GPU",
        evidence,
        "Pageable memory is copied through a staging buffer; page-locked memory can be copied by DMA "
        "directly and asynchronously.",
        "Set pin_memory=True and move batches with .to(device, non_blocking=True).",
        {"pin_memory": True},
    )


# =====================================================================================
# Probe measurements: starvation, spikes, transform cost, worker start-up, memory
# =====================================================================================
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
    choice = i.choice()
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
    return get_rule("data-starved").finding(
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
    reached_budget = max_workers >= math.floor(i.facts.cpus_per_rank)
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
        evidence.append(f"workers tried up to {max_workers}; CPU budget per rank {fmt_num(i.facts.cpus_per_rank)}")
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
    return get_rule("transform-bound").finding(
        WARNING,
        f"Even the best configuration measured leaves the {who} waiting {best.starvation_pct:.0f}% of the time",
        evidence, cause, fix, {},
    )


@rule("spiky-batches", WARNING, "Batch wait times spike (p95 far above the median)", "probe",
      f"wait p95 >= {BURSTY_RATIO:g} x p50 and p95 >= the step time (so 1 in 20 steps loses at least a "
      f"whole step; {policy.BURSTY_FLOOR_MS:g} ms when no step is simulated) while the step waits < "
      f"{STARVED_WARN_PCT:g}% on average: occasional stalls a buffer can absorb, not a throughput shortfall; "
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
    if r.starvation_pct is not None and r.starvation_pct >= STARVED_WARN_PCT:
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
    return get_rule("spiky-batches").finding(
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
      f"measured worker start-up >= {PERSISTENT_SHARE:.0%} of the epoch time computed from the probe's "
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
    # start-up of this many workers: a measured epoch restart without persistence, else the first
    # batch of a fresh iterator (the first epoch always starts its workers)
    same_n = [r for r in i.probe.ok_results if r.settings.num_workers == s.num_workers]
    restarts = [r.epoch_restart_s for r in same_n if not r.settings.persistent_workers and r.epoch_restart_s is not None]
    firsts = [r.first_batch_s for r in same_n if r.first_batch_s is not None]
    startup = max(restarts) if restarts else (max(firsts) if firsts else None)
    if startup is None:
        return None
    n_batches = n_samples // batch if s.drop_last else math.ceil(n_samples / batch)
    if i.world_size and i.context.distributed:
        n_batches = math.ceil(n_batches / i.world_size)
    epoch_s = n_batches / mine.batches_per_s
    share = startup / (epoch_s + startup)
    if share < PERSISTENT_SHARE:
        return None
    return get_rule("persistent-workers-off").finding(
        WARNING,
        f"Each epoch spends {startup:.1f} s ({share:.0%}) restarting {s.num_workers} workers",
        [f"worker start-up to first batch: {startup:.2f} s (measured)",
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
    choice = i.choice()
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
    return get_rule("workers-only-add-ipc").finding(
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
    return get_rule("ram-pressure").finding(
        CRITICAL if critical else WARNING,
        f"Workers would use {fmt_bytes(need)} of {fmt_bytes(budget)} available memory"
        + (": the OOM killer ends the run" if critical else ""),
        evidence,
        cause,
        "Keep the dataset's bulk in numpy arrays or tensors (one buffer, no per-object refcounts), read "
        f"lazily from disk, or use fewer workers ({fit} fit in {RAM_SAFE_SHARE:.0%} of the budget).",
        fewer_workers(fit),
    )


# =====================================================================================
# Open files
# =====================================================================================
@rule("open-files-low", CRITICAL, "Open-file limit too low for the tensors workers share", "machine",
      f"soft `ulimit -n` below the usual Linux default ({NOFILE_LINUX_DEFAULT}) while workers share tensors by "
      "file descriptor; with tensors_per_batch known: workers x prefetch x tensors above half the limit "
      "(the limit is per process); or the probe hit 'Too many open files'")
def _open_files(i: Inputs) -> Finding | None:
    r = get_rule("open-files-low")
    lim = i.facts.limits
    soft = lim.nofile_soft.get()
    strategy = lim.sharing_strategy.get("file_descriptor")
    hard = lim.nofile_hard.get()
    if isinstance(hard, int) and isinstance(soft, int) and hard <= soft:
        # the soft limit can't go above the hard one without privileges
        fix = (f"The hard limit is {hard} too: raise both where the process starts (docker run --ulimit "
               "nofile=65536:65536, LimitNOFILE=65536 in a systemd unit, limits.conf), or call "
               "torch.multiprocessing.set_sharing_strategy('file_system') at start-up so shared tensors don't "
               "hold file descriptors.")
    else:
        raise_to = min(65536, hard) if isinstance(hard, int) else 65536
        fix = (f"Raise the limit before starting training: `ulimit -n {raise_to}`, or call "
               "torch.multiprocessing.set_sharing_strategy('file_system') at start-up so shared tensors don't "
               "hold file descriptors.")
    base = [f"open-file limit: soft {soft if soft is not None else 'unlimited'}, hard {hard if hard is not None else 'unlimited'}",
            f"torch sharing strategy: {strategy}"]
    cause = ("With the 'file_descriptor' strategy every tensor a worker sends stays an open file descriptor "
             "until the training loop frees it.")
    if i.probe is not None:
        for res in i.probe.results:
            text = f"{res.error or ''}\n{res.traceback or ''}".lower()
            if res.status == "failed" and any(m in text for m in NOFILE_ERROR_MARKERS):
                return r.finding(CRITICAL, "Workers failed with 'Too many open files'",
                                 [f"the probe's {describe(res.settings)} failed: {res.error}"] + base, cause, fix, {})
    if soft is None or strategy != "file_descriptor":
        return None
    if i.settings is not None and i.settings.num_workers == 0:
        return None
    # the limit is per process: each rank's training process receives its own loader's tensors
    tensors = i.context.tensors_per_batch
    if i.settings is not None and tensors:
        fds = i.settings.batches_in_flight * tensors
        if fds <= soft / 2:
            return None
        return r.finding(
            CRITICAL if fds > soft else WARNING,
            f"{fds} shared tensors in flight against an open-file limit of {soft}",
            [f"{i.settings.num_workers} workers x prefetch {i.settings.effective_prefetch_factor} x {tensors} tensors"
             f" = {fds} file descriptors held by the training process"] + base,
            cause, fix, {},
        )
    if soft >= NOFILE_LINUX_DEFAULT:
        return None
    evidence = list(base)
    hung = [res for res in (i.probe.results if i.probe else []) if res.status == "timeout" and res.settings.num_workers]
    if hung:
        # the worker's own "Too many open files" goes to its stderr; the loader only sees silence
        evidence.append(f"the probe's {describe(hung[0].settings)} timed out waiting for a worker, as a worker "
                        "that can't send its batch does")
    return r.finding(
        WARNING,
        f"The open-file limit is {soft}, below the usual {NOFILE_LINUX_DEFAULT}: workers may fail with "
        "'Too many open files'",
        evidence, cause, fix, {},
    )


# =====================================================================================
# Crashes
# =====================================================================================
@rule("worker-crashed", CRITICAL, "A DataLoader worker crashed", "probe",
      "a probed configuration ended with status 'failed' for a reason other than shared memory or open files")
def _worker_crashed(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    crashed = []
    for res in i.probe.results:
        text = f"{res.error or ''}\n{res.traceback or ''}".lower()
        if res.status == "failed" and not any(m in text for m in SHM_ERROR_MARKERS + NOFILE_ERROR_MARKERS):
            crashed.append(res)  # shm and open-file failures have their own rules and fixes
    if not crashed:
        return None
    evidence = [f"{describe(r.settings)}: {r.error or 'failed without a message'}" for r in crashed[:3]]
    if len(crashed) > 3:
        evidence.append(f"... and {len(crashed) - 3} more configurations")
    # a run without workers fails in the main process: its traceback points at the user's code
    plain = next((r for r in crashed if r.settings.num_workers == 0 and r.traceback), None)
    where = _innermost_frame(plain.traceback) if plain else None
    if where:
        evidence.append(f"without workers the traceback ends in {where}")
    text = " ".join(f"{r.error or ''} {r.traceback or ''}" for r in crashed).lower()
    if any(m in text for m in OOM_MARKERS):
        cause = ("The process was killed (SIGKILL) or ran out of memory: usually the kernel's OOM killer, when "
                 "the workers' memory exceeds RAM or the cgroup limit (check `dmesg` or the pod's OOMKilled "
                 "status).")
        fix = ("Use fewer workers or a smaller prefetch_factor, and keep the dataset in numpy arrays or tensors "
               "rather than Python objects; `loaderdoc probe` measures the memory per worker.")
    elif where:
        cause = "The dataset (or its transform / collate_fn) raises an exception, with or without workers."
        fix = (f"Fix the code at {where}; the num_workers=0 run above shows the plain traceback. Then restore "
               "the workers.")
    else:
        cause = ("An exception (or a signal) in the dataset, a transform or collate_fn, raised inside a worker "
                 "process; torch re-raises it in the main process with the worker's traceback flattened into "
                 "text.")
        fix = ("Re-run with num_workers=0: the same code then runs in the main process and fails with a plain "
               "traceback (and a debugger can stop at it). Fix the dataset, then restore the workers.")
    with_workers = any(r.settings.num_workers > 0 for r in crashed)
    symptom = ("A DataLoader worker crashed while loading" if with_workers else
               "Loading a batch raised an exception")
    return get_rule("worker-crashed").finding(CRITICAL, symptom, evidence, cause, fix, {})


@rule("worker-hung", WARNING, "A DataLoader worker delivered nothing within the timeout", "probe",
      "a probed configuration ended with status 'timeout' (the DataLoader's `timeout`: a worker that "
      "delivers no batch for that long), unless the open-file limit explains it")
def _worker_hung(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    hung = [r for r in i.probe.results if r.status == "timeout"]
    if not hung or _open_files(i) is not None:
        return None  # a worker starved of file descriptors also times out: that rule names the fix
    evidence = [f"{describe(r.settings)}: {r.error or 'timed out'}" for r in hung[:3]]
    fine = [r for r in i.probe.ok_results if r.settings.num_workers == 0]
    if fine:
        evidence.append(f"{describe(fine[0].settings)}: loaded normally in the training process")
    return get_rule("worker-hung").finding(
        WARNING,
        "A DataLoader worker hung: no batch arrived within the timeout",
        evidence,
        "Something in the dataset blocks inside a forked worker: typically a lock, thread pool or network "
        "client created before the fork (in __init__) and used in __getitem__, or a read that never returns.",
        "Create such clients lazily inside each worker (worker_init_fn or on first use in __getitem__), "
        "or use multiprocessing_context='spawn'; keep a DataLoader timeout (e.g. timeout=120) in training so "
        "a hang becomes an error instead of an idle GPU.",
        {},
    )


_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # .../loaderdoc


def _is_library_frame(path: str) -> bool:
    """A frame in torch or in loaderdoc itself, not in the user's code.

    Judged by the file, not by a folder name: a user's project may live under a folder named
    ``loaderdoc`` or ``torch`` (a plain ``git clone`` of this repository is one). A loaderdoc frame
    is a path ending in one of this package's own files (tracebacks recorded elsewhere carry
    another prefix); a torch frame is inside an installed ``torch`` package."""
    if "/site-packages/torch/" in path or "/dist-packages/torch/" in path:
        return True
    if "/loaderdoc/" in path:
        inside = path.rsplit("/loaderdoc/", 1)[1]
        if (_PACKAGE_DIR / inside).is_file():
            return True
    return False


def _innermost_frame(tb: str) -> str | None:
    """``brokends.py:10 in __getitem__``: the last frame of a traceback outside torch and loaderdoc."""
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', tb)
    mine = [f for f in frames if not _is_library_frame(f[0])]
    if not mine:
        return None
    path, line, func = mine[-1]
    return f"{path.rsplit('/', 1)[-1]}:{line} in {func}"


# =====================================================================================
# Training context: BatchNorm, DDP, cuDNN
# =====================================================================================
@rule("drop-last-batchnorm", WARNING, "drop_last=False with BatchNorm and a tiny last batch", "context",
      f"the model uses BatchNorm and the dataset length (per rank under DDP, as DistributedSampler splits "
      f"it) leaves a last batch of 1 to {BN_SMALL_BATCH - 1} samples: BatchNorm's batch statistics degrade "
      "sharply below 8 samples (Wu & He, Group Normalization, 2018), and a single sample is what "
      "BatchNorm1d rejects in training")
def _drop_last_batchnorm(i: Inputs) -> Finding | None:
    s, c = i.settings, i.context
    if s is None or s.drop_last or c.uses_batchnorm is not True or not s.batch_size:
        return None
    n = c.dataset_len or (i.probe.workload.dataset_len if i.probe else None)
    if not n:
        return None
    evidence = [f"dataset: {n} samples, batch_size {s.batch_size}"]
    per_rank = n
    ws = i.world_size if c.distributed else None
    ddp = bool(ws and ws > 1)
    if ddp:
        per_rank = math.ceil(n / ws)
        evidence.append(f"DDP: {ws} ranks, DistributedSampler gives each ceil({n} / {ws}) = {per_rank} samples")
    last = per_rank % s.batch_size
    if last == 0 or last >= BN_SMALL_BATCH:
        return None
    plural = "s" if last != 1 else ""
    evidence.append(f"last batch of every epoch{' on each rank' if ddp else ''}: {last} sample{plural}")
    if last == 1:
        symptom = ("Every epoch ends with a 1-sample batch: BatchNorm1d raises 'Expected more than 1 value per "
                   "channel when training', other BatchNorm layers normalise that sample by itself")
    else:
        symptom = (f"Every epoch ends with a {last}-sample batch: BatchNorm's statistics from it are noisy and "
                   "leak into the running averages")
    return get_rule("drop-last-batchnorm").finding(
        WARNING, symptom, evidence,
        "In training, BatchNorm normalises with the mean and variance of the current batch"
        + (" on each rank" if ddp else "") + f"; {last} sample{plural} give a poor estimate.",
        f"Set drop_last=True (skips {last} sample{plural} per epoch" + (" per rank" if ddp else "")
        + ", a different subset each epoch when shuffling).",
        {"drop_last": True},
    )


@rule("distributed-sampler-missing", WARNING, "Multi-GPU training without a DistributedSampler", "context",
      "context.distributed is set (or WORLD_SIZE > 1) and the loader has no DistributedSampler")
def _distributed_sampler(i: Inputs) -> Finding | None:
    c = i.context
    if c.uses_distributed_sampler is not False:
        return None
    ws = i.world_size
    if not (c.distributed or (ws and ws > 1)):
        return None
    evidence = ["no DistributedSampler passed to the DataLoader"]
    if ws:
        evidence.append(f"WORLD_SIZE = {ws}")
    return get_rule("distributed-sampler-missing").finding(
        WARNING,
        f"Every rank iterates the whole dataset{f' ({ws} copies per epoch)' if ws else ''}",
        evidence,
        "Without a DistributedSampler each process reads all samples: an epoch does the work "
        "world_size times and ranks can see the same batches.",
        "Pass sampler=DistributedSampler(dataset, shuffle=True) (and shuffle=False to the DataLoader); "
        "call sampler.set_epoch(epoch) at the start of each epoch.",
        {"shuffle": False},
    )


@rule("shuffle-with-sampler", CRITICAL, "shuffle=True together with a sampler", "context",
      "torch's DataLoader raises ValueError ('sampler option is mutually exclusive with shuffle')")
def _shuffle_with_sampler(i: Inputs) -> Finding | None:
    if i.settings is None or not i.settings.shuffle or i.context.uses_distributed_sampler is not True:
        return None
    return get_rule("shuffle-with-sampler").finding(
        CRITICAL,
        "DataLoader(...) will raise: shuffle=True cannot be combined with a sampler",
        ["shuffle = True", "a DistributedSampler is passed as sampler"],
        "The sampler decides the order; torch refuses a second shuffling instruction.",
        "Set shuffle=False on the DataLoader and DistributedSampler(dataset, shuffle=True).",
        {"shuffle": False},
    )


@rule("set-epoch-missing", WARNING, "DistributedSampler without set_epoch", "context",
      "DistributedSampler seeds its shuffle with the epoch; without set_epoch() it is always epoch 0")
def _set_epoch(i: Inputs) -> Finding | None:
    c = i.context
    if c.uses_distributed_sampler is not True or c.calls_set_epoch is not False:
        return None
    return get_rule("set-epoch-missing").finding(
        WARNING,
        "Every epoch visits the samples in the same order",
        ["DistributedSampler in use", "sampler.set_epoch(epoch) is not called"],
        "DistributedSampler shuffles with seed + epoch; the epoch stays 0 unless set_epoch is called.",
        "Call loader.sampler.set_epoch(epoch) at the start of every epoch.",
        {},
    )


@rule("cudnn-benchmark", WARNING, "cudnn.benchmark doesn't match the input shapes", "context",
      "fixed input sizes with convolutions on a usable GPU and benchmark off (cuDNN can pick its fastest "
      "algorithm once per shape); or benchmark on with varying sizes (it re-tunes for every new shape)")
def _cudnn_benchmark(i: Inputs) -> Finding | None:
    c = i.context
    if c.cudnn_benchmark is None or c.fixed_input_size is None or c.uses_convolutions is False:
        return None
    if i.facts.usable_gpus == 0:
        return None
    if c.fixed_input_size and not c.cudnn_benchmark:
        if c.uses_convolutions is not True:
            return None
        return get_rule("cudnn-benchmark").finding(
            WARNING,
            "Convolutions run with cuDNN's default algorithm choice although every batch has the same shape",
            ["input size: fixed", "torch.backends.cudnn.benchmark = False", f"usable GPUs: {i.facts.usable_gpus}"],
            "With benchmark on, cuDNN times the available convolution algorithms for each input shape once "
            "and keeps the fastest; with one shape that cost is paid once.",
            "Set torch.backends.cudnn.benchmark = True before training (not when you need bit-exact "
            "reproducibility: then keep it off with cudnn.deterministic = True).",
            {},
        )
    if not c.fixed_input_size and c.cudnn_benchmark:
        return get_rule("cudnn-benchmark").finding(
            WARNING,
            "cudnn.benchmark is on but input shapes vary: cuDNN re-tunes for every new shape",
            ["input size: varies", "torch.backends.cudnn.benchmark = True"],
            "Each unseen shape triggers a new round of algorithm timing, which can cost more than it saves.",
            "Set torch.backends.cudnn.benchmark = False, or pad/bucket inputs to a few fixed sizes.",
            {},
        )
    return None


def catalogue() -> list[dict[str, str]]:
    """The rules as plain data for docs and the TUI."""
    return [{"id": r.id, "severity": r.severity, "title": r.title, "needs": r.needs, "threshold": r.threshold}
            for r in RULES]
