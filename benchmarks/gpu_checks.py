"""The GPU acceptance run's judging: what each step measured against what it should be, with the
tolerance stated, the table and the exit code. Pure: no torch, no CUDA, no subprocess.

``benchmarks/gpu_acceptance.py`` runs the steps on a CUDA machine and writes a results folder;
:func:`judge_folder` reads one back (a fresh run, or a recording replayed by ``--replay``), so the
whole of this runs in CI without a GPU (``tests/test_gpu_acceptance.py``).

A results folder::

    run.json                  what ran: torch, CUDA, the steps, the exit code (schema below)
    facts.json                ``loaderdoc facts --json``: a MachineFacts fixture of this machine
    nvidia-smi-before.csv     ``nvidia-smi --query-gpu=SMI_FIELDS`` just before ``facts``...
    nvidia-smi-after.csv      ... and just after (a PCIe link changes speed with the load)
    figures/<step>.json       the figures each step measured, or {"error": why it measured none}
    reports/                  the raw reports: watch, probe, tune (for people, not judged)
    logs/<step>.log           each step's output
    checks.json, table.txt    the judgement
"""

from __future__ import annotations

import csv
import io
import json
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SCHEMA = "loaderdoc.gpu_acceptance/1"
SYNTHETIC = "synthetic, not measured"  # run.json's "synthetic" for a hand-written folder

OK = "ok"
MISMATCH = "MISMATCH"
NOT_MEASURED = "NOT MEASURED"

EXIT_PASSED = 0  # every check within its tolerance
EXIT_FAILED = 1  # a check beyond its tolerance, or a step that measured nothing
EXIT_USAGE = 3  # bad arguments, an --out folder in use, a --replay folder that is not a results folder
EXIT_SKIPPED = 4  # no CUDA here: nothing measured
EXIT_INTERRUPTED = 130

MiB = 2**20

# nvidia-smi --query-gpu fields, in this order; the first two match rows to NVML's devices
SMI_FIELDS = ("index", "uuid", "name", "memory.total", "driver_version", "pcie.link.gen.current",
              "pcie.link.width.current", "pcie.link.gen.max", "pcie.link.width.max", "mig.mode.current")
SMI_INTS = {"index", "memory.total", "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max",
            "pcie.link.width.max"}

# PCIe, per lane and direction, after line encoding (8b/10b up to Gen2, 128b/130b Gen3-5, FLIT Gen6)
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}

# the tolerances, each stated in the table beside its check
STEP_KERNEL_REL = 0.05  # the calibrated spin kernel (CUDA events) against --step-ms
STEP_HOST_REL, STEP_HOST_ABS_MS = 0.10, 0.5  # the step as the probe times it (copy, kernel, sync)
BUSY_MIN_PCT = 90.0  # NVML utilisation while steps run back to back
HALF_DUTY_PCT, HALF_DUTY_TOL_PCT = 50.0, 15.0  # ... while each step is followed by as long a pause
LINK_OVER = 1.05  # no copy is faster than the link's nominal rate
LINK_UNDER = 0.50  # the large pinned copy reaches at least this share of it
PINNED_SLACK = 1.10  # a pinned copy takes no longer than a pageable one
IDLE_REL, IDLE_ABS_PER_WAIT_MS = 0.05, 0.2  # watch's GPU idle in waits against the loop's own CUDA events
STARVED_MIN_IDLE, FED_MAX_IDLE = 0.25, 0.15  # the loops' GPU idle share of their span
TUNE_MIN_GAIN, TUNE_MIN_WORKERS = 1.5, 2  # the job as written (0 workers) is starved by design


class FolderError(ValueError):
    """A --replay folder that is not a results folder, or a file in it that cannot be read."""


@dataclass
class Check:
    step: str
    what: str
    expected: str
    measured: str
    tolerance: str
    status: str  # OK, MISMATCH, NOT_MEASURED
    note: str = ""  # why nothing was measured

    @property
    def ok(self) -> bool:
        return self.status == OK


