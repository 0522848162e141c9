"""Reading back a probe report that ``loaderdoc probe ... --json > FILE`` wrote, checked before it
is believed.

A report's numbers become the "measured" rows of the trade-off tables, so a file that is not one
(machine facts, a ``check --json`` document, ``{}``, a hand edit that made a number a string) is
refused with the file, the key path and what was expected, never shown as measurements. The check
follows the dataclasses of :mod:`.result` field by field: keys this build does not know are ignored
(a newer loaderdoc's report still loads), a known key must hold the type its field declares, and
every number is finite and not negative; a schema it does not know, and a batch size, worker count
or prefetch depth no probe can have measured, are refused. No torch, no textual.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from pathlib import Path
from typing import Any

from loaderdoc.base.errors import UserError
from loaderdoc.base.jsondoc import beyond_measured, kind, load_json, other_version, shown
from loaderdoc.base.settings import LoaderSettings, recorded_counts_problem
from loaderdoc.probing.result import ProbeReport

HOW_TO_WRITE = "write one with 'loaderdoc probe PRESET --json > FILE'"
# the report formats this reader knows (a report from before loaderdoc.probe/2 lacks the breakdown)
READABLE_SCHEMAS = ("loaderdoc.probe/1", "loaderdoc.probe/2")


class ProbeReportError(UserError):
    """The file is not a probe report this build can read; the message names the file and the key."""


def load_report(path: str | Path) -> ProbeReport:
    """The probe report in ``path`` (the JSON ``loaderdoc probe --json`` prints); ProbeReportError
    (exit 3) for a file that is missing, unreadable, not JSON or not a probe report."""
    path = Path(path)
    data = load_json(path, what="probe report", error=ProbeReportError, how_to_write=HOW_TO_WRITE,
                     flag="--probe-report")
    problem = report_problem(data)
    if problem:
        raise ProbeReportError(f"{path}: {problem}")
    return ProbeReport.from_dict(data)


def report_problem(data: Any) -> str | None:
    """Why ``data`` (parsed JSON) is not a probe report, or None when it is one."""
    if not isinstance(data, dict):
        return f"expected a JSON object (a probe report), got {kind(data)}; {HOW_TO_WRITE}"
    missing = [key for key in ("workload", "results") if key not in data]
    if missing:
        if "schema_version" in data and "cpu" in data:
            what = "it holds machine facts, which --machine reads"
        elif isinstance(data.get("schema"), str):
            what = f"a {data['schema']} document"
        else:
            what = f"no {' or '.join(missing)}"
        return f"not a probe report ({what}); {HOW_TO_WRITE}"
    schema = data.get("schema")
    if schema is not None and schema not in READABLE_SCHEMAS:
        return other_version(schema, list(READABLE_SCHEMAS), data) or f"not a probe report (schema {schema!r}); {HOW_TO_WRITE}"[:300]
    problem = _object(ProbeReport, data, "")
    if problem:
        return problem
    workload = data["workload"]
    if not isinstance(workload.get("batch_size"), int) or workload["batch_size"] < 1:
        return f"workload.batch_size: expected a whole number >= 1, got {shown(workload.get('batch_size'))}"
    problem = beyond_measured("workload.batch_size", workload["batch_size"])
    for i, result in enumerate(data["results"]):
        problem = problem or _settings(result.get("settings"), f"results[{i}].settings")
    return problem or _settings(data.get("recommended"), "recommended")


def _settings(data: dict | None, where: str) -> str | None:
    """Settings torch would refuse on their own (a negative num_workers), or past anything a probe
    measures, are no measurement."""
    if data is None:
        return None
    problem = recorded_counts_problem(data, where)
    if problem:
        return problem
    known = {f.name for f in dataclasses.fields(LoaderSettings)}
    problems = LoaderSettings(**{k: v for k, v in data.items() if k in known}).range_problems()
    return f"{where}: {problems[0][1]}" if problems else None


def _object(cls: type, data: Any, where: str) -> str | None:
    if not isinstance(data, dict):
        return f"{where or 'the report'}: expected an object, got {kind(data)}"
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data:
            problem = _value(hints[f.name], data[f.name], f"{where}.{f.name}" if where else f.name)
            if problem:
                return problem
    return None


def _value(tp: Any, value: Any, where: str) -> str | None:
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None and len(args) < len(typing.get_args(tp)):
            return None
        tp, origin = args[0], typing.get_origin(args[0])
    if origin is list:
        if not isinstance(value, list):
            return f"{where}: expected a list, got {kind(value)}"
        (item,) = typing.get_args(tp)
        for i, x in enumerate(value):
            problem = _value(item, x, f"{where}[{i}]")
            if problem:
                return problem
        return None
    if dataclasses.is_dataclass(tp):
        return _object(tp, value, where)
    checks = {
        bool: (lambda v: isinstance(v, bool), "true or false"),
        int: (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= 0, "a whole number >= 0"),
        float: (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0,
                "a finite number >= 0"),
        str: (lambda v: isinstance(v, str), "a string"),
    }
    if tp in checks:
        ok, expected = checks[tp]
        if not ok(value):
            return f"{where}: expected {expected}, got {shown(value)}"[:200]
    return None
