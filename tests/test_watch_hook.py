"""The hook's side of ``loaderdoc.watch-records/2``: the sampler thread, per-process records files,
GPU idle with CUDA events (on a fake event class: this machine has no GPU).

No assertion on a duration: the sampler runs with short intervals and the tests wait on conditions
(a tick counted, a file appearing) with generous timeouts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from support.heap import child_with_growing_heap

from loaderdoc.api import watch
from loaderdoc.watching import gpuidle, hook, sampler

SITEDIR = str(Path(hook.__file__).resolve().parent / "sitedir")
TIMEOUT_S = 60


def wait_for(condition, what: str, timeout: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.01)
    pytest.fail(f"timed out waiting for {what}")


def gpu_timing_here() -> str:
    """The GPU timing the hook records in this process: it times GPU idle only where the program
    initialised CUDA (on a GPU machine an earlier test in this worker may have), and never
    initialises CUDA itself."""
    torch = sys.modules.get("torch")
    return "cuda-events" if torch is not None and torch.cuda.is_initialized() else "unavailable"


# -- the sampler ---------------------------------------------------------------------------------


def test_sampler_reads_memory_shm_and_the_loaders_counters_while_an_epoch_runs(monkeypatch):
    monkeypatch.setenv(hook.ENV_MAX_BUSY, "1")  # a tick every interval, however long /proc takes here
    monkeypatch.setattr(sampler.Children, "workers", lambda self: [])  # whatever other tests left running
    recorder = hook.Recorder(interval=0.05)
    items = list(range(50))
    it = recorder.wrap(items, iter(items), hook.clock())
    next(it)
    smp = recorder.sampler
    assert smp.running and smp.interval == 0.05
    # the sample count goes up while the epoch is paused between batches
    wait_for(lambda: smp.ticks >= 2, "two ticks")
    for _ in it:
        pass
    records = recorder.to_dict()
    assert records["schema"] == "loaderdoc.watch-records/2" and records["interval_s"] == 0.05
    samples = records["samples"]
    assert len(samples) >= 2
    assert [s["t_s"] for s in samples] == sorted(s["t_s"] for s in samples)
    first = samples[0]
    assert first["main_pss_bytes"] > 0  # this process, read from /proc/self/smaps_rollup
    assert first["workers"] == 0 and first["workers_pss_bytes"] == 0  # a list has no workers
    if os.path.isdir("/dev/shm"):
        assert 0 <= first["shm_used_bytes"] <= first["shm_total_bytes"]
        assert records["shm_peak_used_bytes"] >= min(s["shm_used_bytes"] for s in samples)
    steps = [s["loaders"]["1"][0] for s in samples]
    assert steps == sorted(steps) and steps[-1] <= 50
    (epoch,) = records["loaders"][0]["epochs"]
    assert 0 <= epoch["start_s"] <= epoch["end_s"]
    assert epoch["workers_pss_max_bytes"] == 0  # sampled while running: zero workers' memory
    assert records["process"]["hostname"] == os.uname().nodename
    assert set(records["process"]) == {"hostname", "argv0", "rank", "local_rank", "world_size", "local_world_size",
                                       "group_rank", "slurm_nodeid", "affinity_cpus"}
    assert records["process"]["affinity_cpus"] == len(os.sched_getaffinity(0))
    smp.stop()
    assert not smp.running


def test_samples_stay_bounded_by_thinning_and_the_period_doubles():
    recorder = hook.Recorder(sample=False)
    items = list(range(10))
    list(recorder.wrap(items, iter(items), hook.clock()))
    smp = sampler.Sampler(recorder, interval=0.5, write_s=None, cap=8, max_busy=1.0)
    for _ in range(8):
        smp.tick()
    assert len(smp.samples) == 4 and smp.base == 1.0  # every 2nd kept, from the first
    for _ in range(4):
        smp.tick()
    assert len(smp.samples) == 4 and smp.base == 2.0 and smp.ticks == 12
    assert smp.period >= smp.base


def test_the_counters_are_sampled_every_period_and_the_memory_on_its_own_budget(monkeypatch):
    # many large workers make a memory read slow (their page tables are walked for Pss): it must
    # not hold the loaders' counters, of which tune's windows are made, to one sample every few s
    now = [100.0]
    monkeypatch.setattr(sampler, "clock", lambda: now[0])
    monkeypatch.setattr(sampler, "cpu_clock", lambda: now[0])  # every second on it spent reading
    recorder = hook.Recorder(sample=False)
    items = list(range(10))
    list(recorder.wrap(items, iter(items), hook.clock()))
    smp = sampler.Sampler(recorder, interval=0.2, write_s=None, max_busy=0.02)
    reads = []

    def slow_memory():
        reads.append(now[0])
        now[0] += 0.05
        return {"main_pss_bytes": len(reads), "workers": 15, "workers_pss_bytes": 15 * len(reads),
                "workers_heap_grown_bytes": 0, "shm_used_bytes": 0, "shm_total_bytes": 1}

    monkeypatch.setattr(smp, "_read_memory", slow_memory)
    for _ in range(50):
        smp.tick()
        assert smp.period == 0.2  # the counters cost nothing on this clock
        now[0] += smp.period
    assert len(smp.samples) == 50 and all(s["loaders"]["1"][0] == 10 for s in smp.samples)
    # a read costs 0.05 s: at 1 % of a core (half of max_busy) the next is 5 s later
    assert [round(b - a, 2) for a, b in zip(reads, reads[1:], strict=False)] == [5.05]
    # between two reads a sample carries the last one
    assert [s["main_pss_bytes"] for s in smp.samples] == [1] * 25 + [2] * 25


def test_workers_memory_is_attributed_to_the_epochs_running_at_the_sample(monkeypatch):
    recorder = hook.Recorder(sample=False)
    items = list(range(4))
    list(recorder.wrap(items, iter(items), hook.clock()))  # finished before any sample
    running = recorder.wrap(items, iter(items), hook.clock())
    next(running)
    smp = sampler.Sampler(recorder, interval=1.0, write_s=None)
    monkeypatch.setattr(smp._children, "workers", lambda: [os.getpid()])  # this process as the "worker"
    smp.tick()
    sample = smp.samples[-1]
    assert sample["workers"] == 1 and sample["workers_pss_bytes"] > 0
    done, live = recorder.loaders[0].epochs
    assert done.workers_pss_max is None  # no sample fell in it
    assert live.workers_pss_max == sample["workers_pss_bytes"]
    # this process as its own "worker": no heap grown beyond itself, read from /proc/<pid>/maps
    assert 0 <= sample["workers_heap_grown_bytes"] <= 1024 * 1024 and live.workers_heap_grown == sample[
        "workers_heap_grown_bytes"]
    cum = dict(zip(sampler.CUMULATIVE, sample["loaders"]["1"], strict=True))  # every counter, summed over epochs
    assert cum["steps"] == 5 and cum["waits"] == 3 and cum["steps_timed"] == 4
    assert cum["wait_s"] == done.wait_s + live.wait_s and cum["step_s"] == done.step_s + live.step_s
    assert cum["cpu_wait_s"] == done.cpu_wait_s + live.cpu_wait_s and cum["workers_cpu_s"] == 0.0
    assert sample["proc_cpu_s"] > 0 and (sample["busy_s"] is None or sample["busy_s"] > 0)


def test_heap_a_worker_grew_is_read_from_its_maps_against_its_first_sight():
    assert sampler.heap_bytes() > 0 and sampler.heap_bytes(2**22 + 12345) is None
    recorder = hook.Recorder(sample=False)
    smp = sampler.Sampler(recorder, interval=1.0, write_s=None)
    with child_with_growing_heap() as (pid, grow):
        assert smp._heap_grown([pid]) is not None  # first sight
        grown_by_child = grow()
        grown = smp._heap_grown([pid])
    assert grown_by_child >= 128 * 1024 * 1024 and grown >= grown_by_child - 16 * 1024 * 1024


def test_the_heap_is_found_when_proc_hands_out_the_maps_file_in_small_pieces(monkeypatch):
    whole = sampler.heap_bytes()
    real_read = os.read
    monkeypatch.setattr(sampler.os, "read", lambda fd, n: real_read(fd, min(n, 97)))
    assert sampler.heap_bytes() == whole > 0


def test_a_gone_child_is_not_a_worker():
    assert sampler.pss_bytes(2**22 + 12345) is None  # no such pid: None, no exception
    children = sampler.Children()
    proc = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        assert proc.pid in wait_for(children.workers, "the child listed")
    finally:
        proc.communicate(b"", timeout=TIMEOUT_S)
    assert proc.pid not in children.workers()  # reaped: gone from /proc


@pytest.mark.parametrize("context", ["fork", "forkserver"])
@pytest.mark.usefixtures("stop_multiprocessing_helpers")
def test_dataloader_workers_are_counted_and_multiprocessing_helpers_are_not(context):
    tud = pytest.importorskip("torch.utils.data")
    # forkserver: the workers are the server's children; the resource tracker is ours, not a worker
    loader = tud.DataLoader(list(range(8)), num_workers=2, multiprocessing_context=context,
                            persistent_workers=True)
    it = iter(loader)
    try:
        next(it)
        expected = {w.pid for w in it._workers}
        found = set(sampler.Children().workers())
        assert expected <= found  # other tests may have left children of this process running
        helpers = {pid for pid, cmdline in _children_of(os.getpid()).items()
                   if b"resource_tracker" in cmdline or b"forkserver" in cmdline}
        assert not helpers & found
        assert helpers or context == "fork"  # forkserver: the server and the resource tracker
    finally:
        it._shutdown_workers()


def _children_of(parent: int) -> dict[int, bytes]:
    """pid -> command line of ``parent``'s children (those that exit meanwhile left out)."""
    out = {}
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{name}/stat").read_bytes()
            if int(stat[stat.rindex(b")") + 2:].split()[1]) == parent:
                out[int(name)] = Path(f"/proc/{name}/cmdline").read_bytes()
        except OSError:
            continue
    return out


