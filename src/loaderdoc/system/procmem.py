"""A process's memory and the shared-memory file system, read from ``/proc`` and ``statvfs``.

Standard library only, no loaderdoc import: ``loaderdoc watch``'s sampler loads this file by path
inside the user's program (where loaderdoc need not be importable), and the probe's monitor
imports it; both read memory with the same functions. Nothing here raises: an unreadable file
is None (a process that is gone, a zombie, not Linux).
"""

from __future__ import annotations

import os

MAPS_CAP = 1 << 22  # read at most 4 MiB of a maps file looking for the heap (it sits near the top)
SHM_PATH = "/dev/shm"


def read(path: str, size: int = 1 << 16) -> bytes | None:
    """Up to ``size`` bytes of a /proc file in one read; None where it cannot be read."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        return os.read(fd, size)
    except OSError:
        return None
    finally:
        os.close(fd)


def pss_bytes(pid: int | str = "self") -> int | None:
    """The proportional set size (shared pages split between their users), None where unreadable
    (or a zombie: it has no memory left)."""
    raw = read(f"/proc/{pid}/smaps_rollup")
    if not raw:
        return None
    at = raw.find(b"\nPss:")
    if at < 0:
        return None
    try:
        return int(raw[at + 5:raw.index(b"kB", at)]) * 1024
    except ValueError:
        return None


def heap_bytes(pid: int | str = "self") -> int | None:
    """Size of a process's malloc heap: its ``[heap]`` mappings (a forked process's heap grown
    after the fork is a mapping of its own), from ``/proc/<pid>/maps``, read until the line after
    the heap (a read of /proc returns a page at a time); None where unreadable or cut short."""
    try:
        fd = os.open(f"/proc/{pid}/maps", os.O_RDONLY)
    except OSError:
        return None
    data = b""
    try:
        while len(data) < MAPS_CAP:
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                break
            data += chunk
            last = data.rfind(b"[heap]\n")
            if last >= 0 and data.find(b"\n", last + 7) >= 0:
                break  # a whole line after the last heap mapping read: the heap's mappings are adjacent
        else:
            return None  # cut short before the heap was seen through
    except OSError:
        return None
    finally:
        os.close(fd)
    total = 0
    for line in data.split(b"\n"):
        if line.endswith(b"[heap]"):
            try:
                start, end = line.split(None, 1)[0].split(b"-")
                total += int(end, 16) - int(start, 16)
            except ValueError:
                return None
    return total


def shm_usage(path: str = SHM_PATH) -> tuple[int | None, int | None]:
    """(used, total) bytes of the shared-memory filesystem workers pass batches through."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None, None
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_blocks * st.f_frsize
