"""The ``loaderdoc.watch/1`` report: the child's records, per-loader totals, findings, the text.

Built from what :mod:`loaderdoc.watching.hook` recorded (``loaderdoc.watch-records/1``); no torch,
no textual. The findings use the :class:`~loaderdoc.advice.findings.Finding` shape ``check --json``
prints. They are built here, not registered in the rule catalogue (``advice.rules``): the
catalogue's rules read machine facts, settings and a probe report through ``Inputs``, and its
docs matrix (``scripts/diagnoses_docs.py``) runs recorded scenarios of those; a real run's
measurements are neither, so these two rules stay beside the evidence they read.

Definitions (every loader, every epoch, summed):

- ``wait_s``: time blocked in ``next()`` for every batch after an epoch's first (the first batch,
  worker start-up included, is ``first_batch_s``, reported apart);
- ``step_s``: time from a batch being returned to the next ``next()`` call;
- ``wait_share = wait_s / (wait_s + step_s)``: the share of the steady loop spent waiting for data.
"""

from __future__ import annotations

import math
import os
import shlex
from typing import Any

from loaderdoc import policy
from loaderdoc.advice.findings import CRITICAL, OK, WARNING, Finding, worst
from loaderdoc.advice.rules.registry import STARVED_CRIT_PCT

WATCH_SCHEMA = "loaderdoc.watch/1"
MIN_STEPS = 20  # steady batches (after the first of an epoch) before a loader is judged
STARVED_RULE = "watch-data-starved"
HEALTHY_RULE = "watch-loader-healthy"
STARVED_THRESHOLD = (
    f"measured in this run: the loop waits >= {policy.NOT_STARVED_PCT:g} % of its steady time for "
    f"batches (loaderdoc.policy.NOT_STARVED_PCT; below it more loading capacity cannot help; critical "
    f">= {STARVED_CRIT_PCT:g} %: it waits more than it computes), over >= {MIN_STEPS} batches"
)


def machine_info() -> dict[str, Any]:
    """The little the report needs about the machine, read without cpuinfo or torch."""
    try:
        affinity: int | None = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        affinity = None
    return {"cpus": os.cpu_count(), "affinity": affinity}


def _share(wait: float, step: float) -> float | None:
    return wait / (wait + step) if wait + step > 0 else None


def loader_entry(raw: dict[str, Any]) -> dict[str, Any]:
    """One DataLoader: its settings, its epochs as recorded, and totals over them."""
    epochs = list(raw.get("epochs", []))
    wait = sum(e.get("wait_s", 0.0) for e in epochs)
    step = sum(e.get("step_s", 0.0) for e in epochs)
    waits = sum(e.get("waits", 0) for e in epochs)
    steps_timed = sum(e.get("steps_timed", 0) for e in epochs)
    first = [e["first_batch_s"] for e in epochs if e.get("first_batch_s") is not None]
    return {
        "loader": raw.get("loader"),
        "class": raw.get("class"),
        "settings": dict(raw.get("settings", {})),
        "epochs": epochs,
        "totals": {
            "epochs": len(epochs),
            "steps": sum(e.get("steps", 0) for e in epochs),
            "waits": waits,
            "wait_s": wait,
            "step_s": step,
            "wall_s": sum(e.get("wall_s", 0.0) for e in epochs),
            "wait_share": _share(wait, step),
            "wait_per_batch_s": wait / waits if waits else None,
            "step_per_batch_s": step / steps_timed if steps_timed else None,
            "first_batch_s": first[0] if first else None,  # the first epoch's (start-up included)
            "later_first_batch_s": max(first[1:]) if len(first) > 1 else None,  # the slowest later one
        },
        "judged": waits >= MIN_STEPS,
    }


