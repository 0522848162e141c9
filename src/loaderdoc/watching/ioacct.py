"""Read accounting for the watch hook: what the training process and its DataLoader workers read
per epoch (bytes asked for, read calls, bytes fetched from a device), from ``/proc/<pid>/io``.

Standard library only: under ``loaderdoc watch`` this file is loaded by path beside ``hook.py``,
and it loads ``system/procio.py`` by path as the sampler loads ``system/procmem.py``. Read at an
epoch's start, its first batch and its end, and at each sampler tick; never per batch.

- The training process's own reads are its live threads' (``/proc/self/task/<tid>/io``), summed
  into a running total: the whole-process file also holds the workers it reaped. The sampler's
  thread is left out (it reads ``/proc``, not data).
- A worker's reads count for the epoch whose iterator it serves now, as in :mod:`cpuacct`. A
  worker reaped between two readings is found in the whole-process file less the live threads,
  which the kernel grew by the worker's whole life: what it read after the last reading is that
  growth less what was counted, split among the workers reaped meanwhile.
"""

from __future__ import annotations

import contextlib
import sys
import threading

if __package__:  # imported as loaderdoc.watching.ioacct
    from loaderdoc.system import procio
else:  # loaded by path beside hook.py, which loads sampler.py first
    procio = sys.modules["_loaderdoc_watch_sampler"].system_module("procio")

ZERO = procio.ZERO
minus, plus = procio.minus, procio.plus


