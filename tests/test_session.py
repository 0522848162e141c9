"""The app's state without a terminal: what the app shows is asserted on the Session it renders."""

from __future__ import annotations

from loaderdoc.advice.findings import Finding
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ConfigResult, ProbeReport, WaitStats, WorkloadInfo
from loaderdoc.session import ProbeRequest, Session
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui import model

IMAGE = 3 * 224 * 224


def measured(workers: int, bps: float, starved: float) -> ConfigResult:
    settings = LoaderSettings(batch_size=32, shuffle=True, num_workers=workers,
                              prefetch_factor=2 if workers else None, persistent_workers=workers > 0)
    return ConfigResult(settings=settings, batches_per_s=bps, starvation_pct=starved, batches=40,
                        wait=WaitStats(p50_ms=5, p95_ms=6), worker_pss_bytes=workers * 50 * 2**20,
                        batch_bytes=32 * IMAGE, first_batch_s=0.2)


def probe_fn(results: list[ConfigResult], pick: int):
    def probe(dataset=None, *, preset=None, batch_size=32, step_ms=20.0, budget_s=30.0, facts=None,
              on_result, on_progress, cancel, collate_fn=None):
        for i, r in enumerate(results):
            on_result(r)
            on_progress((i + 1) / len(results), f"num_workers={r.settings.num_workers}")
        rec = next(r.settings for r in results if r.settings.num_workers == pick)
        return ProbeReport(workload=WorkloadInfo(name=preset, batch_size=batch_size, batch_bytes=32 * IMAGE,
                                                 step_ms=step_ms),
                           results=results, recommended=rec, reasons=[f"num_workers={pick}: scripted"],
                           budget_s=budget_s, elapsed_s=3.0, stopped="done")
    return probe


def test_facts_bring_the_recommendation_findings_and_tradeoffs():
    s = Session(workload=ProbeRequest(preset="image"))
    assert s.settings_origin.startswith("torch defaults")
    s.facts_arrived(load_machine("docker-64m-shm"))
    assert s.recommendation is not None and s.settings == s.recommendation.settings
    assert s.settings_origin == "recommended from machine facts"
    assert [t.knob for t in s.tradeoffs] == list(model.KNOBS)
    # the status line and the machine view are strings made from the session
    assert "CPUs" in model.machine_status(s.facts) and model.settings_line(s.settings).startswith("batch_size=")


def test_editing_settings_reruns_the_rules_and_a_fix_converges():
    s = Session()
    s.facts_arrived(load_machine("ci-2core"))
    s.set_settings(s.settings.replace(num_workers=8, pin_memory=True), "edited")
    assert s.user_touched and s.settings_origin == "edited"
    ids = [f.rule_id for f in s.findings]
    assert "cpu-oversubscribed" in ids and "pin-memory-without-gpu" in ids
    for f in list(s.findings):
        if f.settings_change:
            applied, message = s.apply_fix(f)
            assert applied and "->" in message
    assert not [f for f in s.findings if f.settings_change]
    assert s.settings_origin.startswith("fix applied:")


def test_a_fix_without_a_settings_change_says_so():
    s = Session()
    s.facts_arrived(load_machine("docker-64m-shm"))
    before = s.settings
    finding = Finding(rule_id="shm-too-small", severity="warning", symptom="/dev/shm is only 64 MiB")
    applied, message = s.apply_fix(finding)
    assert not applied and "outside the DataLoader" in message and s.settings == before


def test_the_probe_lifecycle_start_results_finish():
    results = [measured(0, 10.0, 70), measured(1, 24.0, 30), measured(2, 40.0, 3)]
    s = Session(workload=ProbeRequest(preset="image", budget_s=5), probe_fn=probe_fn(results, pick=2))
    s.facts_arrived(load_machine("laptop-rtx3050"))
    assert s.start_probe() is None and s.probe_running and s.probe_state == "running"
    assert s.start_probe() == "A probe is already running; Esc stops it."
    report = s.run_probe(on_result=s.result_arrived, on_progress=s.probe_progressed)
    assert s.live_results == results and s.probe_progress[0] == 1.0
    title, text = s.probe_finished(report)
    assert s.probe_state == "done" and s.report_complete
    assert title == "Probe finished: settings chosen" and "num_workers=2" in text
    assert s.recommendation.source == "probe" and s.settings.num_workers == 2
    assert s.settings_origin == "recommended from the probe"
    # what the probe view shows
    assert [model.result_row(r)[0] for r in s.live_results] == ["0", "1", "2"]
    assert any("recommended" in line for line in model.report_summary(s.report))


def test_a_cancelled_probe_keeps_the_recommendation_and_a_failed_one_says_why():
    s = Session(workload=ProbeRequest(preset="image"))
    s.facts_arrived(load_machine("ci-2core"))
    before = s.recommendation.settings
    assert s.start_probe() is None
    assert s.stop_probe() and s.probe_state == "stopping" and s.cancel.is_set()
    title, _ = s.probe_finished(ProbeReport(results=[measured(0, 10.0, 70)], stopped="cancelled"))
    assert title == "Probe cancelled" and s.probe_state == "cancelled" and not s.report_complete
    assert s.recommendation.settings == before
    assert s.start_probe() is None
    s.probe_failed("ValueError: boom")
    assert s.probe_state == "failed" and s.probe_error == "ValueError: boom" and not s.probe_running


def test_no_workload_no_probe():
    s = Session(workload=ProbeRequest(dataset=None, preset=None))
    s.workload.preset = None
    assert s.start_probe() == "Choose a workload (a preset or --dataset) first."
    assert s.probe_state == "idle"


def test_the_export_header_names_what_differs_from_the_recommendation():
    s = Session(header_fn=lambda facts, rec, findings: ["line 1", "line 2"])
    s.facts_arrived(load_machine("ci-2core"))
    assert s.export_header() == ["line 1", "line 2"]
    s.set_settings(s.settings.replace(num_workers=0, prefetch_factor=None, persistent_workers=False), "edited")
    header = s.export_header()
    assert header[2] == "settings: edited" and header[3].startswith("differs from the recommendation: num_workers")


def test_a_batch_size_typed_into_the_workload_form_resizes_the_recommendation():
    s = Session(workload=ProbeRequest(preset="image", sample_bytes=4 * 2**20))  # 4 MiB samples
    s.facts_arrived(load_machine("docker-64m-shm"))
    s.set_workload_field("batch_size", 16)  # 64 MiB batches: more than /dev/shm holds
    assert s.workload.batch_size_given and s.recommendation.settings.batch_size == 16
    assert s.settings.num_workers == 0 and "--shm-size" in s.recommendation.reasons["num_workers"]
    s.set_workload_field("step_ms", 7.5)
    assert s.workload.step_ms == 7.5 and s.workload.step_ms_given
