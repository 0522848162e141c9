"""``loaderdoc tune``'s pure parts: the steady window read from the hook's samples, the tables
that reach the training loader alone, and the search on fake jobs (no process runs here; the
real trials are in test_tune_faults.py and test_tune_frameworks.py)."""

from __future__ import annotations

import json

import pytest

from loaderdoc.tuning import verify
from loaderdoc.tuning import window as win
from loaderdoc.tuning.result import FAILED, OK, Trial, TrialSettings, TuneReport
from loaderdoc.tuning.search import TuneSearch
from loaderdoc.tuning.trial import apply_tables
from loaderdoc.watching.cpu_use import CpuUse


# ---- the window ---------------------------------------------------------------------------------
def _sample(t, steps, *, wait_per=0.01, step_per=0.01, cpu=None, busy=None, pss=None):
    # the loop's own time (wait + step) runs with the clock: 0.01 + 0.01 s a batch at 50 batches/s
    cum = [steps, wait_per * steps, step_per * steps, max(0, steps - 1), max(0, steps - 1), 0.0, 0.0,
           wait_per * steps, step_per * steps, 0.5 * steps * 0.01, 0.0, 0.0]
    return {"t_s": t, "loaders": {"1": cum}, "proc_cpu_s": cpu if cpu is not None else t * 0.5,
            "busy_s": busy if busy is not None else t * 1.5, "workers_pss_bytes": pss, "shm_used_bytes": 1000}


def _records(samples, *, site="train.py:12", steps=None):
    steps = steps if steps is not None else samples[-1]["loaders"]["1"][0]
    return {"pid": 42, "process": {"rank": None}, "samples": samples,
            "loaders": [{"loader": 1, "site": site, "role": None, "settings": {"num_workers": 2},
                         "epochs": [{"steps": steps}]}]}


def test_a_steady_window_opens_after_the_warm_up_and_settles_when_its_halves_agree():
    samples = [_sample(0.2 * i, 10 * i) for i in range(40)]  # 50 batches/s throughout
    rec = _records(samples)
    w = win.window_of(rec, "site:train.py:12", steps=60, warm=15)
    assert w is not None and w.settled
    assert w.rate == pytest.approx(50.0)
    assert w.steps == 10 * 39 - 20  # from the first sample with >= 15 batches (20) to the last
    assert w.wait_share == pytest.approx(1 / 2)
    assert w.proc_cpu_s == pytest.approx(0.5 * 0.2 * 37) and w.others_cpu_s is not None


def test_a_window_whose_halves_disagree_is_not_settled_until_four_times_the_steps():
    # 50 batches/s, then 20: the second half is slower
    samples = [_sample(0.2 * i, 10 * i) for i in range(20)]
    for i in range(1, 31):  # 4 batches a tick of 0.2 s, each waited 0.04 s
        sample = _sample(0.2 * (19 + i), 190 + 4 * i)
        cum = sample["loaders"]["1"]
        cum[1] = 0.01 * 190 + 0.04 * 4 * i  # the wait grew with it: the loop's own time keeps the clock
        cum[2] = 0.01 * 190 + 0.01 * 4 * i
        samples.append(sample)
    rec = _records(samples)
    w = win.window_of(rec, "site:train.py:12", steps=100, warm=5)
    assert w is not None and w.spread is not None and w.spread > win.SETTLED_SPREAD
    assert not w.settled
    assert win.window_of(rec, "site:train.py:12", steps=20, warm=5).settled  # past 4x 20 batches: taken as is
    # ... or, once it holds the steps asked, past 30 s of the loop's time (a slow loop on a busy
    # machine whose halves keep disagreeing would otherwise run 4x the steps: minutes)
    slow = [_sample(2.0 * i, i, wait_per=1.0, step_per=1.0) for i in range(25)]
    for i, sample in enumerate(slow):
        sample["loaders"]["1"][1] = 1.0 * i + (0.0 if i < 12 else 0.5 * (i - 12))  # the second half slower
    w = win.window_of(_records(slow), "site:train.py:12", steps=10, warm=2)
    assert 10 <= w.steps < 4 * 10 and w.seconds >= win.MAX_WINDOW_S
    assert w.spread > win.SETTLED_SPREAD and w.settled


