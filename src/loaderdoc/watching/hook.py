"""Runs inside the user's process: times every ``torch.utils.data.DataLoader`` iteration.

Standard library only, and cheap to import: under ``loaderdoc watch`` the child's sitecustomize
loads this file by path (as a private module, so the child need not be able to import
loaderdoc), and it runs in every Python process the command starts. torch is never imported
here: a ``sys.meta_path`` finder waits for the user's program to import
``torch.utils.data.dataloader`` and patches ``DataLoader.__iter__`` right after that module ran.

What one wrapped ``__next__`` measures (``time.perf_counter``, a few float additions, no lock,
no I/O):

- the first batch of an epoch: ``first_batch_s``, from ``iter(loader)`` (worker start-up
  included) to the batch being returned;
- every later batch: ``wait_s``, the time blocked in ``next()`` (the data wait), and
  ``step_s``, the time from the previous batch being returned to this ``next()`` call (the
  training step); the step after the last batch counts when the epoch ends normally.

Waits are kept as a bounded sample (every ``stride``-th one; the stride doubles when the sample
is full) for p50/p95, so thousands of steps cost a few KiB. The records are written as JSON
(schema ``loaderdoc.watch-records/1``) atomically at each epoch end and at interpreter exit.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import time

RECORDS_SCHEMA = "loaderdoc.watch-records/1"
ENV_FILE = "LOADERDOC_WATCH_FILE"  # where the child writes its records
ENV_DIR = "LOADERDOC_WATCH_DIR"  # records/2: each process writes records-<pid>.json there
TARGET = "torch.utils.data.dataloader"  # the module whose import triggers the patch
SAMPLE_CAP = 1024  # waits kept per epoch for the percentiles
SETTINGS = ("num_workers", "batch_size", "prefetch_factor", "persistent_workers", "pin_memory", "drop_last")
_MARK = "_loaderdoc_watch"

clock = time.perf_counter


class EpochRecord:
    """One ``iter(loader)``: counters updated in place by the iterator, read at write time."""

    __slots__ = ("index", "started", "last", "steps", "waited", "wait_s", "step_s", "first_batch_s",
                 "finished", "samples", "stride")

    def __init__(self, index: int, started: float) -> None:
        self.index = index
        self.started = started  # perf_counter at iter(loader)
        self.last = started  # the latest moment this epoch was seen doing something
        self.steps = 0  # batches returned
        self.waited = 0  # batches after the first (their wait is in wait_s)
        self.wait_s = 0.0
        self.step_s = 0.0
        self.first_batch_s: float | None = None
        self.finished = False  # StopIteration seen (False: abandoned, interrupted or still running)
        self.samples: list[float] = []
        self.stride = 1

    def to_dict(self) -> dict:
        waits = sorted(self.samples)
        return {
            "epoch": self.index,
            "steps": self.steps,
            "waits": self.waited,  # batches after the first: wait_s sums their waits
            "wait_s": self.wait_s,
            "steps_timed": self.waited + (1 if self.finished and self.steps else 0),  # in step_s
            "step_s": self.step_s,
            "first_batch_s": self.first_batch_s,
            "wall_s": self.last - self.started,
            "finished": self.finished,
            "wait_p50_s": _quantile(waits, 0.50),
            "wait_p95_s": _quantile(waits, 0.95),
            "wait_sampled": len(waits),
        }


def _quantile(ordered: list[float], q: float) -> float | None:
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class WatchedIterator:
    """Wraps the iterator ``DataLoader.__iter__`` returned; everything else is delegated."""

    __slots__ = ("_it", "_next", "_epoch", "_returned", "_on_end")

    def __init__(self, iterator, epoch: EpochRecord, on_end) -> None:
        self._it = iterator
        self._next = iterator.__next__
        self._epoch = epoch
        self._returned: float | None = None  # when the previous batch was handed to the loop
        self._on_end = on_end

    def __iter__(self):
        return self

    def __next__(self):
        t0 = clock()
        try:
            batch = self._next()
        except StopIteration:
            self._end(t0)
            raise
        t1 = clock()
        e = self._epoch
        returned = self._returned
        if returned is None:
            e.first_batch_s = t1 - e.started
        else:
            wait = t1 - t0
            e.step_s += t0 - returned
            e.wait_s += wait
            e.waited += 1
            if e.waited % e.stride == 0:
                samples = e.samples
                samples.append(wait)
                if len(samples) >= SAMPLE_CAP:
                    del samples[::2]
                    e.stride *= 2
        e.steps += 1
        e.last = t1
        self._returned = t1
        return batch

    def _end(self, t0: float) -> None:
        e = self._epoch
        if e.finished:
            return
        if self._returned is not None:
            e.step_s += t0 - self._returned
        e.last = t0
        e.finished = True
        self._on_end()

    def __len__(self) -> int:
        return len(self._it)

    def __getattr__(self, name: str):
        # object.__getattribute__: no recursion while __init__ has not set _it yet
        return getattr(object.__getattribute__(self, "_it"), name)


class LoaderRecord:
    __slots__ = ("number", "ref", "cls", "settings", "epochs")

    def __init__(self, number: int, loader) -> None:
        self.number = number
        try:
            import weakref

            self.ref = weakref.ref(loader)
        except TypeError:  # not weak-referenceable: identity by id() alone
            self.ref = None
        self.cls = type(loader).__name__
        self.settings = loader_settings(loader)
        self.epochs: list[EpochRecord] = []

    def is_for(self, loader) -> bool:
        return self.ref is None or self.ref() is loader

    def to_dict(self) -> dict:
        return {"loader": self.number, "class": self.cls, "settings": self.settings,
                "epochs": [e.to_dict() for e in self.epochs]}


def loader_settings(loader) -> dict:
    """The knobs read off the DataLoader object (None where it has no such attribute)."""
    out = {}
    for name in SETTINGS:
        value = getattr(loader, name, None)
        out[name] = value if value is None or isinstance(value, (bool, int, float, str)) else repr(value)
    return out


class Recorder:
    """Every DataLoader iterated in this process, in the order they were first iterated."""

    def __init__(self, path: str | None = None) -> None:
        self.path = path
        self.pid = os.getpid()  # a forked copy (a DataLoader worker, the user's fork) never writes
        self.loaders: list[LoaderRecord] = []
        self._by_id: dict[int, LoaderRecord] = {}

    def wrap(self, loader, iterator, started: float) -> WatchedIterator:
        rec = self._by_id.get(id(loader))
        if rec is None or not rec.is_for(loader):  # new, or a new object at a dead one's address
            rec = LoaderRecord(len(self.loaders) + 1, loader)
            self.loaders.append(rec)
            self._by_id[id(loader)] = rec
        epoch = EpochRecord(len(rec.epochs), started)
        rec.epochs.append(epoch)
        return WatchedIterator(iterator, epoch, self.epoch_ended)

    def to_dict(self) -> dict:
        return {"schema": RECORDS_SCHEMA, "pid": os.getpid(), "written_at": time.time(),
                "loaders": [rec.to_dict() for rec in self.loaders]}

    def epoch_ended(self) -> None:
        if self.path:
            self.write()

    def write(self) -> None:
        """Atomically replace the records file; never raises into the user's program."""
        if not self.path or not self.loaders or os.getpid() != self.pid:
            return
        tmp = None
        try:
            import json
            import tempfile

            text = json.dumps(self.to_dict())
            fd, tmp = tempfile.mkstemp(prefix=".loaderdoc-watch.", suffix=".tmp",
                                       dir=os.path.dirname(os.path.abspath(self.path)))
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.write(text)
            os.replace(tmp, self.path)
            tmp = None
        except Exception as exc:  # a full disk must not break a training run
            _warn(f"could not write the records to {self.path}: {exc}")
        finally:
            if tmp is not None:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)


