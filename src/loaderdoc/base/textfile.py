"""Reading a text file the user named, bounded: ``--config /dev/zero`` must not fill the RAM.

Config and machine files are kilobytes; anything past :data:`MAX_INPUT_BYTES` is not one.
"""

from __future__ import annotations

from pathlib import Path

MAX_INPUT_BYTES = 64 * 1024 * 1024


class InputTooLarge(ValueError):
    """The file holds more than :data:`MAX_INPUT_BYTES`; nothing of it is used."""


class NoWriter(ValueError):
    """A FIFO nobody writes to: reading it would wait for ever."""


def read_bounded(path: str | Path, limit: int = MAX_INPUT_BYTES) -> str:
    """The file's text (UTF-8, a BOM dropped); OSError / UnicodeDecodeError as ``open`` raises them.

    A named pipe is opened without waiting for a writer (``open`` would block until one came, for
    ever where none does): a pipe with its writer (``--config <(cmd)``) is read to its end, one
    with none is :class:`NoWriter`."""
    import os
    import stat

    if stat.S_ISFIFO(os.stat(path).st_mode):
        data = _read_pipe(path, limit)
    else:
        with open(path, "rb") as fh:
            data = fh.read(limit + 1)
    if len(data) > limit:
        raise InputTooLarge(f"over {limit // (1024 * 1024)} MiB; not a config or machine file")
    return data.decode("utf-8-sig")


def _read_pipe(path: str | Path, limit: int) -> bytes:
    import os
    import select

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:  # a writer, not done yet: wait for its next bytes
                select.select([fd], [], [])
                continue
            if not chunk:  # end: the writer closed, or there never was one
                if not chunks:
                    raise NoWriter("a named pipe with nothing written to it (no writer)")
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


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
    except (InputTooLarge, NoWriter) as exc:
        raise error(f"{path}: {exc}") from None
