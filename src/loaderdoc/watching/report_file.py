"""Reading back a ``loaderdoc.watch/1`` report (``loaderdoc watch --report FILE``) for the app.

The app shows a finished run: its findings in the diagnoses view, and per loader the data wait
against the step over the run. A file that is not such a report (a probe report, machine facts,
``{}``, a hand edit that made a number a string) is refused here, before the app starts, with the
file, the key and what was expected. Only the keys the app reads are checked; keys this build does
not know are ignored and the fields other loaderdoc versions add (``timeline``, ``memory``) are
optional. No torch, no textual.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderdoc._serde import from_dict
from loaderdoc.advice.findings import SEVERITY_ORDER, Finding
from loaderdoc.errors import UserError
from loaderdoc.textfile import read_input
from loaderdoc.watching.report import WATCH_SCHEMA, describe_loader

HOW_TO_WRITE = "write one with 'loaderdoc watch --report run.json -- python train.py'"


class WatchReportError(UserError):
    """The file is not a watch report this build can read; the message names the file and the key."""


@dataclass
class Interval:
    """One stretch of a loader's run: a timeline interval or a whole epoch."""

    label: str  # "at 12.0 s" (the end of the interval) or "epoch 3"
    x: float  # where it sits on the chart's x axis: seconds into the run, or the epoch number
    steps: int
    wait_s: float
    step_s: float


@dataclass
class LoaderRun:
    name: str  # "loader 1 (DataLoader, num_workers=0, batch_size=4)"
    steps: int
    wait_share: float | None
    intervals: list[Interval] = field(default_factory=list)
    per: str = "epoch"  # "interval" (from the timeline) or "epoch": what one point of the chart is
    rank: int | None = None
    pid: int | None = None
    workers_pss_max_bytes: int | None = None
    gpu_idle_share: float | None = None


@dataclass
class WatchRun:
    """What the app shows of one watched run."""

    path: str
    command: list[str] | None
    exit_code: int | None
    steps: int
    wait_share: float | None
    findings: list[Finding]
    loaders: list[LoaderRun]
    main_pss_peak_bytes: int | None = None  # over every process's samples
    workers_pss_peak_bytes: int | None = None
    shm_peak_bytes: int | None = None
    shm_total_bytes: int | None = None
    gpu_timing: str | None = None  # "cuda-events" | "unavailable" | None (not recorded)


def load_watch_report(path: str | Path) -> WatchRun:
    """The run in ``path``; WatchReportError (exit 3) for a file that is missing, unreadable, not
    JSON or not a ``loaderdoc.watch/1`` report."""
    path = Path(path)
    text = read_input(path, what="watch report", flag="--report", error=WatchReportError)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WatchReportError(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}); {HOW_TO_WRITE}") from None
    except RecursionError:
        raise WatchReportError(f"{path}: nested too deeply to be a watch report") from None
    try:
        return _run(data, str(path))
    except _Bad as bad:
        raise WatchReportError(f"{path}: {bad}") from None


class _Bad(Exception):
    """A key holds what no watch report holds; the message is '<key path>: expected ..., got ...'."""


def _run(data: Any, path: str) -> WatchRun:
    if not isinstance(data, dict):
        raise _Bad(f"expected a JSON object (a watch report), got {_kind(data)}; {HOW_TO_WRITE}")
    schema = data.get("schema")
    if schema != WATCH_SCHEMA:
        if "workload" in data and "results" in data:
            what = "a probe report, which 'loaderdoc tradeoffs --probe-report' reads"
        elif "schema_version" in data and "cpu" in data:
            what = "machine facts, which --machine reads"
        elif isinstance(schema, str):
            what = f"a {schema} document"
        else:
            what = "no 'schema' key"
        raise _Bad(f"not a {WATCH_SCHEMA} report ({what}); {HOW_TO_WRITE}")
    command = _get(data, "command", list, "", optional=True)
    if command is not None and not all(isinstance(c, str) for c in command):
        raise _Bad("command: expected a list of strings")
    findings = []
    for i, raw in enumerate(_get(data, "findings", list, "")):
        where = f"findings[{i}]"
        _obj(raw, where)
        for key in ("rule_id", "symptom"):
            _get(raw, key, str, where)
        if raw.get("severity") not in SEVERITY_ORDER:
            raise _Bad(f"{where}.severity: expected one of {', '.join(SEVERITY_ORDER)}, got {raw.get('severity')!r}")
        findings.append(from_dict(Finding, raw))
    loaders = [_loader(raw, f"loaders[{i}]") for i, raw in enumerate(_get(data, "loaders", list, ""))]
    run = WatchRun(
        path=path, command=command, exit_code=_get(data, "exit_code", int, "", optional=True, signed=True),
        steps=_get(data, "steps", int, "", optional=True) or sum(lo.steps for lo in loaders),
        wait_share=_get(data, "wait_share", float, "", optional=True), findings=findings, loaders=loaders,
    )
    gpu = data.get("gpu")
    if isinstance(gpu, dict) and isinstance(gpu.get("timing"), str):
        run.gpu_timing = gpu["timing"]
    _memory(run, data)
    return run


