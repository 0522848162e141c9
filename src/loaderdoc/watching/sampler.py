"""The hook's sampler: one daemon thread per process that, every ``interval`` seconds, reads the
loaders' counters and, as often as its share of a core allows, the process's memory, its
DataLoader workers' memory and ``/dev/shm``.

Standard library only, no loaderdoc import: under ``loaderdoc watch`` this file is loaded by path
beside ``hook.py``. Started by the recorder when the first DataLoader is iterated, never at import
and never in a forked copy (a thread does not survive ``fork``, and the recorder checks its pid).

Thread safety: the training loop's thread updates the epochs' counters without a lock; this thread
only reads them (``list(...)`` copies a list atomically under the GIL) and owns ``samples``, the
per-epoch ``workers_pss_max`` and ``shm_peak``. Nothing here raises into the user's program: an
unreadable ``/proc`` file is a ``None``, an unexpected error stops the sampling with one line.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import weakref

SAMPLE_CAP = 1024  # samples kept; when full every 2nd is dropped and the period doubles
MAX_BUSY = 0.01  # share of one core the sampler may use, half for the counters and half for the
# memory: reading a torch process's Pss walks its page tables (~10 ms for one on this machine), so
# many large workers read less often
FULL_SCAN_EVERY = 16  # ticks between full /proc scans (a pid seen as not ours is skipped between)
_HELPERS = (b"multiprocessing.resource_tracker", b"multiprocessing.semaphore_tracker")
_FORKSERVER = b"multiprocessing.forkserver"

clock = time.perf_counter
cpu_clock = time.thread_time  # what a tick costs: this thread's CPU time (a busy machine's waits are not its use)


def system_module(name: str):
    """A standard-library-only reader of ``system/`` (``procmem``: /proc and /dev/shm; ``procio``:
    reads), loaded by path as hook.py loads this file: the probe's monitor reads with the same
    functions, and the child need not be able to import loaderdoc."""
    import importlib.util

    full = f"_loaderdoc_{name}"
    if full not in sys.modules:
        path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "system", f"{name}.py")
        spec = importlib.util.spec_from_file_location(full, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


_read, pss_bytes, heap_bytes, shm_usage = (getattr(system_module("procmem"), n) for n in ("read", "pss_bytes", "heap_bytes",
                                                                             "shm_usage"))


def _ppid(pid: str) -> int | None:
    raw = _read(f"/proc/{pid}/stat", 512)
    if not raw:
        return None
    try:  # the name in parentheses may hold spaces: the fields after the last ')' are fixed
        return int(raw[raw.rindex(b")") + 2:].split(None, 2)[1])
    except (ValueError, IndexError):
        return None


class Children:
    """This process's worker processes: its children (processes, not threads), without
    multiprocessing's helpers (resource tracker), and through a forkserver, that server's children.

    Uses ``/proc/self/task/*/children`` where the kernel has it, else a ``/proc`` scan for the ppid
    that skips pids already seen as someone else's between full scans."""

    def __init__(self, pid: int | None = None) -> None:
        self.pid = pid or os.getpid()
        self._kind: dict[int, str] = {}  # pid -> "worker" | "helper" | "forkserver" (cmdline read once)
        self._others: set[str] = set()  # pids seen with another parent (re-checked at full scans)
        self._scans = 0
        self._task_children = os.path.exists(f"/proc/{self.pid}/task/{self.pid}/children")

    def workers(self) -> list[int]:
        pairs = None if self._task_children else self._scan()  # one /proc scan a tick
        mine = self._direct(self.pid, pairs)
        out = []
        for pid in mine:
            kind = self._kind.get(pid)
            if kind is None:
                kind = self._kind[pid] = self._classify(pid)
                if kind == "forkserver" and pairs is not None:
                    self._others.clear()  # its children may have been taken for someone else's
                    pairs = self._scan()
            if kind == "worker":
                out.append(pid)
            elif kind == "forkserver":
                out.extend(self._direct(pid, pairs))
        for gone in set(self._kind) - set(mine):
            del self._kind[gone]
        return out

    @staticmethod
    def _classify(pid: int) -> str:
        cmdline = _read(f"/proc/{pid}/cmdline", 4096) or b""
        if any(h in cmdline for h in _HELPERS):
            return "helper"
        return "forkserver" if _FORKSERVER in cmdline else "worker"

    def _direct(self, parent: int, pairs: list[tuple[int, int]] | None) -> list[int]:
        if pairs is not None:
            return [pid for pid, ppid in pairs if ppid == parent]
        try:
            tasks = os.listdir(f"/proc/{parent}/task")
        except OSError:
            return []
        out = []
        for tid in tasks:
            out.extend(int(p) for p in (_read(f"/proc/{parent}/task/{tid}/children") or b"").split())
        return out

    def _scan(self) -> list[tuple[int, int]]:
        """(pid, ppid) of every process not known to be someone else's."""
        self._scans += 1
        if self._scans % FULL_SCAN_EVERY == 1:
            self._others.clear()  # a pid reused by a new child of ours is found here at the latest
        try:
            names = [n for n in os.listdir("/proc") if n.isdigit()]
        except OSError:
            return []
        self._others.intersection_update(names)
        out = []
        for name in names:
            if name in self._others:
                continue
            ppid = _ppid(name)
            if ppid is None:
                continue
            if ppid == self.pid or self._kind.get(ppid) == "forkserver":
                out.append((int(name), ppid))
            else:
                self._others.add(name)
        return out


class Sampler:
    """Samples for ``recorder`` (a hook ``Recorder``: ``t0``, ``loaders``, ``write_if_due()``, ``freeze()``)."""

    def __init__(self, recorder, interval: float, write_s: float | None, cap: int = SAMPLE_CAP,
                 max_busy: float = MAX_BUSY) -> None:
        self.recorder = recorder
        self.interval = interval
        self.base = interval  # doubles each time the samples are thinned
        self.period = interval  # the base, or longer where a tick costs more than max_busy of it
        self.max_busy = max_busy
        self.write_s = write_s  # None: never write from this thread (the Python API)
        self.cap = cap
        self.samples: list[dict] = []
        self.shm_peak: int | None = None
        self.ticks = 0
        self.busy_s = 0.0  # CPU time spent in tick(), writes excluded: the sampler's own cost
        self._children = Children()
        self._heap_first: dict[int, int] = {}  # each worker's malloc heap when first seen
        self._memory: dict | None = None  # the memory figures last read, and when (perf_counter)
        self._memory_at: float | None = None
        self._memory_next = 0.0  # when they are read again
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed = False

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and not self._stop.is_set()

    def start(self) -> None:
        if self.running or self._failed:
            return
        self._stop = threading.Event()
        self._thread = threading.Thread(target=_run, args=(weakref.ref(self), self._stop),
                                        name="loaderdoc-watch-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread and wait for it (at most one tick: reading /proc never blocks for long)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def tick(self) -> None:
        """Take one sample now (from this thread or, once stopped, from any)."""
        t, spent = clock(), cpu_clock()
        rec = self.recorder
        ledger = getattr(rec, "cpu", None)
        if ledger is not None:
            ledger.settle()
        reads = getattr(rec, "io", None)
        if reads is not None:
            reads.settle()
        # the memory is read on its own budget: walking many large workers' page tables for their
        # Pss takes tens of ms, which held every sample (and so tune's windows, which are made of
        # samples) to one every several seconds; between two reads a sample carries the last one
        fresh = self._memory is None or t >= self._memory_next
        memory_cost = 0.0
        if fresh:
            before = cpu_clock()
            self._memory = self._read_memory()
            memory_cost = cpu_clock() - before
            self._memory_next = t + max(self.base, memory_cost / (self.max_busy / 2))
        # the epochs nothing changes any more are summed once (the recorder's freeze, issue 49): a
        # tick adds the rest to those sums, so its cost follows the epochs running, not all so far
        freeze = getattr(rec, "freeze", None)
        freeze_cost = 0.0
        if freeze is not None:
            before = cpu_clock()
            freeze(self)
            freeze_cost = cpu_clock() - before
        loaders = {}
        since = self._memory_at if self._memory_at is not None else rec.t0
        for lrec in list(rec.loaders):
            done, sums = getattr(lrec, "frozen", (0, None))  # one tuple: the count and its sums agree
            epochs = lrec.epochs[done:]  # a frozen epoch ended before `since`: never attributed
            loaders[str(lrec.number)] = cumulative(epochs, sums)
            if fresh:
                _attribute(epochs, self._memory["workers_pss_bytes"], since, self._memory["workers_heap_grown_bytes"])
        if fresh:
            self._memory_at = t
        sample = {"t_s": t - rec.t0, **self._memory, "loaders": loaders}
        if ledger is not None:  # this process's CPU time and every process's busy time on its CPUs, now
            sample.update(ledger.now(getattr(rec, "cpus", None)))
        self.samples.append(sample)
        if len(self.samples) >= self.cap:
            del self.samples[1::2]
            self.base *= 2
        self.ticks += 1
        cost = cpu_clock() - spent
        self.busy_s += cost
        # freezing is per epoch, not per tick (each epoch once): it does not stretch the period
        self.period = max(self.base, (cost - memory_cost - freeze_cost) / (self.max_busy / 2))

    def _read_memory(self) -> dict:
        """This process's and its workers' memory and ``/dev/shm``, as a sample holds them."""
        workers = self._children.workers()
        known = [p for p in (pss_bytes(pid) for pid in workers) if p is not None]  # None: gone, a zombie
        used, total = shm_usage()
        if used is not None and (self.shm_peak is None or used > self.shm_peak):
            self.shm_peak = used
        return {"main_pss_bytes": pss_bytes("self"), "workers": len(known), "workers_pss_bytes": sum(known),
                "workers_heap_grown_bytes": self._heap_grown(workers), "shm_used_bytes": used,
                "shm_total_bytes": total}

    def _heap_grown(self, workers: list[int]) -> int | None:
        """Malloc heap the workers grew: each one's ``[heap]`` beyond the smaller of this process's
        (a forked worker starts with a copy of it) and its own when first seen (a spawned one
        starts afresh); None where none could be read."""
        own = heap_bytes()
        grown, read = 0, False
        for pid in workers:
            size = heap_bytes(pid)
            if size is None:
                continue
            first = self._heap_first.setdefault(pid, size)
            grown += max(0, size - (first if own is None else min(own, first)))
            read = True
        for gone in set(self._heap_first) - set(workers):
            del self._heap_first[gone]
        return grown if read else None

    def _step(self) -> None:
        try:
            self.tick()
            if self.write_s is not None:  # the recorder spaces its writes (write_s, their cost)
                self.recorder.write_if_due()
        except Exception as exc:  # a bug here must not become the user's problem: stop sampling
            self._failed = True
            self._stop.set()
            with_warning(f"sampling stopped: {exc!r}")


# a sample's per-loader list: every epoch's counters summed at the tick, so that any two samples
# give a window's figures (loaderdoc tune measures its steady windows from them); the first three
# are the timeline's
CUMULATIVE = ("steps", "wait_s", "step_s", "waits", "steps_timed", "cpu_wait_s", "cpu_step_s", "cpu_wait_wall_s",
              "cpu_step_wall_s", "workers_cpu_s", "workers_runq_s", "first_batch_s", "cpu_wait_loop_s", "cpu_step_loop_s",
              "iter_s", "stop_s", "starts", "workers_cpu_first_s")


def cumulative(epochs: list, start: tuple | None = None) -> list:
    """The :data:`CUMULATIVE` sums over ``epochs`` (hook EpochRecords) as they stand now, added to
    ``start`` (:func:`accumulate`'s sums over the epochs before them; None: none)."""
    sums = accumulate(epochs, start)
    return [int(sums[0]), *sums[1:]]


def accumulate(epochs, start: tuple | None = None) -> tuple:
    """:func:`cumulative`'s running sums, steps still a float: adding epochs one chunk after
    another, in order, gives the very floats one pass over them all gives."""
    if start is None:
        steps = wait = step = cw = cs = cww = csw = wcpu = wq = first = cwl = csl = started = stopped = wfirst = 0.0
        waits = timed = starts = 0
    else:
        (steps, wait, step, waits, timed, cw, cs, cww, csw, wcpu, wq, first, cwl, csl, started, stopped, starts,
         wfirst) = start
    for e in epochs:
        steps += e.steps
        wait += e.wait_s
        step += e.step_s
        waits += e.waited
        timed += e.waited + (1 if e.finished and e.steps else 0)
        cw += e.cpu_wait_s
        cs += e.cpu_step_s
        cww += e.cpu_wait_wall_s
        csw += e.cpu_step_wall_s
        wcpu += e.workers_cpu_s or 0.0
        wq += e.workers_runq_s or 0.0
        first += e.first_batch_s or 0.0
        cwl += e.cpu_wait_loop_s
        csl += e.cpu_step_loop_s
        started += e.iter_s or 0.0
        stopped += e.stop_s or 0.0
        starts += e.first_batch_s is not None
        wfirst += e.workers_cpu_first or 0.0
    return (steps, wait, step, waits, timed, cw, cs, cww, csw, wcpu, wq, first, cwl, csl, started, stopped, starts,
            wfirst)


def _attribute(epochs: list, workers_pss: int, since: float, heap_grown: int | None = None) -> None:
    """The workers' memory counts for every epoch running at this sample: the latest one unless it
    ended, and an older one still unfinished that returned a batch since the previous tick (two
    iterators of one loader alive at once). An epoch no sample fell in keeps None. The heap the
    workers grew is kept as read at the epoch's PSS peak."""
    for i, e in enumerate(reversed(epochs)):
        if e.finished:
            if i:
                break  # older epochs ended before this one
            continue
        if (i == 0 or e.last >= since) and (e.workers_pss_max is None or workers_pss > e.workers_pss_max):
            e.workers_pss_max = workers_pss
            e.workers_heap_grown = heap_grown
        elif i:
            break


def _run(ref, stop: threading.Event) -> None:
    # a sample a period from the start (a loop shorter than that gets the one taken at its end);
    # holds the sampler only while sampling: a dropped recorder (the Python API) ends the thread
    sampler = ref()
    reads = getattr(getattr(sampler, "recorder", None), "io", None)
    if reads is not None:  # this thread reads /proc, not the program's data
        reads.skip_current_thread()
    del sampler, reads
    while True:
        sampler = ref()
        if sampler is None:
            return
        period = sampler.period
        del sampler
        if stop.wait(period):
            return
        sampler = ref()
        if sampler is None:
            return
        sampler._step()
        del sampler


def with_warning(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"loaderdoc watch: {message}\n")
