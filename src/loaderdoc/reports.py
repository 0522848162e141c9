"""The reports the app opens (``loaderdoc --report FILE``): a watched run (``loaderdoc.watch/1``),
a job (``loaderdoc.job/1``) or a tune (``loaderdoc.tune/1``), told apart by their "schema" key.

The file is read and parsed once here, its strings made visible (control characters escaped),
then checked by its own reader; anything else is refused
in one line naming the three kinds, before the app (or textual) starts. No torch, no textual.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderdoc.base.errors import UserError
from loaderdoc.base.jsondoc import Bad, get, kind, load_json, not_schema, obj, read_document
from loaderdoc.base.visible import visible_data
from loaderdoc.cluster.job_file import job_report_from
from loaderdoc.cluster.job_report import JOB_SCHEMA, JobReport
from loaderdoc.probing.real_loop import RealLoop
from loaderdoc.tuning.result import TUNE_SCHEMA, TuneReport
from loaderdoc.watching.report import WATCH_SCHEMA, WatchReport
from loaderdoc.watching.report_file import watch_report_from

HOW_TO_WRITE = ("write one with 'loaderdoc watch --report run.json -- python train.py', "
                "'loaderdoc tune --report tune.json -- python train.py' or "
                "'torchrun ... -m loaderdoc check --distributed --json > job.json'")
TUNE_HOW_TO_WRITE = "write one with 'loaderdoc tune --report tune.json -- python train.py'"


class ReportError(UserError):
    """The file is not a watch, job or tune report this build can read."""


@dataclass
class TuneRun:
    """What the app shows of one tune report: the checked report itself."""

    path: str
    report: TuneReport


def open_report(path: str | Path) -> WatchReport | JobReport | TuneRun:
    """The run, the job or the tune in ``path``; a UserError (exit 3) in one line for anything else."""
    path = Path(path)
    data = load_json(path, what="watch, job or tune report", error=ReportError, how_to_write=HOW_TO_WRITE)
    # opened to be shown: an escape sequence in a field (the command line) is shown, never obeyed;
    # the app draws past the escaping of loaderdoc.base.output
    data = visible_data(data)
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema == WATCH_SCHEMA:
        return watch_report_from(data, path)
    if schema == JOB_SCHEMA:
        return job_report_from(data, path)
    if schema == TUNE_SCHEMA:
        return tune_run_from(data, path)
    bad = not_schema(data, f"{WATCH_SCHEMA}, {JOB_SCHEMA} or {TUNE_SCHEMA}", "a watch, job or tune report",
                     HOW_TO_WRITE)
    raise ReportError(f"{path}: {bad}")


# ---- loaderdoc.tune/1 ---------------------------------------------------------------------
def tune_run_from(data: Any, path: str | Path) -> TuneRun:
    """The tune in a parsed report (``path`` names it in the errors and the app).

    Every key of :class:`TuneReport` (its trials and pick) is checked against the dataclass's own
    type where it is present; a missing or null key takes the field's default (None where it may
    be null), except the fields without one (a trial's number, the pick's settings, rate, trial
    and reason) and ``trials``. Keys this build does not know are dropped."""
    def build(doc: dict) -> TuneRun:
        get(doc, "trials", list, "")
        _loader(doc.get("loader"))
        return TuneRun(path=str(path), report=TuneReport.from_dict(_checked(doc, TuneReport, "")))

    return read_document(data, path, schema=TUNE_SCHEMA, what="a tune report", error=ReportError,
                         how_to_write=TUNE_HOW_TO_WRITE, build=build)


def _loader(loader: Any) -> None:
    """The training loader's keys that the text and the app read (the rest is shown as it is)."""
    if loader is None:
        return
    obj(loader, "loader")
    for key in ("key", "site", "role", "class"):
        get(loader, key, str, "loader", optional=True)
    for key in ("asked", "settings"):
        get(loader, key, dict, "loader", optional=True)


