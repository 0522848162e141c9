"""The probe's rate beside the real loop's (issue 48): where the report opened in the app measured
the job's own loop (a tune's trials, a watched run's loaders), the probe's summary says the real
loop's rate at the same settings and the ratio between the two."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loaderdoc.probing.real_loop import RealLoop, versus_real_loop
from loaderdoc.probing.result import ProbeReport
from loaderdoc.reports import open_report, real_loops
from loaderdoc.session import ProbeRequest, Session
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui import model

FIXTURES = Path(__file__).resolve().parent / "fixtures"
H200 = FIXTURES / "gpu_acceptance" / "h200-2026-11-28" / "reports"


def recorded_jpeg_probe() -> ProbeReport:
    return ProbeReport.from_json((H200 / "probe-jpeg.json").read_text())


def test_the_h200_jobs_rate_against_the_probes_at_the_same_settings():
    """Recorded on an H200: the probe over 1280 JPEGs (batch 64) measured 16 pinned workers at
    26.8 batches/s; the ResNet-50 job with those settings ran 17.9 steps/s."""
    job = json.loads((H200 / "jpeg-job.json").read_text())
    real = RealLoop(job["steps_per_s"], job["settings"]["num_workers"], job["settings"]["batch_size"],
                    job["settings"]["pin_memory"], "the ResNet-50 job")
    versus = versus_real_loop(recorded_jpeg_probe(), [real])
    assert versus is not None and versus.probe_per_s == pytest.approx(26.83, abs=0.01)
    assert versus.ratio == pytest.approx(0.668, abs=0.001)
    assert versus.lines() == ["the real loop (the ResNet-50 job): 17.9 steps/s at num_workers=16",
                              "  the probe measured 26.8 there: the job runs at 0.67x the probe's rate "
                              "(its step is a stand-in)"]
    # unpinned, the probe's one run at 16 workers is the one compared
    unpinned = versus_real_loop(recorded_jpeg_probe(), [RealLoop(17.9, 16, 64, False, "x")])
    assert unpinned.probe_per_s == pytest.approx(23.81, abs=0.01)


def test_a_loop_at_another_batch_size_is_not_compared_and_unmeasured_workers_give_no_ratio():
    probe = recorded_jpeg_probe()
    assert versus_real_loop(probe, [RealLoop(10.0, 16, 128, True, "bigger batches")]) is None
    # the first comparable loop whose workers the probe measured wins over earlier ones it did not
    versus = versus_real_loop(probe, [RealLoop(9.0, 5, 64, None, "trial 2"), RealLoop(8.0, 14, 64, None, "trial 3")])
    assert versus.real.source == "trial 3" and versus.ratio == pytest.approx(8.0 / 22.85, rel=1e-3)
    none = versus_real_loop(probe, [RealLoop(9.0, 5, 64, None, "trial 2")])
    assert none.ratio is None
    assert none.lines()[1] == "  the probe measured no configuration at num_workers=5: no ratio"


def test_a_watched_runs_loader_is_a_real_loop_at_its_own_settings():
    run = open_report(FIXTURES / "watch" / "healthy.json")
    [loop] = real_loops(run)
    totals = run.loaders[0].totals
    # a report from before the per-batch figures: its sums, 0.36 s over 297 waits and 29.61 s over 300 steps
    assert loop.steps_per_s == pytest.approx(1 / (totals.wait_s / totals.waits + totals.step_s / totals.steps))
    assert loop.steps_per_s == pytest.approx(1 / (0.36 / 297 + 29.61 / 300))
    assert (loop.num_workers, loop.batch_size) == (4, 64)
    assert loop.source.startswith(f"the watched run {run.path}, loader 1 (DataLoader, num_workers=4")


def test_the_app_says_the_tuned_jobs_rate_beside_a_real_probe_of_its_dataset(monkeypatch):
    """tests/fixtures/tune/io-bound.json is a real tune of a loop whose samples sleep 4 ms (batch 8,
    a 10 ms step): its trials are the real loop. A real probe of the same dataset then sits
    beside it, at a worker count both measured."""
    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent / "probe_datasets"))
    tune = open_report(FIXTURES / "tune" / "io-bound.json")
    session = Session(tune_run=tune, workload=ProbeRequest(dataset="probe_userdata:make_io_4ms", batch_size=8, step_ms=10.0,
                                            budget_s=6.0))
    assert [(lo.num_workers, lo.source) for lo in real_loops(tune)] == [
        (4, "tune trial 3"), (3, "tune trial 2"), (2, "tune trial 4"), (0, "tune trial 1")]
    assert session.probe_versus_real is None  # no probe yet
    session.facts_arrived(load_machine("ci-2core"))
    session.probe_state = "running"
    report = session.run_probe(on_result=session.result_arrived, on_progress=session.probe_progressed)
    session.probe_finished(report)
    versus = session.probe_versus_real
    assert versus is not None and versus.ratio is not None, [r.settings.num_workers for r in report.results]
    trial = next(t for t in tune.report.trials if f"tune trial {t.number}" == versus.real.source)
    same = [r.batches_per_s for r in report.results if r.ok and r.settings.num_workers == trial.settings.num_workers]
    assert versus.ratio == pytest.approx(trial.steps_per_s / (sum(same) / len(same)))
    # both loops sleep the same per sample and per step: the stand-in is near this job (0.99x on a
    # quiet machine; beside the suite a loaded probe measured 42 against the trial's 89, 2.1x): the
    # bounds catch a rate of samples taken for batches (8x at batch 8), not the machine's load
    assert 0.25 < versus.ratio < 4.0
    lines = model.report_summary(report, complete=True, versus=versus)
    assert f"  the real loop ({versus.real.source}): {trial.steps_per_s:.1f} steps/s at num_workers=" \
           f"{trial.settings.num_workers}" in lines
    assert any(line.startswith("    the probe measured ") and f"{versus.ratio:.2f}x" in line for line in lines)
