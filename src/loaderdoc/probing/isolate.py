"""Process isolation: one configuration runs in a forked measuring process and comes back as a
:class:`ConfigResult`, whatever the dataset does.

Each configuration runs in its own process group; the DataLoader's workers are forked from it and
share the group. The measuring process is a child subreaper and waits to be killed once it has
reported, so whatever the dataset starts (in another session too) stays below it. The parent only
waits on a pipe, so it can always stop a configuration: on its result, a watchdog deadline,
``cancel`` or Ctrl+C it kills that whole tree (:func:`loaderdoc.probing.reaper.kill_tree`), and no
worker process is left behind whatever the dataset did (hung in ``__getitem__`` with 0 workers,
killed a worker, deadlocked, started a daemon). Forking also means the user's dataset is never
pickled. What is measured inside is :mod:`loaderdoc.probing.measure`'s business.

The measuring process runs torch's intra-op pool at the training job's thread count
(``LoadJob.torch_threads``): at 0 workers the loading and the collation run in that process on
those threads, as in the job, and so does the pin-memory thread's copy at any worker count. libgomp's pool does not survive
fork: once the forking process has run a parallel region on more than one thread, a forked child
that enters one waits forever for threads that do not exist in it (measured with torch 2.13's
libgomp; a child that stays at one thread is fine). :func:`forked_pool_works` tries that in a
throwaway child before a probe uses more than one thread.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import select
import signal
import sys
import threading
import time
import traceback

from loaderdoc.base._serde import from_dict, to_dict
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.measure import LoadJob, RunPlan, measure_in_process
from loaderdoc.probing.reaper import interrupts_deferred, kill_tree, set_subreaper
from loaderdoc.probing.result import ConfigResult

# a forked child that can use the pool does so in milliseconds; one that cannot never returns
POOL_CHECK_S = 3.0
_pool_lost = {"value": False}  # once this process's pool has started, it stays started


def forked_pool_works(threads: int) -> bool:
    """Whether a process forked from this one can run torch's intra-op pool at ``threads`` threads
    (see the module docstring): tried in a child that is killed if it has not finished in
    ``POOL_CHECK_S`` seconds."""
    if threads <= 1:
        return True
    if _pool_lost["value"]:
        return False
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, answers with its exit status
        code = 1
        try:
            import torch

            torch.set_num_threads(threads)
            torch.ones(1 << 20).add_(1)  # 2^20 elements: torch splits it across the pool
            code = 0
        finally:
            os._exit(code)
    code = None
    deadline = time.monotonic() + POOL_CHECK_S
    try:
        while code is None and time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                code = os.waitstatus_to_exitcode(status)
            else:
                time.sleep(0.005)
    finally:
        if code is None:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
    works = code == 0
    _pool_lost["value"] = code is None  # hung: the pool has started here; it will not stop
    return works


def run_config(
    workload: LoadJob,
    settings: LoaderSettings,
    plan: RunPlan,
    *,
    cancel: threading.Event | None = None,
    purpose: str = "",
) -> ConfigResult:
    """Measure one configuration in a forked process; never hangs, never leaves a worker (or any
    process the dataset started) behind.

    KeyboardInterrupt propagates after the measuring process's tree was killed.
    """
    from loaderdoc.probing import fresh

    read_fd, write_fd = os.pipe()
    started = time.perf_counter()
    watchdog_s = plan.watchdog_s(workload.step_ms)
    # torch refuses CUDA in a fork of a process that initialised it: then a new interpreter measures
    anew = workload.device.startswith("cuda") and fresh.cuda_initialised()
    if anew:
        try:
            pid = fresh.start(workload, settings, plan, write_fd, entry=__spec__.name if __spec__ else __name__)
        except (fresh.NoFreshProcess, OSError) as exc:
            os.close(read_fd)
            os.close(write_fd)
            return ConfigResult(settings=settings, status="failed", error=str(exc), purpose=purpose, loaderdoc_error=True)
        watchdog_s += fresh.START_S
    else:
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, reported through the pipe
            os.close(read_fd)
            child_main(write_fd, workload, settings, plan)
    os.close(write_fd)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # also done by the child: whichever runs first wins the race
    chunks: list[bytes] = []
    stopped = ""
    deadline = started + watchdog_s
    try:
        while True:
            if cancel is not None and cancel.is_set():
                stopped = "cancelled"
                break
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                stopped = "timeout"
                break
            ready, _, _ = select.select([read_fd], [], [], min(0.1, remaining))
            if ready:
                data = os.read(read_fd, 1 << 16)
                if not data:
                    break
                chunks.append(data)
                if data.endswith(b"\n"):
                    # the whole result: don't wait for EOF, a hung worker still holds the pipe open
                    break
    finally:
        os.close(read_fd)
        with interrupts_deferred():  # a second Ctrl+C must not cut the cleanup short
            wait_status = kill_tree(pid)
    duration = time.perf_counter() - started
    if stopped == "cancelled":
        result = ConfigResult(settings=settings, status="cancelled", error="cancelled before it finished")
    elif stopped == "timeout":
        result = ConfigResult(
            settings=settings,
            status="timeout",
            error=f"no result within {watchdog_s:.0f} s, stopped by the watchdog: "
            "the dataset or a worker probably hangs",
        )
    else:
        try:
            result = from_dict(ConfigResult, json.loads(b"".join(chunks).decode()))
        except (ValueError, TypeError):
            result = ConfigResult(
                settings=settings,
                status="failed",
                error=f"the measuring process died ({_describe_wait_status(wait_status)}) before reporting",
            )
    result.settings = settings
    result.duration_s = duration
    result.purpose = purpose
    return result


def _describe_wait_status(status: int | None) -> str:
    if status is None:
        return "status unknown"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = str(sig)
        return f"killed by signal {name}"
    return f"exit code {os.WEXITSTATUS(status)}"


# ---- child side -------------------------------------------------------------------------------
def _prefer_oom_kill() -> None:  # pragma: no cover - child
    """Make this process and the workers it forks the OOM killer's first choice (raising one's own
    oom_score_adj needs no privilege): when a configuration outgrows the memory limit, the kernel
    kills it, and the probe records a failed configuration instead of dying itself."""
    try:
        with open("/proc/self/oom_score_adj", "w") as fh:
            fh.write("500")
    except OSError:
        pass


def child_main(write_fd: int, workload: LoadJob, settings: LoaderSettings, plan: RunPlan) -> None:  # pragma: no cover - child
    """The measuring process, forked or started fresh (:mod:`loaderdoc.probing.fresh`): measure,
    send the result, wait to be killed."""
    code = 0
    try:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        set_subreaper(True)  # orphans of whatever the dataset starts stay below this process
        _prefer_oom_kill()  # a dataset that eats memory takes down its configuration, not the probe
        _die_with_parent()
        # the program froze torch's objects (torchload); a training process has not: its workers'
        # collections write to those objects' pages (copy-on-write), and so must the ones measured here
        gc.unfreeze()
        # Ctrl+C reaches the parent, which kills this whole group; the child must not race it
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGINT, signal.SIG_IGN)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
        try:
            import torch

            torch.set_num_threads(workload.torch_threads)  # the job's count, forked_pool_works checked it
            # keep the loader alive: a graceful worker shutdown can take seconds, and the parent
            # kills this process group the moment the result is read
            try:
                result = measure_in_process(workload, settings, plan, keep_alive=[])
                result.torch_threads = torch.get_num_threads()
            finally:
                # torch's SIGCHLD handler raises when a worker dies, at whatever line runs then: once
                # the measurement is over it must not fire in the reporting below (exit 1, no result)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        except BaseException as exc:
            result = failure_result(settings, exc)
            # the traceback holds the failed loader: releasing it would shut its workers down,
            # joining a hung worker for 5 s each, before the result is sent (the watchdog fires first)
            failed = exc  # noqa: F841
        send_result(write_fd, result)
        os.close(write_fd)
        # the parent kills this process and everything below it: exiting first would hand the
        # orphans of what the dataset started to init, out of the parent's reach
        while True:
            signal.pause()
    except BaseException:
        code = 1
    finally:
        os._exit(code)


def send_result(write_fd: int, result: ConfigResult) -> None:  # pragma: no cover - child
    payload = json.dumps(to_dict(result)).encode() + b"\n"  # one line: the parent stops reading at its end
    view = memoryview(payload)
    while view:
        written = os.write(write_fd, view)
        view = view[written:]


def _die_with_parent() -> None:  # pragma: no cover - child
    """Linux: SIGKILL this process if the probe itself dies (prctl PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)


