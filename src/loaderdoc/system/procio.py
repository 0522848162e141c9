"""A process's reads, from ``/proc/<pid>/io``: what it asked for and what came from a device.

Standard library only, no loaderdoc import: ``loaderdoc watch``'s hook loads this file by path
inside the user's program (where loaderdoc need not be importable). Nothing here raises: an
unreadable file is None, and :func:`unreadable_reason` says why.

Three of the file's counters, kept in this order as a ``Reads`` tuple:

- ``rchar``: bytes passed to ``read()`` and ``pread()``, whatever served them: the page cache, a
  device, a pipe from another process, a network file system;
- ``syscr``: read calls;
- ``read_bytes``: bytes this process caused to be fetched from a block device (a page cache hit
  adds nothing; tmpfs and network file systems have no block device and add nothing either).

The whole-process file (``/proc/<pid>/io``) also holds the threads that exited and the children
that were reaped (the kernel adds a reaped child's whole life to its parent's); a thread's file
(``/proc/<pid>/task/<tid>/io``) holds only that thread.
"""

from __future__ import annotations

import os

FIELDS = (b"rchar", b"syscr", b"read_bytes")
Reads = tuple  # (rchar, syscr, read_bytes)
ZERO: Reads = (0, 0, 0)


def _read(path: str) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, 4096)
    except OSError:
        return None
    finally:
        os.close(fd)


def parse(raw: bytes | None) -> Reads | None:
    """The three counters of an io file's text; None where one is missing."""
    if not raw:
        return None
    found = {}
    for line in raw.split(b"\n"):
        name, _, value = line.partition(b":")
        if name in FIELDS:
            try:
                found[name] = int(value)
            except ValueError:
                return None
    if len(found) != len(FIELDS):
        return None
    return tuple(found[f] for f in FIELDS)


def reads(pid: int | str = "self") -> Reads | None:
    """The whole process's reads (exited threads and reaped children included); None where unreadable."""
    return parse(_read(f"/proc/{pid}/io"))


def thread_reads(pid: int | str = "self") -> dict[int, Reads] | None:
    """Each live thread's own reads (no reaped children in them); None where the task list or
    every thread's file is unreadable."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    out = {}
    for tid in tids:
        counts = parse(_read(f"/proc/{pid}/task/{tid}/io"))
        if counts is not None:
            out[int(tid)] = counts
    return out or None


def unreadable_reason(pid: int | str = "self") -> str | None:
    """Why ``/proc/<pid>/io`` gives no reads (None: it does), in words for the report."""
    path = f"/proc/{pid}/io"
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return f"{path} does not exist (not Linux, or a kernel without task I/O accounting)"
    except OSError as exc:
        return f"{path} cannot be opened: {exc.strerror or exc}"
    try:
        raw = os.read(fd, 4096)
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror or exc}"
    finally:
        os.close(fd)
    if parse(raw) is None:
        return f"{path} holds no rchar, syscr and read_bytes counters"
    return None


def minus(a: Reads, b: Reads) -> Reads:
    """``a - b`` per counter, never below 0."""
    return tuple(max(0, a[k] - b[k]) for k in range(len(FIELDS)))


def plus(a: Reads | None, b: Reads) -> Reads:
    return b if a is None else tuple(a[k] + b[k] for k in range(len(FIELDS)))