def test_python_api_sampler_stops_when_the_loop_ends():
    watched = watch(list(range(20)))
    for _ in watched:
        pass
    smp = watched._recorder.sampler
    assert smp is not None and not smp.running and not smp._thread.is_alive()
    records = watched.records()
    assert records["samples"] and records["loaders"][0]["epochs"][0]["end_s"] is not None
    assert records["gpu"]["timing"] == gpu_timing_here()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_copy_that_iterates_nothing_neither_samples_nor_writes(tmp_path):
    # a DataLoader worker is such a copy: it loads samples, it never iterates a DataLoader
    recorder = hook.Recorder(str(tmp_path), interval=0.05, write_s=0.05)
    items = list(range(3))
    list(recorder.wrap(items, iter(items), hook.clock()))
    assert recorder.sampler.running
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the parent's epoch ends in its copy, then it "exits"
        code = 1
        try:
            recorder.epoch_ended(recorder.loaders[0].epochs[0])
            recorder.write()
            recorder.at_exit()
            code = 0
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        assert fh.read() == b"\x00"
    os.waitpid(pid, 0)
    assert not (tmp_path / f"records-{pid}.json").exists()
    wait_for((tmp_path / f"records-{os.getpid()}.json").exists, "the parent's periodic write")
    recorder.sampler.stop()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork only")