def patch(module, recorder: Recorder) -> bool:
    """Wrap ``module.DataLoader.__iter__`` once; True when it is (now) wrapped."""
    cls = getattr(module, "DataLoader", None)
    original = getattr(cls, "__iter__", None)
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True

    def __iter__(self):
        started = clock()
        return recorder.wrap(self, original(self), started)

    __iter__.__wrapped__ = original  # type: ignore[attr-defined]
    __iter__.__doc__ = original.__doc__
    __iter__.__qualname__ = getattr(original, "__qualname__", "DataLoader.__iter__")
    setattr(__iter__, _MARK, True)
    cls.__iter__ = __iter__
    return True


class _PatchOnImport:
    """A ``sys.meta_path`` finder that only answers for TARGET: it lets the real finders find the
    module, and wraps that spec's ``exec_module`` so the patch runs right after the module ran.
    One string comparison per import is all it costs other modules; it removes itself once used."""

    def __init__(self, on_load) -> None:
        self._on_load = on_load

    def find_spec(self, fullname, path=None, target=None):
        if fullname != TARGET:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        spec = None
        for finder in list(sys.meta_path):
            find = getattr(finder, "find_spec", None)
            if find is not None:
                spec = find(fullname, path, target)
                if spec is not None:
                    break
        if spec is None:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            _warn(f"cannot instrument {TARGET} (loaded by {loader!r}); DataLoaders are not measured")
            return spec
        on_load = self._on_load

        def exec_and_patch(module):
            exec_module(module)
            on_load(module)

        try:
            loader.exec_module = exec_and_patch  # a per-spec loader instance: only this import sees it
        except (AttributeError, TypeError):
            _warn(f"cannot instrument {TARGET}; DataLoaders are not measured")
        return spec


def install(path: str | None) -> Recorder:
    """Measure every DataLoader this process iterates and write the records to ``path`` at each
    epoch end and at exit (nothing is written by a process that iterated none)."""
    recorder = Recorder(path)

    def on_load(module) -> None:
        try:
            if not patch(module, recorder):
                _warn("torch.utils.data.dataloader has no DataLoader.__iter__; DataLoaders are not measured")
        except Exception as exc:
            _warn(f"could not instrument DataLoader: {exc}")

    if TARGET in sys.modules:
        on_load(sys.modules[TARGET])
    else:
        sys.meta_path.insert(0, _PatchOnImport(on_load))
    atexit.register(recorder.write)
    return recorder


def _warn(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"loaderdoc watch: {message}\n")
