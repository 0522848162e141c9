"""The text ``loaderdoc watch`` prints on stderr: the run, one block per loader, memory, findings.

Every line fits 80 columns (long ones wrap under their indent), so a training log stays readable;
the one exception is the single line of a run without DataLoaders (its command elided to 40 chars).
Reads the typed report (:class:`~loaderdoc.watching.report.WatchReport`); no torch, no textual.
"""

from __future__ import annotations

import shlex
import textwrap
from typing import TYPE_CHECKING, Any

from loaderdoc.base.units import fmt_bytes, fmt_seconds, fmt_share_fine
from loaderdoc.policy import WATCH_MIN_BATCHES, busy
from loaderdoc.text.findings import finding_lines

if TYPE_CHECKING:
    from loaderdoc.watching.report import WatchReport
    from loaderdoc.watching.watched import LoaderReport

__all__ = ["cpu_text", "io_text", "render_summary"]  # cpu_text, io_text: the accountings' lines, the app's too

WIDTH = 80
COMMAND_CHARS = 40  # the command in the head line, elided past this


def _wrap(text: str, indent: str, more: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=more,
                         break_on_hyphens=False, break_long_words=False) or [indent.rstrip()]


def _head(report: WatchReport) -> str:
    command = report.command
    head = "loaderdoc watch"
    if report.merged_from:
        head += f": {len(report.merged_from)} reports merged"
    if command:
        text = shlex.join(command)
        head += ": " + (text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "...")
    if report.exit_code is not None:
        head += f" (exit {report.exit_code})"
    elif command is not None:
        head += " (still running)"
    return head


def _loader_lines(entry: LoaderReport, where: bool) -> list[str]:
    t = entry.totals
    if entry.iter_error and not t.steps:  # its finding says what iter() raised and why
        return _wrap(f"{entry.title(where)}: no batch, iter(loader) raised{_applied_text(entry)}", "  ", "    ")
    if entry.init_error:  # likewise: what DataLoader(...) raised
        at = f" at {entry.init_site}" if entry.init_site else ""
        return _wrap(f"{entry.title(where)}: never built, DataLoader(...){at} raised{_applied_text(entry)}", "  ", "    ")
    text = (f"{entry.title(where)}: {t.epochs} epoch{'s' if t.epochs != 1 else ''}, "
            f"{t.steps} batches, wait {fmt_share_fine(t.wait_share)}")
    if t.waits:  # the percentiles are the longest epoch's
        text += (f" ({fmt_seconds(t.wait_per_batch_s)}/batch, p50 {fmt_seconds(entry.wait_p50_s)}, "
                 f"p95 {fmt_seconds(entry.wait_p95_s)}; step {fmt_seconds(t.step_per_batch_s)})")
    text += f", first batch {fmt_seconds(t.first_batch_s)}"
    if t.later_first_batch_s is not None:
        text += f" (later epochs up to {fmt_seconds(t.later_first_batch_s)})"
    if t.workers_pss_max_bytes is not None and entry.settings.get("num_workers"):
        text += f"; workers' memory peak {fmt_bytes(t.workers_pss_max_bytes)} (PSS)"
    if t.gpu_idle_s is not None:
        text += f"; GPU idle while waiting {t.gpu_idle_s:.1f} s ({fmt_share_fine(t.gpu_idle_share)})"
    if not entry.judged:
        text += f"; too few batches to judge (< {WATCH_MIN_BATCHES})"
    text += _applied_text(entry)
    return _wrap(text, "  ", "    ")


def _cpu_lines(entry: LoaderReport) -> list[str]:
    text = cpu_text(entry.cpu) if entry.judged else None
    return _wrap(text, "    ", "    ") if text else []


def _io_lines(entry: LoaderReport) -> list[str]:
    text = io_text(entry.io)
    return _wrap(text, "    ", "    ") if text else []


def _trace_lines(report: WatchReport) -> list[str]:
    """--trace: each process's trace file and what profiling cost, or why there is none."""
    out = []
    traces = report.traces or []
    for t in traces:
        who = f" (pid {t.get('pid')})" if len(traces) > 1 else ""
        if t.get("state") == "written":
            text = (f"trace{who}: {t['path']}: {t['steps']} steps of loader {t['loader']} from batch "
                    f"{t['from_batch']} (epoch {t['epoch']}), the data waits marked 'loaderdoc: data wait'")
            if t.get("cut_short"):
                text += f" (ended early: {t['cut_short']})"
            before, traced = t.get("step_per_batch_before_s"), t.get("step_per_batch_traced_s")
            if before and traced:
                text += (f"; profiled, a step took {fmt_seconds(traced)} against {fmt_seconds(before)} before "
                         f"({traced / before:.2f}x)")
            text += (f"; starting the profiler and writing the file took "
                     f"{fmt_seconds(t.get('start_s', 0.0) + t.get('export_s', 0.0))}, left out of the step times")
        elif t.get("state") == "failed":
            text = f"trace{who}: not written: {t.get('error')}"
        else:
            seen = max(0, (t.get("batches_seen") or 0) - 1)
            text = (f"trace{who}: not recorded: it starts after {t.get('after')} steady batches of an epoch, "
                    f"and the longest epoch had {seen}")
        out += _wrap(text, "  ", "    ")
    return out


