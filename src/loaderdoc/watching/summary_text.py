"""The text ``loaderdoc watch`` prints on stderr: the run, one block per loader, memory, findings.

Every line fits 80 columns (long ones wrap under their indent), so a training log stays readable;
the one exception is the single line of a run without DataLoaders (its command elided to 40 chars).
Reads only the report dict (``loaderdoc.watch/1``); no torch, no textual.
"""

from __future__ import annotations

import shlex
import textwrap
from typing import Any

from loaderdoc.policy import WATCH_MIN_BATCHES
from loaderdoc.summary import finding_lines
from loaderdoc.units import fmt_bytes, fmt_seconds, fmt_share_fine

WIDTH = 80
COMMAND_CHARS = 40  # the command in the head line, elided past this


def _wrap(text: str, indent: str, more: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, initial_indent=indent, subsequent_indent=more,
                         break_on_hyphens=False, break_long_words=False) or [indent.rstrip()]


def _head(report: dict[str, Any]) -> str:
    command = report.get("command")
    head = "loaderdoc watch"
    if report.get("merged_from"):
        head += f": {len(report['merged_from'])} reports merged"
    if command:
        text = shlex.join(command)
        head += ": " + (text if len(text) <= COMMAND_CHARS else text[:COMMAND_CHARS - 3] + "...")
    if report.get("exit_code") is not None:
        head += f" (exit {report['exit_code']})"
    elif command is not None:
        head += " (still running)"
    return head


def describe_loader(entry: dict[str, Any], *, where: bool = False) -> str:
    """``train loader (DataLoader, num_workers=0, batch_size=4)`` where the framework hook that
    built it said its role, else ``loader 1 (...)``; ``where`` adds the rank (or pid)."""
    s = entry["settings"]
    knobs = [f"{k}={s[k]}" for k in ("num_workers", "batch_size") if s.get(k) is not None]
    if s.get("num_workers"):
        knobs += [f"{k}={s[k]}" for k in ("prefetch_factor", "persistent_workers") if s.get(k) is not None]
    head = []
    if where:
        head.append(f"rank {entry['rank']}" if entry.get("rank") is not None else f"pid {entry.get('pid')}")
    role = entry.get("role")
    name = f"{role} loader" if isinstance(role, str) and role else f"loader {entry['loader']}"
    return f"{name} ({', '.join([*head, entry['class'] or 'iterable', *knobs])})"


def _loader_lines(entry: dict[str, Any], where: bool) -> list[str]:
    t = entry["totals"]
    longest = max(entry["epochs"], key=lambda e: e.get("waits", 0), default={})  # its percentiles are shown
    text = (f"{describe_loader(entry, where=where)}: {t['epochs']} epoch{'s' if t['epochs'] != 1 else ''}, "
            f"{t['steps']} batches, wait {fmt_share_fine(t['wait_share'])}")
    if t["waits"]:
        text += (f" ({fmt_seconds(t.get('wait_per_batch_s'))}/batch, p50 {fmt_seconds(longest.get('wait_p50_s'))}, "
                 f"p95 {fmt_seconds(longest.get('wait_p95_s'))}; step {fmt_seconds(t.get('step_per_batch_s'))})")
    text += f", first batch {fmt_seconds(t.get('first_batch_s'))}"
    if t.get("later_first_batch_s") is not None:
        text += f" (later epochs up to {fmt_seconds(t['later_first_batch_s'])})"
    if t.get("workers_pss_max_bytes") is not None and entry["settings"].get("num_workers"):
        text += f"; workers' memory peak {fmt_bytes(t['workers_pss_max_bytes'])} (PSS)"
    if t.get("gpu_idle_s") is not None:
        text += f"; GPU idle while waiting {t['gpu_idle_s']:.1f} s ({fmt_share_fine(t['gpu_idle_share'])})"
    if not entry["judged"]:
        text += f"; too few batches to judge (< {WATCH_MIN_BATCHES})"
    text += _applied_text(entry)
    return _wrap(text, "  ", "    ")