def test_a_window_needs_its_steps_and_three_seconds():
    samples = [_sample(0.2 * i, 10 * i) for i in range(10)]  # 1.8 s
    w = win.window_of(_records(samples), "site:train.py:12", steps=10, warm=5)
    assert w is not None and not w.settled
    assert win.window_of(_records(samples[:1]), "site:train.py:12", steps=10, warm=5) is None


def test_the_training_loader_is_the_one_with_most_batches_known_by_its_line():
    rec = {"loaders": [
        {"loader": 1, "site": "train.py:30", "role": "val", "epochs": [{"steps": 2}, {"steps": 10}]},
        {"loader": 2, "site": "train.py:20", "role": "train", "epochs": [{"steps": 100}]},
        {"loader": 3, "site": None, "role": None, "epochs": [{"steps": 5}]}]}
    assert win.training_key([rec]) == "site:train.py:20"
    assert win.loader_key(rec["loaders"][2]) == "loader:3"
    assert win.loader_key({"loader": 4, "role": "train"}) == "role:train"
    assert win.training_key([]) is None


def test_the_trial_settings_reach_the_training_loader_alone():
    s = TrialSettings(num_workers=3, prefetch_factor=4)
    assert json.loads(apply_tables("site:/x/train.py:20", s))["tables"] == {
        "site:/x/train.py:20": {"num_workers": 3, "prefetch_factor": 4}}
    assert json.loads(apply_tables("role:train", TrialSettings(0, 4)))["tables"] == {"train": {"num_workers": 0}}
    assert json.loads(apply_tables("loader:1", s))["tables"] == {"": {"num_workers": 3, "prefetch_factor": 4}}
    assert apply_tables(None, s) is None
    # the script's own settings: no table, but the hook's --apply path (a re-build named as in later trials)
    assert json.loads(apply_tables("site:a:1", None))["tables"] == {}
    assert json.loads(apply_tables(None, None))["tables"] == {}


def test_a_line_that_built_loaders_of_several_roles_names_the_training_loader_by_its_role():
    # the Hugging Face Trainer builds train and eval at one line of _get_dataloader
    hf = "/site-packages/transformers/trainer.py:1051"
    rec = {"loaders": [
        {"loader": 1, "site": hf, "role": "train", "epochs": [{"steps": 40}]},
        {"loader": 2, "site": hf, "role": "eval", "epochs": [{"steps": 3}]},
        {"loader": 3, "site": hf, "role": "eval", "epochs": [{"steps": 3}]},
        {"loader": 4, "site": "train.py:9", "role": None, "epochs": [{"steps": 2}]}]}
    assert win.shared_sites([rec]) == {hf}
    assert win.training_key([rec]) == "role:train"
    assert [raw["loader"] for raw in win.loaders_of(rec, "role:train")] == [1]
    assert win.batches_seen([rec], "role:train") == 40 and win.batches_seen([rec], f"site:{hf}") == 40
    assert win.settings_of([rec], "role:train")["role"] == "train"
    # before the eval loader was built, its line alone
    assert win.training_key([{"loaders": rec["loaders"][:1]}]) == f"site:{hf}"
    assert [raw["loader"] for raw in win.loaders_of(rec, "loader:4")] == []  # it has a line


