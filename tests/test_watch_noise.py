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


def test_a_cpu_step_on_several_threads_beside_other_processes_gets_fewer_threads_proposed_for_a_measurement():
    """issue 57's burner: the ImageNet script's 0-worker run at torch's 2 threads beside a process spinning
    on one CPU ran 1.1 steps/s in watch and 3.5 at 1 thread in tune; watch's model had said fewer threads
    would be no better, and proposed nothing but pin_memory."""
    run = watched(0, batches=120, wait_ms=60.0, step_ms=900.0,
                  cpu={"wait_cpu": 55.0, "step_cpu": 1700.0, "load_cpu": 0.0, "others": 1.0})
    run.torch_threads = 2
    for epoch in run.epochs:
        epoch.torch_threads = 2
    scenario = Scenario("threads-beside-a-burner", "", "ci-2core", LoaderSettings(batch_size=16, num_workers=0),
                        watch=run)
    found = {f.rule_id: f for f in scenario.run()}
    threads = found["threads-oversubscribed"]
    assert threads.settings_change == {"torch_threads": 1} and threads.expected_gain is None
    assert "ran beside other processes' load (1.0 of the 2 CPUs)" in threads.symptom
    assert "this run cannot predict the gain, so measure it" in threads.fix
    quiet = watched(0, batches=120, wait_ms=60.0, step_ms=900.0,
                    cpu={"wait_cpu": 55.0, "step_cpu": 1700.0, "load_cpu": 0.0, "others": 0.0})
    quiet.torch_threads = 2
    for epoch in quiet.epochs:
        epoch.torch_threads = 2
    calm = Scenario("threads-quiet", "", "ci-2core", LoaderSettings(batch_size=16, num_workers=0), watch=quiet)
    assert "threads-oversubscribed" not in {f.rule_id for f in calm.run()}