def _num(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        text = f"{value:.3g}" if abs(value) < 10 else f"{value:.1f}" if abs(value) < 1000 else f"{value:.0f}"
    else:
        text = str(value)
    return f"{text} {unit}".rstrip()


def missing(step: str, what: str, expected: str, tolerance: str, why: str) -> Check:
    return Check(step, what, expected, "-", tolerance, NOT_MEASURED, why)


def equal(step: str, what: str, expected: Any, got: Any, *, why: str = "not read") -> Check:
    if got is None:
        return missing(step, what, _fmt(expected), "exact", why)
    return Check(step, what, _fmt(expected), _fmt(got), "exact", OK if got == expected else MISMATCH)


def within(step: str, what: str, target: float, got: float | None, *, rel: float = 0.0, abs_: float = 0.0,
           unit: str = "", why: str = "not measured") -> Check:
    """|got - target| <= rel * target + abs_."""
    parts = ([f"±{rel:.0%}"] if rel else []) + ([f"±{_fmt(abs_, unit)}"] if abs_ else [])
    tolerance = " ".join(parts) or "exact"
    if got is None:
        return missing(step, what, _fmt(target, unit), tolerance, why)
    good = abs(got - target) <= rel * abs(target) + abs_ + 1e-12
    return Check(step, what, _fmt(target, unit), _fmt(got, unit), tolerance, OK if good else MISMATCH)


def bound(step: str, what: str, got: float | None, *, low: float | None = None, high: float | None = None,
          unit: str = "", why: str = "not measured", tolerance: str = "") -> Check:
    """low <= got <= high (either side open)."""
    expected = (f">= {_fmt(low, unit)}" if high is None else f"<= {_fmt(high, unit)}" if low is None
                else f"{_fmt(low, unit)} .. {_fmt(high, unit)}")
    if got is None:
        return missing(step, what, expected, tolerance or "limit", why)
    good = (low is None or got >= low) and (high is None or got <= high)
    return Check(step, what, expected, _fmt(got, unit), tolerance or "limit", OK if good else MISMATCH)


# ---- nvidia-smi ----------------------------------------------------------------------------------

def smi_command() -> list[str]:
    return ["nvidia-smi", f"--query-gpu={','.join(SMI_FIELDS)}", "--format=csv,noheader,nounits"]


def _smi_value(field: str, raw: str) -> Any:
    text = raw.strip()
    if not text or text.strip("[]").lower() in ("n/a", "not supported", "unknown error", "insufficient permissions"):
        return None
    if field in SMI_INTS:
        try:
            return int(float(text))
        except ValueError:
            raise ValueError(f"{field} is {text!r}, not a number") from None
    if field == "mig.mode.current":
        if text.lower() in ("enabled", "disabled"):
            return text.lower() == "enabled"
        raise ValueError(f"mig.mode.current is {text!r}, not Enabled/Disabled/[N/A]")
    return text


def parse_smi(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=SMI_FIELDS --format=csv,noheader,nounits`` -> one dict per GPU
    ("[N/A]", "[Not Supported]" -> None; numbers as int; MIG mode as bool). ValueError naming the
    line for anything else."""
    rows = []
    for number, cells in enumerate(csv.reader(io.StringIO(text), skipinitialspace=True), 1):
        if not cells or not "".join(cells).strip():
            continue
        if len(cells) != len(SMI_FIELDS):
            raise ValueError(f"line {number}: {len(cells)} fields, expected {len(SMI_FIELDS)} ({','.join(SMI_FIELDS)})")
        try:
            rows.append({field: _smi_value(field, cell) for field, cell in zip(SMI_FIELDS, cells, strict=True)})
        except ValueError as exc:
            raise ValueError(f"line {number}: {exc}") from None
    return rows


def _reading(block: dict | None, name: str) -> tuple[Any, str | None]:
    """(value, why unknown) of a MachineFacts reading."""
    reading = (block or {}).get(name) or {}
    return reading.get("value"), reading.get("unknown")


def judge_facts(facts: dict | None, smi_before: str | None, smi_after: str | None, *, error: str | None = None) -> list[Check]:
    """``loaderdoc facts --json``'s NVML readings against nvidia-smi, field by field. The current
    PCIe link is read by nvidia-smi just before and just after the facts: either reading matches
    (the link trains up and down with the load)."""
    step = "facts"
    if error or facts is None or smi_before is None:
        return [missing(step, "NVML facts vs nvidia-smi", "equal", "exact", error or "no facts or nvidia-smi output")]
    try:
        before = parse_smi(smi_before)
        after = parse_smi(smi_after) if smi_after is not None else before
    except ValueError as exc:
        return [missing(step, "NVML facts vs nvidia-smi", "equal", "exact", f"nvidia-smi output: {exc}")]
    gpu = facts.get("gpu") or {}
    nvml, why = _reading(gpu, "nvml")
    if nvml is not True:
        return [missing(step, "NVML read by loaderdoc", "yes", "exact", why or "NVML not read")]
    count, why = _reading(gpu, "total_count")
    checks = [equal(step, "GPU count", len(before), count, why=why or "not read")]
    driver, driver_why = _reading(gpu, "driver_version")
    after_by_index = {row["index"]: row for row in after}
    by_index = {row["index"]: (row, after_by_index.get(row["index"], row)) for row in before}
    for device in gpu.get("devices") or []:
        index = device.get("index")
        row, row_after = by_index.get(index, (None, None))
        label = f"GPU {index}"
        if row is None:
            checks.append(missing(step, f"{label}: in nvidia-smi", "a row", "exact", f"no row with index {index}"))
            continue
        name, why = _reading(device, "name")
        checks.append(equal(step, f"{label} name", row["name"], name, why=why or "not read"))
        total, why = _reading(device, "memory_total")
        checks.append(within(step, f"{label} memory", row["memory.total"],
                             total / MiB if _num(total) is not None else None, abs_=1, unit="MiB", why=why or "not read"))
        checks.append(equal(step, f"{label} driver", row["driver_version"], driver, why=driver_why or "not read"))
        for field, key in (("pcie.link.gen.current", "pcie_gen_current"), ("pcie.link.width.current", "pcie_width_current")):
            value, why = _reading(device, key)
            seen = sorted({v for v in (row[field], row_after[field]) if v is not None})
            what = f"{label} {field.removeprefix('pcie.link.')}"
            if value is None or not seen:
                checks.append(missing(step, what, "/".join(map(str, seen)) or "-", "either reading", why or "not read"))
                continue
            checks.append(Check(step, what, " or ".join(map(str, seen)), _fmt(value), "either reading",
                                OK if value in seen else MISMATCH))
        for field, key in (("pcie.link.gen.max", "pcie_gen_max"), ("pcie.link.width.max", "pcie_width_max")):
            value, why = _reading(device, key)
            checks.append(equal(step, f"{label} {field.removeprefix('pcie.link.')}", row[field], value,
                                why=why or "not read"))
        mig, why = _reading(device, "mig_mode")
        # nvidia-smi's [N/A]: no MIG on this GPU, which NVML's "not supported" records as off
        checks.append(equal(step, f"{label} MIG", bool(row["mig.mode.current"]), mig, why=why or "not read"))
    if not gpu.get("devices"):
        checks.append(missing(step, "visible GPUs", "at least one", "exact", "facts list no GPU"))
    return checks


# ---- the CUDA consumer ----------------------------------------------------------------------------

def judge_consumer(fig: dict) -> list[Check]:
    """The probe's CUDA consumer: it is the one that runs, its calibrated kernel lasts --step-ms,
    the step as the probe times it too, and NVML sees the GPU busy while steps run."""
    step = "consumer"
    if fig.get("error"):
        return [missing(step, "CUDA consumer", "cuda-kernel", "exact", fig["error"])]
    checks = [equal(step, "consumer kind", "cuda-kernel", fig.get("kind"))]
    for run in fig.get("steps") or []:
        asked = float(run["asked_ms"])
        checks.append(within(step, f"kernel at --step-ms {asked:g}", asked, _num(run.get("kernel_ms")),
                             rel=STEP_KERNEL_REL, unit="ms"))
        checks.append(within(step, f"step at --step-ms {asked:g}", asked, _num(run.get("host_ms")),
                             rel=STEP_HOST_REL, abs_=STEP_HOST_ABS_MS, unit="ms"))
    if not fig.get("steps"):
        checks.append(missing(step, "calibrated steps", "timed", "-", "no step was timed"))
    for key, what in (("busy", "busy share, back to back"), ("half", "busy share, 50 % duty")):
        run = fig.get(key) or {}
        samples = [s for s in run.get("util_pct") or [] if _num(s) is not None]
        got = statistics.fmean(samples) if samples else None
        why = run.get("error") or "no NVML utilisation sample"
        if key == "busy":
            checks.append(bound(step, what, got, low=BUSY_MIN_PCT, unit="%", why=why))
        else:
            checks.append(within(step, what, HALF_DUTY_PCT, got, abs_=HALF_DUTY_TOL_PCT, unit="%", why=why))
    return checks


# ---- pinned vs pageable ---------------------------------------------------------------------------

def nominal_gbps(gen: Any, width: Any) -> float | None:
    """The PCIe link's nominal rate, one direction, GB/s; None for an unknown generation."""
    per_lane = PCIE_LANE_GBPS.get(gen) if isinstance(gen, int) else None
    return per_lane * width if per_lane is not None and isinstance(width, int) and width > 0 else None


def gbps(nbytes: float, ms: float | None) -> float | None:
    return nbytes / 1e9 / (ms / 1e3) if ms else None


def judge_h2d(fig: dict) -> list[Check]:
    """Pinned and pageable copies of a batch at each size (the medians of the repeats) against the
    PCIe link's nominal rate: none faster than the link, the large pinned one at least half of it,
    and pinned no slower than pageable."""
    step = "h2d"
    if fig.get("error"):
        return [missing(step, "pinned vs pageable copies", "timed", "-", fig["error"])]
    link = fig.get("link") or {}
    nominal = nominal_gbps(link.get("gen"), link.get("width"))
    link_text = f"Gen{link.get('gen')} x{link.get('width')}"
    why_link = f"no nominal rate for the link ({link_text})"
    checks = []
    sizes = sorted(fig.get("sizes") or [], key=lambda s: s.get("bytes", 0))
    for n, size in enumerate(sizes):
        nbytes = float(size["bytes"])
        pinned = _median(size.get("pinned_ms"))
        pageable = _median(size.get("pageable_ms"))
        label = f"{nbytes / MiB:.1f} MiB"
        rate = gbps(nbytes, pinned)
        checks.append(bound(step, f"pinned {label} vs {link_text}", rate if nominal else None,
                            high=nominal * LINK_OVER if nominal else None, unit="GB/s",
                            why=why_link if rate is not None else "not timed", tolerance=f"+{LINK_OVER - 1:.0%}"))
        if n == len(sizes) - 1 and len(sizes) > 1:
            checks.append(bound(step, f"pinned {label}, share of the link", rate / nominal if rate and nominal else None,
                                low=LINK_UNDER, why=why_link if rate is not None else "not timed"))
        checks.append(bound(step, f"pinned/pageable time {label}",
                            pinned / pageable if pinned is not None and pageable else None,
                            high=PINNED_SLACK, why="not timed", tolerance=f"+{PINNED_SLACK - 1:.0%}"))
    if len(sizes) < 2:
        checks.append(missing(step, "two batch sizes", "2", "exact", f"{len(sizes)} timed"))
    return checks


def _median(values: Any) -> float | None:
    usable = [float(v) for v in values or [] if _num(v) is not None and v > 0]
    return statistics.median(usable) if usable else None


# ---- loaderdoc watch: GPU idle --------------------------------------------------------------------

def watch_figures(report: dict | None, loop: dict | None, exit_code: int | None) -> dict:
    """What the judge needs from a watch report and the loop's own CUDA-event timings."""
    report = report or {}
    loaders = report.get("loaders") or []
    main = max(loaders, key=lambda entry: (entry.get("totals") or {}).get("waits", 0), default={})
    epochs = main.get("epochs") or []
    totals = main.get("totals") or {}

    def summed(key: str) -> Any:
        values = [e.get(key) for e in epochs]
        return sum(values) if values and all(isinstance(v, int) for v in values) else None

    return {"exit_code": exit_code, "timing": (report.get("gpu") or {}).get("timing"),
            "timing_reason": (report.get("gpu") or {}).get("reason"),
            "hook_idle_s": totals.get("gpu_idle_s"), "hook_wait_s": totals.get("wait_s"),
            "waits_timed": summed("gpu_waits_timed"), "waits_unresolved": summed("gpu_waits_unresolved"),
            "loop": loop}


def judge_watch(name: str, fig: dict, *, starved: bool) -> list[Check]:
    """watch's GPU idle (CUDA events around each wait) against the loop's own events around the
    same ``next()`` calls, and within the GPU's whole idle as the loop's step events give it (the
    time from the end of its first step to the end of its last, less its steps' copies and
    kernels). The whole idle also holds the loop's own launching between steps, which is no data
    wait: on a fed loop synced each step that part is as large as the waits themselves."""
    step = name
    if fig.get("error"):
        return [missing(step, "GPU idle from CUDA events", "timed", "-", fig["error"])]
    loop = fig.get("loop") or {}
    checks = [equal(step, "command's exit code", 0, fig.get("exit_code"), why="the command did not end"),
              equal(step, "watch's GPU timing", "cuda-events", fig.get("timing"),
                    why=fig.get("timing_reason") or "no GPU block in the report")]
    waits = loop.get("steps", 0) - 1 if loop.get("steps") else None
    checks.append(equal(step, "waits timed", waits, fig.get("waits_timed"), why="not in the report"))
    checks.append(equal(step, "waits unresolved", 0, fig.get("waits_unresolved"), why="not in the report"))
    wait_idle = _num(loop.get("wait_idle_ms"))
    total_idle = _num(loop.get("idle_ms"))
    hook_idle = _num(fig.get("hook_idle_s"))
    hook_ms = hook_idle * 1000 if hook_idle is not None else None
    slack = IDLE_ABS_PER_WAIT_MS * (waits or 0)
    what = "GPU idle in waits: watch vs the loop's"
    if wait_idle is None:
        checks.append(missing(step, what, "the loop's", f"±{IDLE_REL:.0%}", "the loop timed no wait"))
    else:
        checks.append(within(step, what, wait_idle, hook_ms, rel=IDLE_REL, abs_=slack, unit="ms",
                             why="no GPU idle in the report"))
    if total_idle is None:
        checks.append(missing(step, "watch's idle within the GPU's whole idle", "the loop's", "limit",
                              "the loop timed nothing"))
    else:
        checks.append(bound(step, "watch's idle within the GPU's whole idle", hook_ms,
                            high=total_idle * (1 + IDLE_REL) + slack, unit="ms", why="no GPU idle in the report",
                            tolerance=f"+{IDLE_REL:.0%} +{_fmt(slack, 'ms')}"))
    span = _num(loop.get("span_ms"))
    share = total_idle / span if total_idle is not None and span else None
    if starved:
        checks.append(bound(step, "the loop's GPU idle share", share, low=STARVED_MIN_IDLE, why="the loop timed nothing"))
    else:
        checks.append(bound(step, "the loop's GPU idle share", share, high=FED_MAX_IDLE, why="the loop timed nothing"))
    return checks


# ---- loaderdoc probe ------------------------------------------------------------------------------

def probe_figures(report: dict | None, exit_code: int | None, step_ms: float) -> dict:
    report = report or {}
    configs = []
    for result in report.get("results") or []:
        if result.get("status") != "ok":
            continue
        settings = result.get("settings") or {}
        pinned = bool(settings.get("pin_memory"))
        configs.append({"num_workers": settings.get("num_workers"), "pin_memory": pinned,
                        "step_ms_achieved": result.get("step_ms_achieved"),
                        "h2d_ms": result.get("h2d_pinned_ms" if pinned else "h2d_pageable_ms"),
                        "h2d_pinned_ms": result.get("h2d_pinned_ms")})
    workload = report.get("workload") or {}
    return {"exit_code": exit_code, "device": report.get("device"), "consumer": workload.get("consumer"),
            "step_ms": step_ms, "configs": configs, "stopped": report.get("stopped")}


def judge_probe(fig: dict) -> list[Check]:
    """`loaderdoc probe image` on CUDA: every measuring process ran the CUDA consumer (only it
    times host-to-device copies; the sleep it falls back to times none), each configuration's
    step lasted --step-ms beside its batch's copy, and pin_memory was tried."""
    step = "probe"
    if fig.get("error"):
        return [missing(step, "loaderdoc probe image", "measured", "-", fig["error"])]
    configs = fig.get("configs") or []
    asked = float(fig.get("step_ms") or 0.0)
    checks = [equal(step, "exit code", 0, fig.get("exit_code"), why="did not end"),
              equal(step, "device", "cuda", fig.get("device"), why="no report"),
              equal(step, "consumer", "cuda-kernel", fig.get("consumer"), why="no report")]
    timed = [c for c in configs if _num(c.get("h2d_pinned_ms")) is not None]
    checks.append(equal(step, "configurations with GPU copies", len(configs), len(timed) if configs else None,
                        why="no configuration measured"))
    worst = None
    for c in configs:
        achieved, h2d = _num(c.get("step_ms_achieved")), _num(c.get("h2d_ms")) or 0.0
        if achieved is None:
            continue
        step_only = achieved - h2d
        if worst is None or abs(step_only - asked) > abs(worst - asked):
            worst = step_only
    checks.append(within(step, "step less its copy (worst)", asked, worst, rel=STEP_HOST_REL,
                         abs_=STEP_HOST_ABS_MS, unit="ms", why="no step time measured"))
    checks.append(equal(step, "pin_memory=True measured", True, any(c.get("pin_memory") for c in configs) if configs
                        else None, why="no configuration measured"))
    return checks


# ---- loaderdoc tune -------------------------------------------------------------------------------

def tune_figures(report: dict | None, exit_code: int | None) -> dict:
    report = report or {}
    trials = [{"number": t.get("number"), "status": t.get("status"), "steps_per_s": t.get("steps_per_s"),
               "num_workers": (t.get("settings") or {}).get("num_workers"), "step_is_cpu": t.get("step_is_cpu"),
               "step_ms": t.get("step_ms")} for t in report.get("trials") or []]
    pick = report.get("pick") or None
    return {"exit_code": exit_code, "trials": trials, "stopped": report.get("stopped"),
            "pick": {"num_workers": (pick.get("settings") or {}).get("num_workers"), "gain": pick.get("gain"),
                     "steps_per_s": pick.get("steps_per_s")} if pick else None}


def judge_tune(fig: dict) -> list[Check]:
    """`loaderdoc tune` on a small CUDA training job written with num_workers=0 and a loader that
    costs far more than its GPU step: the job's own settings measured, its step seen as GPU work
    (CUDA events), and a pick with workers that pays."""
    step = "tune"
    if fig.get("error"):
        return [missing(step, "loaderdoc tune", "a pick", "-", fig["error"])]
    trials = fig.get("trials") or []
    measured = [t for t in trials if t.get("status") in ("ok", "too-short") and t.get("steps_per_s")]
    checks = [bound(step, "exit code (0 or 1)", fig.get("exit_code"), low=0, high=1, why="did not end"),
              equal(step, "trial 1 (as written) measured", True, bool(trials) and trials[0] in measured
                    if trials else None, why="no trial")]
    gpu_steps = [t.get("step_is_cpu") is False for t in measured]
    checks.append(equal(step, "step seen as GPU work", True, all(gpu_steps) if gpu_steps else None,
                        why="no trial measured"))
    pick = fig.get("pick") or {}
    checks.append(bound(step, "pick's workers", _num(pick.get("num_workers")), low=TUNE_MIN_WORKERS,
                        why="no pick"))
    checks.append(bound(step, "pick's gain over as written", _num(pick.get("gain")), low=TUNE_MIN_GAIN,
                        unit="x", why="no pick"))
    return checks


# ---- the folder, the table, the exit code ---------------------------------------------------------

def _read_json(path: Path) -> Any:
    from loaderdoc.base.textfile import first_line, read_bounded

    try:
        return json.loads(read_bounded(path))
    except FileNotFoundError:
        return None
    except json.JSONDecodeError as exc:
        raise FolderError(f"{path}: line {exc.lineno}: not valid JSON: {exc.msg}") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise FolderError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or first_line(exc)})") from None