# ---- the search on fake jobs --------------------------------------------------------------------
class FakeJob:
    """A job whose rate with n workers follows a simple truth; each trial gets a CpuUse as the
    window would give it. ``load_ms``/``load_cpu_ms``: one batch's loading by one worker;
    ``step_ms``: the step (sleeping: no CPU); ``cpus``: the budget; ``beyond``: the rate past the
    CPUs as a multiple of the rate at the CPUs (CPU-bound loading that leaves CPUs idle)."""

    def __init__(self, *, user=0, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0, cpus=2.0, beyond=1.0,
                 fail=(), busy_share=1.0, restart=0.0) -> None:
        self.restart = restart  # share of the loop's time the workers' start-up each epoch takes
        self.busy_share = busy_share  # of the workers' time on a CPU: < 1 leaves CPUs idle (hand-overs)
        self.user, self.load, self.load_cpu, self.step, self.cpus, self.beyond = user, load_ms, load_cpu_ms, step_ms, cpus, beyond
        self.fail = set(fail)
        self.search: TuneSearch | None = None
        self.ran: list[int] = []

    def true_rate(self, n: int) -> float:
        cpu_bound = self.load_cpu >= 0.5 * self.load
        if n == 0:
            return 1000.0 / (self.load + self.step)
        if cpu_bound:
            rate = min(n, self.cpus) * 1000.0 / self.load
            if n > self.cpus:
                rate *= self.beyond
            return min(rate, 1000.0 / self.step)
        return min(n * 1000.0 / self.load, 1000.0 / self.step)

    def run(self, settings, purpose, predicted) -> Trial:
        number = len(self.search.trials) + 1
        n = self.user if settings is None else settings.num_workers
        self.ran.append(n)
        if number in self.fail:
            return Trial(number=number, settings=settings or TrialSettings(n), status=FAILED, reason="exit 3",
                         exit_code=3)
        rate = self.true_rate(n)
        period = 1.0 / rate
        wait = max(0.0, period - self.step / 1000.0)
        persistent = settings is not None and settings.persistent
        restart = self.restart if n and not persistent else 0.0  # in the epochs' first batches, not the waits
        rate *= 1.0 - restart
        trial = Trial(number=number, settings=settings or TrialSettings(n, 2 if n else None), status=OK,
                      steps_per_s=rate, window_steps=100, window_s=100 / rate, settled=True,
                      wait_share=wait / period, workers_pss_bytes=n * 100 * 2**20 or None, restart_share=restart)
        per_batch_cpu = self.load_cpu / 1000.0
        used = self.busy_share * rate * per_batch_cpu + 0.02
        use = CpuUse(workers=n, budget=self.cpus, step_wall_s=self.step / 1000.0, step_cpu_s=0.0005,
                     wait_wall_s=wait, wait_cpu_s=(per_batch_cpu if n == 0 else 0.0002) if wait else 0.0,
                     load_cpu_s=per_batch_cpu, load_queued_s=0.0, used_cpus=used, others_cpus=0.0)
        self.search.note_use(trial, use)
        return trial


def _search(job: FakeJob, **kw) -> TuneSearch:
    search = TuneSearch(run=job.run, per_rank=job.cpus, **kw)
    job.search = search
    return search


def test_an_io_bound_job_is_tuned_in_a_few_trials_to_the_fewest_workers_at_the_top():
    job = FakeJob(user=0, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0)  # needs 4 workers to keep up
    search = _search(job)
    pick = search.search()
    assert pick is not None and len(search.trials) <= 6
    # a 5x gain is past policy.REPEAT_BELOW: one run of your settings is its baseline
    assert not any(t.purpose.startswith("again") for t in search.trials)
    best = max(job.true_rate(n) for n in range(0, 9))
    assert pick.steps_per_s >= 0.97 * best
    assert pick.settings.num_workers == 4  # fewer cannot keep up; 4 past 2 CPUs pays 2x (I/O: the bound's evidence)
    assert pick.gain == pytest.approx(pick.steps_per_s / job.true_rate(0))
    assert not pick.user_within_tolerance
    assert job.ran[0] == 0 and search.trials[1].predicted_per_s is not None  # predicted, then verified


def test_a_job_already_fast_with_its_own_settings_is_within_tolerance_and_a_leaner_one_is_tried():
    job = FakeJob(user=8, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0)  # 8 workers keep up; 4 would too
    search = _search(job)
    pick = search.search()
    assert pick is not None and pick.user_within_tolerance
    assert pick.settings.num_workers < 8  # the leaner one as fast wins (memory)
    assert pick.steps_per_s >= 0.97 * job.true_rate(8)


