"""A machine whose CPU count could not be read (no logical count, no affinity, no quota): the CPU
budget per rank is unknown, and every reader says so instead of assuming one CPU."""

from __future__ import annotations

from loaderdoc import policy
from loaderdoc.advice.rules import evaluate
from loaderdoc.advice.tradeoffs import tradeoffs
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.summary import machine_summary
from loaderdoc.system.facts import MachineFacts, Reading


def unknown_cpus(ranks: int = 1) -> MachineFacts:
    facts = MachineFacts()
    if ranks > 1:
        facts.distributed.launcher = Reading.of("torchrun", "LOCAL_WORLD_SIZE")
        facts.distributed.local_world_size = Reading.of(ranks, "LOCAL_WORLD_SIZE")
    return facts


def test_the_budget_per_rank_is_unknown_not_one_cpu():
    facts = unknown_cpus()
    assert not facts.cpu.known
    assert facts.cpus_per_rank is None
    workers, why = policy.workers_for_cpus(facts)
    assert workers == 0 and "no CPU count could be read" in why


def test_a_known_budget_is_still_divided_among_the_ranks():
    facts = unknown_cpus(ranks=2)
    facts.cpu.logical = Reading.of(8, "os.cpu_count()")
    assert facts.cpus_per_rank == 4.0


def test_the_workers_trade_off_shows_the_budget_unknown():
    facts = unknown_cpus(ranks=2)
    table = next(t for t in tradeoffs(facts, LoaderSettings(num_workers=3)) if t.knob == "num_workers")
    cells = [row.cells["CPUs used / per rank"] for row in table.rows]
    assert cells and all(c.endswith("/ unknown") for c in cells)
    assert [row.value for row in table.rows] == [0, 1, 2, 3]  # torch's range and the settings' own


def test_rules_and_summary_say_unknown_and_do_not_crash():
    facts = unknown_cpus(ranks=4)
    findings = evaluate(facts, LoaderSettings(num_workers=16))
    assert not any("oversubscri" in f.rule_id for f in findings)  # no budget to be over
    ranks = dict(machine_summary(facts))["Ranks"]
    assert ranks.endswith("-> unknown CPUs per rank")