def _checked(value: dict, cls: type, where: str) -> dict:
    """``value`` (an object) with each of dataclass ``cls``'s fields checked against its type."""
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if value.get(f.name) is not None:
            out[f.name] = _value(value, f.name, tp, where)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # no default
            if _nullable(tp):
                out[f.name] = None
            elif dataclasses.is_dataclass(tp):
                raise Bad(f"{where + '.' if where else ''}{f.name}: missing; expected an object")
            else:
                get(value, f.name, tp, where)  # raises "...: missing; expected ..."
    return out


def _nullable(tp: Any) -> bool:
    return typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp)


def _value(container: dict, key: str, tp: Any, where: str) -> Any:
    """``container[key]`` (not None) checked to be a ``tp`` as the dataclasses of tuning.result use it."""
    at = f"{where}.{key}" if where else key
    value = container[key]
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
    origin = typing.get_origin(tp)
    if origin is list:
        (arg,) = typing.get_args(tp)
        items = get(container, key, list, where)
        return [_value({f"{key}[{i}]": item}, f"{key}[{i}]", arg, where) for i, item in enumerate(items)]
    if origin is dict:
        _, arg = typing.get_args(tp)
        return {k: _value(get(container, key, dict, where), k, arg, at) for k in get(container, key, dict, where)}
    if dataclasses.is_dataclass(tp):
        obj(value, at)
        return _checked(value, tp, at)
    if tp is bool:
        if not isinstance(value, bool):
            raise Bad(f"{at}: expected true or false, got {value!r}"[:200])
        return value
    if tp in (int, float, str, dict, list):
        return get(container, key, tp, where, signed=key == "exit_code")
    raise Bad(f"{at}: unreadable ({kind(value)})")  # a type tuning.result started using after this reader


def real_loops(opened: WatchReport | TuneRun | None) -> list[RealLoop]:
    """The real training loop's measured rates in an opened report, the likeliest match for a
    probe first: a watched run's loaders (the train loader, then the busiest), or a tune's
    measured trials (fastest first); none for a job report or none at all."""
    loops: list[RealLoop] = []
    if isinstance(opened, WatchReport):
        for lo in _training_first(opened):
            per_batch = lo.totals.per_batch_s
            workers, batch, pin = (lo.settings.get(k) for k in ("num_workers", "batch_size", "pin_memory"))
            if per_batch and isinstance(workers, int):
                loops.append(RealLoop(1.0 / per_batch, workers, batch if isinstance(batch, int) else None,
                                      pin if isinstance(pin, bool) else None,
                                      f"the watched run {opened.path}, {lo.title()}"))
    elif isinstance(opened, TuneRun):
        written = opened.report.written
        batch = written.get("batch_size") if isinstance(written.get("batch_size"), int) else None
        pin = written.get("pin_memory") if isinstance(written.get("pin_memory"), bool) else None
        for trial in sorted((t for t in opened.report.trials if t.ok), key=lambda t: -t.steps_per_s):
            loops.append(RealLoop(trial.steps_per_s, trial.settings.num_workers, batch, pin,
                                  f"tune trial {trial.number}"))
    return loops


def _training_first(run: WatchReport) -> list:
    """A watched run's loaders, the training loop's likeliest first: the train loader, then the busiest."""
    return sorted(run.loaders, key=lambda lo: (lo.role != "train", -lo.totals.steps))


def watched_choice(run: WatchReport):
    """(the settings the watched run's training loader ran with, where they come from), the app's
    chosen settings for that run (its findings are about them); None where none is plain values."""
    from loaderdoc.watching.build import loader_settings

    for lo in _training_first(run):
        settings = loader_settings(lo.settings)
        if settings is not None:
            name = f"its {lo.role} loader" if lo.role else f"its loader {lo.number}"
            return settings, f"as the watched run {Path(run.path or 'report').name} used them, {name}"
    return None