def test_cpu_bound_loading_that_leaves_cpus_idle_measures_one_past_them_and_keeps_it_on_evidence_only():
    # CPU-bound loading (1.5 ms CPU a sample x 16), a sleeping step: 3 workers 15 % faster than 2
    job = FakeJob(user=2, load_ms=24.0, load_cpu_ms=24.0, step_ms=5.0, beyond=1.15, busy_share=0.8)
    search = _search(job)
    pick = search.search()
    assert 3 in job.ran  # measured one size past the CPUs
    assert job.ran.count(3) >= 2 and job.ran.count(2) >= 2  # 15 % < 20 %: repeated, in turns
    assert pick.settings.num_workers == 3  # every repeated run faster: the policy's evidence
    # CPUs already full at 2 workers: the model rules out a third, so the climb does not propose it,
    # but the search measures it (a neighbour) before concluding; it is not faster, and not picked
    full = FakeJob(user=2, load_ms=24.0, load_cpu_ms=24.0, step_ms=5.0, beyond=1.0)
    search3 = _search(full)
    pick3 = search3.search()
    assert full.ran.count(3) == 1 and "neighbour" in search3.trials[full.ran.index(3)].purpose
    assert pick3.settings.num_workers == 2
    assert search3.stopped == "settled" and "CPUs 100% busy at 2 workers" in search3.settled_reason()
    assert "3 workers" in verify.neighbours_text(search3) or "num_workers=3" in verify.neighbours_text(search3)
    # ... and a gain inside the tolerance is not evidence
    job2 = FakeJob(user=2, load_ms=24.0, load_cpu_ms=24.0, step_ms=5.0, beyond=1.02, busy_share=0.8)
    search2 = _search(job2)
    assert search2.search().settings.num_workers == 2


def test_workers_that_start_again_each_epoch_get_a_persistent_twin_kept_where_it_measures_faster():
    job = FakeJob(user=0, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0, restart=0.08)
    search = _search(job)
    pick = search.search()
    twins = [t for t in search.trials if t.settings.persistent and t.settings.num_workers == pick.settings.num_workers]
    assert len(twins) == 1
    # the persistent pick's neighbours are measured persistent too (one worker either side)
    assert {t.settings.num_workers for t in search.trials if t.settings.persistent} == {
        pick.settings.num_workers - 1, pick.settings.num_workers, pick.settings.num_workers + 1}
    assert pick.settings.persistent and "persistent_workers=True" in pick.reason
    assert all(not r.settings.persistent_workers for r in search.results())  # never pooled by choose
    # a start-up under 2 % of the loop: no twin
    job = FakeJob(user=0, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0, restart=0.01)
    search = _search(job)
    assert not search.search().settings.persistent and not any(t.settings.persistent for t in search.trials)


def test_a_failing_first_trial_ends_the_search_without_a_pick_and_a_failing_later_one_is_skipped():
    job = FakeJob(fail={1})
    search = _search(job)
    assert search.search() is None and "could not be measured" in search.stopped
    job = FakeJob(user=0, fail={2})
    search = _search(job)
    pick = search.search()
    assert pick is not None and search.trials[1].status == FAILED
    assert all(t.number != 2 for t in search.ok)
    failed = search.trials[1].settings.num_workers
    assert job.ran[2] == failed // 2 and "failed" in search.trials[2].purpose  # half way, not given up


def test_no_trial_starts_past_the_deadline():
    import time

    job = FakeJob(user=0)
    search = _search(job, deadline=time.monotonic() - 1)
    search.search()
    assert len(search.trials) == 1 and search.stopped == "budget"  # the user's own trial is always measured


def test_the_report_round_trips_through_json():
    job = FakeJob(user=0)
    search = _search(job)
    pick = search.search()
    report = TuneReport(command=["python", "train.py"], trials=search.trials, pick=pick, cpu_budget=2.0)
    again = TuneReport.from_dict(json.loads(json.dumps(report.to_dict())))
    assert again == report


