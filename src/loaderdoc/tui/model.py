"""What the interactive app shows, computed without a terminal.

Everything the TUI renders passes through this module: machine facts become rows, probe
results become table rows and chart series, the settings form becomes a validated
:class:`LoaderSettings` (or a message per field). It imports neither textual nor torch, so every
piece of it is testable headlessly; the widgets only place the strings it returns.

The state those strings are made from lives in :class:`loaderdoc.session.Session`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import MP_CONTEXTS, LoaderSettings
from loaderdoc.base.summary import settings_diff, settings_line  # noqa: F401  (the views' text)
from loaderdoc.base.units import fmt_bytes, fmt_cpus, fmt_share_fine
from loaderdoc.cluster.job_report import JobReport
from loaderdoc.probing.real_loop import VersusRealLoop
from loaderdoc.probing.result import ConfigResult, ProbeReport, step_note
from loaderdoc.system.facts import MachineFacts, Reading
from loaderdoc.text.machine import machine_status  # noqa: F401  (the views' text)
from loaderdoc.text.watch import loader_title, run_header  # noqa: F401  (the views' text)
from loaderdoc.watching.watched import LoaderReport

# ---- workload -----------------------------------------------------------------------------


DATASET_CHOICE = "__dataset__"


# ---- machine facts ----------------------------------------------------------------------


@dataclass
class FactRow:
    section: str
    label: str
    value: str
    source: str = ""
    note: str = ""  # "unknown", "slow fact pending", ...


def reading_text(r: Reading, fmt: Callable[[Any], str] = str, unset: str = "not set") -> str:
    if not r.known:
        return f"unknown ({r.unknown})"
    if r.value is None:
        return unset
    return fmt(r.value)


def _cpu_list(cpus: list[int]) -> str:
    """[0,1,2,3,8] -> '0-3,8'."""
    cpus = sorted(cpus)
    out: list[str] = []
    start = prev = None
    for c in cpus + [None]:  # type: ignore[list-item]
        if start is None:
            start = prev = c
        elif c is not None and c == prev + 1:
            prev = c
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = c
    return ",".join(out)


def machine_rows(facts: MachineFacts, *, pending: Iterable[str] = ()) -> list[FactRow]:
    """The machine view, section by section. ``pending`` names slow facts still being read
    ("cpu_model", "torch"): those rows say so instead of "unknown"."""
    pending = set(pending)
    rows: list[FactRow] = []
    cpu = facts.cpu
    limit = cpu.budget_source
    rows.append(FactRow("CPU", "budget", f"{fmt_cpus(cpu.budget)} CPUs (set by {limit})",
                        "least of logical, affinity and cgroup quota"))
    rows.append(FactRow("CPU", "logical", reading_text(cpu.logical), cpu.logical.source))
    rows.append(FactRow("CPU", "physical cores", reading_text(cpu.physical), cpu.physical.source))
    aff = cpu.affinity
    rows.append(FactRow("CPU", "affinity",
                        reading_text(aff, lambda v: f"{len(v)} CPUs ({_cpu_list(v)})"), aff.source))
    q = cpu.cgroup_quota
    rows.append(FactRow("CPU", "cgroup quota", reading_text(q, lambda v: f"{fmt_cpus(v)} CPUs", "none"),
                        q.source + (f" (cgroup v{cpu.cgroup_version.value})" if cpu.cgroup_version.get() else "")))
    if "cpu_model" in pending and not cpu.model.get():
        rows.append(FactRow("CPU", "model", "reading...", "py-cpuinfo", note="pending"))
    else:
        rows.append(FactRow("CPU", "model", reading_text(cpu.model, unset="not read"), cpu.model.source))

    mem = facts.memory
    rows.append(FactRow("Memory", "budget", fmt_bytes(mem.budget), "RAM available, capped by the cgroup limit"))
    rows.append(FactRow("Memory", "total RAM", reading_text(mem.total, fmt_bytes), mem.total.source))
    rows.append(FactRow("Memory", "available", reading_text(mem.available, fmt_bytes), mem.available.source))
    rows.append(FactRow("Memory", "cgroup limit", reading_text(mem.cgroup_limit, fmt_bytes, "none"),
                        mem.cgroup_limit.source))
    rows.append(FactRow("Memory", "swap", reading_text(mem.swap_total, fmt_bytes), mem.swap_total.source))

    shm = facts.shm
    shm_note = " (Docker's default)" if shm.looks_like_docker_default else ""
    rows.append(FactRow("/dev/shm", "size", reading_text(shm.total, fmt_bytes) + shm_note, shm.total.source or shm.path))
    rows.append(FactRow("/dev/shm", "free", reading_text(shm.free, fmt_bytes), shm.free.source or shm.path))

    gpu = facts.gpu
    if not gpu.nvml.known:
        rows.append(FactRow("GPU", "NVML", f"not available ({gpu.nvml.unknown})", gpu.nvml.source))
    else:
        rows.append(FactRow("GPU", "driver", reading_text(gpu.driver_version), gpu.driver_version.source))
        rows.append(FactRow("GPU", "CUDA (driver)", reading_text(gpu.cuda_driver_version), gpu.cuda_driver_version.source))
    if gpu.visible_devices.get() is not None:
        rows.append(FactRow("GPU", "CUDA_VISIBLE_DEVICES", str(gpu.visible_devices.value), gpu.visible_devices.source))
    if not gpu.devices:
        rows.append(FactRow("GPU", "devices", "none visible", gpu.nvml.source))
    for dev in gpu.devices:
        mem_txt = reading_text(dev.memory_total, fmt_bytes)
        pcie = ""
        if dev.pcie_gen_current.get() is not None:
            pcie = f", PCIe gen{dev.pcie_gen_current.value}x{dev.pcie_width_current.get('?')}"
            if dev.pcie_gen_max.get() is not None:
                pcie += f" (max gen{dev.pcie_gen_max.value}x{dev.pcie_width_max.get('?')})"
        mig = ", MIG on" if dev.mig_mode.get() else ""
        rows.append(FactRow("GPU", f"GPU {dev.index}", f"{reading_text(dev.name)}, {mem_txt}{pcie}{mig}",
                            dev.name.source))
    rows.append(FactRow("GPU", "usable for training", str(facts.usable_gpus),
                        "NVML devices, and torch built with CUDA"))

    t = facts.torch
    if "torch" in pending and not t.installed.known:
        rows.append(FactRow("torch", "version", "reading...", "import torch", note="pending"))
    elif t.installed.get() is False:
        rows.append(FactRow("torch", "installed", "no", t.installed.source))
    else:
        rows.append(FactRow("torch", "version", reading_text(t.version), t.version.source))
        rows.append(FactRow("torch", "CUDA build", reading_text(t.cuda_build, unset="none (CPU build)"),
                            t.cuda_build.source))
        rows.append(FactRow("torch", "cuDNN", reading_text(t.cudnn, unset="none"), t.cudnn.source))

    lim = facts.limits
    rows.append(FactRow("Limits", "open files (soft/hard)",
                        f"{reading_text(lim.nofile_soft, unset='unlimited')} / "
                        f"{reading_text(lim.nofile_hard, unset='unlimited')}", lim.nofile_soft.source))
    rows.append(FactRow("Limits", "sharing strategy", reading_text(lim.sharing_strategy), lim.sharing_strategy.source))
    rows.append(FactRow("Environment", "container", reading_text(facts.container.kind, unset="none detected"),
                        facts.container.kind.source))
    d = facts.distributed
    if d.launcher.get():
        rows.append(FactRow("Environment", "launcher",
                            f"{d.launcher.value}: local ranks {d.ranks_on_this_node}, "
                            f"{fmt_cpus(facts.cpus_per_rank)} CPUs per rank", d.launcher.source))
    else:
        rows.append(FactRow("Environment", "launcher", reading_text(d.launcher, unset="none (single process)"),
                            d.launcher.source))
    p = facts.platform
    rows.append(FactRow("Environment", "system",
                        f"{p.system.get('?')} {p.kernel.get('')}, Python {p.python.get('?')}".strip(),
                        p.system.source))
    return rows


# ---- settings form ----------------------------------------------------------------------

SETTING_KEYS = [f.name for f in dataclasses.fields(LoaderSettings)]
BOOL_SETTINGS = ("shuffle", "pin_memory", "drop_last", "persistent_workers", "in_order")
TEXT_SETTINGS = ("batch_size", "num_workers", "prefetch_factor", "timeout")
CONTEXT_CHOICES = ("default",) + MP_CONTEXTS


def settings_form_values(settings: LoaderSettings) -> dict[str, Any]:
    """The form's field values for ``settings``: text for numbers, bools for switches."""
    out: dict[str, Any] = {}
    for key in SETTING_KEYS:
        value = getattr(settings, key)
        if key in BOOL_SETTINGS:
            out[key] = bool(value)
        elif key == "multiprocessing_context":
            out[key] = value or "default"
        elif value is None:
            out[key] = ""
        elif key == "timeout":
            out[key] = f"{value:g}"
        else:
            out[key] = str(value)
    return out


