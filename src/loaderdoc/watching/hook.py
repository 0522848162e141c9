"""Runs inside the user's process: times every ``torch.utils.data.DataLoader`` iteration.

Standard library only, and cheap to import: under ``loaderdoc watch`` the child's sitecustomize
loads this file by path (as a private module, so the child need not be able to import
loaderdoc), and it runs in every Python process the command starts. torch is never imported
here: a ``sys.meta_path`` finder waits for the user's program to import
``torch.utils.data.dataloader`` and patches ``DataLoader.__iter__`` right after that module ran.

What one wrapped ``__next__`` measures (``time.perf_counter`` and ``time.process_time``, a few
float additions, no lock, no I/O): the first batch of an epoch (``first_batch_s``, from
``iter(loader)``, worker start-up included); for every later one the wait blocked in ``next()``
(``wait_s``) and the step since the previous batch (``step_s``; the one after the last batch counts
when the epoch ends normally), each with this process's CPU time in it (:mod:`cpuacct`: the rest;
:mod:`ioacct`: what this process and its workers read per epoch).

Waits are kept as a bounded sample (every ``stride``-th one, doubling when full) for p50/p95. From the first iteration on,
a sampler thread (:mod:`sampler`) reads memory, workers and ``/dev/shm`` every
``LOADERDOC_WATCH_INTERVAL`` seconds (longer where a tick would use more than
``LOADERDOC_WATCH_MAX_BUSY``, 1 %, of a core), and when the program itself initialised CUDA the data waits
are also timed on the GPU (:mod:`gpuidle`). Each process writes its own records
``$LOADERDOC_WATCH_DIR/records-<pid>.json`` (schema ``loaderdoc.watch-records/2``) atomically: at
an epoch's end or from the sampler once the last write is ``LOADERDOC_WATCH_WRITE_S`` seconds old
(the first epoch's end always; longer apart where writing takes more than ``WRITE_BUSY`` of the
time), and at exit; a forked copy (a DataLoader worker) neither samples nor writes.

The file holds every epoch, and what watching costs must not grow with them (issue 49: a rewrite
of every epoch so far at each epoch's end made a 1-batch loader iterated 2000 times take 43 s
watched against 1.5 s bare): an epoch nothing can change any more is frozen
(:meth:`Recorder.freeze`): serialized once, its counters summed once for the sampler's ticks; a
write joins those texts to the few epochs still open.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
import weakref

RECORDS_SCHEMA = "loaderdoc.watch-records/2"
ENV_DIR = "LOADERDOC_WATCH_DIR"  # where every process writes its records-<pid>.json
ENV_INTERVAL = "LOADERDOC_WATCH_INTERVAL"  # the sampler's period, seconds
ENV_WRITE_S = "LOADERDOC_WATCH_WRITE_S"  # seconds between the sampler's writes
ENV_MAX_BUSY = "LOADERDOC_WATCH_MAX_BUSY"  # share of one core the sampler may use (default 0.01)
ENV_TUNE_TRIAL = "LOADERDOC_TUNE_TRIAL"  # set in a tune trial (its number), which tune stops with SIGINT
DEFAULT_INTERVAL = 1.0
DEFAULT_WRITE_S = 2.0
MIN_INTERVAL = 0.01
TARGET = "torch.utils.data.dataloader"  # the module whose import triggers the patch
SAMPLE_CAP = 1024  # waits kept per epoch for the percentiles
WRITE_BUSY = 0.01  # share of the wall time the records' writes may take: the next waits cost / this

clock = time.perf_counter
# the wait and step of an epoch's first CPU_ALL batches are CPU-timed, then every CPU_EVERY-th:
# a long fast loop pays 3 clock reads per 16 batches, a short one is timed throughout
CPU_ALL, CPU_EVERY = 64, 16


def _sibling(name: str, package: str = ""):
    """A module beside this file (``package``: in that sibling package of loaderdoc's instead), loaded
    by path as sitecustomize loads this one (the child need not be able to import loaderdoc)."""
    import importlib.util

    full = f"_loaderdoc_watch_{name}"
    if full not in sys.modules:
        folder = os.path.dirname(os.path.abspath(__file__))
        if package:
            folder = os.path.join(os.path.dirname(folder), package)
        spec = importlib.util.spec_from_file_location(full, os.path.join(folder, f"{name}.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[full] = module
        spec.loader.exec_module(module)
    return sys.modules[full]


if __package__:  # imported as loaderdoc.watching.hook
    from loaderdoc.watching import (
        apply,
        cpuacct,
        epochs,
        frozen,
        gpuidle,
        importpatch,
        ioacct,
        iterwrap,
        procinfo,
        replays,
        sampler,
        trace,
    )
else:  # loaded by path under ``loaderdoc watch``
    # sampler first: cpuacct reads with it; epochs after cpuacct and ioacct, which it uses; frozen last;
    # loaderdoc.base's batches.py before replays, which reads with it
    _sibling("batches", package="base")
    _NAMES = "sampler apply cpuacct gpuidle importpatch procinfo ioacct trace epochs frozen iterwrap replays"
    (sampler, apply, cpuacct, gpuidle, importpatch, procinfo, ioacct, trace, epochs, frozen, iterwrap,
     replays) = map(_sibling, _NAMES.split())
EpochRecord, LoaderRecord = epochs.EpochRecord, epochs.LoaderRecord
cpu_clock, loop_clock = epochs.cpu_clock, epochs.loop_clock
_MARK = iterwrap.MARK
_INTERRUPTED = procinfo.INTERRUPTED


class WatchedIterator:
    """Wraps the iterator ``DataLoader.__iter__`` returned; everything else is delegated."""

    __slots__ = ("_it", "_next", "_epoch", "_returned", "_returned_cpu", "_returned_loop", "_on_end", "_on_first",
                 "_trace", "_look", "__weakref__")  # weak: its epoch is not frozen while it lives

    def __init__(self, iterator, epoch: EpochRecord, on_end, on_first=None, trace=None) -> None:
        self._it = iterator
        self._next = iterator.__next__
        self._epoch = epoch
        self._returned: float | None = None  # when the previous batch was handed to the loop
        self._returned_cpu: float | None = None  # this process's CPU time then, where read
        self._returned_loop: float | None = None  # ... and the loop thread's
        self._on_end = on_end
        self._on_first = on_first  # once an epoch, at its first batch: the workers' start-up is over
        self._trace = trace  # under --trace, called at the top of each next(): may start or stop the profiler
        self._look = None  # replays.looker's look(self, batch), untimed, until it has its verdict

    def __iter__(self):
        return self

    def __next__(self):
        if _INTERRUPTED[0]:  # a tune trial's SIGINT that a __del__ swallowed: the loop stops as asked
            raise KeyboardInterrupt
        if self._trace is not None:
            self._trace(self)
        t0 = clock()
        before = self._returned_cpu
        c0 = cpu_clock() if before is not None else None
        l0 = loop_clock() if before is not None else None
        try:
            batch = self._next()
        except StopIteration:
            if self._epoch.stop_s is None:
                self._epoch.stop_s = clock() - t0  # the workers' shutdown: torch joins them in this call
            self._end(t0, c0, before, l0)
            raise
        t1 = clock()
        e = self._epoch
        returned = self._returned
        if returned is None:
            e.first_batch_s = t1 - e.started
            if self._on_first is not None:
                self._on_first(e)
        else:
            wait = t1 - t0
            e.step_s += t0 - returned
            e.wait_s += wait
            if c0 is not None:
                e.cpu_step_s += c0 - before
                e.cpu_wait_s += cpu_clock() - c0
                e.cpu_step_loop_s += l0 - self._returned_loop
                e.cpu_wait_loop_s += loop_clock() - l0
                e.cpu_step_wall_s += t0 - returned
                e.cpu_wait_wall_s += wait
            e.waited += 1
            if e.waited % e.stride == 0:
                samples = e.samples
                samples.append(wait)
                if len(samples) >= SAMPLE_CAP:
                    del samples[::2]
                    e.stride *= 2
        e.steps += 1
        e.last = t1
        if self._look is not None:  # its time is neither this wait nor the next step
            self._look(self, batch)
            t1 = clock()
        self._returned = t1
        # the next batch is CPU-timed: read the CPU clock where its step starts
        if e.steps < CPU_ALL or e.steps % CPU_EVERY == 0:
            self._returned_loop = loop_clock()
            self._returned_cpu = cpu_clock()
        else:
            self._returned_cpu = None
        return batch

    def _end(self, t0: float, c0: float | None, before: float | None, l0: float | None = None) -> None:
        e = self._epoch
        if e.finished:
            return
        if self._returned is not None:
            e.step_s += t0 - self._returned
            if c0 is not None:
                e.cpu_step_s += c0 - before
                e.cpu_step_loop_s += l0 - self._returned_loop
                e.cpu_step_wall_s += t0 - self._returned
        e.last = t0
        e.finished = True
        self._on_end(e)

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str):
        # object.__getattribute__: no recursion while __init__ has not set _it yet
        return getattr(object.__getattribute__(self, "_it"), name)


class Recorder:
    """Every DataLoader iterated in this process, in the order they were first iterated.

    ``directory``: where ``records-<pid>.json`` is written (None: in memory only, the Python API).
    ``sample``: run the sampler thread from the first iteration on; ``sample_per_epoch``: stop it
    when an epoch ends (the Python API: no thread outlives the watched loop)."""

    def __init__(self, directory: str | None = None, *, interval: float | None = None,
                 write_s: float | None = None, sample: bool = True, sample_per_epoch: bool = False) -> None:
        self.directory = directory
        self._begin_process()
        self.interval = interval if interval is not None else procinfo.env_positive(ENV_INTERVAL, DEFAULT_INTERVAL, MIN_INTERVAL, _warn)
        self.write_s = write_s if write_s is not None else procinfo.env_positive(ENV_WRITE_S, DEFAULT_WRITE_S, MIN_INTERVAL, _warn)
        self._sample = sample
        self._per_epoch = sample_per_epoch

    def _begin_process(self) -> None:
        """This process's own records, empty: at start, and in a forked process that iterates a
        DataLoader of its own (a ``multiprocessing.Process`` under fork or forkserver), which would
        otherwise hold a copy of its parent's records and never write."""
        self.pid = os.getpid()  # a forked copy that iterates nothing (a DataLoader worker) never writes
        self.t0 = clock()  # the samples' and epochs' clock starts here
        self.loaders: list[LoaderRecord] = []
        self._by_id: dict[int, LoaderRecord] = {}
        self.sampler = None  # created at the first iteration (a parent's thread did not survive the fork)
        self.gpu = None  # a gpuidle.GpuIdle once the program has initialised CUDA
        self.gpu_reason: str | None = "no DataLoader iterated yet"
        self.tracer = None  # a trace.Tracer under --trace (install() sets it)
        self._write_failed = False
        self._exited = False
        self._next_write = float("-inf")  # clock() from which an epoch's end or the sampler writes again
        self._freeze_lock = threading.Lock()  # one freezer (and one serializer of frozen epochs) at a time
        self.cpu = cpuacct.CpuLedger()  # the workers' CPU time per epoch
        self.io = ioacct.IoLedger()  # this process's and its workers' reads per epoch
        try:
            self.cpus: frozenset[int] | None = frozenset(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            self.cpus = None

    def _adopt_fork(self) -> None:
        """A forked process iterates its first DataLoader: it records its own, and writes them at
        its exit too, which for a ``multiprocessing`` child is ``os._exit`` after the target ran
        (no atexit): its finalizers run then, so the last write is one of them."""
        self._begin_process()
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            with contextlib.suppress(Exception):
                util.Finalize(self, self.at_exit, exitpriority=100)

    @property
    def path(self) -> str | None:
        return os.path.join(self.directory, f"records-{self.pid}.json") if self.directory else None

    def _record(self, loader) -> LoaderRecord:
        if self.directory and os.getpid() != self.pid:
            self._adopt_fork()
        rec = self._by_id.get(id(loader))
        if rec is None or not rec.is_for(loader):  # new, or a new object at a dead one's address
            rec = LoaderRecord(len(self.loaders) + 1, loader)
            self.loaders.append(rec)
            self._by_id[id(loader)] = rec
        return rec

    def iter_failed(self, loader, error: BaseException) -> None:
        """``iter(loader)`` raised (its workers could not start: a dataset spawn cannot pickle): the
        loader is recorded with what it raised, and written at exit beside the others."""
        if isinstance(error, Exception):  # not a KeyboardInterrupt: that stopped the run, not the loader
            rec = self._record(loader)
            rec.iter_error = f"{type(error).__name__}: {error}"[:500]
            context = apply.plain(getattr(loader, "multiprocessing_context", None))
            if context is not None:  # how its workers were to start: what the error is read with
                rec.settings.setdefault("multiprocessing_context", context)

    def init_failed(self, loader, error: BaseException, role, site, stack, asked: dict) -> None:
        """``DataLoader(...)`` raised (torch refused its settings): the loader is recorded as it was asked
        for, with what it raised and the line that built it; the program's traceback loses the hook's frames."""
        rec = self._record(loader)
        rec.init_error = f"{type(error).__name__}: {error}"[:500]
        rec.role, rec.site, rec.stack = role, site, stack
        rec.settings = dict(asked)
        error.__traceback__ = apply.hide_own_frames(error.__traceback__)

    def wrap(self, loader, iterator, started: float) -> WatchedIterator:
        rec = self._record(loader)
        if rec.epochs and not rec.epochs[-1].finished and not rec.epochs[-1].closed:
            rec.epochs[-1].closed = True  # an epoch boundary like StopIteration's: resolve and write
            self.epoch_ended(rec.epochs[-1])
        epoch = EpochRecord(len(rec.epochs), started)
        epoch.iter_s = clock() - started
        rec.epochs.append(epoch)
        watched = WatchedIterator(iterator, epoch, self.epoch_ended, self.first_batch,
                                  trace.per_batch(self.tracer, rec.number, os.getpid() == self.pid))
        epoch.iterator = weakref.ref(watched)
        if os.getpid() == self.pid:  # per epoch, not per batch: a fork's copy does neither
            cpuacct.begin_epoch(self, epoch, iterator)
            ioacct.begin_epoch(self, epoch, iterator)
            self._start_sampler()
            if self.gpu is None:
                self.gpu, self.gpu_reason = gpuidle.from_torch()
            if self.gpu is not None:
                watched._next = self.gpu.timed(watched._next, epoch)
            if len(rec.epochs) == 1:
                watched._look = replays.looker(loader, rec)
        return watched

    def _start_sampler(self) -> None:
        if not self._sample:
            return
        if self.sampler is None:
            self.sampler = sampler.Sampler(self, self.interval, self.write_s if self.directory else None,
                                           max_busy=procinfo.env_positive(ENV_MAX_BUSY, sampler.MAX_BUSY, 0.001, _warn))
        self.sampler.start()

    def to_dict(self) -> dict:
        return {**self._head(), "loaders": [rec.to_dict(self.t0) for rec in list(self.loaders)],
                **({"trace": self.tracer.to_dict()} if self.tracer is not None else {})}

    def to_json(self) -> str:
        """``json.dumps(self.to_dict())``, each frozen epoch serialized once (:mod:`frozen`)."""
        return frozen.records_json(self)

    def _head(self) -> dict:
        smp = self.sampler
        samples = list(smp.samples) if smp is not None else []
        return {"schema": RECORDS_SCHEMA, "pid": os.getpid(), "written_at": time.time(),
                "process": procinfo.process_info(), "interval_s": self.interval,
                "period_s": smp.period if smp is not None else self.interval, "samples": samples,
                "shm_peak_used_bytes": smp.shm_peak if smp is not None else None,
                "sampler": {"ticks": smp.ticks if smp else 0, "busy_s": smp.busy_s if smp else 0.0},
                "io": {"readable": self.io.readable, "reason": self.io.reason},
                "gpu": {"timing": gpuidle.CUDA_EVENTS if self.gpu is not None else gpuidle.UNAVAILABLE,
                        "reason": None if self.gpu is not None else self.gpu_reason}}

    def freeze(self, by=None) -> None:
        """Each loader's oldest epochs that can no longer change: summed and serialized once from
        now on (:func:`frozen.freeze`; ``by``: the sampler ticking)."""
        if os.getpid() == self.pid:  # a forked copy never writes
            frozen.freeze(self, by)

    def first_batch(self, epoch: EpochRecord) -> None:
        if os.getpid() == self.pid:
            cpuacct.first_batch(self, epoch)
            ioacct.first_batch(self, epoch)

    def epoch_ended(self, epoch: EpochRecord | None = None) -> None:
        if os.getpid() != self.pid:
            return
        if epoch is not None:
            cpuacct.end_epoch(self, epoch)
            ioacct.end_epoch(self, epoch)
            trace.ended(self.tracer, epoch)
        if self.gpu is not None:
            self.gpu.resolve()
        if epoch is not None:
            epoch.settled = True  # its end is accounted: the recorder may freeze it
        if self._per_epoch and self.sampler is not None:
            self.sampler.stop()
            self._final_sample()
        if self.directory:
            # not a write at every end (issue 49): each rewrote every epoch so far, and a fast
            # loop's many short epochs made watching quadratic; one once the last is write_s old
            self.write_if_due()

    def _final_sample(self) -> None:
        with contextlib.suppress(Exception):  # /proc read errors are Nones; anything else: no sample
            self.sampler.tick()

    def at_exit(self) -> None:
        """The last sample and the last write (the sampler is stopped first: one writer)."""
        if os.getpid() != self.pid or not self.loaders or self._exited:
            return
        self._exited = True  # once: a multiprocessing child's finalizer, then atexit where it exits normally
        if self.gpu is not None:
            with contextlib.suppress(Exception):
                self.gpu.resolve()
        if self.sampler is not None:
            self.sampler.stop()
            self._final_sample()
        for rec in self.loaders:  # epochs still open at exit (Lightning's last never asks for StopIteration)
            for epoch in rec.epochs[-1:]:
                cpuacct.end_epoch(self, epoch)
                ioacct.end_epoch(self, epoch)
                trace.ended(self.tracer, epoch)
        self.write(full=True)

    def write_if_due(self) -> None:
        """Write once the last write is ``write_s`` old, and longer apart where a write took more
        than ``WRITE_BUSY`` of the time between two: an epoch's end and the sampler's tick call it."""
        if clock() >= self._next_write:
            self.write()

    def write(self, full: bool = False) -> None:
        """Atomically replace this process's records file; never raises into the user's program.
        Called from the loop's thread and the sampler's: each writes its own temporary file (no
        tempfile module: its lock could be held by the other thread at a fork). ``full``: every
        epoch serialized afresh (the last write, at exit), not the frozen epochs' texts."""
        path = self.path
        if not path or not self.loaders or os.getpid() != self.pid:
            return
        tmp = None
        started = clock()
        try:
            import json

            text = json.dumps(self.to_dict()) if full else self.to_json()
            tmp = os.path.join(self.directory, f".records-{self.pid}.{threading.get_ident()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, path)
            tmp = None
        except Exception as exc:  # a full disk must not break a training run
            if not self._write_failed:  # once: the sampler retries every few seconds
                _warn(f"could not write the records to {path}: {exc}")
            self._write_failed = True
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
            now = clock()  # a write that took long (a file of many epochs) waits longer for the next
            self._next_write = now + max(self.write_s, (now - started) / WRITE_BUSY)


def patch(module, recorder: Recorder, applier=None) -> bool:
    """Wrap ``module.DataLoader.__iter__`` and ``__init__`` once (:mod:`apply`: roles, --apply's
    tables), and the own ``__iter__`` of each subclass as its first loader is built."""
    cls = getattr(module, "DataLoader", None)
    original = getattr(cls, "__iter__", None)
    if original is None:
        return False
    applier = applier if applier is not None else apply.Applier(None)
    try:
        apply.wrap_init(cls, applier,
                        on_class=lambda klass: iterwrap.patch_subclass(klass, cls, recorder, applier, clock),
                        on_refused=recorder.init_failed)
    except Exception as exc:  # the measurement goes on without the names
        _warn(f"could not name the DataLoaders: {exc}")
    if not getattr(original, _MARK, False):
        cls.__iter__ = iterwrap.watched_iter(original, recorder, applier, clock)
    return True


def install(directory: str | None) -> Recorder:
    """Measure every DataLoader this process iterates and write the records into ``directory`` at
    each epoch end, from the sampler and at exit (nothing is written by a process that iterated none)."""
    recorder = Recorder(directory)
    if os.environ.get(ENV_TUNE_TRIAL):
        procinfo.quiet_interrupt()
        procinfo.interrupt_sticks()
    recorder.tracer = trace.Tracer.from_env(recorder.io)  # --trace DIR: a profiler trace of a few steady steps
    applier = apply.Applier.from_env()  # --apply's tables (none: the loaders are only named)

    def on_load(module) -> None:
        try:
            if not patch(module, recorder, applier):
                _warn("torch.utils.data.dataloader has no DataLoader.__iter__; DataLoaders are not measured")
        except Exception as exc:
            _warn(f"could not instrument DataLoader: {exc}")

    if TARGET in sys.modules:
        on_load(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, importpatch.PatchOnImport(TARGET, on_load, _warn))
    atexit.register(recorder.at_exit)
    return recorder


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"loaderdoc watch: {message}\n")
