"""A watched run beside other processes' load (issue 57): the summary says so in its first lines,
and a gain the model expects inside what that load moves a run's rate is not proposed (an I/O-bound
loader beside a neighbour was offered one more worker for 1.06x)."""

from __future__ import annotations

from support.scenarios import Scenario, watched

from loaderdoc.base.settings import LoaderSettings


def _starved(others: float):
    # 2 I/O workers (0.5 ms of CPU a batch) behind a 16 ms sleeping step, waiting 3.2 ms a batch: the
    # model expects about 1.2x from more workers
    run = watched(2, batches=400, wait_ms=3.2, step_ms=16.0,
                  cpu={"wait_cpu": 0.1, "step_cpu": 0.2, "load_cpu": 0.5, "others": others})
    scenario = Scenario("beside-a-neighbour", "", "ci-2core", LoaderSettings(batch_size=8, num_workers=2), watch=run)
    (finding,) = [f for f in scenario.run() if f.rule_id == "watch-data-starved"]
    return finding


def test_a_gain_inside_other_processes_load_is_not_proposed_and_a_quiet_run_gets_it():
    quiet = _starved(0.0)
    assert quiet.settings_change.get("num_workers", 0) > 2 and 1.05 <= quiet.expected_gain < 1.45
    loaded = _starved(0.9)  # 0.9 of the 2 CPUs: a run's rate moves by up to 45 %
    assert loaded.settings_change == {} and loaded.expected_gain is None
    assert loaded.fix.startswith(f"no change proposed: the {quiet.expected_gain:.2f}x expected from")
    assert "other processes' load (0.9 of the 2 CPUs)" in loaded.fix
    assert any("other processes 0.90" in line for line in loaded.evidence)


def test_the_summary_says_first_that_the_run_was_measured_beside_other_processes():
    from loaderdoc.text.watch import busy_text

    class Report:
        def __init__(self, others):
            self.loaders = [type("L", (), {"cpu": {"others_cpus": others, "budget_cpus": 2.0}})()]

    assert busy_text(Report(0.9)) == ("busy machine: other processes kept 0.9 of the 2 CPUs busy during the run: "
                                      "its rates were measured beside that load")
    assert busy_text(Report(0.2)) is None  # a tenth of the CPUs: not busy
