"""The app's view model, headless: what each screen shows, without a terminal."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.summary import settings_diff
from loaderdoc.probing.result import ConfigResult, ProbeReport, WorkloadInfo
from loaderdoc.session import ProbeRequest, apply_change, parse_workload_field
from loaderdoc.system.fixtures import load_machine, machine_names
from loaderdoc.tui import model


@pytest.mark.parametrize("name", machine_names())
def test_machine_rows_cover_every_recorded_machine(name):
    facts = load_machine(name)
    rows = model.machine_rows(facts)
    sections = {r.section for r in rows}
    assert {"CPU", "Memory", "/dev/shm", "GPU", "torch"} <= sections
    budget = next(r for r in rows if r.section == "CPU" and r.label == "budget")
    assert budget.value.startswith(f"{facts.cpu.budget:g} CPUs (set by {facts.cpu.budget_source})")
    gpu_rows = [r for r in rows if r.label.startswith("GPU ")]
    assert len(gpu_rows) == facts.gpu.count


def test_quota_and_affinity_are_shown():
    rows = {(r.section, r.label): r for r in model.machine_rows(load_machine("k8s-4cpu-quota"))}
    assert "cgroup quota" in rows[("CPU", "budget")].value
    assert rows[("CPU", "cgroup quota")].value == "4 CPUs"
    assert "CPUs (" in rows[("CPU", "affinity")].value


def test_docker_default_shm_is_named():
    rows = {(r.section, r.label): r for r in model.machine_rows(load_machine("docker-64m-shm"))}
    assert rows[("/dev/shm", "size")].value == "64 MiB (Docker's default)"


def test_pending_slow_facts_say_so_instead_of_unknown():
    facts = load_machine("ci-2core")
    facts.cpu.model = facts.cpu.model.__class__()  # not read yet
    rows = {(r.section, r.label): r for r in model.machine_rows(facts, pending={"cpu_model"})}
    assert rows[("CPU", "model")].value == "reading..."
    rows = {(r.section, r.label): r for r in model.machine_rows(facts)}
    assert rows[("CPU", "model")].value == "not read"


def test_unknown_readings_carry_their_reason():
    facts = load_machine("ci-2core")
    facts.shm.total = facts.shm.total.missing("statvfs failed: EACCES", "/dev/shm")
    rows = {(r.section, r.label): r for r in model.machine_rows(facts)}
    assert rows[("/dev/shm", "size")].value == "unknown (statvfs failed: EACCES)"


def test_cpu_list_ranges():
    assert model._cpu_list([0, 1, 2, 3, 8, 10, 11]) == "0-3,8,10-11"


# ---- settings form ------------------------------------------------------------------------
def _form(**changes):
    values = model.settings_form_values(LoaderSettings(batch_size=32, num_workers=2))
    values.update(changes)
    return values


def test_form_round_trips_settings():
    s = LoaderSettings(batch_size=64, num_workers=4, prefetch_factor=3, persistent_workers=True,
                       multiprocessing_context="spawn", timeout=5.0)
    parsed, errors = model.parse_settings_form(model.settings_form_values(s))
    assert errors == {}
    assert parsed == s


def test_every_boolean_setting_is_a_switch_in_the_form():
    import dataclasses

    booleans = {f.name for f in dataclasses.fields(LoaderSettings) if f.type == "bool"}
    assert "in_order" in booleans and set(model.BOOL_SETTINGS) == booleans
    values = model.settings_form_values(LoaderSettings(num_workers=2, in_order=False))
    assert values["in_order"] is False and values["persistent_workers"] is False


def test_form_round_trips_in_order_and_leaves_it_alone_without_workers():
    s = LoaderSettings(batch_size=64, num_workers=4, in_order=False)
    assert model.parse_settings_form(model.settings_form_values(s)) == (s, {})
    # torch ignores in_order without workers (and refuses nothing): the form accepts it as typed
    parsed, errors = model.parse_settings_form(_form(num_workers="0", in_order=False))
    assert errors == {} and parsed.in_order is False and parsed.num_workers == 0


def test_settings_line_and_diff_show_in_order_only_when_it_is_off():
    on = LoaderSettings(batch_size=32, num_workers=2)
    assert "in_order" not in model.settings_line(on)
    assert model.settings_line(on.replace(in_order=False)).endswith(", in_order=False")
    assert settings_diff(on, on.replace(in_order=False)) == "in_order: True -> False"


def test_form_type_errors_name_the_field():
    parsed, errors = model.parse_settings_form(_form(num_workers="four"))
    assert parsed is None
    assert errors == {"num_workers": "num_workers must be a whole number, got 'four'"}


def test_form_cross_field_rules_come_from_problems():
    parsed, errors = model.parse_settings_form(_form(num_workers="0", prefetch_factor="2", persistent_workers=True))
    assert parsed is None
    assert set(errors) == {"prefetch_factor", "persistent_workers"}
    assert "torch raises ValueError" in errors["prefetch_factor"]


def test_form_empty_optional_fields_mean_none():
    parsed, errors = model.parse_settings_form(_form(prefetch_factor="", batch_size=""))
    assert errors == {}
    assert parsed.prefetch_factor is None and parsed.batch_size is None


def test_form_context_default_means_none():
    parsed, _ = model.parse_settings_form(_form(multiprocessing_context="default"))
    assert parsed.multiprocessing_context is None


def test_apply_change_validates():
    s = LoaderSettings(batch_size=32, num_workers=8, prefetch_factor=4, persistent_workers=True)
    assert apply_change(s, {"num_workers": 3, "prefetch_factor": 1}).num_workers == 3
    with pytest.raises(SettingsError):
        apply_change(s, {"num_workers": 0})  # prefetch_factor and persistent need workers


def test_settings_diff_names_changes():
    a = LoaderSettings(num_workers=8)
    assert settings_diff(a, a.replace(num_workers=3)) == "num_workers: 8 -> 3"
    assert settings_diff(a, a) == "no change"


# ---- probe results ------------------------------------------------------------------------
def _result(workers, bps, starved=None, status="ok", prefetch=None):
    return ConfigResult(settings=LoaderSettings(batch_size=32, num_workers=workers, prefetch_factor=prefetch),
                        status=status, batches_per_s=bps, starvation_pct=starved,
                        error=None if status == "ok" else "worker killed")


def test_chart_series_keeps_best_per_worker_count_and_failures():
    results = [_result(0, 10.0, 80.0), _result(2, 30.0, 20.0, prefetch=2), _result(2, 35.0, 10.0, prefetch=4),
               _result(4, None, status="failed"), _result(1, 20.0, None)]
    s = model.chart_series(results)
    assert s.workers == [0, 1, 2]
    assert s.batches_per_s == [10.0, 20.0, 35.0]
    assert s.starvation_pct[0] == 80.0 and math.isnan(s.starvation_pct[1]) and s.starvation_pct[2] == 10.0
    assert s.failed == [4]


def test_result_row_shows_unmeasured_as_dash_and_failures_with_reason():
    row = model.result_row(_result(4, None, status="failed"))
    assert row[4] == "-" and row[-1] == "failed: worker killed"
    row = model.result_row(_result(0, 12.345, 50.0))
    assert row[:5] == ("0", "-", "no", "no", "12.3") and row[6] == "50%"


def test_report_summary():
    report = ProbeReport(workload=WorkloadInfo(name="image", batch_size=32, step_ms=20.0),
                         results=[_result(2, 30.0, 5.0)], recommended=LoaderSettings(batch_size=32, num_workers=2),
                         reasons=["num_workers: 2 is within 3% of the best"], budget_s=10, elapsed_s=4.2,
                         stopped="not starved")
    lines = model.report_summary(report)
    assert "stopped: not starved" in lines[1]
    assert any("recommended: batch_size=32, num_workers=2" in line for line in lines)
    assert lines[-1].strip() == "num_workers: 2 is within 3% of the best"
    partial = model.report_summary(report, complete=False)
    assert not any(line.startswith("recommended") for line in partial)
    assert partial[-1].startswith("cancelled: the search did not finish")


def test_workload_field_validation():
    assert parse_workload_field("batch_size", "64") == (64, None)
    assert parse_workload_field("batch_size", "0")[1]
    assert parse_workload_field("budget_s", "abc")[1]
    assert parse_workload_field("step_ms", "12.5") == (12.5, None)


def test_model_and_run_app_module_import_neither_textual_nor_torch():
    code = ("import sys, loaderdoc.tui.model, loaderdoc.session, loaderdoc.commands.app, loaderdoc.cli; "
            "print('textual' in sys.modules, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_app_module_does_not_import_torch():
    code = "import sys, loaderdoc.tui.app; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_choosing_a_preset_takes_its_batch_and_step_unless_the_user_gave_them():
    from loaderdoc.probing.workloads import get_preset

    large = get_preset("large-image")
    w = ProbeRequest()
    w.choose_preset("large-image")
    assert (w.preset, w.batch_size, w.step_ms) == ("large-image", large.batch_size, large.step_ms)
    mine = ProbeRequest(batch_size=48, batch_size_given=True, step_ms=7.0, step_ms_given=True)
    mine.choose_preset("large-image")
    assert (mine.preset, mine.batch_size, mine.step_ms) == ("large-image", 48, 7.0)


def test_a_worker_memory_figure_still_rising_is_marked_and_keyed():
    import json

    from support.scenarios import RECORDED_DIR

    from loaderdoc.policy import still_growing

    # a real probe of 8 MiB slices at glibc's defaults: the pick's workers' memory rose
    raw = json.loads((RECORDED_DIR / "real-large-heap-growth.json").read_text(encoding="utf-8"))
    report = ProbeReport.from_dict(raw["probe"])
    cells = [model.result_row(r)[9] for r in report.results]
    assert [c.endswith(model.RISING) for c in cells] == [still_growing(r) for r in report.results]
    assert any(c.endswith(model.RISING) for c in cells)
    assert any(line.startswith(f"{model.RISING} after worker PSS") for line in model.report_summary(report))
    settled = ProbeReport.from_dict(json.loads((RECORDED_DIR / "real-large-mmap-threshold.json").read_text())["probe"])
    assert not any(model.RISING in model.result_row(r)[9] for r in settled.results)
    assert not any(model.RISING in line for line in model.report_summary(settled))


def test_the_views_messages_carry_the_session_state_and_no_view_reads_the_session():
    """The app hands its views typed messages built from the session (tui/messages.py); the views
    and the screens draw what they are given and never reach into the session."""
    import ast
    from pathlib import Path

    from loaderdoc.session import Session
    from loaderdoc.tui import messages

    s = Session()
    s.facts_arrived(load_machine("docker-64m-shm"))
    machine, advice, probe = messages.MachineShown.of(s), messages.AdviceShown.of(s), messages.ProbeShown.of(s)
    assert machine.facts is s.facts and machine.error is None
    assert advice.settings == s.settings and advice.origin == s.settings_origin
    assert list(advice.findings) == s.findings and advice.findings
    assert advice.evidence == tuple("on this machine" for _ in s.findings)
    assert advice.facts_read and not advice.measured and advice.basis is None and advice.sources == {}
    assert probe.workload == s.workload and probe.workload is not s.workload  # a copy: the view cannot change it
    assert probe.state == "idle" and probe.results == () and not probe.can_adopt

    tui = Path(messages.__file__).parent
    for path in [*tui.glob("widgets/*.py"), *tui.glob("screens/*.py")]:
        reads = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Attribute) and node.attr == "session"]
        assert reads == [], f"{path.name} reads the session at lines {reads}"