def failure_result(settings: LoaderSettings, exc: BaseException) -> ConfigResult:
    """A failed configuration, keeping the worker's traceback and a one-line cause."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    message = str(exc).strip()
    lines = [line for line in message.splitlines() if line.strip()]
    status = "failed"
    in_worker = bool(lines) and lines[0].startswith("Caught ") and "DataLoader worker" in lines[0]
    if in_worker:
        # torch re-raises a worker's exception with the original traceback in the message
        error = f"{lines[0].removeprefix('Caught ').rstrip('.')}: {lines[-1].strip()}"
    elif "timed out after" in message and "DataLoader" in message:
        status = "timeout"
        error = f"{lines[0]} (a worker did not deliver a batch in time: it hangs or is far too slow)"
    else:
        error = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
        if isinstance(exc, (OSError, EOFError)):
            # a worker killed while it handed a batch over: the training process sees only the
            # broken connection (ConnectionResetError, EOFError); name the death, which is the cause
            deaths = _dead_workers(exc)
            if deaths:
                error = f"{deaths[0]} while sending a batch ({error})"
    from loaderdoc.probing.blame import loaderdoc_failure

    mine = status == "failed" and loaderdoc_failure(error, text, in_worker=in_worker)
    if mine:
        error = f"loaderdoc's measuring process failed: {error}"
    return ConfigResult(settings=settings, status=status, error=error, traceback=text, loaderdoc_error=mine)


def _dead_workers(exc: BaseException, wait_s: float = 1.0) -> list[str]:
    """Workers of the failed loader (found in the traceback's frames) that died, as torch words it."""
    workers = []
    tb = exc.__traceback__
    while tb is not None:
        for value in tb.tb_frame.f_locals.values():
            found = getattr(value, "_workers", None)
            if isinstance(found, list):
                workers += [w for w in found if hasattr(w, "exitcode") and w not in workers]
        tb = tb.tb_next
    deaths = []
    deadline = time.monotonic() + wait_s  # one wait for all: a hung worker must not hold each up
    for worker in workers:
        with contextlib.suppress(Exception):
            worker.join(timeout=max(0.0, deadline - time.monotonic()))  # the connection breaks as it dies
            code = worker.exitcode
            if code is not None and code < 0:
                deaths.append(f"DataLoader worker (pid {worker.pid}) is killed by signal: {signal.strsignal(-code)}")
            elif code:
                deaths.append(f"DataLoader worker (pid {worker.pid}) exited unexpectedly with exit code {code}")
    return deaths


def _fresh_main() -> None:  # pragma: no cover - a new measuring process (probing.fresh), reported through the pipe
    import pickle

    write_fd = int(sys.argv[1])
    recipe, job, settings, plan = pickle.load(sys.stdin.buffer)
    for entry in reversed(recipe.sys_path):
        if entry not in sys.path:
            sys.path.insert(0, entry)
    try:
        job.dataset, job.collate_fn = recipe.build()
    except BaseException as exc:
        send_result(write_fd, failure_result(settings, exc))
        os._exit(1)
    child_main(write_fd, job, settings, plan)


if __name__ == "__main__":  # pragma: no cover
    _fresh_main()