def parse_settings_form(values: dict[str, Any]) -> tuple[LoaderSettings | None, dict[str, str]]:
    """Validate the form as typed: (settings, {}) when valid, else (None, {field: message}).

    Types are checked per field first; then torch's cross-field rules
    (:meth:`LoaderSettings.problems`) name the field they concern."""
    data: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for key, raw in values.items():
        if key in BOOL_SETTINGS:
            data[key] = bool(raw)
        elif key == "multiprocessing_context":
            data[key] = None if raw in (None, "", "default") else raw
        else:
            text = str(raw).strip()
            if text == "" and key in ("batch_size", "prefetch_factor"):
                data[key] = None
                continue
            try:
                data[key] = float(text) if key == "timeout" else int(text)
            except ValueError:
                kind = "a number of seconds" if key == "timeout" else "a whole number"
                errors[key] = f"{key} must be {kind}, got {text!r}" if text else f"{key} needs a value"
    if errors:
        return None, errors
    try:
        settings = LoaderSettings.from_mapping(data)
    except SettingsError as exc:
        # from_mapping reports the first problem; problems() names every field that has one
        probe = LoaderSettings(**data)
        problems = probe.problems()
        if problems:
            return None, {key: msg for key, msg in problems}
        return None, {_key_in(str(exc)): str(exc)}
    return settings, {}