def test_a_forked_process_iterating_a_loader_of_its_own_writes_its_own_records(tmp_path):
    # a multiprocessing.Process under fork or forkserver: before, its loader was never recorded
    recorder = hook.Recorder(str(tmp_path), interval=0.05, write_s=0.05)
    parents = list(range(3))
    list(recorder.wrap(parents, iter(parents), hook.clock()))
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            own = list(range(5))
            list(recorder.wrap(own, iter(own), hook.clock()))
            recorder.at_exit()
            code = 0 if not recorder.sampler.running else 2
        finally:
            os.write(write, bytes([code]))
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as fh:
        assert fh.read() == b"\x00"
    os.waitpid(pid, 0)
    records = json.loads((tmp_path / f"records-{pid}.json").read_text())
    assert records["pid"] == pid
    # its own loader alone, not a copy of the parent's
    assert [(r["loader"], [e["steps"] for e in r["epochs"]]) for r in records["loaders"]] == [(1, [5])]
    recorder.sampler.stop()


# -- GPU idle with (fake) CUDA events ----------------------------------------------------------

class FakeStream:
    """Hands each recorded event its completion time (ms) and whether it completed, in order."""

    def __init__(self, script):
        self.script = list(script)

    def record(self, event):
        event.t, event.done = self.script.pop(0)


