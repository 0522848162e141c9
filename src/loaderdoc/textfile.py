"""Reading a text file the user named, bounded: ``--config /dev/zero`` must not fill the RAM.

Config and machine files are kilobytes; anything past :data:`MAX_INPUT_BYTES` is not one.
"""

from __future__ import annotations

from pathlib import Path

MAX_INPUT_BYTES = 64 * 1024 * 1024


class InputTooLarge(ValueError):
    """The file holds more than :data:`MAX_INPUT_BYTES`; nothing of it is used."""


def read_bounded(path: str | Path, limit: int = MAX_INPUT_BYTES) -> str:
    """The file's text (UTF-8, a BOM dropped); OSError / UnicodeDecodeError as ``open`` raises them."""
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputTooLarge(f"over {limit // (1024 * 1024)} MiB; not a config or machine file")
    return data.decode("utf-8-sig")


def first_line(exc: BaseException) -> str:
    """An exception's message in one line, or its class name when it has none."""
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def read_input(path: str | Path, *, what: str, flag: str, error: type[Exception]) -> str:
    """The text of an input file the user named with ``flag``; every way it can't be read is
    ``error`` with one line naming the file: missing, a directory, unreadable, not UTF-8, too large."""
    try:
        return read_bounded(path)
    except FileNotFoundError:
        raise error(f"{path}: no such file; check the {flag} path") from None
    except IsADirectoryError:
        raise error(f"{path}: is a directory, not a {what}") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or first_line(exc)
        raise error(f"{path}: cannot read it ({reason})") from None
    except InputTooLarge as exc:
        raise error(f"{path}: {exc}") from None