def _key_in(message: str) -> str:
    for key in SETTING_KEYS:
        if key in message:
            return key
    return "batch_size"


# ---- probe results ----------------------------------------------------------------------

RESULT_COLUMNS = ("workers", "prefetch", "persist", "pin", "batches/s", "samples/s", "starved",
                  "wait p95", "1st batch", "worker PSS", "status")


RISING = "↑"  # after a worker PSS figure: still rising when its steady window ended


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def result_row(r: ConfigResult) -> tuple[str, ...]:
    s = r.settings
    status = r.status if r.ok else f"{r.status}: {r.error or ''}".strip().rstrip(":")
    return (
        str(s.num_workers),
        str(s.effective_prefetch_factor) if s.num_workers else "-",
        "yes" if s.persistent_workers else "no",
        "yes" if s.pin_memory else "no",
        _num(r.batches_per_s, ".1f"),
        _num(r.samples_per_s, ",.0f"),
        "-" if r.starvation_pct is None else f"{r.starvation_pct:.0f}%",
        "-" if r.wait.p95_ms is None else f"{r.wait.p95_ms:.1f} ms",
        "-" if r.first_batch_s is None else f"{r.first_batch_s:.2f} s",
        "-" if r.worker_pss_bytes is None else fmt_bytes(r.worker_pss_bytes) + (f" {RISING}" if r.memory_still_growing else ""),
        status,
    )


