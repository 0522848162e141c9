"""Reading back a ``loaderdoc.watch/1`` report (``loaderdoc watch --report FILE``) for the app.

The app shows a finished run: its findings in the diagnoses view, and per loader the data wait
against the step over the run. A file that is not such a report (a probe report, machine facts,
``{}``, a hand edit that made a number a string) is refused here, before the app starts, with the
file, the key and what was expected. Only the keys the app reads are checked; keys this build does
not know are ignored and the fields other loaderdoc versions add (``timeline``, ``memory``) are
optional. No torch, no textual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loaderdoc.advice.findings import findings_from_json
from loaderdoc.errors import UserError
from loaderdoc.jsondoc import Bad, get, load_json, obj, read_document
from loaderdoc.watching.report import WATCH_SCHEMA, describe_loader
from loaderdoc.watching.run import Interval, LoaderRun, WatchRun

HOW_TO_WRITE = "write one with 'loaderdoc watch --report run.json -- python train.py'"


class WatchReportError(UserError):
    """The file is not a watch report this build can read; the message names the file and the key."""


def load_watch_report(path: str | Path) -> WatchRun:
    """The run in ``path``; WatchReportError (exit 3) for a file that is missing, unreadable, not
    JSON or not a ``loaderdoc.watch/1`` report."""
    path = Path(path)
    data = load_json(path, what="watch report", error=WatchReportError, how_to_write=HOW_TO_WRITE)
    return watch_run_from(data, path)


def watch_run_from(data: Any, path: str | Path) -> WatchRun:
    """The run in a parsed report (``path`` names it in the errors and the app)."""
    return read_document(data, path, schema=WATCH_SCHEMA, what="a watch report", error=WatchReportError,
                         how_to_write=HOW_TO_WRITE, build=lambda doc: _run(doc, str(path)))


def _run(data: dict, path: str) -> WatchRun:
    command = get(data, "command", list, "", optional=True)
    if command is not None and not all(isinstance(c, str) for c in command):
        raise Bad("command: expected a list of strings")
    findings = findings_from_json(data.get("findings"))
    loaders = [_loader(raw, f"loaders[{i}]") for i, raw in enumerate(get(data, "loaders", list, ""))]
    run = WatchRun(
        path=path, command=command, exit_code=get(data, "exit_code", int, "", optional=True, signed=True),
        steps=get(data, "steps", int, "", optional=True) or sum(lo.steps for lo in loaders),
        wait_share=get(data, "wait_share", float, "", optional=True), findings=findings, loaders=loaders,
    )
    gpu = data.get("gpu")
    if isinstance(gpu, dict) and isinstance(gpu.get("timing"), str):
        run.gpu_timing = gpu["timing"]
    _memory(run, data)
    return run


def _loader(raw: Any, where: str) -> LoaderRun:
    obj(raw, where)
    totals = get(raw, "totals", dict, where)
    at = f"{where}.totals"
    settings = get(raw, "settings", dict, where, optional=True) or {}
    role = raw.get("role")  # absent from reports before loaders were named
    name = describe_loader({"loader": raw.get("loader"), "class": raw.get("class"), "settings": settings,
                            "role": role if isinstance(role, str) else None})
    run = LoaderRun(
        name=name, steps=get(totals, "steps", int, at, optional=True) or 0,
        wait_share=get(totals, "wait_share", float, at, optional=True),
        rank=get(raw, "rank", int, where, optional=True), pid=get(raw, "pid", int, where, optional=True),
        workers_pss_max_bytes=get(totals, "workers_pss_max_bytes", int, at, optional=True),
        gpu_idle_share=get(totals, "gpu_idle_share", float, at, optional=True),
        cpu_line=_accounting_line(raw, "cpu", "a CPU accounting", where),
        io_line=_accounting_line(raw, "io", "a read accounting", where),
    )
    timeline = get(raw, "timeline", list, where, optional=True)
    if timeline:
        run.per = "interval"
        for i, point in enumerate(timeline):
            w = f"{where}.timeline[{i}]"
            obj(point, w)
            t = get(point, "t_s", float, w)
            run.intervals.append(Interval(f"at {t:.1f} s", t, get(point, "steps", int, w),
                                          get(point, "wait_s", float, w), get(point, "step_s", float, w)))
        return run
    for i, epoch in enumerate(get(raw, "epochs", list, where, optional=True) or []):
        w = f"{where}.epochs[{i}]"
        obj(epoch, w)
        number = get(epoch, "epoch", int, w, optional=True)
        number = i if number is None else number
        run.intervals.append(Interval(f"epoch {number}", float(number), get(epoch, "steps", int, w, optional=True)
                                      or 0, get(epoch, "wait_s", float, w), get(epoch, "step_s", float, w)))
    return run


def _memory(run: WatchRun, data: dict) -> None:
    """Peaks over every process's samples: the main process, its workers (summed PSS), /dev/shm."""
    memory = get(data, "memory", list, "", optional=True) or []
    main: list[int] = []
    workers: list[int] = []
    shm: list[int] = []
    for i, proc in enumerate(memory):
        where = f"memory[{i}]"
        obj(proc, where)
        for j, sample in enumerate(get(proc, "samples", list, where, optional=True) or []):
            w = f"{where}.samples[{j}]"
            obj(sample, w)
            for key, into in (("main_pss_bytes", main), ("workers_pss_bytes", workers), ("shm_used_bytes", shm)):
                value = get(sample, key, int, w, optional=True)
                if value is not None:
                    into.append(value)
        peak = get(proc, "shm_peak_used_bytes", int, where, optional=True)
        if peak is not None:
            shm.append(peak)
        total = get(proc, "shm_total_bytes", int, where, optional=True)
        if total is not None:
            run.shm_total_bytes = total
    workers += [lo.workers_pss_max_bytes for lo in run.loaders if lo.workers_pss_max_bytes is not None]
    run.main_pss_peak_bytes = max(main, default=None)
    run.workers_pss_peak_bytes = max(workers, default=None)
    run.shm_peak_bytes = max(shm, default=None)


def _accounting_line(raw: dict[str, Any], key: str, what: str, where: str) -> str | None:
    """The loader's ``cpu`` or ``io`` accounting as the one line the text prints, where the report
    has it (older ones do not)."""
    from loaderdoc.watching import summary_text

    block = get(raw, key, dict, where, optional=True)
    if not block:
        return None
    try:
        return (summary_text.cpu_text if key == "cpu" else summary_text.io_text)(block)
    except (KeyError, TypeError, ValueError):
        raise Bad(f"{where}.{key}: not {what} this build can read") from None