def _applied_text(entry: LoaderReport) -> str:
    """What --apply changed on this loader: ``; --apply: num_workers 0 -> 2``."""
    asked, ran = entry.applied.get("asked") or {}, entry.settings or {}
    changed = [f"{k} {asked.get(k)} -> {ran.get(k, '?')}" for k in entry.applied.get("applied") or []]
    if changed:
        return f"; --apply: {', '.join(changed)}"
    if "asked" in entry.applied:
        return "; --apply: unchanged" if entry.applied.get("apply_tables") else "; --apply: no table for it"
    return ""


def _apply_lines(report: WatchReport) -> list[str]:
    """After the run: the --apply tables that found no loader of their role (said, not an error)."""
    plan = report.apply
    if not isinstance(plan, dict) or report.exit_code is None:
        return []
    out = []
    process = plan.get("process")
    if isinstance(process, dict) and process.get("torch_threads") is not None:
        out += _wrap(f"--apply {plan.get('file')}: {_threads_ran(process)}", "  ", "    ")
    for key in plan.get("unmatched") or []:
        what = f"[{key}] settings were not applied: the command iterated no {key} loader" if key else \
            "settings were not applied: the command iterated no DataLoader"
        out += _wrap(f"--apply {plan.get('file')}: its {what}", "  ", "    ")
    return out


def _threads_ran(process: dict) -> str:
    """``torch_threads=1 applied; the epochs ran with 1``, or what else they ran with."""
    k, ran = process["torch_threads"], process.get("torch_threads_ran") or []
    said = f"torch_threads={k} applied (OMP_NUM_THREADS, torch.set_num_threads)"
    if not ran:
        return f"{said}; no epoch recorded torch's thread count"
    if ran == [k]:
        return f"{said}; the epochs ran with {k}"
    return f"{said}; the epochs ran with {' and '.join(map(str, ran))} (the script or its framework set its own)"


def _shm_lines(report: WatchReport) -> list[str]:
    seen = [m for m in report.memory if m.get("shm_peak_used_bytes") is not None]
    if not seen:
        return []
    peak = max(seen, key=lambda m: m["shm_peak_used_bytes"])
    text = f"/dev/shm peak {fmt_bytes(peak['shm_peak_used_bytes'])}"
    if peak.get("shm_total_bytes"):
        text += f" of {fmt_bytes(peak['shm_total_bytes'])} ({peak['shm_peak_used_bytes'] / peak['shm_total_bytes']:.0%})"
    return _wrap(text, "  ", "    ")


def run_header(run: WatchReport) -> list[tuple[str, str]]:
    """(label, text) lines above the run's charts: the command, its outcome, memory peaks, GPU."""
    lines = [("Command", shlex.join(run.command) if run.command else "(not recorded)")]
    outcome = [f"exit {run.exit_code}" if run.exit_code is not None else "exit code unknown",
               f"{run.steps} batches", f"waited for data {fmt_share_fine(run.wait_share)} of the steady time"]
    lines.append(("Run", ", ".join(outcome)))
    peaks = [(name, value) for name, value in (("main", run.main_pss_peak_bytes),
                                               ("workers", run.workers_pss_peak_bytes)) if value is not None]
    memory = [f"{name} {fmt_bytes(value)}" for name, value in peaks]
    if run.shm_peak_bytes is not None:
        memory.append(f"/dev/shm {fmt_bytes(run.shm_peak_bytes)}"
                      + (f" of {fmt_bytes(run.shm_total_bytes)}" if run.shm_total_bytes else ""))
    lines.append(("Memory", "peak PSS " + ", ".join(memory) if memory else "not recorded in this report"))
    if run.gpu_timing is not None:
        idle = [f"{lo.title().split(' (')[0]} {fmt_share_fine(lo.totals.gpu_idle_share)}" for lo in run.loaders
                if lo.totals.gpu_idle_share is not None]
        lines.append(("GPU", "idle while waiting: " + ", ".join(idle) if idle else
                      "idle time not measured" + (" (no CUDA events)" if run.gpu_timing == "unavailable" else "")))
    return lines


def loader_title(loader: LoaderReport) -> str:
    """``loader 1: waited 62.9 %, 238 batches (DataLoader, num_workers=2, ...; rank 0, pid 42)``:
    the numbers first, so that 80 columns show them."""
    short, _, knobs = loader.title().partition(" (")
    where = [f"rank {loader.rank}"] if loader.rank is not None else []
    where += [f"pid {loader.pid}"] if loader.pid is not None else []
    inside = knobs.removesuffix(")") + ("; " + ", ".join(where) if where else "")
    return f"{short}: waited {fmt_share_fine(loader.wait_share)}, {loader.steps} batches" + (f" ({inside})" if inside else "")


