"""One truth: the recommender, the probe's pick and every rule agree, on every shipped machine.

Properties checked over shipped machines x workloads x settings:

- the facts-only recommendation passes `check` with no finding that proposes a change;
- a probe's pick (the real search, over a modelled pipeline sized for that machine) draws no
  finding proposing another num_workers, and recommend() on top of it proposes nothing either;
- every finding's fix, applied, silences that finding and wakes no finding asking to undo it.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from pipeline_model import MiB, Model

from loaderdoc import policy
from loaderdoc.advice.recommend import recommend
from loaderdoc.advice.rules import TrainingContext, evaluate
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ProbeReport, WorkloadInfo
from loaderdoc.probing.search import Search, SearchLimits
from loaderdoc.system.facts import MachineFacts, Reading
from loaderdoc.system.fixtures import load_machine, machine_names

MACHINES = machine_names()
SAMPLES = {  # bytes of one sample
    "text": 4 * 1024,
    "image": 3 * 224 * 224,
    "image-f32": 3 * 224 * 224 * 4,
    "large-2k-u16": 3 * 2048 * 2048 * 2,
}
BATCHES = (8, 64, 256)


def machine(name: str, ranks: int = 1) -> MachineFacts:
    facts = load_machine(name)
    if ranks > 1:
        facts.distributed.local_world_size = Reading.of(ranks, "env LOCAL_WORLD_SIZE")
        facts.distributed.launcher = Reading.of("torchrun", "env")
    return facts


def proposals(findings) -> dict[str, dict[str, Any]]:
    return {f.rule_id: f.settings_change for f in findings if f.settings_change}


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("ranks", [1, 8])
def test_the_facts_only_recommendation_draws_no_proposal(name, ranks):
    facts = machine(name, ranks)
    for (sample, sample_bytes), batch in itertools.product(SAMPLES.items(), BATCHES):
        rec = recommend(facts, batch_size=batch, sample_bytes=sample_bytes)
        found = evaluate(facts, rec.settings, batch_bytes=rec.batch_bytes)
        assert proposals(found) == {}, (sample, batch, rec.settings, rec.reasons)


def _opposes(key: str, before: Any, after: Any, proposed: Any) -> bool:
    """A later proposal for ``key`` that moves it back towards where the fix took it from."""
    if proposed == after:
        return False
    if isinstance(after, bool) or after is None or before is None or proposed is None:
        return proposed == before
    return (proposed - after) * (before - after) > 0


def _configs():
    for workers, prefetch, pin, persistent in itertools.product(
            (0, 1, 2, 4, 8, 16, 32, 64), (None, 1, 4, 8), (False, True), (False, True)):
        if workers == 0 and (prefetch is not None or persistent):
            continue
        yield workers, prefetch, pin, persistent


def _assert_fixes_converge(facts, settings, *, batch_bytes, probe=None, context=None):
    found = evaluate(facts, settings, batch_bytes=batch_bytes, probe=probe, context=context)
    for rule_id, change in proposals(found).items():
        fixed = settings.replace(**change)
        assert fixed.problems() == [], (rule_id, settings, change)
        after = evaluate(facts, fixed, batch_bytes=batch_bytes, probe=probe, context=context)
        assert rule_id not in {f.rule_id for f in after}, (rule_id, settings, change)
        for other, again in proposals(after).items():
            for key, value in again.items():
                if key in change:
                    assert not _opposes(key, getattr(settings, key), change[key], value), (
                        f"{rule_id} changed {key} {getattr(settings, key)!r} -> {change[key]!r}; "
                        f"{other} then asks for {value!r} ({settings})")


@pytest.mark.parametrize("name", MACHINES)
def test_every_fix_silences_its_finding_without_waking_its_opposite(name):
    facts = machine(name)
    for (workers, prefetch, pin, persistent), batch in itertools.product(_configs(), (8, 256)):
        settings = LoaderSettings(batch_size=batch, num_workers=workers, prefetch_factor=prefetch,
                                  pin_memory=pin, persistent_workers=persistent)
        for sample_bytes in SAMPLES.values():
            _assert_fixes_converge(facts, settings, batch_bytes=batch * sample_bytes)


def test_fixes_converge_with_training_context():
    facts = machine("h100x8-node", ranks=8)
    facts.distributed.world_size = Reading.of(16, "env WORLD_SIZE")
    context = TrainingContext(device="cuda", uses_batchnorm=True, distributed=True, uses_distributed_sampler=True,
                              calls_set_epoch=True, dataset_len=1_000_003, tensors_per_batch=2)
    for workers, prefetch, pin, persistent in _configs():
        settings = LoaderSettings(batch_size=64, shuffle=True, num_workers=workers, prefetch_factor=prefetch,
                                  pin_memory=pin, persistent_workers=persistent)
        _assert_fixes_converge(facts, settings, batch_bytes=64 * SAMPLES["image"], context=context)


# ---- with a probe: the real search over modelled pipelines, sized for each machine -------------
WORKLOADS = {  # Model arguments: per-batch fetch time, its CPU share, batch bytes, bursts
    "in-memory": dict(fetch_ms=0.5, cpu_share=1.0),
    "cpu-bound": dict(fetch_ms=140, cpu_share=0.93),
    "io-bound": dict(fetch_ms=320, cpu_share=0.03),
    "large-samples": dict(fetch_ms=60, cpu_share=0.5, batch_bytes=96 * MiB),
    "spiky": dict(fetch_ms=30, cpu_share=0.1, spiky=True),
    "slow-consumer": dict(fetch_ms=200, cpu_share=0.6, step_ms=150),
}


def probed(facts: MachineFacts, workload: str, epoch_steps: int | None = None) -> ProbeReport:
    per_rank = facts.cpus_per_rank
    room = policy.Room.of(facts)
    model = Model(cpus=per_rank, **WORKLOADS[workload])
    limits = SearchLimits(budget_s=30.0, cpu_budget=per_rank, memory_budget_bytes=room.memory_budget,
                          shm_free_bytes=room.shm_free, ranks=room.ranks, expected_cost_s=model.cost_s,
                          cuda=facts.usable_gpus > 0, epoch_steps=epoch_steps)
    outcome = Search(model, LoaderSettings(batch_size=32, shuffle=True), limits, clock=model.clock).run()
    return ProbeReport(
        workload=WorkloadInfo(name=workload, batch_size=32, batch_bytes=model.batch_bytes, step_ms=model.step_ms,
                              dataset_len=32 * epoch_steps if epoch_steps else None),
        results=outcome.results, recommended=outcome.recommended, reasons=outcome.reasons,
        stopped=outcome.stopped, device="cuda" if limits.cuda else "cpu",
    )


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_probe_pick_and_the_rules_agree(name, workload):
    facts = machine(name)
    report = probed(facts, workload)
    assert report.recommended is not None
    pick = report.recommended
    # the probe's own findings never propose another worker count than the pick
    for rule_id, change in proposals(evaluate(facts, pick, probe=report)).items():
        assert change.get("num_workers", pick.num_workers) == pick.num_workers, (rule_id, change, report.reasons)
    # and the recommendation built on the probe draws no proposal at all
    rec = recommend(facts, probe=report)
    assert proposals(evaluate(facts, rec.settings, batch_bytes=rec.batch_bytes, probe=report)) == {}, (
        rec.settings, rec.reasons)
    # more workers than CPUs only with the measurement that justifies it, said in the reasons
    if policy.oversubscribed(pick.num_workers, facts.cpus_per_rank):
        assert policy.beyond_cpus_evidence(report.results, facts.cpus_per_rank) is not None
        assert any("is more than the" in r and "CPUs because" in r for r in report.reasons)


@pytest.mark.parametrize("name", MACHINES)
@pytest.mark.parametrize("workload", WORKLOADS)
def test_the_probe_and_the_restart_rule_weigh_persistent_workers_alike(name, workload):
    # the rule warns only where the probe itself would keep the workers: it reads the same saving
    # (policy.restart_saving) against the same epoch, with a higher bar for a warning
    facts = machine(name)
    for steps in (3, 30, 3000):
        report = probed(facts, workload, epoch_steps=steps)
        pick = report.recommended
        if pick.num_workers == 0:
            continue
        warned = "persistent-workers-off" in proposals(evaluate(facts, pick.replace(persistent_workers=False),
                                                                probe=report))
        assert not warned or pick.persistent_workers, (steps, report.reasons)
        # with an epoch to weigh the start-up against, the pick and the recommendation built on it
        # still draw no proposal at all
        assert proposals(evaluate(facts, pick, probe=report)) == {}, (steps, report.reasons)
        rec = recommend(facts, probe=report)
        assert proposals(evaluate(facts, rec.settings, batch_bytes=rec.batch_bytes, probe=report)) == {}, (
            steps, rec.reasons)


@pytest.mark.parametrize("workload", WORKLOADS)
def test_fixes_converge_with_probe_evidence(workload):
    facts = machine("ci-2core")
    report = probed(facts, workload)
    for workers, prefetch, pin, persistent in _configs():
        settings = LoaderSettings(batch_size=32, num_workers=workers, prefetch_factor=prefetch,
                                  pin_memory=pin, persistent_workers=persistent)
        _assert_fixes_converge(facts, settings, batch_bytes=None, probe=report)
