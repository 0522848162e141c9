"""Datasets that fail the way real ones do, for tests/test_faults_*.py (``faults_data:FACTORY``).

Each is small and quick; the fault tests use budgets of a few seconds.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import time

import torch
from torch.utils.data import Dataset, IterableDataset, get_worker_info

MiB = 1024 * 1024


class Big(Dataset):
    """3 MiB uint8 samples made on the fly: batches of 16 are 48 MiB, more than a 16 MiB /dev/shm."""

    def __len__(self) -> int:
        return 10_000

    def __getitem__(self, i: int):
        return torch.full((3, 1024, 1024), i % 251, dtype=torch.uint8)


def make_big():
    return Big()


class Small(Dataset):
    """Tiny samples with a few ms of latency, so a probe is still measuring when a test stops it."""

    def __init__(self, io_ms: float = 5.0, n: int = 100_000) -> None:
        self.io_ms = io_ms
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.io_ms / 1000)
        return torch.full((4,), float(i))


def make_slow():
    return Small(io_ms=20.0)


class RaisesOnSome(Small):
    """Index 7 of every 50 is corrupt: the first batches load, then a worker raises."""

    def __getitem__(self, i: int):
        if i % 50 == 7:
            raise OSError(f"cannot decode sample {i}: truncated file")
        return super().__getitem__(i)


def make_raises_on_some():
    return RaisesOnSome(io_ms=1.0, n=2000)


class KillsItsWorker(Small):
    """A worker is SIGKILLed (as the OOM killer does) in its second batch of 8: every worker is
    sent prefetch_factor (2) batches the moment it starts, so it gets there however slowly a
    loaded machine measures (at its 40th sample a starved probe's short window could end first)."""

    def __init__(self) -> None:
        super().__init__(io_ms=2.0)
        self.loaded = 0

    def __getitem__(self, i: int):
        if get_worker_info() is not None:
            self.loaded += 1
            if self.loaded == 12:
                os.kill(os.getpid(), signal.SIGKILL)
        return super().__getitem__(i)


def make_kills_its_worker():
    return KillsItsWorker()


class HangsInWorker(Small):
    """A worker stops delivering after a few batches (a stuck network read)."""

    def __init__(self) -> None:
        super().__init__(io_ms=2.0)
        self.loaded = 0

    def __getitem__(self, i: int):
        if get_worker_info() is not None:
            self.loaded += 1
            if self.loaded >= 20:
                time.sleep(3600)
        return super().__getitem__(i)


def make_hangs_in_worker():
    return HangsInWorker()


class Hoarder(Small):
    """Keeps 128 MiB for every sample it loads (a cache that never evicts): memory grows per item.

    Big enough that the two batches of 4 any configuration loads before its measurement can end
    (the first and one warm-up batch) pass a 900 MiB limit, however slowly a loaded machine gets
    through them: with 32 MiB a starved probe measured 0 workers in 3 batches, never reached the
    limit and stopped there ("not starved").
    """

    def __init__(self) -> None:
        super().__init__(io_ms=1.0)
        self.kept: list[bytes] = []

    def __getitem__(self, i: int):
        self.kept.append(b"\x01" * (128 * MiB))  # touches every page: real, resident memory
        return super().__getitem__(i)


def make_hoarder():
    return Hoarder()


class Endless(IterableDataset):
    """A stream that never ends (no __len__), split between workers with get_worker_info() as
    torch's documentation shows: worker k of n yields k, k + n, k + 2n, ..."""

    def __iter__(self):
        info = get_worker_info()
        first, stride = (info.id, info.num_workers) if info is not None else (0, 1)
        for i in itertools.count(first, stride):
            time.sleep(0.002)
            yield torch.full((4,), float(i))


def make_endless():
    return Endless()


class EndlessUnsplit(IterableDataset):
    """The same stream without get_worker_info(): every worker yields 0, 1, 2, ..."""

    def __iter__(self):
        for i in itertools.count():
            time.sleep(0.002)
            yield torch.full((4,), float(i))


def make_endless_unsplit():
    return EndlessUnsplit()


# ---- datasets that start processes in their own session --------------------------------------
SPAWN_LOG = "FAULTS_SPAWN_LOG"  # a file each started process's pid is appended to, when set


def _log_pid(pid: int) -> None:
    path = os.environ.get(SPAWN_LOG)
    if path:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        os.write(fd, f"{pid}\n".encode())
        os.close(fd)


def _become_sleeper() -> None:
    """In a forked child: a new session, no inherited stdio, then `sleep 300` (never returns)."""
    try:
        with contextlib.suppress(OSError):  # already a session leader
            os.setsid()
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        os.execvp("sleep", ["sleep", "300"])
    finally:
        os._exit(1)


def start_detached_processes() -> None:
    """Start three processes that leave the caller's process group, as servers and daemons do:
    Popen(start_new_session=True), os.setsid() in a forked child, and a double fork whose grandchild
    is orphaned at once (reparented away from the caller's tree)."""
    popen = subprocess.Popen(["sleep", "300"], start_new_session=True, stdin=subprocess.DEVNULL,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _log_pid(popen.pid)
    child = os.fork()
    if child == 0:
        _become_sleeper()
    _log_pid(child)
    middle = os.fork()
    if middle == 0:  # the daemon's double fork
        try:
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                _become_sleeper()
            _log_pid(grandchild)
        finally:
            os._exit(0)
    os.waitpid(middle, 0)


class StartsProcesses(Small):
    """Starts detached processes on the first sample each process loads (the measuring process
    with 0 workers, every worker otherwise); optionally fails every sample after that."""

    def __init__(self, io_ms: float = 2.0, fail: bool = False) -> None:
        super().__init__(io_ms=io_ms)
        self.fail = fail
        self.started = False

    def __getitem__(self, i: int):
        if not self.started:
            self.started = True
            start_detached_processes()
        if self.fail:
            raise OSError(f"cannot decode sample {i}: truncated file")
        return super().__getitem__(i)


def make_starts_processes():
    return StartsProcesses()


def make_starts_processes_slow():
    return StartsProcesses(io_ms=20.0)


def make_starts_processes_then_fails():
    return StartsProcesses(fail=True)


def make_starts_processes_in_factory():
    start_detached_processes()  # in the loaderdoc process itself, before any probing
    return Small(io_ms=2.0)


# ---- factories that are wrong ------------------------------------------------------------------
def needs_an_argument(root):
    return Small()


class NotADataset:
    def __getitem__(self, i):
        return i


def returns_getitem_without_len():
    return NotADataset()


def returns_a_list_of_tensors_tuple():
    return ([torch.zeros(1)], [torch.zeros(1)], 3)


def raises_keyboard_interrupt_like():
    raise SystemExit(2)
