"""Reading small system files under a filesystem root, without ever raising.

Every reader in :mod:`loaderdoc.system` reads ``/proc``, ``/sys`` and friends through a
:class:`Tree`, so tests can point it at a recorded tree (``tests/fixtures/cgroup/...``) instead
of ``/``. Sources are always named as the path *on the machine* (``/proc/self/cgroup``), not the
path of the recorded copy, so a fixture recorded from a tree is byte-for-byte reproducible.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Text:
    """The outcome of reading one file: its text, or why it could not be read."""

    path: str  # the path as named on the machine, e.g. "/proc/self/cgroup"
    text: str | None = None
    error: str | None = None  # set when text is None
    missing: bool = False  # the file does not exist (as opposed to unreadable)

    @property
    def ok(self) -> bool:
        return self.text is not None


class Tree:
    """A filesystem root. ``Tree("/")`` is this machine; any other root is a recorded tree."""

    def __init__(self, root: str | os.PathLike[str] = "/") -> None:
        self.root = os.fspath(root) or "/"
        self.live = os.path.realpath(self.root) == "/"

    def path(self, path: str) -> str:
        """The real location of machine path ``path`` (absolute, e.g. "/proc/meminfo")."""
        if self.live:
            return path
        return os.path.join(self.root, path.lstrip("/"))

    def read(self, path: str, limit: int = 1 << 20) -> Text:
        """Read a text file; never raises. ``limit`` guards against runaway pseudo-files."""
        try:
            with open(self.path(path), encoding="utf-8", errors="replace") as fh:
                return Text(path, fh.read(limit))
        except FileNotFoundError:
            return Text(path, error=f"{path} does not exist", missing=True)
        except NotADirectoryError:
            return Text(path, error=f"{path} does not exist", missing=True)
        except PermissionError:
            return Text(path, error=f"{path}: permission denied")
        except IsADirectoryError:
            return Text(path, error=f"{path} is a directory")
        except OSError as exc:
            return Text(path, error=f"{path}: {exc.strerror or exc}")
        except Exception as exc:  # pragma: no cover - defensive: a reader never raises
            return Text(path, error=f"{path}: {type(exc).__name__}: {exc}")

    def exists(self, path: str) -> bool:
        try:
            return os.path.lexists(self.path(path))
        except (OSError, ValueError):
            return False

    def isdir(self, path: str) -> bool:
        try:
            return os.path.isdir(self.path(path))
        except (OSError, ValueError):
            return False

    def listdir(self, path: str) -> list[str]:
        try:
            return sorted(os.listdir(self.path(path)))
        except (OSError, ValueError):
            return []


def parse_int(text: str) -> int:
    """A whole number from a one-value file ("20000\\n"); raises ValueError otherwise."""
    value = text.strip()
    if not value:
        raise ValueError("empty file")
    return int(value, 10)


def parse_cpu_list(text: str) -> list[int]:
    """Kernel CPU list format ("0-3,8,10-11") -> [0, 1, 2, 3, 8, 10, 11]."""
    cpus: set[int] = set()
    body = text.strip()
    if not body:
        return []
    for part in body.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo_s, hi_s = part.split("-", 1)
            lo, hi = int(lo_s), int(hi_s)
            if hi < lo or hi - lo > 1 << 16:
                raise ValueError(f"bad CPU range {part!r}")
            cpus.update(range(lo, hi + 1))
        else:
            cpus.add(int(part))
    if any(c < 0 for c in cpus):
        raise ValueError("negative CPU number")
    return sorted(cpus)


def key_values(text: str, sep: str = ":") -> dict[str, str]:
    """``Key: value`` lines (``/proc/meminfo``, ``/proc/self/status``) -> dict."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if sep in line:
            key, _, value = line.partition(sep)
            out[key.strip()] = value.strip()
    return out
