"""One configuration, measured with a real DataLoader: the numbers' structure and every fault.

Timings on a shared 2-core machine are noisy, so these assert relations that must hold, never
exact figures.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.isolate import failure_result, run_config
from loaderdoc.probing.measure import LoadJob, RunPlan

sys.path.insert(0, str(Path(__file__).with_name("probe_datasets")))
import probe_userdata  # noqa: E402

QUICK = RunPlan(window_s=0.3, min_batches=3, loader_timeout_s=3.0, watchdog_override_s=30.0)


def running(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def descendants() -> list[psutil.Process]:
    return [p for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE]


@pytest.fixture(autouse=True)
def no_process_left_behind():
    before = {p.pid for p in descendants()}
    yield
    left = [p for p in descendants() if p.pid not in before]
    assert not left, f"processes left behind: {[p.pid for p in left]}"


def loader(workers: int, batch_size: int = 16, **kw) -> LoaderSettings:
    kw = {"shuffle": True, **kw}
    if workers == 0:
        return LoaderSettings(batch_size=batch_size, **kw)
    return LoaderSettings(batch_size=batch_size, num_workers=workers, prefetch_factor=2, **kw)


def test_a_configuration_yields_every_measurement():
    workload = LoadJob(probe_userdata.make(), step_ms=5.0)
    r = run_config(workload, loader(2), QUICK, purpose="test")
    assert r.ok, r.error
    assert r.purpose == "test" and r.settings.num_workers == 2
    assert r.batches >= 3 and r.batches_per_s > 0
    assert r.samples_per_s == pytest.approx(r.batches_per_s * 16)
    assert 0 <= r.wait.p50_ms <= r.wait.p95_ms <= r.wait.max_ms
    assert 0 <= r.starvation_pct <= 100
    assert r.step_ms_achieved >= 4.5  # a 5 ms sleep lasts at least about 5 ms
    assert r.first_batch_s > 0 and r.epoch_restart_s > 0
    assert r.batch_bytes == 16 * 8 * 4 + 16 * 8  # float32 x 8 per sample, int64 labels
    # PSS splits shared pages, so it sits between USS (private only) and RSS (double-counts)
    assert 0 < r.worker_uss_bytes <= r.worker_pss_bytes <= r.worker_rss_bytes
    assert r.shm_peak_bytes is not None and r.shm_peak_bytes >= 0
    assert r.cpu_util_pct is not None
    assert r.h2d_pinned_ms is None and r.h2d_pageable_ms is None  # no CUDA: never invented
    assert r.duration_s >= r.first_batch_s


def test_zero_workers_has_no_worker_memory_and_measures_cpu_share():
    workload = LoadJob(probe_userdata.make(), step_ms=2.0)
    r = run_config(workload, loader(0), QUICK)
    assert r.ok, r.error
    assert r.worker_pss_bytes == 0 and r.shm_peak_bytes == 0
    assert r.fetch_cpu_pct is not None and 0 <= r.fetch_cpu_pct <= 100


@pytest.mark.alone
def test_zero_workers_sees_another_process_keeping_a_cpu_busy():
    # a busy loop in another process: the 0-worker run counts it as CPU demand the workers would
    # share the CPUs with (whatever else this machine runs adds to it, never takes from it)
    burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        workload = LoadJob(probe_userdata.make(), step_ms=2.0)
        r = run_config(workload, loader(0), RunPlan(window_s=0.8, min_batches=3, loader_timeout_s=3.0,
                                                    measure_restart=False))
    finally:
        burner.kill()
        burner.wait()
    assert r.ok, r.error
    assert r.other_cpus is not None and r.other_cpus >= 0.5


def test_other_processes_cpu_is_the_busy_time_minus_this_process_tree():
    from loaderdoc.probing.measure import _other_cpus

    # 2 s: the allowed CPUs were busy 3.0 CPU-seconds, this process and its workers used 1.2
    assert _other_cpus((10.0, 4.0), (13.0, 5.2), 2.0) == 0.9
    assert _other_cpus((10.0, 4.0), (10.5, 5.0), 2.0) == 0.0  # never negative
    assert _other_cpus(None, (1.0, 1.0), 2.0) is None


@pytest.mark.alone
def test_io_bound_data_gets_more_throughput_from_more_workers_than_cores():
    # 50 ms of latency per sample, batches of 4: 200 ms per batch serially
    workload = LoadJob(probe_userdata.make_io_bound(), step_ms=5.0)
    plan = RunPlan(window_s=0.8, min_batches=3, loader_timeout_s=5.0, measure_restart=False)
    zero = run_config(workload, loader(0, batch_size=4), plan)
    four = run_config(workload, loader(4, batch_size=4), plan)
    assert zero.ok and four.ok
    assert four.batches_per_s > 2 * zero.batches_per_s
    assert four.starvation_pct < zero.starvation_pct
    # while loading, the 0-worker run mostly waited: I/O, not CPU
    assert zero.fetch_cpu_pct < 50


@pytest.mark.alone
def test_persistent_workers_shorten_the_gap_between_epochs():
    workload = LoadJob(probe_userdata.make(), step_ms=1.0)
    plan = RunPlan(window_s=0.2, min_batches=3, loader_timeout_s=3.0)
    fresh = run_config(workload, loader(2, persistent_workers=False), plan)
    kept = run_config(workload, loader(2, persistent_workers=True), plan)
    assert fresh.ok and kept.ok
    assert kept.epoch_restart_s < fresh.epoch_restart_s
    # the non-persistent run also timed the persistent restart with a second loader
    assert kept.epoch_restart_persistent_s is None
    assert fresh.epoch_restart_persistent_s < fresh.epoch_restart_s


def test_reads_from_storage_are_counted_cold_and_not_warm(tmp_path):
    # files dropped from the page cache: the 0-worker run reads them from storage; run again over
    # the same indices (the sampler's seed is fixed), they come from the cache
    from loaderdoc.probing.instrument import storage_read_bytes

    paths = probe_userdata.write_files(tmp_path, 192, 64 * 1024)
    probe_userdata.evict(paths[:1])
    before = storage_read_bytes()
    with open(paths[0], "rb") as fh:
        fh.read()
    if storage_read_bytes() == before:
        pytest.skip(f"{tmp_path} is not on storage whose reads the kernel accounts (tmpfs?)")
    probe_userdata.evict(paths)
    workload = LoadJob(probe_userdata.Files(paths), step_ms=1.0)
    # exactly 3 steady batches (no time window): both runs read the same 5 batches' files
    plan = RunPlan(window_s=0.0, max_window_s=10.0, min_batches=3, loader_timeout_s=3.0, measure_restart=False)
    cold = run_config(workload, loader(0, batch_size=8), plan)
    warm = run_config(workload, loader(0, batch_size=8), plan)
    assert cold.ok and warm.ok
    assert cold.stages.dataset_read_bytes >= 64 * 1024  # about 8 files of 64 KiB a batch
    assert cold.stages.batches == warm.stages.batches == 3
    assert warm.stages.dataset_read_bytes < cold.stages.dataset_read_bytes / 4


def test_a_restart_run_times_both_restarts_without_a_steady_window():
    # the search's persistence run: the size's rate is known, only the restarts are timed
    workload = LoadJob(probe_userdata.make(), step_ms=1.0)
    plan = RunPlan(window_s=5.0, min_batches=3, loader_timeout_s=3.0, steady=False)
    r = run_config(workload, loader(2, persistent_workers=False), plan)
    assert r.ok, r.error
    assert r.batches == 0 and r.warmup_batches == 0 and r.batches_per_s is None
    assert r.epoch_restart_s > 0 and r.epoch_restart_persistent_s > 0
    assert r.first_batch_s > 0 and r.worker_pss_bytes > 0
    assert r.other_cpus is None  # over no window it would say nothing


@pytest.mark.parametrize("workers", [0, 2])
def test_a_dataset_raising_on_an_index_fails_that_configuration_with_its_traceback(workers):
    workload = LoadJob(probe_userdata.make_raising(), step_ms=1.0)
    r = run_config(workload, loader(workers), QUICK)
    assert r.status == "failed"
    assert "ValueError" in r.error and "sample 13 is corrupt" in r.error
    assert "\n" not in r.error
    assert "probe_userdata.py" in r.traceback and "__getitem__" in r.traceback
    if workers:
        assert "DataLoader worker process" in r.error


def test_a_worker_killed_by_a_signal_fails_the_configuration():
    workload = LoadJob(probe_userdata.make_killing(), step_ms=1.0)
    r = run_config(workload, loader(2), QUICK)
    assert r.status == "failed"
    assert "killed by signal" in r.error or "exited unexpectedly" in r.error


def test_a_hanging_worker_hits_the_dataloader_timeout():
    workload = LoadJob(probe_userdata.make_hanging_worker(), step_ms=1.0)
    plan = RunPlan(window_s=0.3, loader_timeout_s=1.5, watchdog_override_s=30.0)
    started = time.monotonic()
    r = run_config(workload, loader(2), plan)
    assert r.status == "timeout"
    assert "timed out" in r.error
    assert time.monotonic() - started < 20


def test_a_dataset_hanging_in_the_training_process_is_stopped_by_the_watchdog():
    # with num_workers=0 no DataLoader timeout applies: only the watchdog can end it
    workload = LoadJob(probe_userdata.make_hanging(), step_ms=1.0)
    plan = RunPlan(window_s=0.3, loader_timeout_s=1.0, watchdog_override_s=2.0)
    started = time.monotonic()
    r = run_config(workload, loader(0), plan)
    assert r.status == "timeout"
    assert "watchdog" in r.error
    assert time.monotonic() - started < 5


def test_a_long_training_step_is_measured_not_taken_for_a_hang():
    # one run takes 3 steps of 2 s (after the first batch, one in the warm-up, one steady): more
    # than a watchdog blind to the step allows at this plan (0.625 + 0.125 + 2 x 1 + 3 = 5.75 s)
    plan = RunPlan(window_s=0.25, loader_timeout_s=1.0, measure_restart=False)
    r = run_config(LoadJob(probe_userdata.Squares(n=64), step_ms=2000), loader(0, batch_size=4), plan)
    assert r.ok, r.error
    assert r.batches >= 1 and r.step_ms_achieved >= 2000


def test_cancel_stops_a_running_configuration_and_its_workers():
    workload = LoadJob(probe_userdata.make_slow(), step_ms=1.0)
    plan = RunPlan(window_s=30.0, loader_timeout_s=10.0)
    cancel = threading.Event()
    seen_workers = []

    def cancel_when_workers_run():
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            kids = descendants()
            if len(kids) >= 3:  # the measuring process and its two workers
                seen_workers.extend(kids)
                break
            time.sleep(0.05)
        cancel.set()

    helper = threading.Thread(target=cancel_when_workers_run)
    helper.start()
    started = time.monotonic()
    r = run_config(workload, loader(2), plan, cancel=cancel)
    helper.join()
    assert r.status == "cancelled"
    assert len(seen_workers) >= 3
    assert time.monotonic() - started < 25
    for proc in seen_workers:
        assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE


def test_failure_result_keeps_a_one_line_cause():
    try:
        raise RuntimeError("DataLoader timed out after 2 seconds")
    except RuntimeError as exc:
        r = failure_result(LoaderSettings(), exc)
    assert r.status == "timeout" and "\n" not in r.error and "Traceback" in r.traceback


def test_an_iterable_dataset_is_measured_without_a_sampler():
    workload = LoadJob(probe_userdata.make_iterable(), step_ms=1.0)
    r = run_config(workload, loader(0, shuffle=False), QUICK)
    assert r.ok, r.error
    assert r.batches >= 3 and r.epoch_restart_s is None  # no sampler: no epoch boundary to time


def test_an_endless_iterable_dataset_with_workers_ends_its_measurement():
    # the restart would drain the epoch, which an endless stream never ends: the run must stop on
    # its own (the plan's watchdog, ~10 s here, would report anything else as a timeout)
    import faults_data

    plan = RunPlan(window_s=0.3, loader_timeout_s=3.0)  # restart and persistence compared, as at the end
    r = run_config(LoadJob(faults_data.make_endless(), step_ms=1.0), loader(2, batch_size=8, shuffle=False), plan)
    assert r.ok, r.error
    assert r.batches >= 3
    assert r.epoch_restart_s is None and r.epoch_restart_persistent_s is None


@pytest.mark.parametrize("factory, repeats", [("make_endless_unsplit", True), ("make_endless", False)])
def test_the_stream_check_tells_whether_workers_repeat_an_iterable_dataset(factory, repeats):
    import dataclasses

    import faults_data

    plan = dataclasses.replace(QUICK, check_worker_streams=True, measure_restart=False)
    workload = LoadJob(getattr(faults_data, factory)(), step_ms=1.0)
    r = run_config(workload, loader(3, batch_size=8, shuffle=False), plan)
    assert r.ok, r.error
    assert r.workers_repeat is repeats
    # unasked, no check runs
    plain = run_config(workload, loader(3, batch_size=8, shuffle=False), dataclasses.replace(plan, check_worker_streams=False))
    assert plain.workers_repeat is None


@pytest.mark.parametrize("workers", [0, 2])
def test_processes_the_dataset_starts_in_another_session_die_with_the_configuration(tmp_path, monkeypatch, workers):
    # Popen(start_new_session=True), fork + setsid, a double fork: the measuring process keeps them
    # below itself (a subreaper), so they die with it even in a process that is not one (this one)
    import faults_data

    log = tmp_path / "started.pids"
    monkeypatch.setenv(faults_data.SPAWN_LOG, str(log))
    r = run_config(LoadJob(faults_data.make_starts_processes(), step_ms=1.0), loader(workers, batch_size=8), QUICK)
    assert r.ok, r.error
    pids = [int(line) for line in log.read_text().split()]
    assert len(pids) >= 3 * max(1, workers), pids
    assert not [pid for pid in pids if running(pid)]


def test_a_dataset_that_runs_out_fails_with_a_reason():
    workload = LoadJob(probe_userdata.make_short_stream(), step_ms=1.0)
    r = run_config(workload, loader(0, batch_size=2, shuffle=False), QUICK)
    assert r.status == "failed" and "ran out" in r.error


def test_a_broken_connection_from_a_killed_worker_is_named_as_the_death():
    # torch's main process sees a worker killed mid-handover only as ConnectionResetError (or
    # EOFError); the failure must name the death, as torch's own message would
    import multiprocessing
    import os
    import signal as signals

    from loaderdoc.probing.isolate import failure_result

    class Iterator:  # stands in for _MultiProcessingDataLoaderIter: its _workers are processes
        def __init__(self, workers):
            self._workers = workers

    victim = multiprocessing.get_context("fork").Process(target=signals.pause)
    victim.start()
    os.kill(victim.pid, signals.SIGKILL)

    def receive(iterator):
        raise ConnectionResetError(104, "Connection reset by peer")

    try:
        receive(Iterator([victim]))
    except ConnectionResetError as exc:
        result = failure_result(loader(2), exc)
    assert result.status == "failed"
    assert f"DataLoader worker (pid {victim.pid}) is killed by signal: Killed" in result.error
    assert "ConnectionResetError" in result.error


class _SlowStart:
    """A training step of 2 ms, except the first two (0.7 s): meanwhile the workers fill their buffer."""

    kind = "cpu-sleep"
    step_s = 0.002

    def __init__(self) -> None:
        self.steps = 0

    def step(self, batch) -> None:
        self.steps += 1
        time.sleep(0.7 if self.steps <= 2 else self.step_s)

    def h2d_times_ms(self, batch):
        return None, None

    def pin_ms(self, batch):
        return None


@pytest.mark.alone
def test_the_steady_rate_is_what_workers_produce_not_what_startup_buffered(monkeypatch):
    # 2 workers, 4 samples of 20 ms sleep a batch: each makes a batch in ~80 ms, so the pipeline runs
    # at ~25 batches/s. While the first (slow) steps run, the workers fill prefetch_factor=8 x 2 =
    # 16 batches; the warm-up is capped so they are still there when the window opens. Consumed over
    # the window they read as ~twice the real rate; what the workers produced does not.
    import loaderdoc.probing.consumer as consumer

    monkeypatch.setattr(consumer, "make_consumer", lambda step_ms, device: _SlowStart())  # inherited by fork
    workload = LoadJob(probe_userdata.Squares(n=4096, io_ms=20.0), step_ms=2.0)
    plan = RunPlan(window_s=0.6, min_batches=3, loader_timeout_s=5.0, warmup_cap_s=0.0, watchdog_override_s=30.0)
    r = run_config(workload, LoaderSettings(batch_size=4, num_workers=2, prefetch_factor=8), plan)
    assert r.ok, r.error
    st = r.stages
    assert st is not None and st.produced_per_s is not None
    assert r.batches_per_s == min(r.consumed_per_s, st.produced_per_s)
    assert r.batches_per_s <= 25.0 * 1.1  # never faster than two workers can make batches
    assert r.consumed_per_s > 1.3 * r.batches_per_s  # the buffered batches inflate consumption only
    # timed inside the workers: 4 x 20 ms of sleeping a batch, almost no CPU
    assert 80.0 <= st.dataset_ms < 160.0
    assert st.dataset_cpu_ms < 0.5 * st.dataset_ms and st.dataset_wait_ms > 60.0
    # samples are counted when a batch's are fetched, batches when collated: a batch per worker may
    # straddle each edge of the window
    assert abs(st.samples - 4 * st.batches) <= 4 * 2 * 2


def test_zero_workers_are_timed_in_the_training_process():
    workload = LoadJob(probe_userdata.Squares(n=4096, io_ms=5.0), step_ms=2.0)
    r = run_config(workload, loader(0, batch_size=4), QUICK)
    assert r.ok, r.error
    st = r.stages
    assert st.receive_ms == 0.0 and st.produced_per_s is None
    assert st.load_ms == pytest.approx(r.wait.mean_ms, rel=0.3)  # each 0-worker wait is one batch loaded


class _ScriptedLoop:
    """An iterator and a clock where each batch's wait is scripted (seconds)."""

    def __init__(self, waits: list[float]) -> None:
        self.now = 0.0
        self.waits = list(waits)

    def clock(self) -> float:
        return self.now

    def __iter__(self):
        return self

    def __next__(self):
        if not self.waits:
            raise StopIteration
        self.now += self.waits.pop(0)
        return "batch"


class _NoStepConsumer:  # like the CUDA consumer: no host-side step time to read
    def step(self, batch) -> None:
        pass


@pytest.mark.parametrize("step_ms, consumed", [(0.0, 2), (200.0, 4)])
def test_warm_up_judges_a_dry_buffer_by_the_workloads_step_whatever_the_consumer(step_ms, consumed):
    """A 5 ms wait is the buffer running dry beside no step, and noise beside a 200 ms step, where
    the whole buffer of 4 goes by (the threshold is 1 ms + 5 % of the step): the step comes from
    the workload, not the consumer."""
    from loaderdoc.probing.measure import _warm_up

    loop = _ScriptedLoop([0.0] + [0.005] * 5)
    settings = LoaderSettings(num_workers=2, prefetch_factor=2, batch_size=4)
    over, used = _warm_up(loop, _NoStepConsumer(), settings, RunPlan(window_s=100.0), loop.clock,
                          step_s=step_ms / 1000.0)
    assert (over, used) == (False, consumed)