@dataclass
class ChartSeries:
    """Best measured throughput and its starvation at each num_workers, in order."""

    workers: list[int] = field(default_factory=list)
    batches_per_s: list[float] = field(default_factory=list)
    starvation_pct: list[float] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)  # num_workers values with only failures


def chart_series(results: Iterable[ConfigResult]) -> ChartSeries:
    best: dict[int, ConfigResult] = {}
    failed: set[int] = set()
    for r in results:
        n = r.settings.num_workers
        if not r.ok or r.batches_per_s is None:
            failed.add(n)
            continue
        if n not in best or r.batches_per_s > (best[n].batches_per_s or 0):
            best[n] = r
    out = ChartSeries()
    for n in sorted(best):
        out.workers.append(n)
        out.batches_per_s.append(float(best[n].batches_per_s or 0.0))
        out.starvation_pct.append(float(best[n].starvation_pct or 0.0) if best[n].starvation_pct is not None
                                  else float("nan"))
    out.failed = sorted(failed - set(best))
    return out


def report_summary(report: ProbeReport, *, complete: bool = True, versus: VersusRealLoop | None = None) -> list[str]:
    """Lines saying how the probe ended and what it recommends, and ``versus`` the real loop's
    rate where the opened report measured one. A cancelled (incomplete) run shows what it
    measured but no recommendation: its search did not finish."""
    w = report.workload
    lines = [
        f"{w.name or 'workload'}: batch {w.batch_size}"
        + (f" ({fmt_bytes(w.batch_bytes)})" if w.batch_bytes else "")
        + f", step {w.step_ms:g} ms ({w.consumer}) on {report.device}"
        + (f", {w.torch_threads} torch thread{'' if w.torch_threads == 1 else 's'}" if w.torch_threads else ""),
        f"{len(report.results)} configurations in {report.elapsed_s:.1f} s of {report.budget_s:g} s; "
        f"stopped: {report.stopped or 'finished'}",
    ]
    best = report.best
    if best is not None:
        lines.append(f"best measured: {best.batches_per_s:.1f} batches/s with num_workers={best.settings.num_workers}"
                     + (f", {best.starvation_pct:.0f}% starved" if best.starvation_pct is not None else ""))
    if any(r.memory_still_growing for r in report.results):
        lines.append(f"{RISING} after worker PSS: still rising when its window ended, a floor (see Diagnoses)")
    if not complete:
        lines.append("cancelled: the search did not finish, so the recommendation was not changed")
    elif report.recommended is not None:
        lines.append(f"recommended: {settings_line(report.recommended)}")
        note = step_note(w.consumer) if report.prediction is not None else ""
        if note:
            lines.append(f"  note: {note}")
        if versus is not None:
            lines += [f"  {line}" for line in versus.lines()]
        lines += [f"  {r}" for r in report.reasons]
    elif report.results:
        lines.append("no recommendation: no configuration was measured successfully")
    return lines


# ---- findings and trade-offs ------------------------------------------------------------

SEVERITY_LABEL = {"critical": "CRITICAL", "warning": "WARNING", "ok": "OK"}


def severity_counts(findings: Iterable[Any]) -> tuple[int, int]:
    """(critical, warning): how many findings of each, as the status bar and the diagnoses say it."""
    severities = [f.severity for f in findings]
    return severities.count("critical"), severities.count("warning")


def finding_label(f: Any) -> str:
    return f"{SEVERITY_LABEL.get(f.severity, f.severity.upper())}  {f.symptom}"


