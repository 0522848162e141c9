"""Reading back a JSON document loaderdoc wrote (a watch or job report the app opens), checked
key by key: a hand edit or another file is refused in one line naming the file, the key and what
was expected, never a traceback from deep inside the app.

Shared by watching/report_file.py, cluster/job_file.py and probing/report_file.py; only the keys a reader uses are
checked, keys it does not know are ignored. No torch, no textual.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from loaderdoc._version import __version__
from loaderdoc.base.textfile import read_input

T = TypeVar("T")

# What no measured run holds; the one owner of these bounds, which the probe's and the watch's report
# readers refuse past (a hand edit or a corruption, never shown as measured). A probe's --batch-size
# stops below 1,000,000; workers and prefetch past a few thousand exist on no machine.
MEASURED_BOUNDS = {"batch_size": 1_000_000, "num_workers": 4096, "prefetch_factor": 1024}
MEASURED_SECONDS = 10 * 366 * 86400  # a time (``*_s``) of over ten years: no run loaderdoc watched lasted so long
MEASURED_COUNT = 10**15  # epochs, steps, waits: a million steps a second for thirty years
MEASURED_BYTES = 1 << 60  # a memory size (``*_bytes``) of an exbibyte: no machine has it
COUNTS = ("epoch", "epochs", "steps", "waits")


class Bad(Exception):
    """A key holds what no such document holds; the message is '<key path>: expected ..., got ...'."""


def load_json(path: Path, *, what: str, error: type[Exception], how_to_write: str, flag: str = "--report") -> Any:
    """The JSON value in ``path`` (given with ``flag``); ``error`` with one line naming the file
    when it is missing, unreadable or not JSON."""
    text = read_input(path, what=what, flag=flag, error=error)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(f"{path}: line {exc.lineno}: not valid JSON ({exc.msg}); {how_to_write}") from None
    except RecursionError:
        raise error(f"{path}: nested too deeply to be a {what}") from None
    except ValueError:  # a whole number past Python's 4,300 digits: no field of a report is one
        raise error(f"{path}: holds a number of thousands of digits; not a {what}") from None


# The key naming the loaderdoc that wrote a report, so that a report from another build says which.
WRITTEN_BY = "loaderdoc_version"


def stamped(document: dict[str, Any]) -> dict[str, Any]:
    """``document`` with this build's version after its "schema" key (the reports the app reads back)."""
    out = {"schema": document["schema"], WRITTEN_BY: __version__} if "schema" in document else {WRITTEN_BY: __version__}
    out.update((k, v) for k, v in document.items() if k not in out)
    return out


def other_version(schema: Any, readable: list[str], data: Any = None) -> str | None:
    """Where ``schema`` is another version of one of ``readable`` (``loaderdoc.watch/2`` where this
    build reads ``loaderdoc.watch/1``): the one line saying so, naming the build that wrote it when
    the document ``data`` says; None otherwise."""
    if not isinstance(schema, str) or schema in readable or "/" not in schema:
        return None
    family = schema.rsplit("/", 1)[0] + "/"
    same = [r for r in readable if r.startswith(family)]
    if not same:
        return None
    writer = data.get(WRITTEN_BY) if isinstance(data, dict) else None
    if isinstance(writer, str) and re.fullmatch(r"[\w.+-]{1,40}", writer):
        who = f"written by loaderdoc {writer}, this is {__version__}"
    else:
        who = f"written by another loaderdoc (this is {__version__})"
    return (f"schema {schema} is not one this build reads ({', '.join(same)}): {who}; upgrade this one, "
            "or write the report again with it")


