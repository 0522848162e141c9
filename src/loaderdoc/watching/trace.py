"""``loaderdoc watch --trace DIR``: a ``torch.profiler`` trace of a few steady steps of the loop.

Standard library only at import: under ``loaderdoc watch`` this file is loaded by path beside
``hook.py`` in every process, and torch is reached through ``sys.modules`` once the program has
imported it (it has, when a DataLoader is iterated). Off unless ``LOADERDOC_WATCH_TRACE`` names a
folder.

In the process that iterates a DataLoader (never a forked worker), the first epoch to return
``after`` batches past its first starts the profiler (CPU, and CUDA where the program initialised
it) at its next ``next()``; ``steps`` batches later it stops and writes a Chrome trace
(``trace-<pid>.json``, opened by Perfetto or chrome://tracing) atomically. While it records,
each wait in ``next()`` is a ``loaderdoc: data wait`` range and each step a ``loaderdoc: step``
range, so the waits ``watch`` measured sit beside the step's own ops. The time spent starting
and writing is moved out of the step it fell in (the measured step times stay the program's);
what profiling adds to the traced steps stays in them, and the records say how much.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sys
import tempfile
import time

ENV_TRACE = "LOADERDOC_WATCH_TRACE"  # the folder the trace is written to
ENV_TRACE_STEPS = "LOADERDOC_WATCH_TRACE_STEPS"  # steps recorded
ENV_TRACE_AFTER = "LOADERDOC_WATCH_TRACE_AFTER"  # steady batches before it starts (the warm-up)
DEFAULT_STEPS = 10
DEFAULT_AFTER = 10
WAIT_LABEL = "loaderdoc: data wait"
STEP_LABEL = "loaderdoc: step"

clock = time.perf_counter


def _count(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, default))
    except ValueError:
        return default
    return value if value > 0 else default


class Tracer:
    """One process's trace: armed, then recording one epoch's steps, then done."""

    def __init__(self, folder: str, steps: int = DEFAULT_STEPS, after: int = DEFAULT_AFTER) -> None:
        self.folder = folder
        self.steps = steps
        self.after = after
        self.state = "waiting"  # -> "recording" -> "written" | "failed"
        self.error: str | None = None
        self.path: str | None = None
        self._prof = None
        self._mark = None  # the open "loaderdoc: step" range
        self._epoch = None  # the EpochRecord traced
        self._loader: int | None = None
        self._traced = 0  # batches returned while recording
        self._seen = 0  # the most batches any epoch returned while armed (said when none got far enough)
        self._before: tuple[float, float] | None = None  # wait and step per batch over the warm-up's second half
        self._mid = None  # (epoch, wait_s, step_s, waited) half-way through the warm-up: the first steps are slow
        self._wait_s = 0.0  # the traced waits and steps, timed here
        self._step_s = 0.0
        self._steps = 0
        self._returned: float | None = None  # when the last traced batch was handed to the loop
        self._start_s = 0.0
        self._export_s = 0.0
        self._from_batch: int | None = None
        self._restore = None  # (the WatchedIterator, its _next before the trace)
        self._window = None  # (the loading's reads, clock()) when recording began
        self.io = None  # the recorder's ioacct.IoLedger: the profiler's own reads are kept out of the epoch's
        self.cut_short: str | None = None  # why the trace ended before its steps (the program's own profiler)
        self._unguard = None  # undoes _guard: called when ours stops

    @classmethod
    def from_env(cls, io=None) -> Tracer | None:
        """The tracer --trace asked for (None: not asked); ``io``: the recorder's read ledger."""
        folder = os.environ.get(ENV_TRACE)
        if not folder:
            return None
        tracer = cls(folder, _count(ENV_TRACE_STEPS, DEFAULT_STEPS), _count(ENV_TRACE_AFTER, DEFAULT_AFTER))
        tracer.io = io
        return tracer

    @property
    def armed(self) -> bool:
        return self.state == "waiting"

    # ---- called by the hook's WatchedIterator ----------------------------------------------------
    def before_next(self, watched, loader_number: int) -> None:
        """At the top of ``next()``: close the last step's range, and start or stop the profiler.
        The seconds that takes are moved out of the step measured across them."""
        e = watched._epoch
        if self.state == "recording" and self._epoch is e:
            self._end_step()
            if self._traced >= self.steps:
                self._export_s = self._shift(watched, self._stop)
                self._overhead_in_window()
            return
        if not self.armed:
            watched._trace = None  # traced (or failed) already: nothing more to do per batch
            return
        self._seen = max(self._seen, e.steps)
        if (self._mid is None or self._mid[0] is not e) and e.steps >= self.after // 2 + 1:
            self._mid = (e, e.wait_s, e.step_s, e.waited)
        if e.steps >= self.after + 1:  # the first batch and `after` steady ones
            self._epoch, self._loader = e, loader_number
            self._start_s = self._shift(watched, lambda: self._start(watched))
            if self.state == "recording":  # after the start's own reads were set aside
                self._window = (self.io.loading(e) if self.io is not None else None, clock())

    def ended(self, epoch) -> None:
        """The epoch ended (StopIteration, or its loader's next epoch began) while recording: write
        what was recorded."""
        if self.state == "recording" and self._epoch is epoch:
            self._end_step()
            t = clock()
            self._stop()
            self._export_s = clock() - t
            self._overhead_in_window()

    def to_dict(self) -> dict:
        out = {"folder": self.folder, "state": self.state, "path": self.path, "error": self.error,
               "steps_asked": self.steps, "after": self.after, "loader": self._loader,
               "epoch": self._epoch.index if self._epoch is not None else None, "from_batch": self._from_batch,
               "steps": self._traced, "start_s": self._start_s, "export_s": self._export_s,
               "batches_seen": self._seen, "cut_short": self.cut_short}
        if self._before is not None:
            out["wait_per_batch_before_s"], out["step_per_batch_before_s"] = self._before
        if self._traced:
            out["wait_per_batch_traced_s"] = self._wait_s / self._traced
        if self._steps:
            out["step_per_batch_traced_s"] = self._step_s / self._steps
        return out

    # ---- the profiler ------------------------------------------------------------------------------
    def _start(self, watched) -> None:
        e = self._epoch
        # the second half of the warm-up: each waited batch's wait, and the step before it
        mid = self._mid if self._mid is not None and self._mid[0] is e else (e, 0.0, 0.0, 0)
        n = e.waited - mid[3]
        self._before = ((e.wait_s - mid[1]) / n, (e.step_s - mid[2]) / n) if n > 0 else None
        self._from_batch = e.steps + 1
        try:
            torch = sys.modules["torch"]
            enabled = getattr(torch.autograd, "_profiler_enabled", None)
            if enabled is not None and enabled():  # starting ours would end theirs (it then records nothing)
                self._fail("the program runs its own torch profiler; loaderdoc's would stop it, so it did not start")
                return
            profiler = torch.profiler
            activities = [profiler.ProfilerActivity.CPU]
            cuda = getattr(torch, "cuda", None)
            if cuda is not None and cuda.is_available() and cuda.is_initialized():
                activities.append(profiler.ProfilerActivity.CUDA)
            prof = profiler.profile(activities=activities)
            prof.start()
        except Exception as exc:  # another profiler running, no kineto: the run goes on untraced
            self._fail(f"the profiler did not start: {exc}")
            return
        self._prof = prof
        self.state = "recording"
        self._guard(torch)
        original = watched._next
        record_function = torch.profiler.record_function
        tracer = self

        def traced_next():
            t = clock()
            with record_function(WAIT_LABEL):
                batch = original()
            tracer._returned = clock()
            tracer._wait_s += tracer._returned - t
            tracer._traced += 1
            tracer._mark = record_function(STEP_LABEL)
            tracer._mark.__enter__()
            return batch

        watched._next = traced_next
        self._restore = (watched, original)

    def _guard(self, torch) -> None:
        """While ours records, a profiler the program starts ends ours first: two at once ended the
        program with a segfault (exit 139, issue 49). Every torch profiler prepares through
        ``torch.autograd.profiler.profile._prepare_trace``; ours is past it."""
        cls = getattr(getattr(torch.autograd, "profiler", None), "profile", None)
        original = getattr(cls, "_prepare_trace", None)
        if original is None:
            return
        tracer = self

        def _prepare_trace(profile, *args, **kwargs):
            if tracer.state == "recording":
                tracer.cut_short = f"the program started its own torch.profiler after {tracer._traced} steps"
                tracer.ended(tracer._epoch)
            return original(profile, *args, **kwargs)

        cls._prepare_trace = _prepare_trace
        self._unguard = lambda: setattr(cls, "_prepare_trace", original)

    def _overhead_in_window(self) -> None:
        """The profiler's start and export are in the epoch's wall time: the traced window (left
        out of the reads per second) holds them too."""
        traced = self._epoch.io_traced if self._epoch is not None else None
        if isinstance(traced, dict):
            traced["seconds"] += self._start_s + self._export_s

    def _end_step(self) -> None:
        """The step after a traced batch is over: time it and close its range."""
        if self._returned is not None:
            self._step_s += clock() - self._returned
            self._steps += 1
            self._returned = None
        mark, self._mark = self._mark, None
        if mark is not None:
            with contextlib.suppress(Exception):
                mark.__exit__(None, None, None)

    def _stop(self) -> None:
        unguard, self._unguard = self._unguard, None
        if unguard is not None:
            with contextlib.suppress(Exception):
                unguard()
        if self._restore is not None:
            watched, original = self._restore
            watched._next = original
            self._restore = None
        window = self._window
        if window is not None and window[0] is not None and self.io is not None:
            # what the traced steps read (the profiler pages its own code in meanwhile): kept out of
            # the loader's steady reads, with their batches and time
            reads = self.io.procio.minus(self.io.loading(self._epoch), window[0])
            self._epoch.io_traced = {"reads": list(reads), "batches": self._traced, "seconds": clock() - window[1]}
        prof, self._prof = self._prof, None
        if prof is None:
            return
        path = os.path.join(self.folder, f"trace-{os.getpid()}.json")
        private = None
        try:
            prof.stop()
            # written in a folder only the owner can enter, made owner-only, then moved into place:
            # the trace names the program's files and functions (every file loaderdoc writes is 0600)
            private = tempfile.mkdtemp(prefix=".trace-", dir=self.folder)
            tmp = os.path.join(private, "trace.json")
            prof.export_chrome_trace(tmp)
            if not os.path.exists(tmp):  # the profiler's writer says nothing when it fails (a full disk)
                self._fail(_unwritten(self.folder, None))
                return
            os.chmod(tmp, 0o600)
            os.replace(tmp, path)
        except Exception as exc:  # a full disk, a folder removed meanwhile: said in the report
            self._fail(_unwritten(self.folder, exc))
            return
        finally:
            if private is not None:
                shutil.rmtree(private, ignore_errors=True)
        self.path = path
        self.state = "written"

    def _fail(self, message: str) -> None:
        self.state = "failed"
        self.error = message
        with contextlib.suppress(Exception):
            sys.stderr.write(f"loaderdoc watch: --trace: {message}\n")

    def _shift(self, watched, action) -> float:
        """Run ``action`` (start or stop), move its time out of the step it fell in; its seconds."""
        t = clock()
        try:
            if self.io is not None:
                self.io.excluded(action)
            else:
                action()
        except Exception as exc:  # never into the user's loop
            self._fail(f"{exc!r}")
        spent = clock() - t
        if watched._returned is not None:
            watched._returned += spent
            watched._returned_cpu = None  # the step's CPU time would hold the profiler's: not timed
        return spent


