"""The watch report from records of the loaderdoc.watch-records/2 shape: every finding fires on its
evidence and stays silent on healthy evidence, several processes merge, timelines are deltas, the
text fits 80 columns, and SIGUSR1 to a real launcher reports mid-run without reaching the child.

Records here are written out by hand as the hook would write them, so these tests do not depend
on the hook's timing (tests/test_watch.py runs the hook end to end)."""

from __future__ import annotations

import json
import os
import signal
import socket
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import pythonpath

from loaderdoc.base.units import MiB
from loaderdoc.system.fixtures import load_machine
from loaderdoc.text.watch import render_summary
from loaderdoc.watching import hook
from loaderdoc.watching.build import HEALTHY_RULE, STARVED_RULE, build_report, watch_report
from loaderdoc.watching.records import RecordsReader

HOST = socket.gethostname()


def epoch(n: int, *, batches: int = 100, wait_s: float = 0.1, step_s: float = 5.0, first_s: float = 0.5,
          start_s: float | None = None, pss_mib: float | None = None, gpu_idle_s: float | None = None) -> dict:
    start = 10.0 * n if start_s is None else start_s
    return {"epoch": n, "steps": batches, "waits": batches - 1, "wait_s": wait_s, "steps_timed": batches,
            "step_s": step_s, "first_batch_s": first_s, "wall_s": first_s + wait_s + step_s, "finished": True,
            "wait_p50_s": wait_s / batches, "wait_p95_s": 2 * wait_s / batches, "wait_sampled": batches - 1,
            "start_s": start, "end_s": start + first_s + wait_s + step_s,
            "workers_pss_max_bytes": int(pss_mib * MiB) if pss_mib is not None else None,
            "gpu_idle_s": gpu_idle_s, "gpu_waits_timed": batches - 1 if gpu_idle_s is not None else 0}


def loader(number: int = 1, *, workers: int = 4, persistent: bool = True, epochs: list[dict] | None = None) -> dict:
    return {"loader": number, "class": "DataLoader",
            "settings": {"num_workers": workers, "batch_size": 64, "prefetch_factor": 2 if workers else None,
                         "persistent_workers": persistent if workers else False, "pin_memory": False,
                         "drop_last": False},
            "epochs": epochs if epochs is not None else [epoch(0)]}


def records(loaders: list[dict], *, pid: int = 4242, rank: int | None = None, samples: list[dict] | None = None,
            shm: tuple[float, float] | None = None, gpu: str = "unavailable") -> dict:
    """One process's records file (loaderdoc.watch-records/2 shape); ``shm`` = (peak, size) in MiB."""
    samples = samples or []
    if shm is not None and not samples:
        samples = [{"t_s": 1.0, "main_pss_bytes": 500 * MiB, "workers": 4, "workers_pss_bytes": 800 * MiB,
                    "shm_used_bytes": int(shm[0] * MiB), "shm_total_bytes": int(shm[1] * MiB), "loaders": {}}]
    return {"schema": hook.RECORDS_SCHEMA, "pid": pid, "written_at": 0.0,
            "process": {"hostname": HOST, "argv0": "train.py", "rank": rank, "local_rank": rank,
                        "world_size": None if rank is None else 2, "group_rank": None, "slurm_nodeid": None},
            "interval_s": 1.0, "samples": samples,
            "shm_peak_used_bytes": int(shm[0] * MiB) if shm else None,
            "gpu": {"timing": gpu, "reason": None if gpu == "cuda-events" else "CUDA not initialised"},
            "loaders": loaders}


def report_of(recs, machine: str = "h100x8-node") -> dict:
    return build_report(recs, command=["python", "train.py"], exit_code=0, facts=load_machine(machine))


def ids(report: dict) -> list[str]:
    return [f["rule_id"] for f in report["findings"]]


def finding(report: dict, rule_id: str) -> dict:
    (f,) = [f for f in report["findings"] if f["rule_id"] == rule_id]
    return f