def _read_text(path: Path) -> str | None:
    from loaderdoc.base.textfile import first_line, read_bounded

    try:
        return read_bounded(path)
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise FolderError(f"{path}: cannot read it ({getattr(exc, 'strerror', None) or first_line(exc)})") from None


def read_run(folder: Path) -> dict:
    """run.json of a results folder; FolderError when the folder is not one."""
    if not folder.is_dir():
        raise FolderError(f"{folder}: no such folder; give a folder gpu_acceptance.py --out wrote")
    run = _read_json(folder / "run.json")
    if not isinstance(run, dict) or run.get("schema") != SCHEMA:
        raise FolderError(f"{folder}: not a GPU acceptance results folder (no run.json of schema {SCHEMA})")
    return run


def jpeg_figures(step: dict | None, report: dict | None, probe_code: int | None, job: dict | None,
                 job_code: int | None) -> dict:
    """The probe over JPEGs and the real job with its pick (issue 48), side by side."""
    report = report or {}
    results = report.get("results") or []
    pinned = [r for r in results if (r.get("settings") or {}).get("pin_memory")]
    prediction = report.get("prediction") or {}
    recommended = report.get("recommended") or {}
    return {"step_alone_ms": (step or {}).get("step_ms"), "probe_exit_code": probe_code,
            "device": report.get("device"), "configs": len(results),
            "failed": [f"{(r.get('settings') or {}).get('num_workers')} workers: {r.get('error')}"
                       for r in results if r.get("status") != "ok"],
            "pinned_ok": sum(r.get("status") == "ok" for r in pinned), "pinned": len(pinned),
            "blamed": sorted({f.get("rule_id") for f in report.get("findings") or []} &
                             {"worker-crashed", "probe-failed-itself"}),
            "pick_workers": recommended.get("num_workers"), "pick_pin_memory": recommended.get("pin_memory"),
            "probe_predicted_per_s": prediction.get("pick_predicted_per_s"),
            "probe_measured_per_s": prediction.get("pick_measured_per_s"),
            "job_exit_code": job_code, "job_workers": ((job or {}).get("settings") or {}).get("num_workers"),
            "job_per_s": (job or {}).get("steps_per_s"), "job_step_ms": (job or {}).get("step_ms_median")}