FULL_BELOW = 64 << 20  # free bytes under which a disk a trace could not be written to is called full


def _unwritten(folder: str, error: Exception | None) -> str:
    """Why the trace is not in ``folder``: its disk is full (ENOSPC, or the profiler wrote nothing
    where little space is left), or what went wrong."""
    try:
        st = os.statvfs(folder)
        free: int | None = st.f_bavail * st.f_frsize
    except OSError:
        free = None
    if getattr(error, "errno", None) == errno.ENOSPC or (error is None and free is not None and free < FULL_BELOW):
        shown = "" if free is None else f" ({free >> 10} KiB free)" if free < 1 << 20 else f" ({free >> 20} MiB free)"
        return f"the disk holding {folder} is full{shown}; free some space or give --trace another folder"
    if error is None:
        return f"the profiler wrote no file into {folder}"
    return f"the trace was not written: {error}"


def per_batch(tracer: Tracer | None, loader_number: int, own_process: bool):
    """What a new WatchedIterator calls at the top of each ``next()``: None unless a trace is
    still to be recorded in this process (never in a forked worker)."""
    if tracer is None or not tracer.armed or not own_process:
        return None
    return lambda watched: tracer.before_next(watched, loader_number)


def ended(tracer: Tracer | None, epoch) -> None:
    if tracer is not None:
        tracer.ended(epoch)


def holds(tracer: Tracer | None, epoch) -> bool:
    """Whether the tracer is recording ``epoch`` (it sets the epoch's ``io_traced`` when it stops)."""
    return tracer is not None and tracer.state == "recording" and tracer._epoch is epoch
