"""Session-wide test setup."""

from __future__ import annotations

import gc
import signal
import tempfile

# A shell without job control starts background jobs with SIGINT and SIGQUIT ignored, and exec
# keeps them ignored: a `.ci/run &` would hand that to every loaderdoc the tests start, and the
# signal tests would send SIGINT or SIGQUIT to a process that (rightly, as a bare command would)
# ignores it: the watch launcher then waits for a command that never got it. A handled signal
# resets to its default on exec, as does one set to its default here, so each child starts as a
# foreground command would.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
# nohup does the same to SIGHUP.
for _name in ("SIGQUIT", "SIGHUP"):
    if signal.getsignal(getattr(signal, _name)) is signal.SIG_IGN:
        signal.signal(getattr(signal, _name), signal.SIG_DFL)

# A worker holds torch, textual and every module the tests import, and the app's tests make a lot of
# garbage: with CPython's default thresholds (700, 10, 10) a full collection walking some 300 000
# objects came every few hundred milliseconds, 0.1-0.4 s each, a quarter of the CPU of
# test_tui_app.py (28.5 CPU-s against 21.0 with the first threshold at 10 000, measured on one
# worker). Garbage is still collected, less often; the processes the tests start keep the defaults.
gc.set_threshold(10_000, 10, 10)

# Where the environment forbids bytecode files (PYTHONDONTWRITEBYTECODE=1, common in Docker images and
# set on the machines this suite was developed on), the suite leaves it so. An earlier version gave
# the suite's processes a bytecode directory of their own (PYTHONPYCACHEPREFIX) so that loaderdoc's
# modules were compiled once: but Python then reads bytecode from there alone, so the standard
# library, torch, textual and the frameworks were compiled again too, by each of the workers
# at once as they started. That cost more than it saved: on a fresh clone beside a busy core, 476
# CPU-s for the suite against 453 without it, and the first test 11.6 s after the start against 4.5.
# The processes the tests start import the loaderdoc this suite imports (support.paths), which
# after `pip install` has the bytecode pip compiled.

# ---- tests that time the machine run alone ------------------------------------------------------
# The suite runs on several pytest-xdist workers. A test marked ``alone`` compares what it measured
# (a rate, a CPU share, a ceiling) with what the product predicted from an earlier run: the other
# workers' tests starting and stopping beside it change the machine between the two, which a
# busy core that stays busy does not. Such a test takes the suite's lock exclusively, the others
# take it shared; a gate taken first keeps new tests from slipping in while an ``alone`` test waits
# (flock gives a waiting exclusive lock no priority over new shared ones).
#
# The ``alone`` tests are one xdist group (``--dist loadgroup`` in pyproject.toml): one worker runs
# them one after another and holds the lock from the first to the last, so the other workers'
# running tests are waited for once, not once for each of them.
import fcntl  # noqa: E402
import json  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

ALONE = "alone"


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: a timing test no other test of the suite runs beside")


# ---- the slowest tests first ---------------------------------------------------------------------
# xdist hands tests out in collection order, a few at a time to each worker as it runs short. A 20-s
# test handed out last keeps one worker busy while the others have ended: the suite starts the
# slowest first, from the wall times in durations.json (``benchmarks/suite_cpu.py --durations-out``).
# A test missing from it (new, or under a second) keeps its place after the listed ones; a stale
# figure only changes the order.
DURATIONS = Path(__file__).with_name("durations.json")


@pytest.hookimpl(tryfirst=True)  # before xdist adds the group to each test's id
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker(ALONE):
            item.add_marker(pytest.mark.xdist_group(ALONE))
    if getattr(config, "workerinput", None) is not None:  # one process runs them all in any order
        wall = json.loads(DURATIONS.read_text()) if DURATIONS.exists() else {}
        items.sort(key=lambda item: -wall.get(item.nodeid, 0.0))  # stable: the rest keep their order


def pytest_unconfigure(config):
    _release()
    # a worker that is done may remove them: a worker still running opens them anew for each test,
    # and nobody else is left to share them with
    for path in _lock_paths(config) or ():
        path.unlink(missing_ok=True)
    # pytest then collects five times over to report exceptions raised in finalizers, each a walk of
    # the whole heap (0.4 s each at the end of test_tui_app.py): one collection here reports the
    # same, and freezing what survives it leaves the five nothing old to walk
    gc.collect()
    gc.freeze()


def _lock_paths(config) -> tuple[Path, Path] | None:
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:  # one process: every test already runs alone
        return None
    base = Path(tempfile.gettempdir()) / f"loaderdoc-suite-{workerinput['testrunuid']}"
    return base.with_suffix(".gate"), base.with_suffix(".lock")


_held: list = []  # the gate and the lock, held exclusively across this worker's consecutive alone tests


def _release() -> None:
    while _held:
        _held.pop().close()  # closing releases its lock


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    paths = _lock_paths(item.config)
    if paths is None:
        yield
        return
    if item.get_closest_marker(ALONE):
        if not _held:
            for path in paths:  # the gate first: no test starts from now on; then the running ones end
                held = open(path, "a")  # noqa: SIM115 (held across tests)
                _held.append(held)
                fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            if nextitem is None or not nextitem.get_closest_marker(ALONE):
                _release()
        return
    gate = open(paths[0], "a")  # noqa: SIM115 (held across the yield)
    lock = open(paths[1], "a")  # noqa: SIM115
    try:
        fcntl.flock(gate, fcntl.LOCK_SH)
        fcntl.flock(lock, fcntl.LOCK_SH)
        fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        lock.close()  # closing releases the locks
        gate.close()


# ---- multiprocessing's helpers ------------------------------------------------------------------
@pytest.fixture
def stop_multiprocessing_helpers():
    """Stops the forkserver and the resource tracker a test started in this pytest process:
    multiprocessing keeps both until the process ends, and a later test of the same worker that
    asserts it left no child process (the probe's, the app's) would find them."""
    yield
    from multiprocessing import forkserver, resource_tracker

    forkserver._forkserver._stop()  # private, and the one way short of the process ending
    resource_tracker._resource_tracker._stop()