def test_a_trial_waits_for_every_rank_of_the_node_even_one_not_yet_seen():
    train = {"loader": 1, "site": "train.py:9", "epochs": [{"steps": 50}]}
    rank1 = {"process": {"local_world_size": 2}, "loaders": [train]}
    assert win.ranks_expected([rank1], "site:train.py:9") == 2  # rank 0 has written nothing yet
    assert win.ranks_expected([{"process": {}, "loaders": [train]}], "site:train.py:9") == 1
    launcher = {"process": {"local_world_size": None}, "loaders": []}
    assert win.ranks_expected([launcher, {"process": {}, "loaders": [train]}, {"process": {}, "loaders": [train]}],
                              "site:train.py:9") == 2


class CpuStepJob(FakeJob):
    """pytorch/examples' ImageNet script on the CPU (issue 57): loading and the step both CPU work on 2
    CPUs, so the window's model prices a worker's CPU time against the step's and predicts 1 worker
    slower than 0; measured, 1 worker was faster (2.70 against 2.44 steps/s) and 2 slower again."""

    def __init__(self, rates: dict[int, float], **kw) -> None:
        super().__init__(user=0, load_ms=60.0, load_cpu_ms=60.0, step_ms=350.0, **kw)
        self.rates = rates

    def true_rate(self, n: int) -> float:
        return self.rates.get(n, min(self.rates.values()))

    def run(self, settings, purpose, predicted) -> Trial:
        import dataclasses

        trial = super().run(settings, purpose, predicted)
        use = self.search.uses[trial.number]
        # the step is CPU work on both CPUs: 1 s of CPU a 350 ms step (the pool's spin counted); the
        # model then predicts 1.9 steps/s for 1 worker against 2.44 measured at 0
        self.search.note_use(trial, dataclasses.replace(use, step_cpu_s=1.0, used_cpus=2.0, torch_threads=2))
        return trial


def test_a_model_that_rules_out_every_worker_is_checked_by_a_measurement_before_the_search_settles():
    job = CpuStepJob({0: 2.44, 1: 2.70, 2: 2.50})
    search = _search(job)
    first = search.trials
    pick = search.search()
    assert len(first) >= 3 and 1 in job.ran  # never "settled after trial 1"
    assert pick.settings.num_workers == 1 and pick.gain == pytest.approx(2.70 / 2.44)
    assert not pick.user_within_tolerance
    assert "neighbour" in search.trials[job.ran.index(1)].purpose
    # ... and where the model was right (timm: a worker slows the step), 0 stays the pick, compared
    job = CpuStepJob({0: 3.15, 1: 2.60, 2: 2.40})
    search = _search(job)
    pick = search.search()
    assert 1 in job.ran and pick.settings.num_workers == 0 and pick.user_within_tolerance
    assert search.stopped == "settled" and "num_workers=1 2.6 steps/s" in verify.neighbours_text(search)
    # two trials would have settled it: a third measures your settings again, for the noise between repeats
    assert job.ran == [0, 1, 0] and search.trials[2].purpose.startswith("again: your settings")
    assert pick.repeated == [1, 3]
    # ... unless --trials leaves no room for it
    job = CpuStepJob({0: 3.15, 1: 2.60, 2: 2.40})
    search = _search(job, max_trials=2)
    search.search()
    assert job.ran == [0, 1]


def test_a_neighbour_measured_slower_than_the_model_said_is_the_measurement_the_pick_rests_on():
    # the model's best (predicted) is measured, and so are its neighbours: none of them is skipped for a
    # prediction, and the pick is the measured fastest
    job = FakeJob(user=0, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0)  # needs 4 workers to keep up
    search = _search(job)
    pick = search.search()
    n = pick.settings.num_workers
    assert {n - 1, n + 1} <= set(job.ran)
    assert pick.steps_per_s == max(t.steps_per_s for t in search.ok if not search.twin(t))


