"""The thread budget (issue 47): the training process's CPU time told apart by thread (the loop's
own thread does the work; the intra-op pool spins while it waits), the model's thread dimension, and
``tune``'s thread trial.

- A real watched loop with a second thread of the training process burning CPU while the loop loads:
  loading costs what the loop's thread burnt, not what the process did.
- A recorded run of this VM (``fixtures/watch/cpu-cnn-2cpu-spinning-pool.json``:
  ``benchmarks/watch_loops/cpu_cnn.py`` watched with torch's default 2 threads on 2 CPUs, quiet machine):
  the pool spun about as long as the loop loaded; the model's rates for workers x threads against
  the grid measured on this VM the same day (issue 47's grid, ``benchmarks/thread_grid.py``).
- Issue 47's H200 run (16 CPUs, torch's 16 threads, a ResNet-50 step on the GPU, 0 workers), built from
  the figures that run recorded: 8.44 s of process CPU per batch while the loop loaded, 0.49 s of it
  the loop's own (the probe measured 492 ms a batch in one worker).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from pathlib import Path

import pytest

from loaderdoc.tuning.result import OK, Trial, TrialSettings
from loaderdoc.tuning.search import TuneSearch
from loaderdoc.watching.cpu_use import CpuUse

FIXTURES = Path(__file__).parent / "fixtures" / "watch"


def _use(**kw) -> CpuUse:
    base = dict(workers=0, budget=2.0, step_wall_s=0.08, step_cpu_s=0.15, wait_wall_s=0.07, wait_cpu_s=0.14,
                load_cpu_s=0.07, load_queued_s=None, used_cpus=2.0, others_cpus=0.0, torch_threads=2,
                wait_loop_cpu_s=0.07, step_loop_cpu_s=0.078)
    return CpuUse(**{**base, **kw})


# ---- the accounting on a real loop --------------------------------------------------------------
def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_loading_costs_the_loop_threads_cpu_not_what_the_processes_other_threads_burnt_meanwhile():
    torch = pytest.importorskip("torch")
    from loaderdoc.api import watch

    class Burning(torch.utils.data.Dataset):  # 4 ms of the loading thread's CPU a sample
        def __len__(self):
            return 64

        def __getitem__(self, i):
            _burn(0.004)
            return torch.zeros(2)

    stop = threading.Event()

    def other_thread():  # hashing releases the GIL: CPU time of the process, none of the loop's
        block = b"x" * (4 << 20)
        while not stop.is_set():
            hashlib.sha256(block).digest()

    burner = threading.Thread(target=other_thread, daemon=True)
    burner.start()
    try:
        watched = watch(torch.utils.data.DataLoader(Burning(), batch_size=2, num_workers=0))
        for _ in range(2):
            for _batch in watched:
                _burn(0.002)
    finally:
        stop.set()
        burner.join()
    epochs = watched.records()["loaders"][0]["epochs"]
    loop_wait = sum(e["cpu_wait_loop_s"] for e in epochs)
    all_wait = sum(e["cpu_wait_s"] for e in epochs)
    timed = sum(e["cpu_wait_wall_s"] for e in epochs)
    assert loop_wait > 0 and all_wait > loop_wait  # the other thread ran during the waits too
    # each timed wait is a batch of two 4 ms samples in the loop's thread, whatever the other thread took
    batches = timed / (sum(e["wait_s"] for e in epochs) / sum(e["waits"] for e in epochs))
    assert loop_wait / batches == pytest.approx(0.008, rel=0.35)
    cpu = watched.report()["loaders"][0]["cpu"]
    # the report's loading cost is the loop's: below the process's CPU time in the waits
    assert cpu["load_cpu_per_batch_s"] == pytest.approx(cpu["loop_wait_cpu_per_batch_s"])
    assert cpu["others_wait_cpu_per_batch_s"] > 0


# ---- a recorded run of this VM: the CNN trained on the CPU, torch's 2 threads, 0 workers --------
def _recorded_cnn() -> CpuUse:
    from loaderdoc.watching.report_file import load_watch_report

    report = load_watch_report(FIXTURES / "cpu-cnn-2cpu-spinning-pool.json")
    (loader,) = report.loaders
    return loader.cpu_use(2.0)


def test_the_recorded_cnn_loads_on_the_loops_thread_while_torchs_other_thread_spins():
    use = _recorded_cnn()
    assert use.torch_threads == 2 and use.workers == 0
    # the process spent about twice the loop's CPU time while the loop loaded: the other half is the
    # pool's second thread spinning, not loading
    assert use.wait_cpu_s > 1.8 * use.load_cpu_s
    assert use.load_cpu_s == pytest.approx(use.wait_loop_cpu_s)
    assert use.spin_s == pytest.approx(use.wait_cpu_s - use.wait_loop_cpu_s)
    # 2.0 of 2 CPUs busy, but a quarter of it spinning: not saturated with work
    assert use.used_cpus > 1.9 and use.spin_cpus > 0.4 and not use.saturated
    # the ceiling counts work: loading once (the loop's), not the spin
    assert use.ceiling == pytest.approx(2.0 / (use.load_cpu_s + use.step_cpu_s), rel=0.01)


# the grid measured on this VM the same day (steps/s, two rounds each, issue 47; cpu_cnn.py with
# --workers N and OMP_NUM_THREADS=k): (workers, threads) -> the rounds
CNN_GRID = {(1, 1): (6.29,), (1, 2): (6.45,), (2, 1): (6.83, 5.82), (2, 2): (6.58, 6.59), (3, 1): (7.04, 6.31),
            (3, 2): (6.06,), (0, 1): (4.93, 4.61)}


@pytest.mark.parametrize("config", sorted(CNN_GRID))
def test_the_models_rate_for_workers_and_threads_is_within_a_quarter_of_the_grid(config):
    use = _recorded_cnn()
    n, k = config
    measured = sum(CNN_GRID[config]) / len(CNN_GRID[config])
    predicted = use.predict(n, k)
    assert predicted is not None
    assert abs(predicted / measured - 1) <= 0.25, (config, predicted, measured)


def test_the_recorded_cnn_proposes_no_change_its_grid_would_not_repay():
    use = _recorded_cnn()
    best = use.best_setting()
    # every (workers, threads) of the grid measured within about 10 % of the run's 6.8 steps/s: no change
    # is expected to gain the 5 % a proposal needs
    assert best is None or best[2] < 1.05 * use.rate


# ---- the model's thread dimension ----------------------------------------------------------------
def test_the_parallel_share_comes_from_the_steps_cpu_over_its_wall_time():
    use = _use(step_cpu_s=0.150, step_wall_s=0.080)
    # w = S ((1-p) + p/2): 0.080 = 0.150 (1 - p/2)
    assert use.parallel_share == pytest.approx((1 - 0.080 / 0.150) / 0.5)
    assert use._step_wall_alone(1) == pytest.approx(0.150)
    assert use._step_wall_alone(2) == pytest.approx(0.080)


def test_threads_are_not_predicted_where_the_run_cannot_say_how_its_step_scales():
    assert not _use(torch_threads=1).threads_known  # one thread: no speed-up seen
    assert not _use(on_gpu=True).threads_known  # a GPU step
    assert not _use(wait_loop_cpu_s=None, step_loop_cpu_s=None).threads_known  # recorded before the loop's clock
    contended = _use(workers=2, wait_wall_s=0.002, wait_cpu_s=0.002, wait_loop_cpu_s=0.002, load_cpu_s=0.07)
    assert not contended.threads_known  # its workers took the step's CPUs: the speed-up is hidden
    assert _use(torch_threads=1).predict(1, 1) is not None  # the run's own threads: as before
    assert _use(torch_threads=1).predict(0, 4) is None


def test_a_region_beside_busy_workers_runs_as_slowly_as_its_most_shared_cpu():
    use = _use()
    assert use._contention(2, 0.0) == 1.0
    assert use._contention(1, 1.5) == 1.0  # one thread: no region waits for another
    assert use._contention(2, 0.45) == 2.0  # the 2-CPU grid: 1.9-2.0x beside 1-3 workers
    assert use._contention(2, 3.0) == 3.0  # 5 threads wanting 2 CPUs: 3 on the most shared


def test_a_pool_larger_than_the_cpus_slows_the_loading_in_the_loop_and_fewer_threads_are_proposed():
    # OMP_NUM_THREADS=8 on 2 CPUs, 0 workers, a sleeping step: the loop's loading waits for CPUs the
    # spinning pool holds (its wait is 4x its CPU time)
    use = _use(torch_threads=8, step_wall_s=0.030, step_cpu_s=0.001, step_loop_cpu_s=0.001, wait_wall_s=0.280,
               wait_cpu_s=0.56, wait_loop_cpu_s=0.070, load_cpu_s=0.070, used_cpus=2.0)
    assert use.spin_s == pytest.approx(0.49) and not use.saturated
    assert use.predict(0) == pytest.approx(use.rate)
    # the step waits (not CPU work): no thread scaling to predict, but loading in workers is
    assert use.best_workers() is not None and use.best_workers()[1] > 2 * use.rate


def test_no_spin_is_claimed_for_the_pin_memory_threads_copy_or_a_single_threaded_process():
    assert _use(workers=2, pin_memory=True, wait_cpu_s=0.01, wait_loop_cpu_s=0.002).spin_s == 0.0
    assert _use(torch_threads=1).spin_s == 0.0
    assert _use(wait_loop_cpu_s=None, step_loop_cpu_s=None).spin_s == 0.0


# ---- issue 47's H200 run, from its recorded figures -----------------------------------------------
def _h200_zero_workers() -> CpuUse:
    rate, step = 1.7, 0.0316  # steps/s at 0 workers; the ResNet-50 step alone
    wait = 1 / rate - step
    return CpuUse(workers=0, budget=16.0, step_wall_s=step, step_cpu_s=0.030, wait_wall_s=wait, wait_cpu_s=8.44,
                  load_cpu_s=0.49, load_queued_s=None, used_cpus=(8.44 + 0.03) * rate, others_cpus=0.0,
                  torch_threads=16, on_gpu=True, wait_loop_cpu_s=0.49, step_loop_cpu_s=0.028, pin_memory=True)


def test_sixteen_spinning_threads_are_not_taken_for_loading_on_sixteen_cpus():
    use = _h200_zero_workers()
    assert use.spin_s == pytest.approx(8.44 - 0.49)  # 15 threads spinning while the loop loaded
    assert not use.saturated  # 14.4 CPUs busy, of which 13.5 spinning
    assert use.load_is_cpu
    best = use.best_setting(use.workers_to_keep_up)
    assert best is not None
    n, threads, rate = best
    # the run measured 9.7 steps/s (5.7x) at 16 workers, where the old accounting (every thread's CPU
    # taken for loading) promised 1.28x; this model sees the loading's real cost and proposes the
    # workers the CPUs allow. It does not know what the training process pays per batch past the
    # loop's own loading (the pinning, the hand-over of 73.5 MiB batches: issue 48), so its rate is
    # an upper bound there: it is not held to the measured one
    assert 8 <= n <= 16 and threads is None
    assert rate / use.rate > 5.7


# ---- tune's thread trial --------------------------------------------------------------------------
class ThreadedJob:
    """A fake CPU-trained job on 2 CPUs: 0 workers at torch's 2 threads 6.8 steps/s; workers help
    only with one intra-op thread (2 workers and 1 thread: 8.2)."""

    RATES = {(0, None): 6.8, (1, None): 6.5, (2, None): 6.6, (3, None): 6.1, (1, 1): 7.4, (2, 1): 8.2, (3, 1): 8.0}

    def __init__(self) -> None:
        self.search: TuneSearch | None = None
        self.ran: list[tuple[int, int | None]] = []

    def run(self, settings, purpose, predicted) -> Trial:
        number = len(self.search.trials) + 1
        n = 0 if settings is None else settings.num_workers
        k = None if settings is None else settings.torch_threads
        self.ran.append((n, k))
        rate = self.RATES.get((n, k), 6.0)
        trial = Trial(number=number, settings=settings or TrialSettings(0), status=OK, steps_per_s=rate,
                      window_steps=100, window_s=100 / rate, settled=True, wait_share=0.02 if n else 0.45,
                      torch_threads=k or 2)
        use = CpuUse(workers=n, budget=2.0, step_wall_s=0.08, step_cpu_s=0.15, wait_wall_s=0.002 if n else 0.07,
                     wait_cpu_s=0.002 if n else 0.14, load_cpu_s=0.07, load_queued_s=0.0, used_cpus=1.9,
                     others_cpus=0.0, torch_threads=k or 2)  # recorded before the loop's clock: no thread model
        self.search.note_use(trial, use)
        return trial


def test_tune_tries_fewer_threads_where_threads_and_workers_exceed_the_cpus_and_keeps_the_faster():
    job = ThreadedJob()
    search = TuneSearch(run=job.run, per_rank=2.0)
    job.search = search
    search.trials.append(job.run(None, "your settings", None))
    search.trials.append(job.run(TrialSettings(2, None), "two workers", None))
    nxt = search._threads()
    assert nxt is not None
    settings, purpose, _predicted = nxt
    # 2 threads + 2 workers on 2 CPUs: as many threads as the workers leave, at least one
    assert settings.num_workers == 2 and settings.torch_threads == 1 and "intra-op threads" in purpose
    search.trials.append(job.run(settings, purpose, None))
    assert search._threads() is None  # once
    pick = search.pick()
    assert pick.settings.torch_threads == 1 and pick.settings.num_workers == 2
    assert "torch_threads=1" in pick.reason and pick.steps_per_s == pytest.approx(8.2)


def test_a_thread_trial_runs_the_job_with_that_many_intra_op_threads(tmp_path):
    pytest.importorskip("torch")
    from loaderdoc.tuning.trial import TrialLimits, run_trial

    script = tmp_path / "loop.py"
    script.write_text(
        "import os, sys, time, torch\n"
        "from torch.utils.data import DataLoader\n"
        "print('OMP', os.environ.get('OMP_NUM_THREADS'), 'torch', torch.get_num_threads(), flush=True)\n"
        "loader = DataLoader(list(range(400)), batch_size=2)\n"
        "for _ in range(50):\n"
        "    for _batch in loader:\n"
        "        time.sleep(0.002)\n")
    # one thread: torch caps OMP_NUM_THREADS at the physical cores, so a count above them would not hold
    run = run_trial([sys.executable, str(script)], 2, TrialSettings(0, torch_threads=1), None,
                    TrialLimits(steps=30, first_batch_s=60, max_s=60))
    assert run.trial.status == OK, (run.trial.reason, run.log_tail)
    assert run.trial.torch_threads == 1  # the hook read it as the epochs began
    assert any("OMP 1 torch 1" in line for line in run.log_tail), run.log_tail
    assert json.loads(json.dumps(run.trial.settings.text())) == "num_workers=0, torch_threads=1"


def test_tune_measures_fewer_threads_where_the_models_floor_for_them_comes_near_the_fastest():
    use = _recorded_cnn()  # 0 workers, torch's 2 threads: the model reads how its step scales
    search = TuneSearch(run=lambda *a: None, per_rank=2.0)
    first = Trial(number=1, settings=TrialSettings(0), status=OK, steps_per_s=use.rate, window_steps=100,
                  window_s=100 / use.rate, settled=True, wait_share=0.46, torch_threads=2)
    search.trials.append(first)
    search.note_use(first, use)
    settings, purpose, predicted = search._threads()
    # the floor for one thread (the step's CPU time with the pool's spin counted as work) is within
    # 10 % of the 6.8 measured: measured, at the fewest workers that floor allows
    assert settings.torch_threads == 1 and settings.num_workers == 1
    assert predicted >= 0.9 * use.rate and "floor" in purpose
