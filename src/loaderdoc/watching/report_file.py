"""Reading back a ``loaderdoc.watch/1`` report (``loaderdoc watch --report FILE``): the one checked
reader, returning the same typed :class:`~loaderdoc.watching.report.WatchReport` the run built.

The app shows a finished run (its findings in the diagnoses view, per loader the data wait against
the step over the run) and ``watch --merge`` joins the nodes' reports. A file that is not such a
report (a probe report, machine facts, ``{}``, a hand edit that made a number a string) is refused
here, before the app starts, with the file, the key and what was expected. Keys this build does not
know are ignored; the fields older reports lack (``timeline``, ``memory``, ``processes``, a
loader's ``role``, ``cpu``, ``io``, most ``totals``) are optional. The loader's figures are read
as its producer wrote them, never derived again. No torch, no textual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loaderdoc.advice.findings import findings_from_json
from loaderdoc.base.errors import UserError
from loaderdoc.base.jsondoc import Bad, beyond_measured, get, load_json, obj, read_document, shown
from loaderdoc.base.settings import recorded_counts_problem
from loaderdoc.watching.report import WATCH_SCHEMA, WatchReport
from loaderdoc.watching.watched import LoaderReport, LoaderTotals, TimelinePoint, WatchedEpoch

HOW_TO_WRITE = "write one with 'loaderdoc watch --report run.json -- python train.py'"
TOTAL_TYPES = {"epochs": int, "steps": int, "waits": int, "wait_s": float, "step_s": float, "wall_s": float,
               "wait_share": float, "wait_per_batch_s": float, "step_per_batch_s": float, "first_batch_s": float,
               "later_first_batch_s": float, "workers_pss_max_bytes": int, "gpu_idle_s": float,
               "gpu_idle_share": float}
COUNTS = ("epochs", "steps", "waits", "wait_s", "step_s")  # 0 where an older report left them out
# each process's place in the job (procinfo), each rank's row (report.rank_table) and each process's
# memory, checked where present: watch --merge and the app key ranks and nodes by them
PROCESS_TYPES = {"pid": int, "hostname": str, "argv0": str, "rank": int, "local_rank": int, "world_size": int,
                 "local_world_size": int, "group_rank": int, "slurm_nodeid": int, "affinity_cpus": int, "source": int}
RANK_TYPES = {"rank": int, "node": str, "pid": int, "loader": int, "wait_share": float, "wait_per_batch_s": float,
              "steps": int, "cpus": float, "shm_total_bytes": int, "num_workers": int, "source": int}
MEMORY_TYPES = {"pid": int, "source": int, "shm_peak_used_bytes": int, "shm_total_bytes": int}
# an epoch's figures beyond those the app charts, checked where present
EPOCH_TYPES = {"waits": int, "steps_timed": int, "first_batch_s": float, "wall_s": float, "gpu_idle_s": float,
               "iter_s": float, "stop_s": float,
               "wait_p50_s": float, "wait_p95_s": float, "workers_pss_max_bytes": int,
               "workers_heap_grown_bytes": int}


class WatchReportError(UserError):
    """The file is not a watch report this build can read; the message names the file and the key."""


def load_watch_report(path: str | Path) -> WatchReport:
    """The run in ``path``; WatchReportError (exit 3) for a file that is missing, unreadable, not
    JSON or not a ``loaderdoc.watch/1`` report."""
    path = Path(path)
    data = load_json(path, what="watch report", error=WatchReportError, how_to_write=HOW_TO_WRITE)
    return watch_report_from(data, path)


def watch_report_from(data: Any, path: str | Path) -> WatchReport:
    """The run in a parsed report (``path`` names it in the errors and the app)."""
    return read_document(data, path, schema=WATCH_SCHEMA, what="a watch report", error=WatchReportError,
                         how_to_write=HOW_TO_WRITE, build=lambda doc: _report(doc, str(path)))


def _checked(container: dict, key: str, tp: type, where: str, *, optional: bool = True, signed: bool = False) -> Any:
    """``container[key]`` checked as :func:`jsondoc.get` checks it, and within what a measured run
    can hold (:func:`jsondoc.beyond_measured`: no 10^30 steps, no wait of 1e308 s); kept as written (a
    whole number stays one where a float is expected: the report is written back as it was read)."""
    get(container, key, tp, where, optional=optional, signed=signed)
    value = container.get(key)
    problem = beyond_measured(f"{where}.{key}" if where else key, value)
    if problem:
        raise Bad(problem)
    return value


def _report(data: dict, path: str) -> WatchReport:
    command = get(data, "command", list, "", optional=True)
    if command is not None and not all(isinstance(c, str) for c in command):
        raise Bad("command: expected a list of strings")
    findings = findings_from_json(data.get("findings"))
    loaders = [_loader(raw, f"loaders[{i}]") for i, raw in enumerate(get(data, "loaders", list, ""))]
    for key, tp in (("steps", int), ("wait_share", float), ("wait_s", float), ("step_s", float)):
        _checked(data, key, tp, "")  # the run's totals are the loaders', checked all the same
    gpu = data.get("gpu")
    exit_code = _checked(data, "exit_code", int, "", signed=True)
    if exit_code is not None and not -255 <= exit_code <= 255:  # a status byte, or minus a signal number
        raise Bad(f"exit_code: {shown(exit_code)} is no process's exit code (a whole number from -255 to 255)")
    return WatchReport(
        command=command, exit_code=exit_code,
        processes=_rows(data, "processes", PROCESS_TYPES), ranks=_rows(data, "ranks", RANK_TYPES), loaders=loaders,
        memory=_memory(data), gpu=gpu if isinstance(gpu, dict) else None, findings=findings,
        machine=data.get("machine"), traces=data.get("traces"), apply=data.get("apply"),
        merged_from=data.get("merged_from"), commands=data.get("commands"), machines=data.get("machines"),
        path=path)


def _objects(data: dict, key: str) -> list[dict[str, Any]]:
    items = get(data, key, list, "", optional=True) or []
    for i, item in enumerate(items):
        obj(item, f"{key}[{i}]")
    return items


def _rows(data: dict, key: str, types: dict[str, type], required: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    rows = _objects(data, key)
    for i, row in enumerate(rows):
        for name, tp in types.items():
            _checked(row, name, tp, f"{key}[{i}]", optional=name not in required)
    return rows


def _loader(raw: Any, where: str) -> LoaderReport:
    obj(raw, where)
    at = f"{where}.totals"
    totals = get(raw, "totals", dict, where)
    read = {key: _checked(totals, key, tp, at) for key, tp in TOTAL_TYPES.items()}
    settings = get(raw, "settings", dict, where, optional=True) or {}
    problem = recorded_counts_problem(settings, f"{where}.settings")
    if problem:
        raise Bad(problem)
    role, cls = raw.get("role"), raw.get("class")  # role: absent from reports before loaders were named
    loader = LoaderReport(
        number=raw.get("loader"), role=role if isinstance(role, str) else None,
        pid=_checked(raw, "pid", int, where), rank=_checked(raw, "rank", int, where),
        cls=cls if isinstance(cls, str) else None, settings=settings,
        applied={k: raw[k] for k in ("asked", "applied", "apply_tables") if k in raw},
        epochs=_epochs(raw, where, checked=not raw.get("timeline")),
        totals=LoaderTotals(**{k: (v if v is not None or k not in COUNTS else 0) for k, v in read.items()}),
        timeline=_timeline(raw, where), cpu=_accounting(raw, "cpu", "a CPU accounting", where),
        io=_accounting(raw, "io", "a read accounting", where), proposed=raw.get("proposed"),
        source=raw.get("source"), replays=raw.get("replays") if isinstance(raw.get("replays"), bool) else None,
        iter_error=get(raw, "iter_error", str, where, optional=True),
        init_error=get(raw, "init_error", str, where, optional=True),
        init_site=get(raw, "init_site", str, where, optional=True))
    if isinstance(loader.io, dict) and loader.io.get("readable") is False:
        loader.io_unreadable = loader.io.get("reason")
    return loader


def _timeline(raw: dict, where: str) -> list[TimelinePoint]:
    out = []
    for i, point in enumerate(get(raw, "timeline", list, where, optional=True) or []):
        w = f"{where}.timeline[{i}]"
        obj(point, w)
        out.append(TimelinePoint(t_s=_checked(point, "t_s", float, w, optional=False),
                                 steps=_checked(point, "steps", int, w, optional=False),
                                 wait_s=_checked(point, "wait_s", float, w, optional=False),
                                 step_s=_checked(point, "step_s", float, w, optional=False)))
    return out


def _epochs(raw: dict, where: str, *, checked: bool) -> list[WatchedEpoch]:
    """The epochs as recorded; ``checked``: the ones the app charts (a report without a timeline)."""
    out = []
    for i, epoch in enumerate(get(raw, "epochs", list, where, optional=True) or []):
        w = f"{where}.epochs[{i}]"
        obj(epoch, w)
        for key, tp in (("epoch", int), ("steps", int), ("wait_s", float), ("step_s", float)):
            _checked(epoch, key, tp, w, optional=not checked or key in ("epoch", "steps"))
        for key in ("start_s", "end_s"):  # the epoch's wall time is their difference
            _checked(epoch, key, float, w)
        for key, tp in EPOCH_TYPES.items():
            _checked(epoch, key, tp, w)
        out.append(WatchedEpoch.from_record(epoch, i))
    return out


def _memory(data: dict) -> list[dict[str, Any]]:
    """Every process's memory: its samples (the main process, its workers' summed PSS, /dev/shm)."""
    memory = _rows(data, "memory", MEMORY_TYPES, required=("pid",))  # the pid: which process's, which node's
    for i, proc in enumerate(memory):
        where = f"memory[{i}]"
        for j, sample in enumerate(get(proc, "samples", list, where, optional=True) or []):
            w = f"{where}.samples[{j}]"
            obj(sample, w)
            for key in ("main_pss_bytes", "workers_pss_bytes", "shm_used_bytes"):
                _checked(sample, key, int, w)
    return memory


# what each accounting's one line (text/watch.py's cpu_text, io_text) reads: required, then where a flag says
_NUMBER, _FLAG, _TEXT = (int, float), bool, str
ACCOUNTING_KEYS = {
    "cpu": ({"load_cpu_per_batch_s": _NUMBER, "load_is_cpu": _FLAG, "step_cpu_per_step_s": _NUMBER,
             "step_wall_per_step_s": _NUMBER},
            {"used_cpus": {"used_cpus": _NUMBER, "budget_cpus": _NUMBER},
             "ceiling_matters": {"ceiling_per_s": _NUMBER, "rate_per_s": _NUMBER}}),
    "io": ({"readable": _FLAG},
           {"readable": {"rchar_per_batch_bytes": _NUMBER, "read_calls_per_batch": _NUMBER,
                         "read_bytes_per_batch": _NUMBER, "verdict": _TEXT}}),
}


def _accounting(raw: dict[str, Any], key: str, what: str, where: str) -> dict[str, Any] | None:
    """The loader's ``cpu`` or ``io`` accounting, where the report has it (older ones do not),
    checked to hold what its one line shows (ACCOUNTING_KEYS)."""
    block = get(raw, key, dict, where, optional=True)
    if not block:
        return block
    required, when = ACCOUNTING_KEYS[key]
    wanted = dict(required)
    for flag, keys in when.items():
        if block.get(flag):
            wanted.update(keys)
    for name, kind in wanted.items():
        value = block.get(name)
        if not isinstance(value, kind) or (kind is _NUMBER and isinstance(value, bool)):
            raise Bad(f"{where}.{key}: not {what} this build can read")
    return block