class NoisyJob(CpuStepJob):
    """A job whose trials are disturbed: ``slow[trial]`` scales that trial's rate (a neighbour's load,
    or a drift), ``others[trial]`` the CPUs other processes took in it, ``spread`` its window's halves."""

    def __init__(self, rates, *, slow=None, others=None, spread=0.02) -> None:
        super().__init__(rates)
        self.slow, self.others, self.spread = slow or {}, others or {}, spread

    def run(self, settings, purpose, predicted) -> Trial:
        trial = super().run(settings, purpose, predicted)
        trial.steps_per_s *= self.slow.get(trial.number, 1.0)
        trial.others_cpus = self.others.get(trial.number, 0.0)
        trial.spread = self.spread
        return trial


def test_a_tune_beside_other_processes_measures_your_settings_and_the_pick_again_in_turns_and_says_so():
    from loaderdoc.text.tune import render

    # trial 1 (your settings) ran while a neighbour took 0.9 of the 2 CPUs: 0.55x its quiet rate; the
    # pick's quiet rate is 0.91x yours, so one run each would have called it 1.66x faster
    job = NoisyJob({0: 3.0, 1: 2.73, 2: 2.5}, slow={1: 0.55}, others={1: 0.9})
    search = _search(job)
    pick = search.search()
    again = [t for t in search.trials if t.purpose.startswith("again")]
    assert again and again[0].settings.num_workers == 0  # your settings again first
    assert pick.repeated and pick.settings.num_workers == 0 and pick.user_within_tolerance
    report = TuneReport(command=["python", "train.py"], trials=search.trials, pick=pick, cpu_budget=2.0)
    lines = render(report).splitlines()
    assert any(line.startswith("busy machine: other processes used 0.0-0.9 of the 2 CPUs during the trials")
               for line in lines[:3])  # said first, before the trials
    assert any(line.startswith("noise: +/-") and "measured again" in line for line in lines)


def test_a_gain_inside_the_spread_of_one_run_is_not_worth_changing():
    # your settings measure 4 % slower than 1 worker once, but each run's halves differ by 12 % (+/-6 %):
    # measured again in turns, and equal in truth, it is no gain; the repeats are the noise said
    job = NoisyJob({0: 3.0, 1: 3.0, 2: 2.6}, slow={1: 0.96}, spread=0.12)
    search = _search(job)
    pick = search.search()
    assert any(t.purpose.startswith("again") for t in search.trials)
    assert pick.user_within_tolerance and pick.repeated and pick.noise == pytest.approx(0.04 / 2 / 0.98)
    # a quiet, steady machine: your settings twice (a gain is claimed against two runs of them), the
    # pick once: the repeats agree, and the gain is far outside their spread
    job = NoisyJob({0: 2.44, 1: 2.70, 2: 2.5}, spread=0.01)
    search = _search(job)
    pick = search.search()
    again = [t for t in search.trials if t.purpose.startswith("again")]
    assert [t.settings.num_workers for t in again] == [0] and pick.repeated == [1, again[0].number]
    assert pick.settings.num_workers == 1 and not pick.user_within_tolerance and pick.noise == 0.0


class ThreadJob(NoisyJob):
    """Rates by (workers, intra-op threads); the script's own threads are 2 (torch's default here)."""

    def __init__(self, rates, **kw) -> None:
        super().__init__({n: r for (n, k), r in rates.items() if k == 2}, **kw)
        self.by_threads = rates

    def true_rate(self, n: int) -> float:
        known = {m: r for (m, k), r in self.by_threads.items() if k == self._threads}
        return known.get(n, min(known.values()))

    def run(self, settings, purpose, predicted) -> Trial:
        self._threads = settings.torch_threads if settings is not None and settings.torch_threads else 2
        trial = super().run(settings, purpose, predicted)
        trial.torch_threads = self._threads
        return trial


def test_fewer_threads_are_measured_without_workers_too_and_the_picks_neighbours_keep_them():
    # beside a process that spins on one of the 2 CPUs torch's 2 threads lose most (each parallel region
    # waits for a descheduled thread): 1 thread is faster at any worker count, 0 workers too
    rates = {(0, 2): 2.44, (1, 2): 2.2, (2, 2): 2.0, (0, 1): 3.0, (1, 1): 2.9, (2, 1): 2.6}
    job = ThreadJob(rates, others={n: 1.0 for n in range(1, 12)})
    search = _search(job)
    pick = search.search()
    assert (pick.settings.num_workers, pick.settings.torch_threads) == (0, 1)
    assert pick.gain == pytest.approx(3.0 / 2.44)
    # the pick's neighbour is measured at its threads, not at the script's 2, and the run beside a
    # load is repeated in turns
    assert "num_workers=1, torch_threads=1 2.9 steps/s" in verify.neighbours_text(search)
    assert [t.purpose.split(":")[0] for t in search.trials[-2:]] == ["again", "again"] and pick.repeated


