"""Issue 48: on a GPU machine every pin_memory=True configuration failed with "Cannot re-initialize
CUDA in forked subprocess" and was reported as the user's dataset crashing. Without a GPU, a
stand-in for torch's CUDA state (support/fake_cuda.py) makes the measuring processes' starts and
CUDA's state observable: which process started CUDA, and which was refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from test_probe_cli import DATASETS

from loaderdoc.base.errors import EXIT_OK

SUPPORT = Path(__file__).parent / "support"


def fake_cuda_env(log: Path) -> dict[str, str]:
    path = os.pathsep.join([str(SUPPORT / "fake_cuda_site"), str(SUPPORT), DATASETS, os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path, "FAKE_CUDA": "1", "FAKE_CUDA_LOG": str(log)}


def events(log: Path) -> list[tuple[int, str]]:
    lines = log.read_text().splitlines() if log.exists() else []
    return [(int(pid), event) for pid, event in (line.split() for line in lines)]


MEASURE = textwrap.dedent("""
    import json, os, sys, torch
    from loaderdoc.probing import fresh
    from loaderdoc.probing.probe import plan_for_budget
    from loaderdoc.probing.isolate import run_config
    from loaderdoc.probing.measure import LoadJob
    from loaderdoc.base.settings import LoaderSettings
    from probe_cuda_data import Waiting
    state, path = sys.argv[1], sys.argv[2]
    if state != "clean":
        torch.cuda.init()  # something before the probe started CUDA in this process
    if path == "fork":
        fresh.cuda_initialised = lambda: False  # the measuring process forked whatever the state: before issue 48
    job = LoadJob(dataset=Waiting(), step_ms=5, device="cuda")
    out = []
    for workers in (0, 2):
        r = run_config(job, LoaderSettings(batch_size=16, num_workers=workers, pin_memory=True), plan_for_budget(4))
        out.append({"workers": workers, "status": r.status, "error": r.error, "mine": r.loaderdoc_error,
                    "steps": r.batches_per_s})
    print(json.dumps({"pid": os.getpid(), "results": out}))
""")


def measure_pinned(tmp_path: Path, state: str, path: str = "auto") -> tuple[dict, list[tuple[int, str]]]:
    log = tmp_path / f"cuda-{state}-{path}.log"
    done = subprocess.run([sys.executable, "-c", MEASURE, state, path], env=fake_cuda_env(log),
                          capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), events(log)


def test_a_process_that_initialised_cuda_still_measures_pinned_configurations(tmp_path):
    seen, log = measure_pinned(tmp_path, "initialised")
    assert all(r["status"] == "ok" and r["steps"] for r in seen["results"]), seen["results"]
    # each measuring process was a new interpreter that started CUDA itself; none was refused
    assert (seen["pid"], "init") in log and not [e for e in log if e[1] == "refused"]
    assert len({pid for pid, event in log if event == "init" and pid != seen["pid"]}) == len(seen["results"])


def test_a_clean_process_forks_its_measuring_processes_and_never_starts_cuda_itself(tmp_path):
    seen, log = measure_pinned(tmp_path, "clean")
    assert all(r["status"] == "ok" and r["steps"] for r in seen["results"]), seen["results"]
    inits = {pid for pid, event in log if event == "init"}
    assert seen["pid"] not in inits and len(inits) == len(seen["results"]) and "refused" not in {e for _, e in log}


def test_a_forked_copy_of_an_initialised_process_fails_as_loaderdocs_own_failure(tmp_path):
    """The path issue 48 met: torch refuses CUDA in the fork. It is loaderdoc's failure, and the
    rules say so instead of blaming the dataset."""
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.base.settings import LoaderSettings
    from loaderdoc.probing.result import ConfigResult, ProbeReport
    from loaderdoc.system.fixtures import load_machine

    seen, log = measure_pinned(tmp_path, "initialised", "fork")
    assert [r["status"] for r in seen["results"]] == ["failed", "failed"]
    assert all(r["mine"] and r["error"].startswith("loaderdoc's measuring process failed") and
               "Cannot re-initialize CUDA in forked subprocess" in r["error"] for r in seen["results"])
    assert "refused" in {e for _, e in log}
    results = [ConfigResult(settings=LoaderSettings(batch_size=16, num_workers=r["workers"], pin_memory=True),
                            status="failed", error=r["error"], loaderdoc_error=True) for r in seen["results"]]
    fired = {f.rule_id: f for f in evaluate(load_machine("ci-2core"), LoaderSettings(batch_size=16),
                                             probe=ProbeReport(results=results, device="cuda"))}
    assert "worker-crashed" not in fired and "probe-failed-itself" in fired
    assert "not in the dataset" in fired["probe-failed-itself"].cause


def test_the_cli_probe_of_a_factory_that_starts_cuda_measures_every_configuration(tmp_path):
    log = tmp_path / "cuda.log"
    done = subprocess.run(
        [sys.executable, "-m", "loaderdoc", "probe", "--dataset", "probe_cuda_data:factory", "--batch-size", "16",
         "--step-ms", "5", "--budget", "6", "--json", "--no-progress"],
        env=fake_cuda_env(log), capture_output=True, text=True, timeout=180)
    assert done.returncode == EXIT_OK, done.stderr
    report = json.loads(done.stdout)
    # the factory ran in this process and started CUDA: every configuration ran in a new interpreter
    assert report["results"] and all(r["status"] == "ok" for r in report["results"])
    assert {"worker-crashed", "probe-failed-itself"}.isdisjoint(f["rule_id"] for f in report["findings"])
    assert not [e for e in events(log) if e[1] == "refused"]


def test_whose_failure_is_told_by_where_it_was_raised():
    from loaderdoc.probing.blame import innermost_user_frame, loaderdoc_failure

    here = str(Path(__file__).resolve().parents[1] / "src" / "loaderdoc" / "probing" / "measure.py")
    torch_file = "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/collate.py"
    user = '  File "/home/me/proj/data.py", line 12, in __getitem__\n'
    ours = f'  File "{here}", line 160, in measure_in_process\n'
    theirs = f'  File "{torch_file}", line 210, in collate\n'
    refused = "RuntimeError: Cannot re-initialize CUDA in forked subprocess."
    # the user's code raised: theirs, with its frame
    assert not loaderdoc_failure("ValueError: bad", ours + user, in_worker=False)
    assert innermost_user_frame(ours + user) == "data.py:12 in __getitem__"
    # torch's collate refused the user's samples: not loaderdoc's either
    assert not loaderdoc_failure("RuntimeError: stack expects each tensor to be equal size", ours + theirs,
                                 in_worker=False)
    # loaderdoc's own code raised, or CUDA would not start in the measuring process: loaderdoc's
    assert loaderdoc_failure("KeyError: 'x'", theirs + ours, in_worker=False)
    assert loaderdoc_failure(refused, ours + user, in_worker=False)
    # ... but refused in a worker, the user's real job meets it too: CUDA in __getitem__ with fork workers
    assert not loaderdoc_failure(refused, user, in_worker=True)
    # a project folder named loaderdoc is the user's, not this package
    assert not loaderdoc_failure("KeyError", '  File "/home/me/loaderdoc/train.py", line 3, in main\n',
                                 in_worker=False)