def judge_jpeg(fig: dict) -> list[Check]:
    """Pinned configurations measured on a real dataset, nothing blamed on it, the job run with
    the probe's pick; the rates side by side are reported, not judged."""
    step = "probe-jpeg"
    if fig.get("error"):
        return [missing(step, "probe and job over JPEGs", "measured", "-", fig["error"])]
    checks = [equal(step, "probe exit code", 0, fig.get("probe_exit_code"), why="did not end"),
              equal(step, "device", "cuda", fig.get("device"), why="no report"),
              equal(step, "failed configurations", 0, len(fig.get("failed") or []) if fig.get("configs") else None,
                    why="no configuration measured"),
              equal(step, "pinned configurations measured", fig.get("pinned") or None,
                    fig.get("pinned_ok") if fig.get("pinned") else None, why="no pinned configuration tried"),
              equal(step, "findings blaming the dataset or loaderdoc", "none", ", ".join(fig.get("blamed") or []) or "none"),
              equal(step, "job exit code", 0, fig.get("job_exit_code"), why="the job did not run"),
              equal(step, "job's workers = the probe's pick", fig.get("pick_workers"), fig.get("job_workers"),
                    why="the job did not run")]
    job, measured, predicted = (_num(fig.get(k)) for k in ("job_per_s", "probe_measured_per_s",
                                                           "probe_predicted_per_s"))
    if job and measured and predicted:
        side = (f"probe {predicted:.1f} predicted / {measured:.1f} measured, job {job:.1f} "
                f"({job / measured:.2f}x the probe's; step {fig.get('step_alone_ms') or 0:.1f} ms alone, "
                f"{fig.get('job_step_ms') or 0:.1f} ms in the job)")
        checks.append(Check(step, "steps/s: the probe's pick vs the real job", "reported", side,
                            "not judged", OK))
    return checks


