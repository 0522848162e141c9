"""The rule registry: what a rule sees (:class:`Inputs`), how it registers, and evaluate().

Diagnoses: which symptom *this* machine and *this* loader show, with the numbers that prove it.

Every rule looks at the machine facts, optionally the user's DataLoader settings, the bytes of one
collated batch, a probe report, a :class:`TrainingContext` and what a real run measured
(:class:`~loaderdoc.watching.watched.LoaderReport`, from ``loaderdoc watch``), and either returns a
:class:`~loaderdoc.advice.findings.Finding` (it fires) or ``None`` (it stays silent). A rule that
lacks the information it needs stays silent: advice that is wrong is worse than none.

``evaluate()`` is what ``loaderdoc check``, ``probe`` output, ``watch`` and the export header call. It must
stay cheap: the rules import neither torch nor textual (a test checks that in a subprocess).
The rules live in one module per area beside this one; their own thresholds are named here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from loaderdoc import policy
from loaderdoc.advice.context import TrainingContext
from loaderdoc.advice.findings import CRITICAL, OK, SEVERITY_ORDER, WARNING, Finding
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import MiB
from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.system.facts import MachineFacts

if TYPE_CHECKING:  # the watch feature's model: a rule reads it, the watch feature builds it
    from loaderdoc.watching.cpu_use import CpuUse
    from loaderdoc.watching.io_use import IoUse
    from loaderdoc.watching.watched import LoaderReport

# ---- thresholds (each rule's `threshold` text says where its number comes from) -----------
# Sizing thresholds (CPU budget, /dev/shm and memory shares, "as fast", bursts) live in
# loaderdoc.policy, shared with recommend and the probe's search; these are the rules' own.
STARVED_WARN_PCT, STARVED_CRIT_PCT = policy.STARVED_WARN_PCT, policy.STARVED_CRIT_PCT  # the policy's ladder
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
class Inputs:
    """Everything a rule may look at, with the derived numbers several rules share."""

    facts: MachineFacts
    settings: LoaderSettings | None = None
    batch_bytes: int | None = None
    probe: ProbeReport | None = None
    context: TrainingContext = field(default_factory=TrainingContext)
    watch: LoaderReport | None = None  # one loader of a real run, measured by `loaderdoc watch`

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
        return self.facts.cpus_per_rank

    @property
    def room(self) -> policy.Room:
        return policy.Room.of(self.facts)

    @cached_property
    def choice(self) -> policy.Choice | None:
        """What the policy picks among the probe's measurements at these settings' batch size
        (several rules ask; one evaluate() computes it once)."""
        if self.probe is None:
            return None
        return policy.choose(self.probe.results, per_rank=self.per_rank, room=self.room,
                             batch_bytes=self.batch_bytes)

    @cached_property
    def io_use(self) -> IoUse | None:
        """The watched loader's reads (None without a watched run or its reads)."""
        return self.watch.io_use() if self.watch is not None else None

    @cached_property
    def cpu_use(self) -> CpuUse | None:
        """The watched loader's CPU accounting against this rank's CPUs (several rules read it;
        one evaluate() computes it once); None without a watched run or its CPU time."""
        return self.watch.cpu_use(self.per_rank, self.ranks) if self.watch is not None else None

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
    needs: str  # what must be known for it to speak: "machine", "settings", "probe", "context", "watch"
    threshold: str  # where its threshold comes from
    check: Callable[[Inputs], Finding | None] = field(repr=False, compare=False)



RULES: list[Rule] = []
_BY_ID: dict[str, Rule] = {}
# A rule's judgement of a watched run, given by the watch feature (loaderdoc.watching.rules registers
# them): where a run was measured, its CPU accounting, not the counts, decides (rule id -> judge).
WATCHED_JUDGES: dict[str, Callable[[Inputs], Finding | None]] = {}


def judged_by_the_run(rule_id: str, i: Inputs) -> Finding | None:
    """The watch feature's judgement of a watched run for ``rule_id`` (None: it has none)."""
    judge = WATCHED_JUDGES.get(rule_id)
    return judge(i) if judge is not None else None


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


def found(severity: str, symptom: str, evidence: list[str], cause: str, fix: str,
          change: dict[str, Any] | None = None, expected_gain: float | None = None) -> Finding:
    """What a rule returns when it fires; :func:`evaluate` names the rule and its threshold."""
    return Finding(rule_id="", severity=severity, symptom=symptom, evidence=evidence, cause=cause, fix=fix,
                   settings_change=dict(change or {}), expected_gain=expected_gain)


def evaluate(
    facts: MachineFacts,
    settings: LoaderSettings | None = None,
    *,
    batch_bytes: int | None = None,
    probe: ProbeReport | None = None,
    context: TrainingContext | None = None,
    watch: LoaderReport | None = None,
    with_ok: bool = False,
) -> list[Finding]:
    """The findings that fire for this machine (and settings, probe, context), most severe first.

    ``settings=None`` means no config was given: only machine-level rules speak. ``batch_bytes``
    falls back to what the probe measured for one collated batch. ``watch``: one loader of a real
    run; ``with_ok`` keeps the "ok" findings of rules that say a measured thing is fine (watch's
    healthy loader), which check and probe leave out.
    """
    if watch is not None and not WATCHED_JUDGES:  # a programming error, not a user's: said loudly
        raise RuntimeError("a watched loader evaluated without the watch rules: import loaderdoc.watching.rules first")
    if batch_bytes is None:
        batch_bytes = batch_bytes_from_probe(probe, settings)
    inputs = Inputs(facts, settings, batch_bytes, probe, context or TrainingContext(), watch)
    kept = (OK, WARNING, CRITICAL) if with_ok else (WARNING, CRITICAL)
    fired: list[Finding] = []
    for r in RULES:
        f = r.check(inputs)
        if f is not None and f.severity in kept:
            f.rule_id, f.threshold = r.id, r.threshold
            fired.append(f)
    # stable sort keeps catalogue order within a severity
    return sorted(fired, key=lambda f: -SEVERITY_ORDER.get(f.severity, 0))


def catalogue() -> list[dict[str, str]]:
    """The rules as plain data for docs and the TUI."""
    return [{"id": r.id, "severity": r.severity, "title": r.title, "needs": r.needs, "threshold": r.threshold}
            for r in RULES]