def test_a_twin_far_faster_than_your_settings_is_no_within_tolerance_and_the_fewest_workers_among_equals_win():
    """The ImageNet script beside a burner: your settings (0 workers, 2 threads) 0.1-0.2 steps/s, 1 and 0
    workers at 1 thread 3.5 each: the pick was 1 worker and said 'your settings are already within
    tolerance' beside a 25x gain."""
    rates = {(0, 2): 0.15, (1, 2): 0.1, (0, 1): 3.5, (1, 1): 3.5}
    job = ThreadJob(rates)
    search = _search(job)
    for settings in (None, TrialSettings(1, 2), TrialSettings(1, 2, torch_threads=1), TrialSettings(0, torch_threads=1)):
        search._run(settings, "measured", None)
    pick = search.pick()
    assert (pick.settings.num_workers, pick.settings.torch_threads) == (0, 1)  # as fast, fewer workers
    assert not pick.user_within_tolerance and pick.gain == pytest.approx(3.5 / 0.15)
    # a gain past policy.REPEAT_BELOW on a quiet machine: one run of your settings is its baseline
    assert verify.repeat_close(search) is None


class PersistentScript:
    """A fake job whose script builds its loader with persistent_workers=True (timm's)."""

    def run(self, settings, purpose, predicted) -> Trial:
        trial = super().run(settings, purpose, predicted)
        if settings is None:
            trial.settings.persistent_workers = True
        return trial


def test_a_script_with_persistent_workers_keeps_them_in_every_trial_it_is_shown_and_compared_with():
    """timm passes persistent_workers=True: a trial whose table left it out ran persistent all the same,
    was shown as '1' and then measured again as the neighbour '1p' (issue 57)."""
    class Persistent(PersistentScript, FakeJob):
        pass

    job = Persistent(user=2, load_ms=40.0, load_cpu_ms=1.0, step_ms=10.0)
    search = _search(job)
    search.search()
    assert all(t.settings.persistent for t in search.trials if t.settings.num_workers)
    shown = [t.settings.columns()[0] for t in search.trials]
    assert len(shown) == len(set(shown)) or any(t.purpose.startswith("again") for t in search.trials)


def test_a_zero_worker_picks_neighbour_keeps_the_scripts_persistent_workers():
    """timm (persistent_workers=True) picked 0 workers: its neighbour '1p' was measured, yet the note
    named 'num_workers=1' as not compared."""
    class Persistent(PersistentScript, CpuStepJob):
        pass

    job = Persistent({0: 3.0, 1: 2.6, 2: 2.5, 3: 2.4})
    job.user = 2
    search = _search(job)
    search._run(None, "your settings", None)
    search._run(search.settings_for(1), "measured", None)
    search._run(TrialSettings(0), "measured", None)
    assert search.pick().settings.num_workers == 0 and search.settings_for(1).persistent
    assert all(s.num_workers != 1 or s.torch_threads is not None for s, _, _ in verify.unmeasured_neighbours(search))


def test_a_report_that_recorded_no_noise_says_so_rather_than_zero():
    """A tune report written before windows' spreads were recorded showed 'noise: +/-0%' in the app."""
    from loaderdoc.text.tune import noise_text

    job = FakeJob(user=0)
    search = _search(job)
    pick = search.search()
    report = TuneReport(command=["python", "train.py"], trials=search.trials, pick=pick, cpu_budget=2.0)
    assert all(t.spread is None for t in report.trials)
    assert noise_text(report).startswith("not measured (no configuration measured twice, no window's halves recorded)")