def render_opened(run: WatchReport) -> str:
    """A watched run's report opened where the app cannot show it: its header, its loaders, then
    its findings (the Run view's text, without the charts)."""
    lines = [f"loaderdoc: watched run {run.path}"]
    lines += [f"  {label:<8}{text}" for label, text in run_header(run)]
    lines += [f"  {loader_title(lo)}" for lo in run.loaders]
    for finding in run.findings:
        lines += finding_lines(finding)
    return "\n".join(lines) + "\n"


def render_summary(report: WatchReport) -> str:
    """A few lines for stderr: the run, one block per loader, /dev/shm, then the findings."""
    head = _head(report)
    loaders = report.loaders
    if not loaders:  # one line, whatever the width: a run without DataLoaders says only that
        if report.exit_code is None and report.command is not None:
            return f"{head}: no torch DataLoader iterated yet\n"
        return "\n".join([f"{head}: no torch DataLoader was iterated; nothing measured", *_apply_lines(report)]) + "\n"
    if not report.steps and all(entry.init_error or entry.iter_error for entry in loaders):
        out = _wrap(f"{head}: no batch: torch refused or could not start {'every' if len(loaders) > 1 else 'the'} "
                    "DataLoader", "", "  ")
    else:
        out = _wrap(f"{head}: {report.steps} batches, waited for data {fmt_share_fine(report.wait_share)} of the "
                    "steady time", "", "  ")
    busy = busy_text(report)
    if busy:
        out += _wrap(busy, "  ", "    ")
    where = report.several_processes
    for entry in loaders:
        out += _loader_lines(entry, where)
        out += _cpu_lines(entry)
        out += _io_lines(entry)
    out += _shm_lines(report)
    out += _trace_lines(report)
    out += _apply_lines(report)
    for f in report.findings:
        out += finding_lines(f, WIDTH, ok_brief=True)  # an ok finding's evidence is the loader's line above
    return "\n".join(out) + "\n"


def busy_text(report: WatchReport) -> str | None:
    """A run beside other processes' load (``policy.busy`` on a loader's CPU accounting), said first."""
    seen = [(cpu["others_cpus"], cpu["budget_cpus"]) for entry in report.loaders
            if (cpu := entry.cpu) and cpu.get("others_cpus") is not None and cpu.get("budget_cpus")]
    loaded = [(o, b) for o, b in seen if busy(o, b)]
    if not loaded:
        return None
    others, budget = max(loaded)
    return (f"busy machine: other processes kept {others:.1f} of the {budget:g} CPUs busy during the run: its rates "
            "were measured beside that load")


# ---- the accountings as the one line the summary and the app print ----
def cpu_text(cpu: dict[str, Any] | None) -> str | None:
    """Where a loader's CPU time went and the ceiling the CPUs allow (None: not recorded), for the
    summary and the app alike."""
    if not cpu:
        return None
    text = (f"CPU: loading {fmt_seconds(cpu['load_cpu_per_batch_s'])}/batch "
            f"({'CPU work' if cpu['load_is_cpu'] else 'mostly waiting'}), step "
            f"{fmt_seconds(cpu['step_cpu_per_step_s'])} of CPU per {fmt_seconds(cpu['step_wall_per_step_s'])}")
    if cpu.get("used_cpus") is not None:
        text += f"; {cpu['used_cpus']:.1f} of {cpu['budget_cpus']:g} CPUs busy"
        if (cpu.get("spin_cpus") or 0.0) >= 0.05:
            text += f" ({cpu['spin_cpus']:.1f} of them torch's threads spinning)"
        if cpu.get("others_cpus"):
            text += f" (+{cpu['others_cpus']:.1f} other processes)"
    if cpu.get("ceiling_matters"):  # else the CPUs are far from the limit
        # an estimate with its basis: other settings spend other CPU time a batch (a 0-worker run beat the
        # ceiling a 1-worker run of timm's train.py had said, issue 57)
        text += (f"; at most about {cpu['ceiling_per_s']:.1f} steps/s on these CPUs at this run's CPU time a batch "
                 f"(ran {cpu['rate_per_s']:.1f})")
    return text


def io_text(io: dict[str, Any] | None) -> str | None:
    """What a loader read per batch and per second, how much came from the disk, and what that
    says (None: not recorded), for the summary and the app alike."""
    if not io:
        return None
    if not io.get("readable"):
        return f"reads: not measured: {io.get('reason') or '/proc/<pid>/io is not readable'}"
    text = (f"reads: {fmt_bytes(io['rchar_per_batch_bytes'])}/batch in {io['read_calls_per_batch']:.1f} read calls"
            f"{_per_s(io.get('rchar_per_s'))}, {fmt_bytes(io['read_bytes_per_batch'])}/batch from the disk")
    if io.get("read_bytes_per_batch") and io.get("device_share") is not None:
        text += f" ({io['device_share']:.0%}{', ' + fmt_bytes(io['read_bytes_per_s']) + '/s' if io.get('read_bytes_per_s') is not None else ''})"
    return f"{text}: {io['verdict']}"


def _per_s(rate: float | None) -> str:
    return f" ({fmt_bytes(rate)}/s)" if rate is not None else ""