class FakeEvent:
    made = 0

    def __init__(self):
        FakeEvent.made += 1
        self.t, self.done = None, False

    def record(self, stream):
        stream.record(self)

    def query(self):
        return self.done

    def elapsed_time(self, end):
        assert self.done and end.done, "elapsed_time on an event not completed"
        return end.t - self.t


def fake_gpu(script):
    stream = FakeStream(script)
    return gpuidle.GpuIdle(FakeEvent, lambda: stream), stream


def run_epoch(recorder, n):
    items = list(range(n))
    return list(recorder.wrap(items, iter(items), hook.clock()))


def test_gpu_idle_is_summed_over_the_timed_waits():
    recorder = hook.Recorder(sample=False)
    # 3 waits after the first batch: A/B at 10/15, 20/20, 30/33.5 ms -> 5 + 0 + 3.5 ms idle
    recorder.gpu, stream = fake_gpu([(10, True), (15, True), (20, True), (20, True), (30, True), (33.5, True),
                                     (40, False)])  # the last: A of the next() that ends the epoch
    run_epoch(recorder, 4)
    assert not stream.script
    records = recorder.to_dict()
    assert records["gpu"] == {"timing": "cuda-events", "reason": None}
    (epoch,) = records["loaders"][0]["epochs"]
    assert epoch["gpu_waits_timed"] == 3 and epoch["gpu_waits_unresolved"] == 0
    assert epoch["gpu_idle_s"] == pytest.approx(0.0085)


def test_unresolved_events_are_left_out_and_counted():
    recorder = hook.Recorder(sample=False)
    recorder.gpu, _ = fake_gpu([(10, True), (12, True), (20, True), (29, False),  # the 2nd B still queued
                                (30, False)])
    run_epoch(recorder, 3)
    (epoch,) = recorder.to_dict()["loaders"][0]["epochs"]
    assert epoch["gpu_waits_timed"] == 1 and epoch["gpu_waits_unresolved"] == 1
    assert epoch["gpu_idle_s"] == pytest.approx(0.002)
    a, b, _ = recorder.gpu._pending[0]
    b.done = True  # the GPU got there: the next resolution counts it for that epoch
    assert recorder.gpu.resolve() == 0
    assert recorder.loaders[0].epochs[0].gpu_idle_s == pytest.approx(0.011)


def test_events_are_pooled_and_the_first_batch_and_the_end_are_not_timed():
    n = 10 * gpuidle.RESOLVE_EVERY
    gpu, stream = fake_gpu([(float(i), True) for i in range(2 * n + 1)])
    recorder = hook.Recorder(sample=False)
    recorder.gpu = gpu
    FakeEvent.made = 0
    run_epoch(recorder, n + 1)
    epoch = recorder.loaders[0].epochs[0]
    assert epoch.gpu_waits_timed == n and epoch.gpu_pending == 0
    assert gpu.created == FakeEvent.made <= 2 * gpuidle.RESOLVE_EVERY + 1  # reused, not one pair a wait
    assert not stream.script  # the StopIteration's A was recorded too, then returned to the pool


def test_a_gpu_far_behind_keeps_a_bounded_number_of_events():
    cap = gpuidle.PENDING_CAP
    gpu, stream = fake_gpu([(float(i), False) for i in range(2 * cap)])  # nothing ever completes
    recorder = hook.Recorder(sample=False)
    recorder.gpu = gpu
    run_epoch(recorder, cap + 20)  # the waits beyond the cap (and the end) go untimed
    epoch = recorder.loaders[0].epochs[0]
    assert not stream.script and gpu.created == 2 * cap
    assert epoch.gpu_pending == cap and epoch.gpu_waits_timed == 0 and epoch.gpu_idle_s == 0.0
    for a, b, _ in gpu._pending:
        a.done = b.done = True
    assert gpu.resolve() == 0 and epoch.gpu_waits_timed == cap and epoch.gpu_pending == 0


def test_a_failing_event_leaves_the_wait_untimed_and_the_loop_running():
    def broken():
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    recorder = hook.Recorder(sample=False)
    recorder.gpu = gpuidle.GpuIdle(broken, lambda: None)
    assert run_epoch(recorder, 5) == list(range(5))
    epoch = recorder.loaders[0].epochs[0]
    assert epoch.gpu_idle_s == 0.0 and epoch.gpu_waits_timed == 0 and epoch.gpu_pending == 0


