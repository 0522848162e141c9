"""One trial of ``loaderdoc tune``: the user's command, run for real with the training loader built
with the trial's settings, measured until its steady window settles, then stopped.

The command runs as ``loaderdoc watch`` runs it (the hook on its PYTHONPATH, ``--apply``'s tables
in its environment), with ``LOADERDOC_TUNE_TRIAL`` set to the trial's number and ``TMPDIR`` a folder
of the trial's own, in a session of its own; its output is read through a pipe and only its last
LOG_KEEP bytes are kept, in memory (the last lines are shown where it fails): a chatty script fills
no disk. The launcher polls the records every quarter second. A trial ends when the window settled, when the command exits, when
no batch came within the time allowed for the first one, or when the trial's time is up. Stopping
it: SIGINT to the command (Python raises KeyboardInterrupt, so its ``finally`` and ``with`` blocks
run: a lock file is removed, a file being written is closed; a script may stop cleanly on it),
INT_GRACE_S for it to exit; then SIGTERM to the command alone (a preemption handler runs), GRACE_S;
then SIGTERM to what is left of its process group, GROUP_GRACE_S; then SIGKILL to everything below
the launcher that the trial started, in whatever session (the launcher is a child subreaper while
tune runs: ``probing.reaper.contained``), so no worker, helper or daemon of a trial outlives it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderdoc.tuning import window as win
from loaderdoc.tuning.result import (
    FAILED,
    NO_BATCH,
    NO_LOADER,
    OK,
    SHORT,
    STOPPED,
    RankRate,
    Trial,
    TrialSettings,
)
from loaderdoc.watching.hook import ENV_TUNE_TRIAL

ENV_TRIAL = ENV_TUNE_TRIAL  # set in every trial: a script may skip checkpoints and uploads
SAMPLE_INTERVAL_S = "0.2"  # the hook's sampler, in trials (a window's edges are its ticks)
WRITE_S = "0.5"  # the hook's writes of the records, in trials
POLL_S = 0.25
# SIGINT (KeyboardInterrupt: the script's cleanup runs), then this long before SIGTERM: twice the 5 s
# torch gives each DataLoader worker to exit as its iterator shuts down (beside busy CPUs 5 s cut a
# `finally` short)
INT_GRACE_S = 10.0
GRACE_S = 10.0  # SIGTERM to the command (a preemption handler saving its state), then this long at most
GROUP_GRACE_S = 1.0  # SIGTERM to what is left of its group (helpers), then this long before SIGKILL
LOG_TAIL = 6  # lines of a failed trial's output shown
MAX_SOCKET_PATH = 107  # a Unix socket's path, in bytes, on Linux
LOG_KEEP = 64 * 1024  # bytes of the command's output kept (the end): enough for LOG_TAIL long lines


@dataclass
class TrialLimits:
    steps: int = 60  # batches a settled window holds at least
    first_batch_s: float = 180.0  # from the start to the first batch of any DataLoader (later trials: the training loader's)
    max_s: float = 300.0  # the whole trial


@dataclass
class TrialRun:
    """What a trial left: its measurement and what the launcher needs next."""

    trial: Trial
    key: str | None  # the training loader, as known across runs
    records: list[dict[str, Any]]
    windows: list[win.Window]
    log_tail: list[str]


def apply_tables(key: str | None, settings: TrialSettings | None) -> str | None:
    """--apply's JSON for the hook: the trial's settings on the training loader alone (by the line
    that built it, else by its role; by neither: every loader, the only way to reach it). The script's
    own settings: no table, but the hook's --apply path all the same, so that a loader a framework
    re-builds (accelerate's copy of the Trainer's) is known by the same line in every trial."""
    if settings is None:
        return json.dumps({"file": "loaderdoc tune", "tables": {}})
    if key is None:
        return None
    table: dict[str, Any] = {"num_workers": settings.num_workers}
    if settings.num_workers and settings.prefetch_factor is not None:
        table["prefetch_factor"] = settings.prefetch_factor
    if settings.persistent_workers is not None and settings.num_workers:
        table["persistent_workers"] = settings.persistent_workers
    kind, _, name = key.partition(":")
    target = {"site": key, "role": name}.get(kind, "")
    plan: dict[str, Any] = {"file": "loaderdoc tune", "tables": {target: table}}
    if settings.torch_threads is not None:  # the hook sets them too, should the script's launcher drop the env
        plan["process"] = {"torch_threads": settings.torch_threads}
    return json.dumps(plan)


def _env(records_dir: str, number: int, apply: str | None, threads: int | None = None) -> dict[str, str]:
    from loaderdoc.watching.hook import ENV_INTERVAL, ENV_WRITE_S
    from loaderdoc.watching.records import child_env

    env = child_env(records_dir, apply=apply)
    if threads is not None:  # torch sizes its intra-op pool from it at import (MKL's own variable would win)
        env["OMP_NUM_THREADS"] = str(threads)
        env.pop("MKL_NUM_THREADS", None)
    env[ENV_TRIAL] = str(number)
    env[ENV_INTERVAL] = SAMPLE_INTERVAL_S
    env[ENV_WRITE_S] = WRITE_S
    scratch = os.path.join(os.path.dirname(records_dir), "tmp")
    # the trial's temporary files in the trial's own folder, removed with it: a DataLoader worker
    # stopped mid-run leaves its pymp-* folder behind (issue 49); not where that would make the path
    # of multiprocessing's sockets (TMPDIR/pymp-XXXXXXXX/listener-XXXXXXXX) pass Linux's 107 bytes
    if len(scratch) + len("/pymp-XXXXXXXX/listener-XXXXXXXX") <= MAX_SOCKET_PATH:
        os.makedirs(scratch, exist_ok=True)
        env["TMPDIR"] = scratch
    return env


def run_trial(command: list[str], number: int, settings: TrialSettings | None, key: str | None,
              limits: TrialLimits, *, evidence: Callable[[Trial, list[win.Window], list[dict]], None] | None = None,
              deadline: float | None = None) -> TrialRun:
    """Run trial ``number``: ``settings`` on the loader ``key`` (None, None: the script as written,
    which names the training loader). ``evidence`` fills the trial's CPU figures from its windows."""
    import io

    from loaderdoc.base.preflight import cannot_start
    from loaderdoc.watching.records import RecordsReader

    trial = Trial(number=number, settings=settings or TrialSettings())
    started = time.monotonic()
    tmp = tempfile.mkdtemp(prefix="loaderdoc-tune-")
    records_dir = Path(tmp) / "records"
    records_dir.mkdir()
    reader = RecordsReader(records_dir, stderr=io.StringIO())  # its warnings are not the user's: a trial reads mid-write
    me = os.getpid()
    try:
        import psutil

        before = {p.pid for p in psutil.Process(me).children(recursive=True)}
    except Exception:
        before = set()
    records: list[dict[str, Any]] = []
    windows: list[win.Window] = []
    proc = None
    log = None
    try:
        try:
            proc = subprocess.Popen(command, env=_env(str(records_dir), number, apply_tables(key, settings),
                                                     settings.torch_threads if settings else None),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        except OSError as exc:
            raise cannot_start("tune", command[0], exc) from None
        log = LogTail(proc.stdout)
        records, windows, key = _follow(proc, trial, reader, key, limits, started, deadline)
    except KeyboardInterrupt:
        trial.status, trial.reason = STOPPED, "interrupted"
        raise
    finally:
        if proc is not None:
            _stop(proc, me, before)
        trial.duration_s = time.monotonic() - started
        tail = log.lines(LOG_TAIL) if log is not None else []
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    if trial.status in (OK, SHORT) and windows:
        _measure(trial, windows, records, key, settings)
        if evidence is not None:
            evidence(trial, windows, records)
    elif settings is None:  # the script's own settings, unmeasured: as its loader showed them, if it did
        records = reader.read() or records  # what the command wrote as it stopped (the hook writes at exit)
        key = key or win.training_key(records)
        ran = win.settings_of(records, key) if key else None
        if ran is not None:
            trial.settings = _as_ran(ran["settings"])
        else:
            trial.settings_seen = False
    return TrialRun(trial=trial, key=key, records=records, windows=windows, log_tail=tail)


def _follow(proc, trial: Trial, reader, key: str | None, limits: TrialLimits, started: float,
            deadline: float | None) -> tuple[list, list, str | None]:
    """Poll until the trial has its answer; the last records, windows and the training loader."""
    from loaderdoc.watching.records import exit_code_of

    records: list[dict[str, Any]] = []
    windows: list[win.Window] = []
    fixed = key is not None
    while True:
        code = proc.poll()
        records = reader.read()
        if not fixed:
            key = win.training_key(records)
        # once the training loader is known, its own first batch (a validation loop that ran first
        # does not make a trial whose training loader hangs wait for the trial's whole time)
        seen = win.batches_seen(records, key if fixed else None)
        if seen and trial.first_batch_s is None:
            trial.first_batch_s = time.monotonic() - started
        if key is not None:
            ran = win.settings_of(records, key) if not fixed else None  # the script's own: read off the loader
            settings = trial.settings if ran is None else _as_ran(ran["settings"])
            warm = win.WARM_BATCHES + settings.num_workers * settings.prefetch_depth
            windows = win.windows(records, key, steps=limits.steps, warm=warm)
        if code is not None:
            trial.exit_code = exit_code_of(code)
            _ended(trial, records, windows, code)
            return records, windows, key
        # every rank on the node measured and settled: one that opened its window later (a slower
        # start) would otherwise be missed, and it may be the slowest
        if windows and key is not None and len(windows) >= win.ranks_expected(records, key) and all(
                w.settled for w in windows):
            trial.settled = True
            return records, windows, key
        now = time.monotonic()
        if not seen and now - started > limits.first_batch_s:
            trial.status = NO_BATCH
            what = "batch of the training loader" if fixed else "DataLoader batch"
            trial.reason = f"no {what} within {limits.first_batch_s:g} s of the start; stopped"
            return records, windows, key
        over = now - started > limits.max_s or (deadline is not None and now > deadline)
        if over:
            if windows:
                trial.reason = "the window had not settled when the trial's time was up; measured as it was"
            else:
                trial.status = NO_BATCH if not seen else FAILED
                trial.reason = ("no steady window before the trial's time was up "
                                f"({win.batches_seen(records, key)} batches of the training loader)")
            return records, windows, key
        time.sleep(POLL_S)


def _as_ran(ran: dict) -> TrialSettings:
    """The loader's workers and prefetch factor as the hook read them off it (anything else: none):
    the queue they filled before the loop took its first batch flatters the first batches."""
    workers, prefetch = ran.get("num_workers"), ran.get("prefetch_factor")
    workers = workers if isinstance(workers, int) and workers > 0 else 0
    return TrialSettings(workers, prefetch if isinstance(prefetch, int) and prefetch > 0 else None)


def _ended(trial: Trial, records: list, windows: list, code: int) -> None:
    """The command exited on its own before the window settled."""
    if not any(r.get("loaders") for r in records):
        trial.status = NO_LOADER if code == 0 else FAILED
        trial.reason = (f"the command exited {trial.exit_code} without iterating a torch DataLoader" if code == 0 else
                        f"the command exited {trial.exit_code} before its first batch")
    elif code != 0:
        trial.status = FAILED
        trial.reason = f"the command exited {trial.exit_code} before the window settled"
    elif windows:
        trial.status = SHORT
        trial.reason = f"the job ended before the window settled ({windows[0].steps} steady batches measured)"
    else:
        trial.status = FAILED
        trial.reason = "the job ended before a steady window opened (too few batches); a longer run is needed"


def _stop(proc, me: int, before: set[int]) -> None:
    """The trial's whole process tree, gone: SIGINT to the command (its cleanup runs, as on Ctrl+C),
    then SIGTERM to it alone (a preemption handler saves its state while its DataLoader workers live
    on: signalled too, they would die under it and torch would raise in the middle of the save),
    then SIGTERM to what is left of its group, and SIGKILL to every process the trial started that
    is still alive (orphans in other sessions included: we are their subreaper)."""
    # a command started with SIGINT ignored (tune run in the background of a script) would only wait
    if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
        _signal_and_wait(proc, signal.SIGINT, INT_GRACE_S)
    _signal_and_wait(proc, signal.SIGTERM, GRACE_S)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + GROUP_GRACE_S
        while time.monotonic() < deadline:
            os.killpg(proc.pid, 0)  # raises ProcessLookupError once the group is empty
            time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(Exception):
        proc.kill()
    with contextlib.suppress(Exception):
        proc.wait(timeout=GRACE_S)
    from loaderdoc.probing import reaper

    with contextlib.suppress(Exception):
        reaper.reap(reaper.kill_descendants(me, spare=before))


def _signal_and_wait(proc, signum: int, grace_s: float) -> None:
    if proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        proc.send_signal(signum)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


class LogTail:
    """The command's output, read as it comes (the pipe never fills, nothing goes to disk), of
    which only the last LOG_KEEP bytes are kept."""

    def __init__(self, pipe) -> None:
        import threading

        self._pipe = pipe
        self._kept = bytearray()
        self._thread = threading.Thread(target=self._read, name="loaderdoc-trial-log", daemon=True)
        self._thread.start()

    def _read(self) -> None:
        with contextlib.suppress(OSError, ValueError):
            fd = self._pipe.fileno()
            while chunk := os.read(fd, 65536):
                self._kept += chunk
                if len(self._kept) > 2 * LOG_KEEP:  # trimmed now and then, not at every chunk
                    del self._kept[:-LOG_KEEP]

    def lines(self, count: int) -> list[str]:
        """The last ``count`` non-blank lines, once the output ended (a process that escaped the
        trial and still holds the pipe is not waited for)."""
        self._thread.join(timeout=2.0)
        text = bytes(self._kept[-LOG_KEEP:]).decode("utf-8", errors="replace")
        with contextlib.suppress(OSError):
            self._pipe.close()
        return [line for line in text.splitlines() if line.strip()][-count:]


def _measure(trial: Trial, windows: list[win.Window], records: list, key: str | None, settings) -> None:
    """The trial's figures from its windows: the slowest rank's rate and that rank's breakdown."""
    slowest = min(windows, key=lambda w: w.rate)
    trial.steps_per_s = slowest.rate
    trial.window_steps = slowest.steps
    trial.window_s = slowest.seconds
    trial.settled = trial.settled or all(w.settled for w in windows)
    trial.spread = slowest.spread
    trial.wait_share = slowest.wait_share
    trial.step_ms = 1000 * slowest.step_s / slowest.steps_timed if slowest.steps_timed else None
    trial.wait_ms = 1000 * slowest.wait_s / slowest.waits if slowest.waits else None
    pss = [w.workers_pss_bytes for w in windows if w.workers_pss_bytes]
    trial.workers_pss_bytes = max(pss) if pss else None
    shm = [w.shm_peak_bytes for w in windows if w.shm_peak_bytes is not None]
    trial.shm_peak_bytes = max(shm) if shm else None
    wall = slowest.wall_s
    if wall > 0:
        trial.proc_cpus = slowest.proc_cpu_s / wall if slowest.proc_cpu_s is not None else None
        trial.workers_cpus = slowest.workers_cpu_s / wall
        others = slowest.others_cpu_s
        trial.others_cpus = others / wall if others is not None else None
    trial.ranks = [RankRate(rank=w.rank, pid=w.pid, steps_per_s=w.rate, steps=w.steps, seconds=w.seconds)
                   for w in windows]
    ran = win.settings_of(records, key) if key else None
    workers = (ran or {}).get("settings", {}).get("num_workers")
    if isinstance(workers, int):
        if settings is None:
            trial.settings = TrialSettings(num_workers=workers,
                                           prefetch_factor=(ran["settings"].get("prefetch_factor") if workers else None),
                                           persistent_workers=ran["settings"].get("persistent_workers"))
        trial.applied = settings is None or workers == settings.num_workers
        if not trial.applied:
            trial.status = FAILED
            trial.reason = (f"the settings did not reach the training loader (it ran with num_workers={workers}); "
                            "see the trial's output")
    if not trial.settings.persistent:
        trial.restart_share = slowest.restart_share(trial.settings.num_workers)
    threads = [w.torch_threads for w in windows if w.torch_threads is not None]
    trial.torch_threads = max(threads) if threads else None
    if settings is not None and settings.torch_threads is not None and threads and max(threads) != settings.torch_threads:
        # the script sets its own thread count after the hook did (torch.set_num_threads in its code)
        trial.applied = False
        trial.status = FAILED
        trial.reason = (f"torch_threads={settings.torch_threads} did not hold: the training process ran "
                        f"{max(threads)} intra-op threads (the script sets its own?)")
