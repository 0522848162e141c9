"""Dataclass <-> plain-JSON conversion, so facts and results can be recorded as fixtures.

Only what loaderdoc's dataclasses use is supported: nested dataclasses, lists of them,
Optional fields and plain JSON values. Unknown keys in the input are ignored so that an old
build can still read a fixture recorded by a newer one.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")


def to_dict(obj: Any) -> Any:
    """Turn a dataclass tree into JSON-ready dicts and lists."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(x) for x in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


def from_dict(cls: type[T], data: Any) -> T:
    """Rebuild a dataclass of type ``cls`` from what :func:`to_dict` produced."""
    return _convert(cls, data)


class Recorded:
    """The JSON methods of a dataclass recorded whole (a :class:`ProbeReport`, :class:`MachineFacts`):
    :func:`to_dict` and :func:`from_dict`, as text. A mixin: it adds no field."""

    def to_dict(self) -> dict:
        return to_dict(self)

    @classmethod
    def from_dict(cls: type[T], data: dict) -> T:
        return from_dict(cls, data)

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls: type[T], text: str) -> T:
        return cls.from_dict(json.loads(text))


def _convert(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(tp):
            if arg is type(None):
                continue
            return _convert(arg, data)
        return data
    if origin in (list, tuple):
        (arg, *_) = typing.get_args(tp) or (Any,)
        items = [_convert(arg, x) for x in data]
        return items if origin is list else tuple(items)
    if origin is dict:
        _, arg = typing.get_args(tp) or (Any, Any)
        return {k: _convert(arg, v) for k, v in data.items()}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for f in dataclasses.fields(tp):
            if f.name in data and f.init:
                kwargs[f.name] = _convert(hints[f.name], data[f.name])
        return tp(**kwargs)
    if tp is float and isinstance(data, int) and not isinstance(data, bool):
        return float(data)
    return data