STEP_JUDGES = {
    "consumer": judge_consumer,
    "h2d": judge_h2d,
    "watch-starved": lambda fig: judge_watch("watch-starved", fig, starved=True),
    "watch-fed": lambda fig: judge_watch("watch-fed", fig, starved=False),
    "probe": judge_probe,
    "tune": judge_tune,
    "probe-jpeg": judge_jpeg,
}
STEP_NAMES = ("facts", *STEP_JUDGES)


def judge_folder(folder: Path) -> tuple[dict, list[Check]]:
    """(run.json, every check) of a results folder: the steps run.json lists, each from its files."""
    run = dict(read_run(folder))
    facts = _read_json(folder / "facts.json") if "facts" in (run.get("steps") or STEP_NAMES) else None
    if isinstance(facts, dict):  # the table's header names the machine
        gpu = facts.get("gpu") or {}
        devices = gpu.get("devices") or [{}]
        run.setdefault("gpu", _reading(devices[0], "name")[0])
        run.setdefault("driver", _reading(gpu, "driver_version")[0])
    steps = [s for s in run.get("steps") or STEP_NAMES if s in STEP_NAMES]
    checks: list[Check] = []
    for name in steps:
        fig = _read_json(folder / "figures" / f"{name}.json")
        if name == "facts":
            fig = fig or {}
            checks += judge_facts(_read_json(folder / "facts.json"), _read_text(folder / "nvidia-smi-before.csv"),
                                  _read_text(folder / "nvidia-smi-after.csv"), error=fig.get("error"))
            continue
        if not isinstance(fig, dict):
            fig = {"error": "the step wrote no figures (it did not run)"}
        checks += STEP_JUDGES[name](fig)
    return run, checks


