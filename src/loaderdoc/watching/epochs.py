"""A watched DataLoader as the hook records it: :class:`LoaderRecord` (what it is, how it was
built, what --apply changed) and one :class:`EpochRecord` per ``iter()``, updated in place by the
wrapped iterator (``hook.WatchedIterator``) and read when the records are written.

Standard library only: under ``loaderdoc watch`` it is loaded by path beside ``hook.py``, after
``apply.py``, ``cpuacct.py`` and ``ioacct.py``, whose fields it writes out.
"""

from __future__ import annotations

import sys
import time

if __package__:  # imported as loaderdoc.watching.epochs
    from loaderdoc.watching import apply, cpuacct, ioacct
else:  # loaded by path beside hook.py, which loads apply.py, cpuacct.py and ioacct.py first
    apply = sys.modules["_loaderdoc_watch_apply"]
    cpuacct = sys.modules["_loaderdoc_watch_cpuacct"]
    ioacct = sys.modules["_loaderdoc_watch_ioacct"]

cpu_clock = time.process_time  # this process's CPU time, every thread (torch's intra-op pool included)
# the loop's own thread: its CPU time is work (the loading without workers, the hand-over, the step's
# share of each op); the rest of the process's is its other threads': torch's intra-op pool, which
# spins while it waits for the next op, and the pin-memory thread
loop_clock = time.thread_time


class EpochRecord:
    """One ``iter(loader)``: counters updated in place by the iterator, read at write time."""

    __slots__ = ("index", "started", "last", "steps", "waited", "wait_s", "step_s", "first_batch_s",
                 "finished", "closed", "samples", "stride", "workers_pss_max", "workers_heap_grown", "gpu_idle_s",
                 "gpu_waits_timed", "gpu_pending", "cpu_wait_s", "cpu_step_s", "cpu_start", "proc_cpu_s",
                 "workers_cpu_s", "busy_start", "busy_s", "workers_cpu_at_end", "torch_threads", "workers_runq_s",
                 "workers_cpu_first", "workers_runq_first", "cpu_wait_wall_s", "cpu_step_wall_s",
                 "cpu_wait_loop_s", "cpu_step_loop_s", "iter_s", "stop_s",
                 "io_main_start", "io_main", "io_workers", "io_first", "io_traced", "iterator", "settled")

    def __init__(self, index: int, started: float) -> None:
        self.index = index
        self.started = started  # perf_counter at iter(loader)
        self.last = started  # the latest moment this epoch was seen doing something
        self.steps = 0  # batches returned
        self.waited = 0  # batches after the first (their wait is in wait_s)
        self.wait_s = 0.0
        self.step_s = 0.0
        self.first_batch_s: float | None = None  # from iter(loader), so iter_s is in it
        # what persistent workers save, timed where it happens: iter(loader) itself (starting the
        # workers: a fork each, from a process that may hold gigabytes) and the call that raised
        # StopIteration (shutting them down: torch joins each); None where it did not happen
        self.iter_s: float | None = None
        self.stop_s: float | None = None
        self.finished = False  # StopIteration seen (False: abandoned, interrupted or still running)
        # a later epoch of the same loader began before this one's StopIteration: it is over, ended
        # at its last batch (Lightning stops at len(loader) and never asks for StopIteration)
        self.closed = False
        self.samples: list[float] = []
        self.stride = 1
        self.workers_pss_max: int | None = None  # set by the sampler thread only
        self.workers_heap_grown: int | None = None  # ... with the malloc heap they had grown then
        self.gpu_idle_s: float | None = None  # None: this epoch's waits were not GPU-timed
        self.gpu_waits_timed = 0
        self.gpu_pending = 0  # GPU-timed waits whose events had not completed yet
        # CPU accounting (cpuacct): this process's CPU time in the waits, the steps, the whole epoch;
        # its workers'; every process's busy time on its CPUs (what others took)
        self.cpu_wait_s = 0.0  # in the CPU-timed waits and steps (CPU_ALL, then CPU_EVERY) ...
        self.cpu_step_s = 0.0
        self.cpu_wait_wall_s = 0.0  # ... whose wall time is this
        self.cpu_step_wall_s = 0.0
        self.cpu_wait_loop_s = 0.0  # ... and the loop's own thread's CPU time in them
        self.cpu_step_loop_s = 0.0
        self.cpu_start = cpu_clock()
        self.proc_cpu_s: float | None = None  # set when the epoch ends
        self.workers_cpu_s: float | None = None  # None: no worker processes (or none read)
        self.workers_cpu_at_end: float | None = None
        self.workers_runq_s: float | None = None  # the workers' time runnable but waiting for a CPU
        self.workers_cpu_first: float | None = None  # ... both by the first batch: their start-up
        self.workers_runq_first: float | None = None
        self.busy_start: float | None = None
        self.busy_s: float | None = None
        self.torch_threads: int | None = None  # torch.get_num_threads() when the epoch began
        # reads (ioacct: rchar, read calls, bytes from a device; None: not read)
        self.io_main_start = self.io_main = self.io_workers = self.io_first = self.io_traced = None
        # for the recorder's freeze (issue 49): the WatchedIterator counting into this epoch (a weak
        # reference: while it lives it may count more), and whether the epoch's end was accounted
        self.iterator = None
        self.settled = False

    def to_dict(self, t0: float) -> dict:
        waits = sorted(self.samples)  # sorted() copies first: safe while the loop appends
        return {
            "epoch": self.index,
            "steps": self.steps,
            "waits": self.waited,  # batches after the first: wait_s sums their waits
            "wait_s": self.wait_s,
            "steps_timed": self.waited + (1 if self.finished and self.steps else 0),  # in step_s
            "step_s": self.step_s,
            "first_batch_s": self.first_batch_s,
            "iter_s": self.iter_s,
            "stop_s": self.stop_s,
            "wall_s": self.last - self.started,
            "finished": self.finished,
            "wait_p50_s": _quantile(waits, 0.50),
            "wait_p95_s": _quantile(waits, 0.95),
            "wait_sampled": len(waits),
            "start_s": self.started - t0,
            "end_s": self.last - t0 if self.finished or self.closed else None,
            "workers_pss_max_bytes": self.workers_pss_max,
            "workers_heap_grown_bytes": self.workers_heap_grown,
            "gpu_idle_s": self.gpu_idle_s,
            "gpu_waits_timed": self.gpu_waits_timed,
            "gpu_waits_unresolved": self.gpu_pending,
            "cpu_wait_s": self.cpu_wait_s,
            "cpu_step_s": self.cpu_step_s,
            "cpu_wait_wall_s": self.cpu_wait_wall_s,
            "cpu_step_wall_s": self.cpu_step_wall_s,
            "cpu_wait_loop_s": self.cpu_wait_loop_s,
            "cpu_step_loop_s": self.cpu_step_loop_s,
            "proc_cpu_s": self.proc_cpu_s,
            "workers_cpu_s": self.workers_cpu_s,
            "workers_runq_s": self.workers_runq_s,
            "workers_cpu_first_s": self.workers_cpu_first,
            "workers_runq_first_s": self.workers_runq_first,
            "others_cpu_s": cpuacct.others_cpu_s(self),
            "torch_threads": self.torch_threads,
            **ioacct.fields(self),
        }