# ---- data wait --------------------------------------------------------------------------------
def test_starved_loader_is_critical_and_names_a_worker_count():
    # 0 workers: 99 waits of 20 ms against 100 steps of 10 ms -> 66 % waiting
    rep = report_of(records([loader(workers=0, epochs=[epoch(0, wait_s=1.98, step_s=1.0)])]), "ci-2core")
    f = finding(rep, STARVED_RULE)
    assert f["severity"] == "critical" and rep["status"] == "critical"
    assert f["settings_change"] == {"num_workers": 2}  # a 20 ms load against a 10 ms step
    assert "num_workers from 0 to 2" in f["fix"] and "99 batches" in f["evidence"][0]
    assert "loaderdoc.policy.NOT_STARVED_PCT" in f["threshold"]


def test_mildly_starved_loader_is_a_warning():
    rep = report_of(records([loader(workers=2, epochs=[epoch(0, wait_s=1.0, step_s=5.0)])]))
    assert finding(rep, STARVED_RULE)["severity"] == "warning"


def test_healthy_loader_says_so_and_warns_of_nothing():
    rep = report_of(records([loader(epochs=[epoch(0), epoch(1)])]))
    assert ids(rep) == [HEALTHY_RULE] and rep["status"] == "ok"
    assert "keeps up" in finding(rep, HEALTHY_RULE)["symptom"]


# ---- slow epoch start ---------------------------------------------------------------------------
def restarting(first_s: float, persistent: bool = False) -> dict:
    return records([loader(persistent=persistent,
                           epochs=[epoch(n, first_s=first_s, wait_s=0.1, step_s=8.0) for n in range(3)])])


def test_workers_restarting_every_epoch_suggest_persistent_workers():
    rep = report_of(restarting(2.0))
    f = finding(rep, "watch-slow-epoch-start")
    assert f["severity"] == "warning" and f["settings_change"] == {"persistent_workers": True}
    assert "2.00 s" in f["evidence"][0]  # the later epochs' measured first batches


# benchmarks/watch_loops/epoch_restarts.py watched on the 2-CPU dev VM (2026-11-28), and the same
# loop's seconds an epoch after the first, without and with persistent workers, two runs each
RESTART_RUNS = {
    # 16 workers sleeping 0.5 s a sample, 23 batches an epoch, a 3 GiB training process: each epoch's
    # iter(loader) forks 16 copies of it (0.75 s) and its end joins them (0.3 s)
    "epoch-restarts-16-forks.json": ((5.238, 5.232), (4.170, 4.167)),
    # 8 workers burning 0.3 CPU-s each in worker_init_fn on 2 CPUs
    "epoch-restarts-8-setups.json": ((2.374, 2.378), (1.120, 1.119)),
}


def _recorded_restarts(name: str):
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.watching.build import loader_settings
    from loaderdoc.watching.report_file import load_watch_report

    report = load_watch_report(Path(__file__).parent / "fixtures" / "watch" / name)
    (loader,) = report.loaders
    fired = evaluate(load_machine("ci-2core"), loader_settings(loader.settings), watch=loader)
    (f,) = [f for f in fired if f.rule_id == "watch-slow-epoch-start"]
    return loader, f


@pytest.mark.parametrize("name", sorted(RESTART_RUNS))
def test_the_expected_gain_of_persistent_workers_holds_on_real_runs(name):
    """Issue 47: watch priced a restart as the first batch less one batch's load, and missed the
    forks in iter(loader) and the shutdown at the epoch's end (its estimate for the first run was
    1.35x). Now within 6 % of the measured gain on both."""
    loader, f = _recorded_restarts(name)
    off, on = RESTART_RUNS[name]
    measured = statistics.fmean(off) / statistics.fmean(on)
    assert abs(f.expected_gain - measured) / measured < 0.06, (f.expected_gain, measured)


def test_the_forks_and_the_shutdown_are_evidence():
    loader, f = _recorded_restarts("epoch-restarts-16-forks.json")
    later = loader.epochs[1:]
    assert all(e.iter_s > 0.3 and e.stop_s > 0.1 for e in later)  # sixteen forks of 3 GiB, sixteen joins
    evidence = " ".join(f.evidence)
    assert "to start the workers" in evidence and "to shut them down" in evidence


