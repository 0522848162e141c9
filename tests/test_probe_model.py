"""The probe's model of a pipeline (predicted curve, pick) and the breakdown of a measured run.

Pure arithmetic on made-up stage timings: each expectation is worked out by hand in the comment.
"""

from __future__ import annotations

import pytest

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.instrument import window
from loaderdoc.probing.model import LoadModel, breakdown, curve, fit_contention, model_from, prediction
from loaderdoc.probing.result import ConfigResult, StageTimes, WaitStats


def test_waiting_scales_with_workers_until_the_step_caps_it():
    # 320 ms of mostly waiting per batch, a 20 ms step: 16 workers deliver 50/s = the step's rate
    m = LoadModel(load_ms=320, cpu_ms=10, step_ms=20, cpus=2)
    assert m.rate(8) == (pytest.approx(25.0), "workers")
    assert m.rate(16)[0] == pytest.approx(50.0)
    assert m.rate(24) == (pytest.approx(50.0), "step")
    assert m.workers_for(1.0) == 16
    assert m.pick() == 16  # 16 x 0.97 rounds up to 16: fewer would be more than 3 % slower


def test_contention_fitted_on_two_measured_sizes_beside_a_busy_process():
    # a real busy torchvision probe: 2 workers 7.13 steps/s, 6 workers 8.59, 1.01 CPUs held by others.
    # The share: 2 workers get 2 x 2/3.01 = 1.329 CPUs -> 5.36 steps/s per CPU; 6 get 2 x 6/7.01 = 1.712
    # -> 9.18 expected; 9.18 / 8.59 - 1 = 6.9 %, over 4 workers past the CPUs: 1.7 % each
    m = LoadModel(load_ms=230, cpu_ms=225, step_ms=60, cpus=2, others=1.01, max_workers=16)
    fit = fit_contention(m, {0: 4.33, 2: 7.13, 6: 8.59}, 2, 6)
    assert fit.expected_high == pytest.approx(9.18, abs=0.01)
    assert fit.contention == pytest.approx(0.0172, abs=0.0005)
    assert fit.rate(2) == pytest.approx(7.13) and fit.rate(6) == pytest.approx(8.59)
    # the fitted curve tops out at 7-8 workers (8.63); 97 % of that is 8.37: 5 workers (8.49) reach it,
    # 4 (8.28) do not. The share alone would have said 11
    assert fit.pick() == (5, 8)
    assert fit.rate(5) >= 0.97 * fit.rate(8) > fit.rate(4)
    assert m.pick() == 11
    # measured at least the share: no cost per worker, the model's own curve
    assert fit_contention(m, {2: 7.13, 6: 9.5}, 2, 6).contention == 0.0
    # nothing to fit without both rates, or without a size past the CPUs
    assert fit_contention(m, {2: 7.13}, 2, 6) is None
    assert fit_contention(m, {1: 4.0, 2: 7.13}, 1, 2) is None
    assert fit_contention(LoadModel(load_ms=230, cpu_ms=225, step_ms=60), {2: 7.1, 6: 8.6}, 2, 6) is None
    assert fit_contention(m, {0: 4.33, 6: 8.59}, 0, 6) is None  # 0 workers share no CPUs: nothing to scale


def test_the_fitted_curve_is_capped_by_the_step():
    # the busy torchvision numbers with a 130 ms step (7.69 steps/s): the fitted CPU side would reach
    # 8.63 at 8 workers and put the pick at 5 (8.49); the step caps 3 workers' 7.89 at 7.69 already,
    # so 3 are within 3 % of the top (2 workers, 7.13, are not)
    m = LoadModel(load_ms=230, cpu_ms=225, step_ms=130, cpus=2, others=1.01, max_workers=16)
    fit = fit_contention(m, {2: 7.13, 6: 8.59}, 2, 6)
    assert max(fit.rate(w) for w in range(1, 17)) == pytest.approx(1000 / 130)
    assert fit.pick()[0] == 3


