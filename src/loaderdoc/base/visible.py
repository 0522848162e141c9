"""Text from data, made safe to show: every control character written as an escape.

A command line, a path, a dataset's error message or a report's field can hold an escape
sequence; written raw to a terminal it is obeyed (colours, a new window title, a cleared screen,
with some terminals bytes typed back). loaderdoc's own text has no control character but newline
and tab, so every other one (C0, DEL, C1, and the bidirectional overrides that reorder what is
shown) is written as in a Python string literal: ESC as ``\\x1b``, U+202E as ``\\u202e``.
"""

from __future__ import annotations

import re
from typing import Any

# newline and tab lay text out; everything else here is obeyed by a terminal or reorders the line
# ... and a lone surrogate: a byte that was not UTF-8 in a command line or a path (Python keeps it as
# U+DC80-U+DCFF), which no UTF-8 text can hold (issue 49: `--run-name $'caf\xe9'` was exit 70)
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # the byte it stands for, as the shell would show it
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def encodable(text: str) -> str:
    """``text`` with each lone surrogate (a byte that was not UTF-8) written as its escape, so that
    it can be written as UTF-8; everything else as it is."""
    return _SURROGATE.sub(_escape, text)


def visible(text: str) -> str:
    """``text`` with every control character but newline and tab escaped (``\\x1b``)."""
    return _CONTROL.sub(_escape, text)


def visible_data(value: Any) -> Any:
    """A parsed JSON document with every string (keys too) made :func:`visible`."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, dict):
        return {visible(k) if isinstance(k, str) else k: visible_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [visible_data(v) for v in value]
    return value
