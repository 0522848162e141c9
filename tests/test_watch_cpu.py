"""CPU accounting of a watched run: the workers' CPU time read from /proc (live and reaped), the
loop's in its waits and steps, and the model of watching.cpu_use that turns them into a ceiling and
an expected gain (issue 28)."""

from __future__ import annotations

import time

import pytest

from loaderdoc.watching.cpu_use import CpuUse

torch = pytest.importorskip("torch")


def _burn(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class _Burning(torch.utils.data.Dataset):
    """Each sample costs ``load_s`` of CPU time in whichever process loads it."""

    def __init__(self, n: int, load_s: float) -> None:
        self.n, self.load_s = n, load_s

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        _burn(self.load_s)
        return torch.zeros(2)


@pytest.mark.parametrize("persistent", [False, True], ids=["reaped-workers", "persistent-workers"])
@pytest.mark.alone
def test_the_workers_cpu_time_is_counted_whether_they_are_reaped_or_kept(persistent):
    from loaderdoc.api import watch

    # 2 workers, 2 epochs of 12 batches of 2 samples burning 10 ms each: 0.48 s of CPU in the workers
    loader = torch.utils.data.DataLoader(_Burning(24, 0.010), batch_size=2, num_workers=2,
                                         persistent_workers=persistent)
    watched = watch(loader)
    for _ in range(2):
        for _batch in watched:
            pass
    epochs = watched.records()["loaders"][0]["epochs"]
    total = sum(e["workers_cpu_s"] for e in epochs)
    assert 0.45 < total < 0.48 + 2 * 0.6, total  # + up to two workers' start-up per epoch
    # past each epoch's first batch: the steady loading, without start-up (a few batches were in
    # flight by then); a reaped worker counted twice would add its whole life again
    steady = sum(e["workers_cpu_s"] - e["workers_cpu_first_s"] for e in epochs)
    assert 0.25 < steady < 0.55, steady
    for e in epochs:
        assert e["workers_cpu_s"] >= 0.2, e  # each epoch loaded its own 12 batches
        assert e["cpu_wait_s"] < 0.2  # the loop only received the batches
        assert e["proc_cpu_s"] is not None and e["others_cpu_s"] is not None


@pytest.mark.alone
def test_the_loops_own_loading_and_step_are_told_apart_without_workers():
    from loaderdoc.api import watch

    watched = watch(torch.utils.data.DataLoader(_Burning(200, 0.004), batch_size=2))  # 8 ms a batch
    for _batch in watched:
        _burn(0.004)  # a 4 ms CPU step
    (epoch,) = watched.records()["loaders"][0]["epochs"]
    assert epoch["workers_cpu_s"] is None
    # the first 64 batches are CPU-timed, then every 16th: 66 of these 100
    assert 0.5 * epoch["step_s"] < epoch["cpu_step_wall_s"] < 0.8 * epoch["step_s"]
    (loader,) = watched.report()["loaders"]
    cpu = loader["cpu"]
    per_wait, per_step = cpu["load_cpu_per_batch_s"], cpu["step_cpu_per_step_s"]
    assert 0.0075 < per_wait < 0.012 and 0.0035 < per_step < 0.007, (per_wait, per_step)
    assert cpu["load_is_cpu"] and cpu["step_is_cpu"] and cpu["handover_per_batch_s"] == 0


def _use(**kw) -> CpuUse:
    base = dict(workers=0, budget=2.0, step_wall_s=0.020, step_cpu_s=0.020, wait_wall_s=0.048, wait_cpu_s=0.048,
                load_cpu_s=0.048, load_queued_s=None, used_cpus=1.0, others_cpus=0.0)
    return CpuUse(**{**base, **kw})


def test_cpu_bound_loading_beside_a_cpu_step_is_capped_at_the_cpus_and_the_ceiling_is_the_cpus_over_the_work():
    use = _use()
    assert use.load_is_cpu and use.step_is_cpu and use.worker_cap == 2
    assert use.ceiling == pytest.approx(2 / 0.068)  # 68 ms of CPU per trained batch on 2 CPUs
    rates = [use.predict(n) for n in range(5)]
    assert rates[0] == pytest.approx(use.rate)
    assert all(r <= use.ceiling + 1e-9 for r in rates)  # never a rate the CPUs cannot give
    n, rate = use.best_workers(needed=6)
    assert n == 2 and rate > 1.3 * use.rate  # 6 would keep up if nothing else needed the CPUs


def test_other_busy_processes_lower_the_ceiling_to_the_kernels_share():
    quiet, busy = _use(), _use(others_cpus=1.0)
    assert busy.ceiling < quiet.ceiling
    # 2 workers and the step (3 runnable) beside one busy process on 2 CPUs: 2 x 3/4 = 1.5 CPUs
    assert busy.ceiling == pytest.approx(1.5 / 0.068)


def test_sleeping_loading_is_waiting_not_cpu_and_may_take_more_workers_than_cpus():
    # 8 ms sleeps per sample, batch 8: 64 ms a batch, 0.5 ms of it CPU; a 16 ms sleeping step
    use = _use(step_wall_s=0.016, step_cpu_s=0.0002, wait_wall_s=0.064, wait_cpu_s=0.0005, load_cpu_s=0.0005)
    assert not use.load_is_cpu and not use.step_is_cpu and use.worker_cap is None
    n, rate = use.best_workers(needed=4)
    assert n >= 4 and rate > 3 * use.rate


def test_the_hand_over_of_a_ready_batch_is_not_starvation():
    # issue 28's I/O-bound loop: 8 workers, 1.1 ms waits of which 1.0 ms the loop's own CPU time
    use = _use(workers=8, step_wall_s=0.0165, step_cpu_s=0.0002, wait_wall_s=0.0011, wait_cpu_s=0.0010,
               load_cpu_s=0.002, used_cpus=0.2)
    assert use.wait_wall_s / (use.wait_wall_s + use.step_wall_s) > 0.06  # the raw share: "starved"
    assert use.idle_share < 0.01  # beyond the hand-over: fed
    assert not use.saturated and not use.load_is_cpu
    assert use.predict(9) is None  # workers that kept up do not say how long a batch takes


def test_a_saturated_run_expects_no_gain_from_more_workers():
    # 2 workers starved while both CPUs are busy with CPU-bound loading and a CPU step
    use = _use(workers=2, step_wall_s=0.060, step_cpu_s=0.020, wait_wall_s=0.011, wait_cpu_s=0.0008,
               load_cpu_s=0.053, load_queued_s=0.04, used_cpus=1.9)
    assert use.saturated and use.load_is_cpu and use.step_is_cpu  # a fifth of its wall is CPU: it waited
    assert use.worker_cap == 2 and use.best_workers(needed=3) is None


# ---- review findings: the ledger's reaped workers, ranks, GPU steps, contention --------------------
class _FakeProc:
    """/proc as the ledger reads it: this process's (own, children's) CPU seconds, and live pids'."""

    def __init__(self) -> None:
        self.children = 0.0
        self.live: dict[int, float] = {}

    def cpu_times(self, pid="self"):
        if pid == "self":
            return 1.0, self.children
        return (self.live[pid], 0.0) if pid in self.live else None

    def reap(self, pid: int, total: float) -> None:
        del self.live[pid]
        self.children += total


class _Epoch:
    workers_cpu_s = None
    workers_runq_s = None


@pytest.fixture
def fake_proc(monkeypatch):
    from loaderdoc.watching import cpuacct

    proc = _FakeProc()
    monkeypatch.setattr(cpuacct, "cpu_times", proc.cpu_times)
    monkeypatch.setattr(cpuacct, "runqueue_seconds", lambda pid: None)
    return proc, cpuacct.CpuLedger()


def test_a_worker_reaped_between_two_reads_counts_once(fake_proc, monkeypatch):
    proc, ledger = fake_proc
    epoch = _Epoch()
    proc.live[11] = 0.0
    ledger.track([11], epoch)
    proc.live[11] = 5.0
    ledger.settle()
    assert epoch.workers_cpu_s == pytest.approx(5.0)
    # the worker is reaped after the ledger read this process's children's time, before its own
    from loaderdoc.watching import cpuacct

    real = proc.cpu_times

    def racing(pid="self"):
        out = real(pid)
        if pid == "self" and 11 in proc.live:
            proc.reap(11, 6.0)  # a 6 s life: 1 s after the last reading
        return out

    monkeypatch.setattr(cpuacct, "cpu_times", racing)
    ledger.settle()
    ledger.settle()
    assert epoch.workers_cpu_s == pytest.approx(6.0)


def test_another_child_the_script_reaps_is_not_the_workers(fake_proc):
    proc, ledger = fake_proc
    epoch = _Epoch()
    proc.live[11] = 0.0
    ledger.track([11], epoch)
    proc.live[11] = 2.0
    proc.reap(11, 2.5)
    ledger.settle()
    assert epoch.workers_cpu_s == pytest.approx(2.5)
    proc.children += 3.0  # a `subprocess.run` of the script's, reaped later
    ledger.settle()
    assert epoch.workers_cpu_s == pytest.approx(2.5)


def test_sibling_ranks_are_not_other_processes():
    from loaderdoc.watching.cpu_use import cpu_use

    # one of 2 ranks on 2 CPUs (budget 1 each), each keeping 1 CPU busy at 25 batches/s
    n = 1000
    kw = dict(workers=1, budget=1.0, waits=n, steps=n, steps_timed=n, wait_s=n * 0.001, step_s=n * 0.039,
              cpu_wait_s=n * 0.001, cpu_step_s=n * 0.015, cpu_wait_wall_s=n * 0.001, cpu_step_wall_s=n * 0.039,
              workers_cpu_s=n * 0.024, workers_runq_s=0.0, tree_cpu_s=n * 0.04, others_cpu_s=n * 0.04,
              cpu_wall_s=n * 0.04)
    alone, beside = cpu_use(**kw), cpu_use(**kw, ranks=2)
    assert beside.others_cpus == pytest.approx(0.0)
    assert beside.ceiling >= beside.rate  # never a ceiling below the rate the run reached
    assert alone.ceiling < alone.rate  # the same numbers read as a stranger's load: wrong


def test_a_gpu_step_that_spins_on_a_sync_is_no_cpu_trained_model():
    use = _use(on_gpu=True)
    assert not use.step_is_cpu and _use().step_is_cpu


def test_the_hand_over_is_at_most_the_wait_and_others_count_towards_saturation():
    spun = _use(workers=2, wait_wall_s=0.002, wait_cpu_s=0.004, load_cpu_s=0.04)  # OpenMP spinning in the wait
    assert spun.handover_cpu_s == pytest.approx(0.002)
    assert not _use(used_cpus=1.0, others_cpus=0.0).saturated and _use(used_cpus=1.0, others_cpus=1.0).saturated
    assert not _use(used_cpus=1.0, others_cpus=1.0).saturated_by_itself
