"""CPU accounting for the watch hook: the DataLoader workers' CPU time per epoch, what other
processes took from this process's CPUs, and the readings of ``/proc`` they stand on.

Standard library only: under ``loaderdoc watch`` this file is loaded by path beside ``hook.py``
(and reads ``/proc`` with the ``sampler.py`` loaded there before it). Read per epoch (its start and end) and per sampler tick, never per batch: the
per-batch CPU time of the training process comes from ``time.process_time`` in the hook.
"""

from __future__ import annotations

import os
import sys
import threading
import time

if __package__:  # imported as loaderdoc.watching.cpuacct
    from loaderdoc.watching.sampler import _read
else:  # loaded by path beside hook.py, which loads sampler.py first
    _read = sys.modules["_loaderdoc_watch_sampler"]._read


try:
    _TICK = float(os.sysconf("SC_CLK_TCK"))  # the unit of /proc's CPU times (100 on Linux)
except (AttributeError, ValueError, OSError):
    _TICK = 100.0


def cpu_times(pid: int | str = "self") -> tuple[float, float] | None:
    """(its own CPU seconds, its reaped children's) from ``/proc/<pid>/stat``: utime + stime, and
    cutime + cstime (the kernel adds a child's whole CPU time there when the child is reaped, so
    workers that exited still count); None where unreadable (the process is gone)."""
    raw = _read(f"/proc/{pid}/stat", 1024)
    if not raw:
        return None
    try:  # fields after the name: state ppid ... utime(14) stime cutime cstime, counted from 1
        f = raw[raw.rindex(b")") + 2:].split()
        return (int(f[11]) + int(f[12])) / _TICK, (int(f[13]) + int(f[14])) / _TICK
    except (ValueError, IndexError):
        return None


def runqueue_seconds(pid: int | str) -> float | None:
    """Seconds a process's main thread waited on a run queue: runnable, but every CPU it may use
    was busy (``/proc/<pid>/schedstat``, second field, in ns; None where unreadable or the kernel
    keeps no schedstats). A worker that loads CPU work is running or runnable all the time; one
    that waits on I/O (or for a free slot in the queue) is neither."""
    raw = _read(f"/proc/{pid}/schedstat", 256)
    try:
        return int(raw.split()[1]) / 1e9 if raw else None
    except (ValueError, IndexError):
        return None


def busy_seconds(cpus: frozenset[int] | None) -> float | None:
    """CPU seconds every process on the machine spent on ``cpus`` (the ones this process may run
    on; None: all), from ``/proc/stat``: user, nice, system, irq, softirq and steal; idle and iowait
    are not busy. Minus this process tree's own, it is what other processes took from the CPUs."""
    raw = _read("/proc/stat", 1 << 20)
    if not raw:
        return None
    total = 0
    for line in raw.split(b"\n"):
        if not line.startswith(b"cpu") or line[3:4] == b" ":
            continue
        name, *fields = line.split()
        try:
            if cpus is not None and int(name[3:]) not in cpus:
                continue
            user, nice, system, _idle, _iowait, irq, softirq, steal = (int(x) for x in fields[:8])
        except ValueError:
            continue
        total += user + nice + system + irq + softirq + steal
    return total / _TICK