def _cpu_lines(entry: dict[str, Any]) -> list[str]:
    text = cpu_text(entry.get("cpu")) if entry.get("judged") else None
    return _wrap(text, "    ", "    ") if text else []


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
        if cpu.get("others_cpus"):
            text += f" (+{cpu['others_cpus']:.1f} other processes)"
    if cpu.get("ceiling_matters"):  # else the CPUs are far from the limit
        text += f"; at most about {cpu['ceiling_per_s']:.1f} steps/s on these CPUs (ran {cpu['rate_per_s']:.1f})"
    return text


def _io_lines(entry: dict[str, Any]) -> list[str]:
    text = io_text(entry.get("io"))
    return _wrap(text, "    ", "    ") if text else []


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


def _trace_lines(report: dict[str, Any]) -> list[str]:
    """--trace: each process's trace file and what profiling cost, or why there is none."""
    out = []
    traces = report.get("traces") or []
    for t in traces:
        who = f" (pid {t.get('pid')})" if len(traces) > 1 else ""
        if t.get("state") == "written":
            text = (f"trace{who}: {t['path']}: {t['steps']} steps of loader {t['loader']} from batch "
                    f"{t['from_batch']} (epoch {t['epoch']}), the data waits marked 'loaderdoc: data wait'")
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


def _applied_text(entry: dict[str, Any]) -> str:
    """What --apply changed on this loader: ``; --apply: num_workers 0 -> 2``."""
    asked, ran = entry.get("asked") or {}, entry.get("settings") or {}
    changed = [f"{k} {asked.get(k)} -> {ran.get(k, '?')}" for k in entry.get("applied") or []]
    if changed:
        return f"; --apply: {', '.join(changed)}"
    if "asked" in entry:
        return "; --apply: unchanged" if entry.get("apply_tables") else "; --apply: no table for it"
    return ""


def _apply_lines(report: dict[str, Any]) -> list[str]:
    """After the run: the --apply tables that found no loader of their role (said, not an error)."""
    plan = report.get("apply")
    if not isinstance(plan, dict) or report.get("exit_code") is None:
        return []
    out = []
    for key in plan.get("unmatched") or []:
        what = f"[{key}] settings were not applied: the command iterated no {key} loader" if key else \
            "settings were not applied: the command iterated no DataLoader"
        out += _wrap(f"--apply {plan.get('file')}: its {what}", "  ", "    ")
    return out


def _shm_lines(report: dict[str, Any]) -> list[str]:
    seen = [m for m in report.get("memory") or [] if m.get("shm_peak_used_bytes") is not None]
    if not seen:
        return []
    peak = max(seen, key=lambda m: m["shm_peak_used_bytes"])
    text = f"/dev/shm peak {fmt_bytes(peak['shm_peak_used_bytes'])}"
    if peak.get("shm_total_bytes"):
        text += f" of {fmt_bytes(peak['shm_total_bytes'])} ({peak['shm_peak_used_bytes'] / peak['shm_total_bytes']:.0%})"
    return _wrap(text, "  ", "    ")


def render_summary(report: dict[str, Any]) -> str:
    """A few lines for stderr: the run, one block per loader, /dev/shm, then the findings."""
    head = _head(report)
    loaders = report["loaders"]
    if not loaders:  # one line, whatever the width: a run without DataLoaders says only that
        if report.get("exit_code") is None and report.get("command") is not None:
            return f"{head}: no torch DataLoader iterated yet\n"
        return "\n".join([f"{head}: no torch DataLoader was iterated; nothing measured", *_apply_lines(report)]) + "\n"
    out = _wrap(f"{head}: {report['steps']} batches, waited for data {fmt_share_fine(report['wait_share'])} of the steady "
                "time", "", "  ")
    where = len({(e.get("source"), e.get("pid")) for e in loaders}) > 1  # source: a merged report's
    for entry in loaders:
        out += _loader_lines(entry, where)
        out += _cpu_lines(entry)
        out += _io_lines(entry)
    out += _shm_lines(report)
    out += _trace_lines(report)
    out += _apply_lines(report)
    for f in report["findings"]:
        out += finding_lines(f, WIDTH, ok_brief=True)  # an ok finding's evidence is the loader's line above
    return "\n".join(out) + "\n"