def build_report(records: dict[str, Any] | None, *, command: list[str] | None, exit_code: int | None,
                 machine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The report for one run; ``records=None`` when the run iterated no DataLoader."""
    machine = machine if machine is not None else machine_info()
    loaders = [loader_entry(raw) for raw in (records or {}).get("loaders", [])]
    findings: list[Finding] = []
    for entry in loaders:
        finding = judge(entry, machine)
        if finding is not None:
            findings.append(finding)
    findings.sort(key=lambda f: -f.rank)
    wait = sum(e["totals"]["wait_s"] for e in loaders)
    step = sum(e["totals"]["step_s"] for e in loaders)
    from loaderdoc._serde import to_dict

    return {
        "schema": WATCH_SCHEMA,
        "command": list(command) if command is not None else None,
        "exit_code": exit_code,
        "status": worst(findings),
        "steps": sum(e["totals"]["steps"] for e in loaders),
        "wait_share": _share(wait, step),
        "wait_s": wait,
        "step_s": step,
        "loaders": loaders,
        "findings": [to_dict(f) for f in findings],
        "machine": machine,
    }


def describe_loader(entry: dict[str, Any]) -> str:
    """``loader 1 (DataLoader, num_workers=0, batch_size=4)``."""
    s = entry["settings"]
    knobs = [f"{k}={s[k]}" for k in ("num_workers", "batch_size") if s.get(k) is not None]
    if s.get("num_workers"):
        knobs += [f"{k}={s[k]}" for k in ("prefetch_factor", "persistent_workers") if s.get(k) is not None]
    return f"loader {entry['loader']} ({', '.join([entry['class'] or 'iterable', *knobs])})"


def judge(entry: dict[str, Any], machine: dict[str, Any]) -> Finding | None:
    """Starved (a warning, critical past STARVED_CRIT_PCT) or keeps up (ok); None when too few batches."""
    t = entry["totals"]
    share = t["wait_share"]
    if not entry["judged"] or share is None:
        return None
    name = describe_loader(entry)
    pct = 100 * share
    evidence = [
        f"{name}: waited {pct:.1f} % of its steady time for data over {t['waits']} batches "
        f"({_ms(t['wait_per_batch_s'])} per batch waiting, {_ms(t['step_per_batch_s'])} per step)",
    ]
    if pct < policy.NOT_STARVED_PCT:
        return Finding(
            rule_id=HEALTHY_RULE, severity=OK,
            symptom=f"{name} keeps up: the loop waited {pct:.1f} % of the time for data",
            evidence=evidence,
            cause="batches were ready when the step asked for them",
            fix="nothing to change for speed; fewer workers may do as well ('loaderdoc probe' measures)",
            threshold=STARVED_THRESHOLD,
        )
    workers = int(entry["settings"].get("num_workers") or 0)
    needed = _workers_needed(t, workers)
    cpus = machine.get("affinity") or machine.get("cpus")
    suggested = max(workers + 1, needed or 0)
    longest = max(entry["epochs"], key=lambda e: e.get("waits", 0))
    if longest.get("wait_p50_s") is not None:
        evidence.append(f"wait per batch p50 {_ms(longest['wait_p50_s'])}, p95 {_ms(longest['wait_p95_s'])} "
                        f"(epoch {longest.get('epoch')}, {longest.get('waits')} batches)")
    if needed is not None:
        evidence.append(f"one batch takes about {_ms(_load_per_batch(t, workers))} to load with num_workers="
                        f"{workers}: about {needed} workers keep up with the {_ms(t['step_per_batch_s'])} step")
    fix = f"raise num_workers from {workers} to {suggested}"
    if cpus and suggested > cpus:
        fix += (f" (more than the {cpus} CPUs this process may use: if loading is CPU work, make it cheaper "
                "or move it off the step's machine)")
    fix += "; size it on this machine with 'loaderdoc probe'"
    return Finding(
        rule_id=STARVED_RULE, severity=CRITICAL if pct >= STARVED_CRIT_PCT else WARNING,
        symptom=f"{name} is data-starved: the loop waited {pct:.0f} % of the time for batches",
        evidence=evidence,
        cause=("the batch is loaded in the training process, between steps" if workers == 0 else
               f"{policy.workers_text(workers)} load batches slower than the step consumes them"),
        fix=fix,
        settings_change={"num_workers": suggested},
        threshold=STARVED_THRESHOLD,
    )


def _load_per_batch(t: dict[str, Any], workers: int) -> float | None:
    """One batch's load time: in the loop (0 workers) it is the wait; n starved workers deliver a
    batch every wait + step, so each takes n times that."""
    wait, step = t["wait_per_batch_s"], t["step_per_batch_s"]
    if wait is None or step is None:
        return None
    return wait if workers == 0 else workers * (wait + step)


def _workers_needed(t: dict[str, Any], workers: int) -> int | None:
    load, step = _load_per_batch(t, workers), t["step_per_batch_s"]
    if load is None or not step:
        return None
    return max(1, math.ceil(round(load / step, 6)))  # 4.0000001 workers are 4


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    ms = 1000 * seconds
    return f"{ms:.2f} ms" if ms < 1 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def _pct(share: float | None) -> str:
    return "?" if share is None else f"{100 * share:.1f} %"


def render_summary(report: dict[str, Any]) -> str:
    """A few lines for stderr: one per loader, then the findings."""
    from loaderdoc.summary import finding_lines

    command = report.get("command")
    head = "loaderdoc watch" + (f": {shlex.join(command)}" if command else "")
    if report.get("exit_code") is not None:
        head += f" (exit {report['exit_code']})"
    loaders = report["loaders"]
    if not loaders:
        return f"{head}: no torch DataLoader was iterated; nothing measured\n"
    out = [f"{head}: {report['steps']} batches, waited for data {_pct(report['wait_share'])} of the steady time"]
    for entry in loaders:
        t = entry["totals"]
        longest = max(entry["epochs"], key=lambda e: e.get("waits", 0))  # its percentiles are shown
        line = (f"  {describe_loader(entry)}: {t['epochs']} epoch{'s' if t['epochs'] != 1 else ''}, "
                f"{t['steps']} batches, wait {_pct(t['wait_share'])}")
        if t["waits"]:
            line += (f" ({_ms(t['wait_per_batch_s'])}/batch, p50 {_ms(longest.get('wait_p50_s'))}, "
                     f"p95 {_ms(longest.get('wait_p95_s'))}; step {_ms(t['step_per_batch_s'])})")
        line += f", first batch {_ms(t['first_batch_s'])}"
        if not entry["judged"]:
            line += f"; too few batches to judge (< {MIN_STEPS})"
        out.append(line)
    for f in report["findings"]:
        out.extend(finding_lines(f))
    return "\n".join(out) + "\n"