def not_schema(data: Any, expected: str, what: str, how_to_write: str) -> Bad:
    """Why ``data`` is not a document of the ``expected`` schema(s), saying what it looks like instead."""
    if not isinstance(data, dict):
        return Bad(f"expected a JSON object ({what}), got {kind(data)}; {how_to_write}")
    schema = data.get("schema")
    newer = other_version(schema, re.findall(r"loaderdoc\.[\w-]+/\d+", expected), data)
    if newer is not None:  # another loaderdoc's report: not "write one with ..."
        return Bad(newer)
    if "workload" in data and "results" in data:
        instead = "a probe report, which 'loaderdoc tradeoffs --probe-report' reads"
    elif "schema_version" in data and "cpu" in data:
        instead = "machine facts, which --machine reads"
    elif isinstance(schema, str):
        instead = f"a {schema} document"
    else:
        instead = "no 'schema' key"
    return Bad(f"not a {expected} report ({instead}); {how_to_write}")


def read_document(data: Any, path: str | Path, *, schema: str, what: str, error: type[Exception],
                  how_to_write: str, build: Callable[[dict], T]) -> T:
    """``build(data)`` for parsed ``data`` that is a ``schema`` document; ``error`` naming the file
    for anything else, and for the :class:`Bad` key ``build`` met (its message names the key)."""
    if not isinstance(data, dict) or data.get("schema") != schema:
        raise error(f"{path}: {not_schema(data, schema, what, how_to_write)}")
    try:
        return build(data)
    except Bad as bad:
        raise error(f"{path}: {bad}") from None


_EXPECTED = {int: "a whole number >= 0", float: "a finite number >= 0", str: "a string", list: "a list",
             dict: "an object"}


def get(obj: dict, key: str, tp: type, where: str, *, optional: bool = False, signed: bool = False) -> Any:
    """``obj[key]`` checked to be a ``tp`` (numbers finite and >= 0 unless ``signed``); None for
    a missing or null key when ``optional``."""
    at = f"{where}.{key}" if where else key
    value = obj.get(key)
    if value is None:
        if optional:
            return None
        raise Bad(f"{at}: missing; expected {_EXPECTED[tp]}")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        ok = number and isinstance(value, int) and (signed or value >= 0)
    elif tp is float:
        ok = number and math.isfinite(value) and value >= 0
    else:
        ok = isinstance(value, tp)
    if not ok:
        expected = "a whole number" if tp is int and signed else _EXPECTED[tp]
        raise Bad(f"{at}: expected {expected}, got {value!r}"[:200])
    return float(value) if tp is float else value


def measured_bound(key: str) -> int | None:
    """The most a measured run can hold under ``key`` (a setting, a count, a time ``*_s`` or a size
    ``*_bytes``, as loaderdoc's reports name them); None for a key with no bound."""
    if key in MEASURED_BOUNDS:
        return MEASURED_BOUNDS[key]
    if key in COUNTS:
        return MEASURED_COUNT
    if key.endswith("_bytes"):
        return MEASURED_BYTES
    return MEASURED_SECONDS if key.endswith("_s") else None


def beyond_measured(where: str, value: Any) -> str | None:
    """Why ``value`` at ``where`` (a key path; its last key names the bound) is no measurement: a
    number past :func:`measured_bound` (``num_workers`` 1,000,000, a batch of 10^30, a wait of 1e308 s)."""
    bound = measured_bound(where.rsplit(".", 1)[-1])
    if bound is None or not isinstance(value, (int, float)) or isinstance(value, bool) or value <= bound:
        return None if bound is None or not isinstance(value, float) or math.isfinite(value) else (
            f"{where}: expected a finite number, got {shown(value)}")
    return f"{where}: {shown(value)} is beyond any measured run (at most {bound:,}); not a measurement"


def shown(value: Any) -> str:
    """``repr(value)`` cut short; a whole number of thousands of digits named by its size (repr refuses it)."""
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= 10**30:
        return f"a number of {value.bit_length() * 30103 // 100000 + 1} digits"
    return repr(value)[:80]


def obj(value: Any, where: str) -> None:
    if not isinstance(value, dict):
        raise Bad(f"{where}: expected an object, got {kind(value)}")


def kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__)
