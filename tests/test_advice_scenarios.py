"""Recorded scenarios: exactly the expected rules fire, healthy ones fire nothing, docs are current."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support import matrix
from support.scenarios import SCENARIOS

from loaderdoc.advice.rules import RULES, evaluate
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ProbeReport
from loaderdoc.system.fixtures import machine_names

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_exactly_the_expected_rules_fire(scenario):
    fired = {f.rule_id for f in scenario.run()}
    assert fired == set(scenario.expect)


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
def test_every_finding_is_complete_and_its_settings_change_is_valid(scenario):
    for f in scenario.run():
        assert f.symptom and f.evidence and f.cause and f.fix and f.threshold, f.rule_id
        # every number a finding shows is one it saw: evidence lines are not boilerplate
        assert any(ch.isdigit() for ch in " ".join(f.evidence)) or f.rule_id in (
            "shuffle-with-sampler", "set-epoch-missing", "cudnn-benchmark"), f.rule_id
        base = scenario.settings or LoaderSettings()
        # torch_threads is the training process's own knob (OMP_NUM_THREADS), not a DataLoader argument
        process = {k: v for k, v in f.settings_change.items() if k == "torch_threads"}
        assert all(isinstance(v, int) and v >= 1 for v in process.values()), (f.rule_id, process)
        changed = base.replace(**{k: v for k, v in f.settings_change.items() if k not in process})
        # the change must leave settings torch accepts (the rejected-settings fix repairs them)
        assert changed.problems() == [], (f.rule_id, f.settings_change)


def test_every_rule_has_a_scenario_where_it_fires():
    fired = {f.rule_id for sc in SCENARIOS for f in sc.run()}
    assert fired == {r.id for r in RULES}


def test_there_are_healthy_scenarios_on_each_kind_of_machine():
    healthy = {sc.machine for sc in SCENARIOS if sc.healthy}
    assert {"h100x8-node", "ci-2core", "laptop-rtx3050", "docker-64m-shm", "k8s-4cpu-quota"} <= healthy
    # at least one healthy scenario carries a probe report and a full training context
    assert any(sc.healthy and sc.probe is not None and sc.context is not None for sc in SCENARIOS)


def test_scenario_names_are_unique_and_machines_are_recorded_fixtures():
    names = [sc.name for sc in SCENARIOS]
    assert len(names) == len(set(names))
    assert {sc.machine for sc in SCENARIOS if not sc.recorded} <= set(machine_names())
    # real recordings are part of the list in a source checkout
    assert {"recorded-shm-16m", "recorded-keyerror"} <= set(names)


@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s.probe is not None], ids=lambda s: s.name)
def test_probe_reports_survive_a_json_round_trip(scenario):
    again = ProbeReport.from_json(scenario.probe.to_json())
    found = evaluate(scenario.facts(), scenario.settings, batch_bytes=scenario.batch_bytes, probe=again,
                     context=scenario.context)
    assert [f.rule_id for f in found] == [f.rule_id for f in scenario.run()]


def test_docs_matrix_is_current():
    assert (REPO / matrix.DOC_PATH).exists(), "run python scripts/diagnoses_docs.py"
    assert (REPO / matrix.DOC_PATH).read_text(encoding="utf-8") == matrix.render(), (
        "docs/diagnoses.md is stale: run python scripts/diagnoses_docs.py"
    )


def test_docs_tradeoffs_is_current():
    assert (REPO / matrix.TRADEOFFS_PATH).read_text(encoding="utf-8") == matrix.render_tradeoffs(), (
        "docs/tradeoffs.md is stale: run python scripts/diagnoses_docs.py"
    )


def test_findings_serialise_for_check_json():
    from loaderdoc.base._serde import to_dict

    for sc in SCENARIOS:
        for f in sc.run():
            json.dumps(to_dict(f))