def test_watch_and_tune_price_one_runs_restarts_alike():
    """Issue 47: watch said 9 % and 1.10x where tune said 57 % for the same run. Both now price each
    epoch start with policy.restart_cost_s: the same epochs (made up) as watch's records and as
    tune's window give one share."""
    from loaderdoc.tuning.window import Window

    n, batches, first, wait, step, it, stop, setup = 16, 23, 2.74, 1.76, 0.47, 0.82, 0.29, 0.05
    later = [dict(epoch(e, batches=batches, first_s=first, wait_s=wait, step_s=step), iter_s=it, stop_s=stop,
                  workers_cpu_first_s=setup, workers_cpu_s=batches * 0.002) for e in range(1, 6)]
    rep = report_of(records([loader(workers=n, persistent=False, epochs=[dict(later[0], epoch=0), *later])]),
                    "ci-2core")
    watch_gain = finding(rep, "watch-slow-epoch-start")["expected_gain"]
    k = len(later)
    window = Window(pid=1, rank=None, seconds=k * (first + wait + step + stop), wall_s=k * (first + wait + step + stop),
                    steps=k * batches, wait_s=k * wait, step_s=k * step, waits=k * (batches - 1),
                    steps_timed=k * batches, cpu_wait_s=0.0, cpu_step_s=0.0, cpu_wait_wall_s=0.0, cpu_step_wall_s=0.0,
                    cpu_wait_loop_s=0.0, cpu_step_loop_s=0.0, workers_cpu_s=k * batches * 0.002, workers_runq_s=0.0,
                    first_batch_s=k * first, proc_cpu_s=None, busy_s=None, workers_pss_bytes=None,
                    shm_peak_bytes=None, settled=True, spread=0.0, iter_s=k * it, stop_s=k * stop, starts=k,
                    workers_cpu_first_s=k * setup)
    share = window.restart_share(n)
    assert 1 / (1 - share) == pytest.approx(watch_gain, rel=0.02)


@pytest.mark.parametrize("first_s, persistent", [(2.0, True), (0.12, False)])
def test_slow_epoch_start_silent_with_persistent_workers_or_a_cheap_start(first_s, persistent):
    # a 0.12 s start against 8 s epochs is ~1 %, under twice the policy's 1 %
    assert "watch-slow-epoch-start" not in ids(report_of(restarting(first_s, persistent)))


# ---- worker memory ------------------------------------------------------------------------------
def growing(pss: list[float]) -> dict:
    return records([loader(epochs=[epoch(n, pss_mib=v) for n, v in enumerate(pss)])])


def test_worker_memory_growing_epoch_after_epoch_is_copy_on_read():
    f = finding(report_of(growing([600, 700, 800, 900])), "watch-worker-memory-growing")
    assert "600 MiB" in f["symptom"] and "900 MiB" in f["symptom"]
    assert "numpy" in f["fix"] and "Copy-on-read" in f["cause"]


def test_worker_memory_the_workers_malloc_heap_holds_is_not_called_copy_on_read():
    # large samples at glibc's defaults: the heap the workers grew after the fork holds most of it
    run = growing([600, 700, 800, 900])
    for n, e in enumerate(run["loaders"][0]["epochs"]):
        e["workers_heap_grown_bytes"] = int((400 + 100 * n) * MiB)
    f = finding(report_of(run), "watch-worker-memory-growing")
    assert "malloc heaps ([heap] in /proc/<pid>/maps) grew by 300 MiB, to 700 MiB" in " ".join(f["evidence"])
    assert "mmap threshold" in f["cause"] and "Copy-on-read" not in f["cause"]
    assert "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072" in f["fix"]
    # a little heap beside growing pages is still copy-on-read
    for e in run["loaders"][0]["epochs"]:
        e["workers_heap_grown_bytes"] = 50 * MiB
    assert "Copy-on-read" in finding(report_of(run), "watch-worker-memory-growing")["cause"]