class IoLedger:
    """This process's own reads as a running total, and its workers' reads per epoch. Called from
    the loop's thread (epoch start, first batch, end) and the sampler's (ticks): one lock."""

    def __init__(self) -> None:
        self.reason = procio.unreadable_reason("self")  # None: /proc/self/io is readable
        self.main = ZERO  # this process's own threads' reads since the ledger began
        self._threads: dict[int, tuple] | None = None  # tid -> its reads at the last settle
        self._skip: set[int] = set()  # threads whose reads are not the program's (the sampler)
        self._gone = None  # whole-process reads less the live threads': exited threads, reaped children
        self._owner: dict[int, object] = {}  # worker pid -> the EpochRecord it works for
        self._seen: dict[int, tuple] = {}  # worker pid -> its reads at the last settle
        self._pending: list[tuple[object, tuple]] = []  # reaped workers not yet found in _gone: (epoch, counted)
        self._open: list = []  # epochs begun and not ended: their io_main follows self.main
        self._lock = threading.Lock()
        self.settle()

    procio = procio  # for the tracer, which loads no module of its own

    @property
    def readable(self) -> bool:
        return self.reason is None

    def skip_current_thread(self) -> None:
        with self._lock:
            self._skip.add(threading.get_native_id())

    def begin(self, epoch, pids: list[int]) -> None:
        if self.reason is not None:
            return  # the epoch's reads stay None: not measured
        with self._lock:
            # the workers first: persistent ones began loading this epoch's batches when
            # iter(loader) reset them, and their last epoch was settled when it ended
            for pid in pids:
                self._owner[pid] = epoch
                self._seen.setdefault(pid, ZERO)  # a new worker's reads since its start count
                if epoch.io_workers is None:
                    epoch.io_workers = ZERO
            self._settle()
            epoch.io_main_start = self.main
            epoch.io_main = ZERO
            self._open.append(epoch)

    def first_batch(self, epoch) -> None:
        with self._lock:
            self._settle()
            if epoch.io_main is not None:
                epoch.io_first = loading(epoch)

    def end(self, epoch) -> None:
        with self._lock:
            if epoch not in self._open:
                return
            self._settle()
            self._open.remove(epoch)

    def settle(self) -> None:
        with self._lock:
            self._settle()

    def live(self) -> list:
        """The epochs a later settle may still add reads to (begun and not ended, served by a
        worker now, or owed a reaped worker's last reads), as :meth:`CpuLedger.live`."""
        with self._lock:
            return [*self._open, *self._owner.values(), *(epoch for epoch, _ in self._pending)]

    def loading(self, epoch) -> tuple:
        """The epoch's loading's reads so far (:func:`loading`), settled now."""
        if self.reason is not None or epoch.io_main is None:
            return ZERO
        with self._lock:
            self._settle()
            return loading(epoch)

    def excluded(self, action) -> None:
        """Run ``action``; what this process's threads read meanwhile counts for no epoch, nor do
        the threads it starts (the profiler's start reads megabytes of its own files, and its
        threads go on reading: not the loader's data)."""
        if self.reason is not None:
            action()
            return
        with self._lock:
            self._settle()
            before, threads = self.main, set(self._threads or ())
        try:
            action()
        finally:
            with self._lock:
                self._settle()
                spent = minus(self.main, before)
                self._skip.update(set(self._threads or ()) - threads)
                for epoch in self._open:
                    epoch.io_main_start = plus(epoch.io_main_start, spent)
                    epoch.io_main = minus(self.main, epoch.io_main_start)

    def _settle(self) -> None:
        if self.reason is not None:
            return
        whole = procio.reads("self")  # first: a worker reaped after it is gone below and found next time
        threads = procio.thread_reads("self")
        if whole is None or threads is None:
            return
        if self._threads is None:  # the first reading is the baseline
            self._threads = threads
        for tid, now in threads.items():
            if tid not in self._skip:
                self.main = plus(self.main, minus(now, self._threads.get(tid, ZERO)))
        self._threads = threads
        self._skip.intersection_update(threads)
        for epoch in self._open:
            epoch.io_main = minus(self.main, epoch.io_main_start)
        gone_now = minus(whole, _sum(threads.values()))
        for pid, epoch in list(self._owner.items()):
            now = procio.reads(pid)
            if now is None:  # reaped (or unreadable): its last reads are in the whole-process file
                self._pending.append((self._owner.pop(pid), self._seen.pop(pid)))
                continue
            epoch.io_workers = plus(epoch.io_workers, minus(now, self._seen[pid]))
            self._seen[pid] = now
        if self._gone is None or not self._pending:
            self._gone = gone_now  # an exited thread's or another child's reads: not a worker's
            return
        grown = minus(gone_now, self._gone)
        counted = _sum(seen for _, seen in self._pending)
        if grown[0] < counted[0]:
            return  # a worker reaped after `whole` was read: its life shows at the next settle
        share = tuple(v // len(self._pending) for v in minus(grown, counted))
        for epoch, _ in self._pending:
            epoch.io_workers = plus(epoch.io_workers, share)
        self._pending.clear()
        self._gone = gone_now


def fields(epoch) -> dict:
    """The epoch's reads as its records hold them: this process's own threads' over the epoch,
    its workers', the loading's by the first batch, and --trace's steps (left out of the figures)."""
    def listed(reads):
        return list(reads) if reads is not None else None

    return {"io_main": listed(epoch.io_main), "io_workers": listed(epoch.io_workers),
            "io_first": listed(epoch.io_first), "io_traced": epoch.io_traced}


def loading(epoch) -> tuple:
    """The reads that load the epoch's batches: its workers' where it has workers (the training
    process then reads batches through pipes, and pages in its own code and model), else the
    training process's own."""
    return epoch.io_workers if epoch.io_workers is not None else epoch.io_main


def _sum(values) -> tuple:
    total = ZERO
    for v in values:
        total = plus(total, v)
    return total


def begin_epoch(recorder, epoch, iterator) -> None:
    """The epoch's read accounting starts: this process's running total, its workers (a
    multiprocessing iterator's ``_workers``; persistent ones carry over)."""
    try:
        pids = [w.pid for w in getattr(iterator, "_workers", None) or () if getattr(w, "pid", None)]
        recorder.io.begin(epoch, pids)
    except Exception:  # accounting is a bonus: never break the user's loop over it
        pass


def first_batch(recorder, epoch) -> None:
    """What the epoch had read by its first batch: the workers' start-up and the batches in flight."""
    with contextlib.suppress(Exception):  # accounting is a bonus
        recorder.io.first_batch(epoch)


def end_epoch(recorder, epoch) -> None:
    with contextlib.suppress(Exception):
        recorder.io.end(epoch)
