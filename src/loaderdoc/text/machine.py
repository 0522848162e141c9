"""The machine as the front ends print it: `loaderdoc facts`'s text (the summary, then every
reading with its source), each reading's value as text, and the app's status line."""

from __future__ import annotations

import dataclasses
from typing import Any

from loaderdoc.base.summary import machine_summary
from loaderdoc.base.units import fmt_bytes, fmt_cpus, ranges
from loaderdoc.system.facts import MachineFacts, Reading
from loaderdoc.text.layout import wrap


def machine_status(facts: MachineFacts | None) -> str:
    """One line for the status bar."""
    if facts is None:
        return "reading machine facts..."
    gpus = facts.gpu.devices
    gpu = f"{len(gpus)}x {gpus[0].name.get('GPU')}" if gpus else "no GPU"
    shm = facts.shm.free.get()
    return (f"{fmt_cpus(facts.cpu.budget)} CPUs ({facts.cpu.budget_source}) | RAM {fmt_bytes(facts.memory.budget)}"
            f" | /dev/shm {fmt_bytes(shm)} free | {gpu}")


# ---- every reading and where it was read from (`loaderdoc facts`) ------------------------------
_BYTES = {"memory": {"total", "available", "cgroup_limit", "cgroup_usage", "swap_total", "swap_free"},
          "shm": {"total", "free"}, "gpu_device": {"memory_total", "memory_used"}}
_UNSET = {("cpu", "cgroup_quota"): "none", ("memory", "cgroup_limit"): "none", ("limits", "nofile_soft"): "unlimited",
          ("limits", "nofile_hard"): "unlimited", ("torch", "cuda_build"): "none (CPU build)"}


def reading_sections(facts: MachineFacts) -> list[tuple[str, list[tuple[str, str, Reading]]]]:
    """Every reading of ``facts``, section by section: (title, [(name, value as text, reading)]).

    Names are the JSON keys of ``loaderdoc facts --json``; a reading added to the facts shows up
    here without a change. Sections: CPU, memory, /dev/shm, limits, GPU (then each device),
    torch, distributed, container, platform."""
    out = []
    for title, kind, obj in (("CPU", "cpu", facts.cpu), ("Memory", "memory", facts.memory),
                             (facts.shm.path, "shm", facts.shm), ("Limits", "limits", facts.limits),
                             ("GPU", "gpu", facts.gpu)):
        out.append((title, _readings(kind, obj)))
    for dev in facts.gpu.devices:
        out.append((f"GPU {dev.index}", _readings("gpu_device", dev)))
    for title, kind, obj in (("torch", "torch", facts.torch), ("Distributed", "distributed", facts.distributed),
                             ("Container", "container", facts.container), ("Platform", "platform", facts.platform)):
        out.append((title, _readings(kind, obj)))
    return out


def _readings(kind: str, obj: Any) -> list[tuple[str, str, Reading]]:
    rows = []
    for f in dataclasses.fields(obj):
        reading = getattr(obj, f.name)
        if isinstance(reading, Reading):
            rows.append((f.name, reading_value(kind, f.name, reading), reading))
    return rows


def reading_value(kind: str, name: str, reading: Reading) -> str:
    """A reading's value as text: bytes in binary units, CPU sets counted, "unknown: why"."""
    if not reading.known:
        return f"unknown: {reading.unknown}"
    v = reading.value
    if v is None:
        return _UNSET.get((kind, name), "not set")
    if isinstance(v, bool):
        return "yes" if v else "no"
    if name in _BYTES.get(kind, ()) and isinstance(v, (int, float)):
        return fmt_bytes(v)
    if (kind, name) == ("cpu", "affinity") and isinstance(v, list):
        return f"{len(v)} CPUs ({ranges(v)})"
    if (kind, name) == ("cpu", "cgroup_quota"):
        return f"{fmt_cpus(v)} CPUs"
    if (kind, name) == ("cpu", "flags") and isinstance(v, list):
        return f"{len(v)} flags"
    if (kind, name) == ("gpu_device", "utilization"):
        return f"{v}%"
    return str(v)


VALUE_COLUMN = 16  # sources line up after values this long; a longer value just pushes its source on


def render_facts(facts, width: int = 80) -> str:
    """The summary lines, then each reading with its source, in lines of at most ``width``."""
    out = []
    for topic, line in machine_summary(facts):
        out += wrap(line, width, f"{topic:<9} ", " " * 10)
    out += ["", "Where each value was read from (name  value  <- source):"]
    sections = reading_sections(facts)
    name_w = max(len(name) for _, rows in sections for name, _, _ in rows)
    value_w = max([len(value) for _, rows in sections for _, value, _ in rows if len(value) <= VALUE_COLUMN] + [1])
    indent = " " * (2 + name_w + 2)
    for title, rows in sections:
        out += ["", title]
        for name, value, reading in rows:
            source = f"<- {reading.source}" if reading.source else "<- (source not recorded)"
            line = f"  {name:<{name_w}}  {value:<{value_w}}  {source}"
            if len(line) <= width:
                out.append(line)
                continue
            out += wrap(value, width, f"  {name:<{name_w}}  ", indent)
            out += wrap(reading.source or "(source not recorded)", width, indent + "<- ", indent + "   ")
    return "\n".join(out) + "\n"