FIXTURES = Path(__file__).parent / "fixtures" / "watch"


def _judged_again(name: str) -> list:
    """A recorded `loaderdoc watch --report` judged by today's rules (its loaders, on no machine)."""
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.system.facts import MachineFacts
    from loaderdoc.watching.report_file import load_watch_report

    report = load_watch_report(FIXTURES / name)
    return [f for loader in report.loaders for f in evaluate(MachineFacts(), None, watch=loader)]


def test_a_recorded_run_on_large_samples_names_malloc_and_the_fixed_threshold_silences_it():
    # real runs (this project's 2-CPU VM): 3 persistent workers, 8 MiB slices, batch 4, 5 epochs,
    # under `loaderdoc watch --report`, at glibc's defaults and with GLIBC_TUNABLES set
    grown = [f for f in _judged_again("large-heap-growth.json") if f.rule_id == "watch-worker-memory-growing"]
    assert len(grown) == 1 and "mmap threshold" in grown[0].cause
    assert "malloc heaps ([heap] in /proc/<pid>/maps) grew by" in " ".join(grown[0].evidence)
    assert "watch-worker-memory-growing" not in {f.rule_id for f in _judged_again("large-mmap-threshold.json")}


@pytest.mark.parametrize("pss", [
    [600, 610, 605, 612],  # flat
    [600, 900],  # two epochs: warming up, not a trend
    [600, 900, 800, 950],  # fell back once
    [100, 120, 140, 150],  # 1.5x, but only 50 MiB
])
def test_worker_memory_silent_on_flat_short_or_small_growth(pss):
    assert "watch-worker-memory-growing" not in ids(report_of(growing(pss)))


# ---- /dev/shm -------------------------------------------------------------------------------------
@pytest.mark.parametrize("peak, severity", [(52, "warning"), (62, "critical"), (30, None)])
def test_shm_nearly_full(peak, severity):
    rep = report_of(records([loader()], shm=(peak, 64)), "docker-64m-shm")
    found = [f for f in rep["findings"] if f["rule_id"] == "watch-shm-nearly-full"]
    assert [f["severity"] for f in found] == ([severity] if severity else [])
    if severity:
        assert f"{peak} MiB of 64 MiB" in found[0]["evidence"][0]
    # the run measured /dev/shm: the facts-only guess about a 64 MiB /dev/shm stays silent
    assert "shm-too-small" not in ids(rep)


# ---- several processes -------------------------------------------------------------------------
def test_processes_merge_with_pid_and_rank_and_machine_findings_once():
    ranks = [records([loader(workers=8)], pid=100 + r, rank=r) for r in (1, 0)]
    rep = report_of(ranks, "ci-2core")
    assert [(p["pid"], p["rank"], p["hostname"]) for p in rep["processes"]] == [(101, 1, HOST), (100, 0, HOST)]
    assert [(e["pid"], e["rank"]) for e in rep["loaders"]] == [(101, 1), (100, 0)]
    healthy = [f for f in rep["findings"] if f["rule_id"] == HEALTHY_RULE]
    assert sorted("rank 0" in f["symptom"] for f in healthy) == [False, True]  # one per loader, named
    # 8 workers per rank, two ranks on 2 CPUs: the settings rule speaks once, per rank's CPU share
    (cpu,) = [f for f in rep["findings"] if f["rule_id"] == "cpu-oversubscribed"]
    assert any("2 ranks" in ev or "per rank" in ev for ev in cpu["evidence"]), cpu["evidence"]
    assert rep["steps"] == 200 and len(rep["memory"]) == 2


def test_ranks_on_one_node_share_its_shm_peak_in_one_finding():
    ranks = [records([loader()], pid=100, rank=0, shm=(30, 64)), records([loader()], pid=101, rank=1, shm=(60, 64))]
    rep = report_of(ranks, "docker-64m-shm")
    (shm,) = [f for f in rep["findings"] if f["rule_id"] == "watch-shm-nearly-full"]
    assert "60 MiB of 64 MiB" in shm["evidence"][0] and "2 ranks" in shm["evidence"][1]
    assert [m["shm_peak_used_bytes"] for m in rep["memory"]] == [30 * MiB, 60 * MiB]  # each as it saw it