def test_without_cuda_the_timing_is_unavailable_and_cuda_is_never_initialised(monkeypatch):
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert gpuidle.from_torch() == (None, "torch is not imported")

    def never(**kwargs):
        raise AssertionError("an event was made without CUDA initialised")

    cuda = types.SimpleNamespace(is_initialized=lambda: False, Event=never, current_stream=never)
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    recorder = hook.Recorder(sample=False)
    items = list(range(5))  # one loader, two epochs
    list(recorder.wrap(items, iter(items), hook.clock()))
    gpu = recorder.to_dict()["gpu"]
    assert gpu["timing"] == "unavailable" and "not initialised" in gpu["reason"]
    assert recorder.to_dict()["loaders"][0]["epochs"][0]["gpu_idle_s"] is None

    # initialised by the program later: the next epoch is timed
    stream = FakeStream([(0, True), (1, True), (2, True), (3, True)])
    cuda.is_initialized = lambda: True
    cuda.Event = lambda enable_timing: FakeEvent()
    cuda.current_stream = lambda: stream
    list(recorder.wrap(items, iter(items[:2]), hook.clock()))
    assert recorder.to_dict()["gpu"] == {"timing": "cuda-events", "reason": None}
    assert recorder.loaders[0].epochs[1].gpu_idle_s == pytest.approx(0.001)


def test_real_torch_without_cuda_stays_uninitialised():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_initialized():
        pytest.skip("CUDA already initialised in this process")
    recorder = hook.Recorder(sample=False)
    run_epoch(recorder, 3)
    assert recorder.gpu is None and not torch.cuda.is_initialized()


# -- real processes under LOADERDOC_WATCH_DIR ------------------------------------------------------

WORKERS_LOOP = """\
import json, os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

class Holding(Dataset):
    held = []
    def __len__(self):
        return 8
    def __getitem__(self, i):
        if len(Holding.held) < 8:  # 8 x 4 MiB written, held by each worker
            Holding.held.append(bytearray(b"x") * (4 << 20))
        return i

def seen():
    # a sample of both workers, and one that fell inside an epoch (a sample between two epochs of
    # these 20 ms epochs belongs to none): the records hold what the test checks
    try:
        with open(os.path.join(os.environ["LOADERDOC_WATCH_DIR"], f"records-{os.getpid()}.json")) as fh:
            records = json.load(fh)
    except (OSError, ValueError):
        return False
    epochs = records["loaders"][0]["epochs"] if records["loaders"] else []
    return (any(s["workers"] == 2 and s["workers_pss_bytes"] for s in records["samples"])
            and any(e["workers_pss_max_bytes"] for e in epochs))

loader = DataLoader(Holding(), batch_size=2, num_workers=2, persistent_workers=True)
deadline = time.monotonic() + 60
while not seen() and time.monotonic() < deadline:  # epochs until the sampler saw both workers
    for batch in loader:
        time.sleep(0.005)
print("seen" if seen() else "not seen")
"""


def hooked_env(directory: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SITEDIR, env.get("PYTHONPATH")) if p)
    env.update({"LOADERDOC_WATCH_DIR": str(directory), "LOADERDOC_WATCH_INTERVAL": "0.05",
                "LOADERDOC_WATCH_WRITE_S": "0.05", "LOADERDOC_WATCH_MAX_BUSY": "1"}, **extra)
    return env


def records_files(directory: Path) -> dict[int, dict]:
    return {int(p.stem.split("-")[1]): json.loads(p.read_text()) for p in directory.glob("records-*.json")}


def test_two_workers_memory_and_shm_are_sampled_in_a_real_process(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(WORKERS_LOOP)
    out = tmp_path / "records"
    out.mkdir()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=hooked_env(out), timeout=120)
    assert proc.returncode == 0 and proc.stdout == "seen\n", proc.stderr
    ((pid, records),) = records_files(out).items()  # the forked workers wrote nothing
    assert records["pid"] == pid and records["schema"] == hook.RECORDS_SCHEMA
    both = [s for s in records["samples"] if s["workers"] == 2]
    assert both and all(s["workers_pss_bytes"] > 0 for s in both)
    assert all(s["main_pss_bytes"] > 0 for s in records["samples"])
    if os.path.isdir("/dev/shm"):
        assert all(isinstance(s["shm_used_bytes"], int) for s in records["samples"])
        assert records["shm_peak_used_bytes"] == max(s["shm_used_bytes"] for s in records["samples"])
    epochs = records["loaders"][0]["epochs"]
    assert max(e["workers_pss_max_bytes"] or 0 for e in epochs) > 0
    assert all(e["end_s"] >= e["start_s"] for e in epochs if e["finished"])
    assert records["gpu"]["timing"] == gpu_timing_here()
    assert records["process"]["argv0"] == str(script)
    assert not list(out.glob(".records-*"))  # no temporary file left behind