def test_cpu_work_saturates_at_the_cpu_budget():
    # 200 ms of CPU per batch on 2 CPUs: at most 10 batches/s however many workers
    m = LoadModel(load_ms=200, cpu_ms=200, step_ms=20, cpus=2)
    assert m.rate(1) == (pytest.approx(5.0), "workers")
    assert m.rate(2)[0] == pytest.approx(10.0)
    assert m.rate(6) == (pytest.approx(10.0), "CPU")
    assert m.pick() == 2
    # receiving batches costs the training process CPU too: it lowers the ceiling
    assert LoadModel(load_ms=200, cpu_ms=200, step_ms=20, cpus=2, receive_ms=50).ceiling == pytest.approx(8.0)


def test_pinning_each_batch_is_priced_in_the_training_process():
    """Issue 48: the probe's rate left out what the training process pays per batch besides the step.
    Its pin-memory thread copies each batch once, one at a time beside the step, on the CPUs."""
    fed = LoadModel(load_ms=500, cpu_ms=490, step_ms=31.6, cpus=16)
    pinned = LoadModel(load_ms=500, cpu_ms=490, step_ms=31.6, cpus=16, pin_ms=40.0)
    assert fed.rate(32) == (pytest.approx(1000 / 31.6), "step")
    assert pinned.rate(32) == (pytest.approx(25.0), "pinning")  # 40 ms a batch, one thread
    assert pinned.ceiling == pytest.approx(25.0)
    # the copy is CPU time beside the workers': 16 CPUs / (490 + 40) ms
    cpu_bound = LoadModel(load_ms=500, cpu_ms=490, step_ms=5, cpus=16, pin_ms=10.0)
    assert cpu_bound.rate(40) == (pytest.approx(16000 / 500), "CPU")
    assert "pinning it 40.0 ms" in pinned.describe()
    # from the baseline's stages, where the CUDA consumer measured it
    stages = StageTimes(batches=10, samples=320, dataset_ms=300, dataset_cpu_ms=30, collate_ms=20, collate_cpu_ms=10,
                        pin_ms=12.5)
    assert model_from(_run(0, stages, rate=2.9), cpus=2, max_workers=64).pin_ms == 12.5


def test_zero_workers_when_loading_in_the_training_process_is_already_fast_enough():
    # 49 steps/s with 0 workers, 50 at most with any: within 3 %
    m = LoadModel(load_ms=0.5, cpu_ms=0.5, step_ms=20, cpus=2, zero_per_s=49.0)
    assert m.pick() == 0


def test_memory_caps_the_predicted_workers():
    m = LoadModel(load_ms=320, cpu_ms=10, step_ms=20, cpus=2, max_workers=5)
    assert m.pick() == 5


def _run(workers, stages=None, rate=10.0, step=20.0, wait=None, fetch_cpu=None, batch_bytes=None):
    return ConfigResult(settings=LoaderSettings(batch_size=32, num_workers=workers,
                                                prefetch_factor=2 if workers else None),
                        batches=20, batches_per_s=rate, step_ms_achieved=step, stages=stages,
                        wait=wait or WaitStats(), fetch_cpu_pct=fetch_cpu, batch_bytes=batch_bytes)


def test_the_model_comes_from_the_instrumented_baseline_or_its_waits():
    stages = StageTimes(batches=10, samples=320, dataset_ms=300, dataset_cpu_ms=30, collate_ms=20, collate_cpu_ms=10)
    m = model_from(_run(0, stages, rate=2.9), cpus=2, max_workers=64)
    assert (m.load_ms, m.cpu_ms, m.zero_per_s) == (320, 40, 2.9)
    # without stage timings: each 0-worker wait is one batch loaded, fetch_cpu_pct its CPU share
    m = model_from(_run(0, None, wait=WaitStats(mean_ms=200.0), fetch_cpu=25.0), cpus=2, max_workers=64)
    assert (m.load_ms, m.cpu_ms) == (200.0, 50.0)
    assert model_from(_run(0, None), cpus=2, max_workers=64) is None