def test_reader_takes_every_process_file_and_warns_once_about_others(tmp_path, capsys):
    for pid in (7, 5):
        (tmp_path / f"records-{pid}.json").write_text(json.dumps(records([loader()], pid=pid)))
    (tmp_path / "records-9.json").write_text(json.dumps({"schema": "loaderdoc.watch-records/0"}))
    (tmp_path / "records-11.json").write_text("{not json")
    (tmp_path / "other.json").write_text("{}")
    reader = RecordsReader(tmp_path)
    assert [r["pid"] for r in reader.read()] == [5, 7]
    assert [r["pid"] for r in reader.read()] == [5, 7]
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2 and any("records-9.json is loaderdoc.watch-records/0" in line for line in err)


# ---- timeline, memory, GPU ---------------------------------------------------------------------------
def test_timeline_is_per_interval_deltas_and_memory_and_gpu_are_reported():
    samples = [
        {"t_s": 1.0, "main_pss_bytes": 1, "workers": 0, "workers_pss_bytes": None, "shm_used_bytes": 10,
         "shm_total_bytes": 100, "loaders": {}},
        {"t_s": 2.0, "main_pss_bytes": 2, "workers": 4, "workers_pss_bytes": 40, "shm_used_bytes": 30,
         "shm_total_bytes": 100, "loaders": {"1": [10, 0.5, 0.25]}},
        {"t_s": 3.0, "main_pss_bytes": 3, "workers": 4, "workers_pss_bytes": 50, "shm_used_bytes": 20,
         "shm_total_bytes": 100, "loaders": {"1": [25, 0.75, 1.0], "2": [3, 0.1, 0.1]}},
    ]
    recs = records([loader(epochs=[epoch(0, pss_mib=300, gpu_idle_s=0.05), epoch(1, pss_mib=320, gpu_idle_s=0.02)]),
                    loader(2)], samples=samples, gpu="cuda-events")
    rep = report_of(recs)
    first, second = rep["loaders"]
    assert first["timeline"] == [{"t_s": 2.0, "steps": 10, "wait_s": 0.5, "step_s": 0.25},
                                 {"t_s": 3.0, "steps": 15, "wait_s": 0.25, "step_s": 0.75}]
    assert second["timeline"] == [{"t_s": 3.0, "steps": 3, "wait_s": 0.1, "step_s": 0.1}]
    t = first["totals"]
    assert t["workers_pss_max_bytes"] == 320 * MiB
    assert t["gpu_idle_s"] == pytest.approx(0.07) and t["gpu_idle_share"] == pytest.approx(0.07 / 10.2)
    assert second["totals"]["gpu_idle_s"] is None and second["totals"]["gpu_idle_share"] is None
    (mem,) = rep["memory"]
    assert [s["workers_pss_bytes"] for s in mem["samples"]] == [None, 40, 50]
    assert mem["shm_total_bytes"] == 100 and "loaders" not in mem["samples"][0]
    assert rep["gpu"]["timing"] == "cuda-events"


# ---- the text ------------------------------------------------------------------------------------
def test_summary_fits_80_columns_and_shows_memory_shm_gpu_and_findings():
    recs = records([loader(persistent=False, epochs=[epoch(n, first_s=2.0, wait_s=0.1, step_s=8.0,
                                                           pss_mib=600 + 150 * n, gpu_idle_s=0.5)
                                                     for n in range(4)])], shm=(58, 64), gpu="cuda-events")
    rep = watch_report(recs, command=["python", "-m", "a.very.long.package.train", "--config", "x" * 60],
                       exit_code=0, facts=load_machine("docker-64m-shm"))
    text = render_summary(rep)
    assert all(len(line) <= 80 for line in text.splitlines()), text
    flat = " ".join(text.split())
    assert "workers' memory peak 1.0 GiB" in flat and "/dev/shm peak 58 MiB of 64 MiB" in flat
    assert "GPU idle while waiting 2.0 s" in flat
    for rule_id in ("watch-slow-epoch-start", "watch-worker-memory-growing", "watch-shm-nearly-full"):
        assert rule_id in text