def exit_code(checks: list[Check]) -> int:
    return EXIT_PASSED if checks and all(c.ok for c in checks) else EXIT_FAILED


COLUMNS = ("step", "check", "expected", "measured", "tolerance", "result")


def table(run: dict, checks: list[Check]) -> str:
    """The checks as an aligned text table, a header naming the run and a one-line verdict."""
    head = []
    if run.get("synthetic"):
        head.append(f"*** {str(run['synthetic']).upper()}: a hand-written folder for the tests, no GPU measured it ***")
    machine = ", ".join(str(run[k]) for k in ("gpu", "driver", "torch") if run.get(k))
    if machine:
        head.append(f"GPU acceptance on {machine}" + (f" ({run['started_at']})" if run.get("started_at") else ""))
    rows = [COLUMNS] + [(c.step, c.what, c.expected, c.measured, c.tolerance,
                         c.status + (f": {c.note}" if c.note else "")) for c in checks]
    widths = [max(len(r[i]) for r in rows) for i in range(len(COLUMNS) - 1)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1] for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths) + "  " + "-" * len(COLUMNS[-1]))
    counts = {s: sum(c.status == s for c in checks) for s in (OK, MISMATCH, NOT_MEASURED)}
    verdict = "PASSED" if exit_code(checks) == EXIT_PASSED else "FAILED"
    tail = (f"{verdict}: {len(checks)} checks, {counts[OK]} ok, {counts[MISMATCH]} beyond tolerance, "
            f"{counts[NOT_MEASURED]} not measured")
    return "\n".join(head + lines + [tail]) + "\n"


def checks_json(checks: list[Check]) -> str:
    return json.dumps([asdict(c) for c in checks], indent=1) + "\n"


def cuda_skip_reason(torch_version: str | None, cuda_built: bool, device_count: int, error: str | None = None) -> str | None:
    """Why this machine cannot run the acceptance (None: it can)."""
    if torch_version is None:
        return f"torch is not importable ({error})" if error else "torch is not importable"
    if not cuda_built:
        return f"torch {torch_version} is built without CUDA"
    if error:
        return f"CUDA does not start with torch {torch_version} ({error})"
    if device_count < 1:
        return f"no CUDA device is visible to torch {torch_version} (CUDA_VISIBLE_DEVICES, driver)"
    return None