def test_curve_and_prediction_carry_the_measured_rates():
    m = LoadModel(load_ms=320, cpu_ms=10, step_ms=20, cpus=2, zero_per_s=2.9)
    points = curve(m, {0: 2.9, 16: 44.4})
    assert points[0].measured_per_s == 2.9 and points[16].measured_per_s == 44.4
    assert points[-1].workers >= 18  # past the knee
    p = prediction(m, {16: 44.4}, pick=16)
    assert p.workers == 16 and p.pick_predicted_per_s == pytest.approx(50.0)
    assert p.error_pct == pytest.approx(-11.2)


def test_breakdown_names_the_bottleneck():
    # 0 workers: 320 ms loading (300 of it waiting) against a 20 ms step
    base = _run(0, StageTimes(batches=5, dataset_ms=310, dataset_cpu_ms=10, collate_ms=10, collate_cpu_ms=5,
                              receive_ms=0.0), rate=2.9)
    b = breakdown(base, "baseline", cpus=2)
    assert b.bottleneck == "loading" and "mostly waiting on storage/network" in b.why
    stages = {s.stage: s for s in b.stages}
    assert stages["dataset (waiting)"].ms == pytest.approx(300)
    # 4 workers at 320 ms a batch: 12.5 batches/s, below the step's 50/s
    pick = _run(4, StageTimes(batches=20, dataset_ms=310, dataset_cpu_ms=10, collate_ms=10, collate_cpu_ms=5,
                              receive_ms=0.5), rate=12.0, batch_bytes=1 << 20)
    b = breakdown(pick, "pick", cpus=2)
    assert b.bottleneck == "workers" and "12.5 batches/s" in b.why
    assert {s.stage for s in b.stages} >= {"transfer", "training step", "CPU budget"}
    # CPU-bound workers: 2 CPUs at 200 ms of CPU a batch run out at 10/s before 6 workers do (30/s)
    cpu = _run(6, StageTimes(batches=20, dataset_ms=200, dataset_cpu_ms=195, collate_ms=5, collate_cpu_ms=5,
                             receive_ms=0.0), rate=9.5)
    assert breakdown(cpu, "pick", cpus=2).bottleneck == "CPU"
    # enough workers: the step is the slowest stage
    fed = _run(16, StageTimes(batches=20, dataset_ms=310, dataset_cpu_ms=10, collate_ms=10, collate_cpu_ms=5,
                              receive_ms=0.5), rate=48.0)
    assert breakdown(fed, "pick", cpus=2).bottleneck == "training step"
    # no stage timings (a report from an older probe): said, not invented
    assert "not instrumented" in breakdown(_run(2), "pick", cpus=2).why


def _row(batches, last):
    return {"samples": 0.0, "dataset_wall": 0.0, "dataset_cpu": 0.0, "dataset_queued": 0.0, "dataset_read": 0.0,
            "batches": batches,
            "collate_wall": 0.0, "collate_cpu": 0.0, "last_done": last}


def test_production_rate_counts_whole_batch_intervals_per_worker():
    # worker 1: 4 batches between t=10.0 and t=12.0 -> 2/s; worker 2: 3 between 10.5 and 12.0 -> 2/s
    before = [_row(0, 0), _row(10, 10.0), _row(9, 10.5)]
    after = [_row(0, 0), _row(14, 12.0), _row(12, 12.0)]
    w = window(before, after, range(1, 3))
    assert w.batches == 7 and w.produced_per_s == pytest.approx(4.0)
    # a worker that finished nothing in the window: the rate cannot be told, not guessed
    after[2] = _row(9, 10.5)
    assert window(before, after, range(1, 3)).produced_per_s is None