TWO_PROCESSES = """\
import os, subprocess, sys
import torch
from torch.utils.data import DataLoader
for _ in DataLoader(list(range(8)), batch_size=2):
    pass
if len(sys.argv) == 1:  # the parent runs a second process, a rank, under the same directory
    env = dict(os.environ, RANK="1", LOCAL_RANK="1", WORLD_SIZE="2")
    subprocess.run([sys.executable, __file__, "child"], env=env, check=True)
"""


def test_two_processes_under_one_directory_write_two_files(tmp_path):
    script = tmp_path / "two.py"
    script.write_text(TWO_PROCESSES)
    out = tmp_path / "records"
    out.mkdir()
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          env=hooked_env(out), timeout=120)
    assert proc.returncode == 0, proc.stderr
    files = records_files(out)
    assert len(files) == 2 and all(r["pid"] == pid for pid, r in files.items())
    ranks = sorted((r["process"]["rank"], r["process"]["world_size"]) for r in files.values()
                   if r["process"]["rank"] is not None)
    assert ranks == [(1, 2)]
    assert all(r["loaders"][0]["epochs"][0]["steps"] == 4 for r in files.values())


def test_an_epoch_left_before_its_end_is_closed_and_written_when_the_loaders_next_begins(tmp_path):
    """Lightning fetches len(loader) batches and never asks for StopIteration: the next iter() of
    the same loader ends that epoch (at its last batch) and writes the records, as an end would."""
    recorder = hook.Recorder(str(tmp_path), sample=False)
    items = list(range(10))
    first = recorder.wrap(items, iter(items), hook.clock())
    for _ in range(3):
        next(first)
    assert not (tmp_path / f"records-{os.getpid()}.json").exists()
    second = recorder.wrap(items, iter(items), hook.clock())
    written = json.loads((tmp_path / f"records-{os.getpid()}.json").read_text())
    (epoch,) = written["loaders"][0]["epochs"]  # written at the boundary, before the new one
    assert epoch["steps"] == 3 and epoch["finished"] is False and epoch["end_s"] is not None
    list(second)
    again = recorder.to_dict()["loaders"][0]["epochs"]
    assert [e["finished"] for e in again] == [False, True] and again[0]["end_s"] <= again[1]["start_s"]


def _slow_exit(worker_id: int) -> None:
    """worker_init_fn: the worker takes 0.3 s to exit (its finalizer runs as multiprocessing ends it)."""
    import multiprocessing.util

    multiprocessing.util.Finalize(None, time.sleep, args=(0.3,), exitpriority=0)


@pytest.mark.parametrize("persistent", [False, True])
def test_an_epoch_records_the_iter_that_started_its_workers_and_the_stop_that_shut_them(persistent):
    """What persistent workers save, timed where it happens (issue 47): torch shuts non-persistent
    workers down in the call that raises StopIteration, joining each (here each takes 0.3 s to
    exit); persistent ones stay, and their later iter() only hands out the new epoch's indices."""
    tud = pytest.importorskip("torch.utils.data")
    loader = tud.DataLoader(list(range(8)), batch_size=2, num_workers=2, worker_init_fn=_slow_exit,
                            persistent_workers=persistent)
    watched = watch(loader)
    for _ in range(2):
        for _ in watched:
            pass
    epochs = watched.records()["loaders"][0]["epochs"]
    assert len(epochs) == 2 and all(e["iter_s"] >= 0 and e["iter_s"] < e["first_batch_s"] for e in epochs)
    if persistent:
        assert all(e["stop_s"] < 0.3 for e in epochs)
        loader._iterator._shutdown_workers()
    else:
        assert all(e["stop_s"] >= 0.3 for e in epochs)