class CpuLedger:
    """The DataLoader workers' CPU time, per epoch: each worker pid belongs to the epoch whose
    iterator it serves now (persistent workers move to the next epoch); every :meth:`settle` adds
    what each live worker used since the last one, and a worker that was reaped meanwhile is
    found in this process's children's time, which the kernel grew by the worker's whole life.
    Called from the loop's thread (epoch starts and ends) and the sampler's (ticks): one lock."""

    def __init__(self) -> None:
        self._owner: dict[int, object] = {}  # pid -> the EpochRecord it works for
        self._seen: dict[int, float] = {}  # pid -> CPU seconds read at the last settle
        self._queued: dict[int, float] = {}  # pid -> run-queue seconds read at the last settle
        own = cpu_times()
        self._reaped = own[1] if own else None
        # workers gone from /proc whose whole lives the children's time has not shown yet: (the
        # epoch, CPU seconds already counted for it)
        self._pending: list[tuple[object, float]] = []
        self._lock = threading.Lock()

    def track(self, pids: list[int], epoch) -> None:
        """``pids`` now load for ``epoch`` (a new worker's CPU since its start counts for it)."""
        with self._lock:
            self._settle()
            for pid in pids:
                self._owner[pid] = epoch
                self._seen.setdefault(pid, 0.0)
                self._queued.setdefault(pid, 0.0)
                if epoch.workers_cpu_s is None:
                    epoch.workers_cpu_s = 0.0

    def settle(self) -> None:
        with self._lock:
            self._settle()

    def live(self) -> list:
        """The epochs a later settle may still add CPU time to: those a worker serves now (a
        persistent worker's ended epoch until the next begins), those a reaped worker's life is
        still to be found for. The recorder freezes an epoch only once it is in neither."""
        with self._lock:
            return [*self._owner.values(), *(epoch for epoch, _ in self._pending)]

    def settled(self, epoch) -> tuple[float | None, float | None]:
        """Settle, then the epoch's workers' (CPU, run-queue) seconds, read under the lock."""
        with self._lock:
            self._settle()
            return epoch.workers_cpu_s, epoch.workers_runq_s

    def _settle(self) -> None:
        own = cpu_times()  # first: a worker reaped after this read is still alive below, or gone next time
        reaped = own[1] if own else None
        gone = []
        for pid, epoch in list(self._owner.items()):
            times = cpu_times(pid)
            if times is None:
                gone.append(pid)
                continue
            epoch.workers_cpu_s = (epoch.workers_cpu_s or 0.0) + max(0.0, times[0] - self._seen[pid])
            self._seen[pid] = times[0]
            queued = runqueue_seconds(pid)
            if queued is not None:
                epoch.workers_runq_s = (epoch.workers_runq_s or 0.0) + max(0.0, queued - self._queued[pid])
                self._queued[pid] = queued
        for pid in gone:
            self._pending.append((self._owner.pop(pid), self._seen.pop(pid)))
            del self._queued[pid]
        if reaped is None or self._reaped is None:
            return
        if not self._pending:
            self._reaped = reaped  # another child's growth (a subprocess the script ran): not the workers'
            return
        # the kernel grew the children's time by each reaped worker's whole life; a worker reaped
        # after `own` was read is gone already but not in this growth: wait for the next settle
        counted = sum(seen for _, seen in self._pending)
        grown = reaped - self._reaped
        if grown + 1e-6 < counted:
            return
        for epoch, _ in self._pending:
            epoch.workers_cpu_s = (epoch.workers_cpu_s or 0.0) + (grown - counted) / len(self._pending)
        self._pending.clear()
        self._reaped = reaped

    def now(self, cpus: frozenset[int] | None) -> dict:
        """This process's CPU time (every thread) and every process's busy time on ``cpus``, now:
        the sampler keeps them beside the loaders' sums, so a window between two samples has both."""
        return {"proc_cpu_s": time.process_time(), "busy_s": busy_seconds(cpus)}


def begin_epoch(recorder, epoch, iterator) -> None:
    """The epoch's CPU accounting starts: its workers (a multiprocessing iterator's ``_workers``;
    persistent ones carry over), every process's busy time, torch's thread count."""
    try:
        pids = [w.pid for w in getattr(iterator, "_workers", None) or () if getattr(w, "pid", None)]
        recorder.cpu.track(pids, epoch)
        epoch.busy_start = busy_seconds(recorder.cpus)
        torch = sys.modules.get("torch")
        threads = getattr(torch, "get_num_threads", None)
        epoch.torch_threads = int(threads()) if threads is not None else None
    except Exception:  # accounting is a bonus: never break the user's loop over it
        pass


def first_batch(recorder, epoch) -> None:
    """The workers' CPU and run-queue time by the epoch's first batch: their start-up (imports,
    the dataset copied in) and the first batches in flight, which the steady per-batch figures leave out."""
    try:
        if epoch.workers_cpu_s is not None:
            epoch.workers_cpu_first, epoch.workers_runq_first = recorder.cpu.settled(epoch)
    except Exception:
        pass


def end_epoch(recorder, epoch) -> None:
    """The epoch's CPU accounting ends (once): its workers settled, this process's CPU time over
    the epoch, every process's busy time."""
    if epoch.proc_cpu_s is not None:
        return
    try:
        epoch.workers_cpu_at_end = recorder.cpu.settled(epoch)[0]
        epoch.proc_cpu_s = time.process_time() - epoch.cpu_start
        busy = busy_seconds(recorder.cpus)
        if busy is not None and epoch.busy_start is not None:
            epoch.busy_s = busy - epoch.busy_start
    except Exception:
        pass


def others_cpu_s(epoch) -> float | None:
    """CPU time other processes took on this process's CPUs while the epoch ran: every
    process's busy time there, less this process's and its workers' (None before the end)."""
    if epoch.busy_s is None or epoch.proc_cpu_s is None:
        return None
    return max(0.0, epoch.busy_s - epoch.proc_cpu_s - (epoch.workers_cpu_at_end or 0.0))