def _loader(raw: Any, where: str) -> LoaderRun:
    _obj(raw, where)
    totals = _get(raw, "totals", dict, where)
    at = f"{where}.totals"
    settings = _get(raw, "settings", dict, where, optional=True) or {}
    name = describe_loader({"loader": raw.get("loader"), "class": raw.get("class"), "settings": settings})
    run = LoaderRun(
        name=name, steps=_get(totals, "steps", int, at, optional=True) or 0,
        wait_share=_get(totals, "wait_share", float, at, optional=True),
        rank=_get(raw, "rank", int, where, optional=True), pid=_get(raw, "pid", int, where, optional=True),
        workers_pss_max_bytes=_get(totals, "workers_pss_max_bytes", int, at, optional=True),
        gpu_idle_share=_get(totals, "gpu_idle_share", float, at, optional=True),
    )
    timeline = _get(raw, "timeline", list, where, optional=True)
    if timeline:
        run.per = "interval"
        for i, point in enumerate(timeline):
            w = f"{where}.timeline[{i}]"
            _obj(point, w)
            t = _get(point, "t_s", float, w)
            run.intervals.append(Interval(f"at {t:.1f} s", t, _get(point, "steps", int, w),
                                          _get(point, "wait_s", float, w), _get(point, "step_s", float, w)))
        return run
    for i, epoch in enumerate(_get(raw, "epochs", list, where, optional=True) or []):
        w = f"{where}.epochs[{i}]"
        _obj(epoch, w)
        number = _get(epoch, "epoch", int, w, optional=True)
        number = i if number is None else number
        run.intervals.append(Interval(f"epoch {number}", float(number), _get(epoch, "steps", int, w, optional=True)
                                      or 0, _get(epoch, "wait_s", float, w), _get(epoch, "step_s", float, w)))
    return run


def _memory(run: WatchRun, data: dict) -> None:
    """Peaks over every process's samples: the main process, its workers (summed PSS), /dev/shm."""
    memory = _get(data, "memory", list, "", optional=True) or []
    main: list[int] = []
    workers: list[int] = []
    shm: list[int] = []
    for i, proc in enumerate(memory):
        where = f"memory[{i}]"
        _obj(proc, where)
        for j, sample in enumerate(_get(proc, "samples", list, where, optional=True) or []):
            w = f"{where}.samples[{j}]"
            _obj(sample, w)
            for key, into in (("main_pss_bytes", main), ("workers_pss_bytes", workers), ("shm_used_bytes", shm)):
                value = _get(sample, key, int, w, optional=True)
                if value is not None:
                    into.append(value)
        peak = _get(proc, "shm_peak_used_bytes", int, where, optional=True)
        if peak is not None:
            shm.append(peak)
        total = _get(proc, "shm_total_bytes", int, where, optional=True)
        if total is not None:
            run.shm_total_bytes = total
    workers += [lo.workers_pss_max_bytes for lo in run.loaders if lo.workers_pss_max_bytes is not None]
    run.main_pss_peak_bytes = max(main, default=None)
    run.workers_pss_peak_bytes = max(workers, default=None)
    run.shm_peak_bytes = max(shm, default=None)


_EXPECTED = {int: "a whole number >= 0", float: "a finite number >= 0", str: "a string", list: "a list",
             dict: "an object"}


def _get(obj: dict, key: str, tp: type, where: str, *, optional: bool = False, signed: bool = False) -> Any:
    """``obj[key]`` checked to be a ``tp`` (numbers finite and >= 0 unless ``signed``); None for
    a missing or null key when ``optional``."""
    at = f"{where}.{key}" if where else key
    value = obj.get(key)
    if value is None:
        if optional:
            return None
        raise _Bad(f"{at}: missing; expected {_EXPECTED[tp]}")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        ok = number and isinstance(value, int) and (signed or value >= 0)
    elif tp is float:
        ok = number and math.isfinite(value) and value >= 0
    else:
        ok = isinstance(value, tp)
    if not ok:
        expected = "a whole number" if tp is int and signed else _EXPECTED[tp]
        raise _Bad(f"{at}: expected {expected}, got {value!r}"[:200])
    return float(value) if tp is float else value


def _obj(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise _Bad(f"{where}: expected an object, got {_kind(value)}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__)