def _quantile(ordered: list[float], q: float) -> float | None:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


class LoaderRecord:
    __slots__ = ("number", "ref", "cls", "settings", "epochs", "role", "asked", "applied", "tables", "site",
                 "stack", "frozen", "frozen_json", "replays", "iter_error", "init_error")

    def __init__(self, number: int, loader) -> None:
        self.number = number
        try:
            import weakref

            self.ref = weakref.ref(loader)
        except TypeError:  # not weak-referenceable: identity by id() alone
            self.ref = None
        self.cls = type(loader).__name__
        # set by apply.wrap_init at construction: the role ("train", ... or None) and, under --apply,
        # what the script asked, the keys --apply changed and the tables that matched
        self.role = getattr(loader, apply.ROLE, None)
        self.site = getattr(loader, apply.SITE, None)  # the line that built it ("train.py:42")
        self.stack = getattr(loader, apply.STACK, None)  # ... with its callers (apply.STACK_DEPTH lines)
        self.asked = getattr(loader, apply.ASKED, None)
        self.applied = getattr(loader, apply.APPLIED_KEYS, None)
        self.tables = getattr(loader, apply.TABLES_USED, None)
        self.settings = apply.loader_settings(loader, [k for k in self.applied or () if k not in apply.SETTINGS])
        self.epochs: list[EpochRecord] = []
        # epochs[:n] are frozen (Recorder.freeze): (n, the sampler's sums over them), one tuple so
        # that a reader in another thread gets a count and sums that agree; frozen_json: the JSON
        # text of each frozen epoch written so far, serialized once
        self.frozen: tuple[int, tuple | None] = (0, None)
        self.frozen_json: list[str] = []
        self.replays: bool | None = None  # its workers each yield the whole stream (replays.looker)
        self.iter_error: str | None = None  # what iter(loader) raised ("AttributeError: Can't pickle ...")
        self.init_error: str | None = None  # what DataLoader(...) raised: torch refused its settings

    def is_for(self, loader) -> bool:
        return self.ref is None or self.ref() is loader

    def to_dict(self, t0: float) -> dict:
        return {**self._head(), "epochs": [e.to_dict(t0) for e in list(self.epochs)], **self._applied()}

    def _head(self) -> dict:
        head = {"loader": self.number, "role": self.role, "site": self.site, "stack": self.stack, "class": self.cls,
                "settings": self.settings}
        if self.replays is not None:
            head["replays"] = self.replays
        if self.iter_error is not None:
            head["iter_error"] = self.iter_error
        if self.init_error is not None:
            head["init_error"] = self.init_error
        return head

    def _applied(self) -> dict:
        if self.asked is None:  # under --apply only: readers take a record without them
            return {}
        return {"asked": self.asked, "applied": self.applied or [], "apply_tables": self.tables or []}