def finding_detail(f: Any, where: str = "on this machine") -> list[tuple[str, str]]:
    """(heading, text) blocks for one finding: symptom, evidence (``where`` it was found: this
    machine, or the report opened with --report), cause, fix, threshold."""
    out = [("Symptom", f"[{SEVERITY_LABEL.get(f.severity, f.severity)}] {f.symptom}  ({f.rule_id})")]
    if f.evidence:
        out.append((f"Evidence {where}", "\n".join(f"- {e}" for e in f.evidence)))
    if f.cause:
        out.append(("Cause", f.cause))
    if f.fix:
        out.append(("Fix", f.fix))
    if f.settings_change:
        out.append(("Applying the fix sets",
                    ", ".join(f"{k}={v!r}" for k, v in f.settings_change.items())))
    if f.threshold:
        out.append(("Threshold", f.threshold))
    return out


KNOBS = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "batch_size")
BOOLEAN_KNOBS = ("pin_memory", "persistent_workers")


def tradeoff_blocks(t: Any) -> list[tuple[str, str]]:
    """(heading, text) for one KnobTradeoff: what raising and lowering it does here, evidence."""
    up, down = ("Turning it on", "Turning it off") if t.knob in BOOLEAN_KNOBS else ("Raising it", "Lowering it")
    out: list[tuple[str, str]] = []
    if getattr(t, "note", ""):
        out.append(("Note", t.note))
    out.append((up, t.raising))
    out.append((down, t.lowering))
    if t.evidence:
        out.append(("Evidence", "\n".join(f"- {e}" for e in t.evidence)))
    return out


def tradeoff_table(t: Any) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of a KnobTradeoff's table; the first column marks the current value
    (">") and rows the probe measured ("*")."""
    if not t.rows:
        return [], []
    columns = [""] + list(t.columns)
    rows = []
    for r in t.rows:
        mark = (">" if r.current else " ") + ("*" if r.measured else " ")
        rows.append([mark] + [r.cells.get(c, "") for c in t.columns])
    return columns, rows


def knob_blocks(knob: Any) -> list[tuple[str, str]]:
    """(heading, text) for a knob's plain explanation (loaderdoc.advice.knobs.Knob)."""
    return [
        ("What it does", f"{knob.what} (torch's default: {knob.default})"),
        ("Buys", "\n".join(f"+ {p}" for p in knob.pros)),
        ("Costs", "\n".join(f"- {c}" for c in knob.cons)),
        ("When to change it", knob.when_to_change),
    ]


# ---- a watched run (`loaderdoc --report FILE`) --------------------------------------------


def loader_chart_note(loader: LoaderReport) -> str:
    """Under the chart: what one point is and where the loop waited most."""
    if not loader.intervals:
        return "no batches recorded"
    per = "of each interval" if loader.per == "interval" else "of each epoch (no timeline in this report)"
    worst = max(loader.intervals, key=lambda i: i.wait_share or 0.0)
    return f"share {per}; most waiting {worst.label} ({fmt_share_fine(worst.wait_share)} of it)"


# ---- a job report (`loaderdoc --report job.json`) ------------------------------------------


def job_summary(job: JobReport) -> str:
    """One line above the job table: the job's status and its odd nodes out first (80 columns cut
    the rest), then its size and launcher."""
    nodes = job.nodes
    table = job.table
    odd = sorted({table.columns[i] for _, i in table.odd}, key=table.columns.index)
    if odd:
        head = f"{job.status}: {', '.join(odd)} {'is' if len(odd) == 1 else 'are'} the odd one out"
    else:
        head = f"{job.status}" + (": the nodes agree" if len(nodes) > 1 else "")
    return (f"{head}; {len(nodes)} node{'s' if len(nodes) != 1 else ''}, {job.world_size} "
            f"rank{'s' if job.world_size != 1 else ''} ({job.launcher or 'launcher unknown'}, "
            f"nodes by {job.node_source})")


def job_note(job: JobReport) -> str:
    """Under the summary: how to read the highlights, where the findings are, the file."""
    if not job.findings:
        return f"No findings: the nodes agree and none has a problem. Report: {job.path}"
    return f"{ODD_MARK} marks the odd node's value; the findings and fixes are in Diagnoses (3). Report: {job.path}"


ODD_MARK = "◀"