# ---- SIGUSR1 to a real launcher ------------------------------------------------------------------
CHILD = """\
import json, os, sys
print("started", flush=True)
sys.stdin.readline()  # the test looks once before any records exist
records = {records!r}
records["pid"] = os.getpid()
path = os.path.join(os.environ["LOADERDOC_WATCH_DIR"], f"records-{{os.getpid()}}.json")
with open(path + ".tmp", "w") as fh:
    json.dump(records, fh)
os.replace(path + ".tmp", path)
print("ready", flush=True)
sys.stdin.readline()  # runs until the test says go: the launcher reports meanwhile
print("done", flush=True)
"""


def test_sigusr1_reports_findings_so_far_and_the_child_runs_on(tmp_path):
    starved = records([loader(workers=0, epochs=[epoch(0, wait_s=1.98, step_s=1.0)])])
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(records=starved), encoding="utf-8")
    target = tmp_path / "run.json"
    env = dict(os.environ, PYTHONPATH=pythonpath())
    proc = subprocess.Popen([sys.executable, "-m", "loaderdoc", "watch", "--report", str(target), "--",
                             sys.executable, str(script)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    try:
        assert proc.stdout.readline() == "started\n"
        os.kill(proc.pid, signal.SIGUSR1)  # the launcher alone, not its process group
        assert proc.stderr.readline().endswith("(still running): no torch DataLoader iterated yet\n")
        assert json.loads(target.read_text())["loaders"] == []
        proc.stdin.write("next\n")
        proc.stdin.flush()
        assert proc.stdout.readline() == "ready\n"
        os.kill(proc.pid, signal.SIGUSR1)
        so_far = []
        while not any(line.strip().startswith("fix:") for line in so_far):
            line = proc.stderr.readline()
            assert line, "".join(so_far)
            so_far.append(line)
        assert "(still running)" in so_far[0] and STARVED_RULE in "".join(so_far)
        mid = json.loads(target.read_text())
        assert mid["exit_code"] is None and STARVED_RULE in [f["rule_id"] for f in mid["findings"]]
        assert proc.poll() is None  # the child did not get SIGUSR1 (its default action ends it)
        out, err = proc.communicate("go\n", timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    assert out == "done\n" and "(exit 0)" in err
    final = json.loads(target.read_text())
    assert final["exit_code"] == 0 and final["steps"] == 100


def test_a_look_asked_for_while_one_runs_runs_after_it_never_inside_it():
    """SIGUSR1 arriving while the handler answers an earlier one (Python runs the handler again at
    the next bytecode, inside the first): it is answered once the first is done, never dropped
    (a test that sent its second SIGUSR1 just after reading the first answer's first line hung)."""
    from loaderdoc.watching.launcher import once_at_a_time as _once_at_a_time

    calls, depth = [], []

    def look() -> None:
        depth.append(1)
        calls.append(len(depth))  # how deep this call runs: 1, never nested
        if len(calls) == 1:
            handler(None, None)  # a second signal while the first look runs ...
            handler(None, None)  # ... and a third: one more look answers both
        depth.pop()

    handler = _once_at_a_time(look)
    handler(None, None)
    assert calls == [1, 1]
    handler(None, None)  # idle again: a later signal gets its own look
    assert calls == [1, 1, 1]


def test_launcher_env_points_the_hook_at_a_directory(tmp_path):
    from loaderdoc.watching.records import child_env

    env = child_env(str(tmp_path), {hook.ENV_DIR: "/an-outer-watch", "PYTHONPATH": "/user"})
    assert env[hook.ENV_DIR] == str(tmp_path)
    assert env["PYTHONPATH"].endswith(os.pathsep + "/user")

