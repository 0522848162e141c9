"""benchmarks/gpu_acceptance.py without a GPU: its dry run, its skip line, its usage errors, and its
judging (nvidia-smi parsing, tolerances, table, exit code) against recorded results folders.

``tests/fixtures/gpu_acceptance/synthetic-h100`` is hand-written ("synthetic, not measured"); a
folder measured on a GPU goes beside it and is replayed by the same tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from faults_support import assert_nothing_left, fault_env, one_line_error, run_tagged

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_acceptance.py"
RECORDED = REPO / "tests" / "fixtures" / "gpu_acceptance"
SYNTHETIC = RECORDED / "synthetic-h100"
FIXTURES = REPO / "tests" / "fixtures"


def _load(name: str):
    # by path: `pytest` (the README's line) does not put the repository root on sys.path
    spec = importlib.util.spec_from_file_location(f"_loaderdoc_bench_{name}", REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


gc = _load("gpu_checks")


def script(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """The script as a user runs it; asserts that nothing it started is left running."""
    if env is None:
        env, tag = fault_env()
    else:
        tag = env["LOADERDOC_FAULT_TAG"]
    return run_tagged([sys.executable, str(SCRIPT), *args], tag, capture_output=True, text=True, env=env,
                      timeout=timeout, cwd=REPO)


def cuda_here() -> bool:
    import torch

    return torch.backends.cuda.is_built() and torch.cuda.is_available()


def statuses(checks) -> list[tuple[str, str, str]]:
    return [(c.step, c.what, c.status) for c in checks]


# ---- the real command, no GPU ----------------------------------------------------------------------

def test_dry_run_names_every_step_its_commands_and_tolerances():
    proc = script("--dry-run")
    assert proc.returncode == 0, proc.stderr
    for name in gc.STEP_NAMES:
        assert f"\n{name} (limit " in proc.stdout
    for needle in ("nvidia-smi --query-gpu=index,uuid,name,memory.total,driver_version,pcie.link.gen.current",
                   "-m loaderdoc facts --json", "-m loaderdoc watch --report", "-m loaderdoc probe image --json",
                   "-m loaderdoc tune --report", "tolerances:", "±5%", "jpeg-step", "--step-ms STEP_MS"):
        assert needle in proc.stdout
    assert proc.stderr == ""


@pytest.mark.skipif("cuda_here()", reason="CUDA is here: the script would run, not skip")
def test_without_cuda_it_skips_in_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "results"
    proc = script("--out", str(out))
    line = one_line_error(proc, gc.EXIT_SKIPPED, "gpu_acceptance: skipped: ", "nothing measured")
    assert "without CUDA" in line or "no CUDA device" in line or "not importable" in line
    assert proc.stdout == ""
    assert not out.exists()


def test_the_synthetic_folder_replays_as_passed_and_says_it_is_synthetic():
    proc = script("--replay", str(SYNTHETIC))
    assert proc.returncode == gc.EXIT_PASSED, proc.stdout + proc.stderr
    first = proc.stdout.splitlines()[0]
    assert "SYNTHETIC, NOT MEASURED" in first and "no GPU measured it" in first
    assert proc.stdout == (SYNTHETIC / "table.txt").read_text()
    assert proc.stdout.rstrip().splitlines()[-1].startswith("PASSED: 48 checks, 48 ok")


@pytest.mark.parametrize("folder, header, checks", [
    ("h100-2026-11-27", "NVIDIA H100 80GB HBM3, 580.159.04, 2.11.0+cu130", 48),
    ("h200-2026-11-28", "NVIDIA H200, 580.159.04, 2.11.0+cu130", 56),  # with probe-jpeg (issue 48)
    # --only consumer after the spin's calibration changed (no facts step: no GPU name in the header)
    ("h200-2026-11-28-consumer-calibrated", "2.11.0+cu130", 9),
])
def test_the_measured_gpu_runs_replay_as_they_printed_there(folder, header, checks):
    """The folders the script wrote on real GPUs: judged again here each prints the table it
    printed on that machine, every check within tolerance."""
    proc = script("--replay", str(RECORDED / folder))
    assert proc.returncode == gc.EXIT_PASSED, proc.stdout + proc.stderr
    assert proc.stdout == (RECORDED / folder / "table.txt").read_text()
    assert "SYNTHETIC" not in proc.stdout
    assert proc.stdout.startswith(f"GPU acceptance on {header} (2026-11-2")
    assert proc.stdout.rstrip().splitlines()[-1].startswith(f"PASSED: {checks} checks, {checks} ok")


@pytest.mark.parametrize("folder", sorted(p.name for p in RECORDED.iterdir() if p.is_dir()))
def test_every_recorded_folder_judges_as_it_was_judged(folder):
    """A change in the judging that would turn a recorded run's verdict shows here."""
    run, checks = gc.judge_folder(RECORDED / folder)
    recorded = json.loads((RECORDED / folder / "checks.json").read_text())
    assert statuses(checks) == [(c["step"], c["what"], c["status"]) for c in recorded]
    # synthetic numbers are never presented as measured
    assert bool(run.get("synthetic")) == ("synthetic" in folder)
    if run.get("synthetic"):
        assert run["synthetic"] == gc.SYNTHETIC


@pytest.mark.parametrize("args, needles", [
    ([], ["one of the arguments --out --dry-run --replay is required"]),
    (["--out", "X", "--replay", "Y"], ["not allowed with"]),
    (["--replay", "RESULTS", "--only", "facts"], ["--only goes with --out"]),
    (["--out", "NEW", "--only", "consumer,gpu"], ["--only: unknown step gpu", "steps: facts, consumer"]),
    (["--out", "NEW", "--only", ","], ["--only: unknown step (none given)"]),
    (["--out", "FILE"], ["is a file; give a folder"]),
    (["--out", "RESULTS"], ["the folder is not empty", "never overwritten"]),
    (["--replay", "MISSING"], ["no such folder"]),
    (["--replay", "EMPTY"], ["not a GPU acceptance results folder"]),
    (["--replay", "BROKEN"], ["figures/probe.json: line 1: not valid JSON"]),
    (["--replay", "FILE"], ["no such folder"]),
], ids=lambda v: " ".join(v) if isinstance(v, list) and v and v[0].startswith("--") else None)
def test_bad_usage_is_one_line_exit_3_and_nothing_written(tmp_path, args, needles):
    results = tmp_path / "results"
    shutil.copytree(SYNTHETIC, results)
    broken = tmp_path / "broken"
    shutil.copytree(SYNTHETIC, broken)
    (broken / "figures" / "probe.json").write_text("{not json")
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    names = {"RESULTS": results, "BROKEN": broken, "EMPTY": tmp_path / "empty", "FILE": tmp_path / "file",
             "MISSING": tmp_path / "missing", "NEW": tmp_path / "new", "X": tmp_path / "x", "Y": tmp_path / "y"}
    before = sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*"))
    proc = script(*[str(names.get(a, a)) for a in args])
    one_line_error(proc, gc.EXIT_USAGE, "gpu_acceptance: error: ", *needles)
    assert sorted((p.relative_to(tmp_path), p.stat().st_mtime_ns) for p in tmp_path.rglob("*")) == before


# ---- mismatches: each perturbation of the synthetic run fails its own check, and only it -------------

def _edit(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def _set(*keys, value):
    def change(data):
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value
    return change


MUTATIONS = [
    # (file, change, the check that fails, its status)
    ("figures/consumer.json", _set("kind", value="cpu-sleep"), "consumer kind", gc.MISMATCH),
    ("figures/consumer.json", _set("steps", 1, "kernel_ms", value=21.5), "kernel at --step-ms 20", gc.MISMATCH),
    ("figures/consumer.json", _set("steps", 0, "host_ms", value=6.1), "step at --step-ms 5", gc.MISMATCH),
    ("figures/consumer.json", _set("steps", 2, "host_ms", value=None), "step at --step-ms 50", gc.NOT_MEASURED),
    ("figures/consumer.json", _set("busy", "util_pct", value=[80, 85, 88]), "busy share, back to back", gc.MISMATCH),
    ("figures/consumer.json", _set("half", "util_pct", value=[]), "busy share, 50 % duty", gc.NOT_MEASURED),
    ("figures/consumer.json", _set("half", "util_pct", value=[90, 95]), "busy share, 50 % duty", gc.MISMATCH),
    ("figures/h2d.json", _set("sizes", 1, "pinned_ms", value=[0.9] * 5), "pinned 73.5 MiB vs Gen5 x16", gc.MISMATCH),
    ("figures/h2d.json", _set("sizes", 1, "pinned_ms", value=[3.0] * 5), "pinned 73.5 MiB, share of the link",
     gc.MISMATCH),
    ("figures/h2d.json", _set("sizes", 0, "pageable_ms", value=[0.09] * 5), "pinned/pageable time 4.6 MiB",
     gc.MISMATCH),
    ("figures/watch-starved.json", _set("hook_idle_s", value=1.4), "GPU idle in waits: watch vs the loop's",
     gc.MISMATCH),
    ("figures/watch-starved.json", _set("loop", "wait_idle_ms", value=None), "GPU idle in waits: watch vs the loop's",
     gc.NOT_MEASURED),
    ("figures/watch-starved.json", _set("timing", value="unavailable"), "watch's GPU timing", gc.MISMATCH),
    ("figures/watch-starved.json", _set("waits_unresolved", value=3), "waits unresolved", gc.MISMATCH),
    ("figures/watch-starved.json", _set("loop", "span_ms", value=7000.0), "the loop's GPU idle share", gc.MISMATCH),
    ("figures/watch-fed.json", _set("hook_idle_s", value=None),
     ("GPU idle in waits: watch vs the loop's", "watch's idle within the GPU's whole idle"), gc.NOT_MEASURED),
    # watch can't see more idle in the waits than the GPU had in all (61 ms against 10 ms)
    ("figures/watch-fed.json", _set("loop", "idle_ms", value=10.0), "watch's idle within the GPU's whole idle",
     gc.MISMATCH),
    ("figures/watch-fed.json", _set("waits_timed", value=150), "waits timed", gc.MISMATCH),
    ("figures/watch-fed.json", _set("exit_code", value=1), "command's exit code", gc.MISMATCH),
    ("figures/probe.json", _set("consumer", value="cpu-sleep"), "consumer", gc.MISMATCH),
    ("figures/probe.json", _set("configs", 1, "h2d_pinned_ms", value=None), "configurations with GPU copies",
     gc.MISMATCH),
    ("figures/probe.json", _set("configs", 2, "step_ms_achieved", value=23.5), "step less its copy (worst)",
     gc.MISMATCH),
    ("figures/probe.json", _set("configs", 3, "pin_memory", value=False), "pin_memory=True measured", gc.MISMATCH),
    ("figures/tune.json", _set("trials", 1, "step_is_cpu", value=True), "step seen as GPU work", gc.MISMATCH),
    ("figures/tune.json", _set("pick", "gain", value=1.2), "pick's gain over as written", gc.MISMATCH),
    ("figures/tune.json", _set("pick", value=None), ("pick's workers", "pick's gain over as written"), gc.NOT_MEASURED),
    ("figures/tune.json", _set("exit_code", value=4), "exit code (0 or 1)", gc.MISMATCH),
    ("facts.json", _set("gpu", "driver_version", "value", value="575.57.08"), "GPU 0 driver", gc.MISMATCH),
    ("facts.json", _set("gpu", "devices", 0, "memory_total", "value", value=85520809984 + 3 * 2**20), "GPU 0 memory",
     gc.MISMATCH),
    ("facts.json", _set("gpu", "devices", 0, "pcie_width_current", "value", value=8), "GPU 0 width.current",
     gc.MISMATCH),
    ("facts.json", _set("gpu", "devices", 0, "mig_mode", "value", value=True), "GPU 0 MIG", gc.MISMATCH),
    ("facts.json", _set("gpu", "total_count", "value", value=8), "GPU count", gc.MISMATCH),
]


@pytest.mark.parametrize("rel, change, what, status", MUTATIONS, ids=[f"{m[0]}:{m[2] if isinstance(m[2], str) else m[2][0]}" for m in MUTATIONS])
def test_a_figure_beyond_its_tolerance_fails_its_own_check_only(tmp_path, rel, change, what, status):
    folder = tmp_path / "run"
    shutil.copytree(SYNTHETIC, folder)
    _edit(folder / rel, change)
    _, checks = gc.judge_folder(folder)
    failed = [(c.what, c.status) for c in checks if not c.ok]
    assert failed == [(w, status) for w in ((what,) if isinstance(what, str) else what)]
    assert gc.exit_code(checks) == gc.EXIT_FAILED


def test_a_failed_replay_prints_the_table_and_exits_1(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(SYNTHETIC, folder)
    (folder / "figures" / "tune.json").write_text(json.dumps({"error": "stopped at its time limit, 200 s"}))
    (folder / "figures" / "h2d.json").unlink()
    proc = script("--replay", str(folder))
    assert proc.returncode == gc.EXIT_FAILED, proc.stderr
    assert "NOT MEASURED: stopped at its time limit, 200 s" in proc.stdout
    assert "NOT MEASURED: the step wrote no figures (it did not run)" in proc.stdout
    assert proc.stdout.rstrip().splitlines()[-1].startswith("FAILED: ")
    assert proc.stderr == ""


def test_a_run_of_some_steps_is_judged_on_those_only(tmp_path):
    folder = tmp_path / "run"
    shutil.copytree(SYNTHETIC, folder)
    _edit(folder / "run.json", _set("steps", value=["h2d", "tune"]))
    shutil.rmtree(folder / "figures")
    (folder / "figures").mkdir()
    shutil.copy(SYNTHETIC / "figures" / "h2d.json", folder / "figures")
    shutil.copy(SYNTHETIC / "figures" / "tune.json", folder / "figures")
    _, checks = gc.judge_folder(folder)
    assert {c.step for c in checks} == {"h2d", "tune"} and gc.exit_code(checks) == gc.EXIT_PASSED


def test_tolerances_hold_at_their_edges_and_fail_just_past_them():
    rng = random.Random(33)
    for _ in range(300):
        target = rng.uniform(1, 100)
        rel, abs_ = rng.choice([0.05, 0.10]), rng.choice([0.0, 0.5])
        edge = rel * target + abs_
        sign = rng.choice([-1, 1])
        assert gc.within("s", "w", target, target + sign * edge * 0.999, rel=rel, abs_=abs_).ok
        assert not gc.within("s", "w", target, target + sign * edge * 1.001 + 1e-9, rel=rel, abs_=abs_).ok
        low = rng.uniform(0, 1)
        assert gc.bound("s", "w", low, low=low).ok and not gc.bound("s", "w", low - 1e-6, low=low).ok
        assert gc.bound("s", "w", low, high=low).ok and not gc.bound("s", "w", low + 1e-6, high=low).ok
    assert gc.within("s", "w", 5.0, None).status == gc.NOT_MEASURED
    assert gc.exit_code([]) == gc.EXIT_FAILED  # no check at all is no proof


# ---- nvidia-smi and NVML facts --------------------------------------------------------------------

# recorded shapes of `nvidia-smi --query-gpu=SMI_FIELDS --format=csv,noheader,nounits`: a GeForce
# (no MIG: [N/A]), a MIG-enabled A100, and fields a driver does not support
SMI_LAPTOP = "0, GPU-0b2c6a3e-5d1f-8a91-2c3d-4e5f60718293, NVIDIA GeForce RTX 3050 Laptop GPU, 4096, 550.120, 3, 8, 3, 8, [N/A]\n"
SMI_TWO = ("0, GPU-aaaaaaaa-0000-1111-2222-333333333333, NVIDIA A100-SXM4-80GB, 81920, 535.183.01, 4, 16, 4, 16, Enabled\n"
           "1, GPU-bbbbbbbb-0000-1111-2222-333333333333, NVIDIA A100-SXM4-80GB, 81920, 535.183.01, 1, 16, 4, 16, Disabled\n")


def test_nvidia_smi_lines_parse_to_typed_fields():
    (laptop,) = gc.parse_smi(SMI_LAPTOP)
    assert laptop == {"index": 0, "uuid": "GPU-0b2c6a3e-5d1f-8a91-2c3d-4e5f60718293",
                      "name": "NVIDIA GeForce RTX 3050 Laptop GPU", "memory.total": 4096, "driver_version": "550.120",
                      "pcie.link.gen.current": 3, "pcie.link.width.current": 8, "pcie.link.gen.max": 3,
                      "pcie.link.width.max": 8, "mig.mode.current": None}
    first, second = gc.parse_smi(SMI_TWO + "\n")
    assert first["mig.mode.current"] is True and second["mig.mode.current"] is False
    assert second["pcie.link.gen.current"] == 1
    assert gc.parse_smi("0, GPU-x, T4, [Not Supported], 470.1, [N/A], [N/A], 3, 16, [N/A]")[0]["memory.total"] is None


@pytest.mark.parametrize("text, needle", [
    ("0, GPU-x, H100, 81559, 580.95.05, 5, 16, 5, 16\n", "line 1: 9 fields, expected 10"),
    (SMI_LAPTOP + "1, GPU-y, H100, lots, 580.95.05, 5, 16, 5, 16, Disabled\n", "line 2: memory.total is 'lots'"),
    ("0, GPU-x, H100, 81559, 580.95.05, 5, 16, 5, 16, Maybe\n", "mig.mode.current is 'Maybe'"),
])
def test_odd_nvidia_smi_output_names_the_line(text, needle):
    with pytest.raises(ValueError, match=needle):
        gc.parse_smi(text)


def test_nvidia_smi_round_trip_over_many_rows():
    rng = random.Random(7)
    for _ in range(200):
        row = {"index": rng.randrange(16), "uuid": f"GPU-{rng.getrandbits(64):016x}",
               "name": rng.choice(["NVIDIA H100 80GB HBM3", "NVIDIA L4", "Tesla T4", "NVIDIA H200"]),
               "memory.total": rng.randrange(1, 200_000), "driver_version": f"{rng.randrange(400, 600)}.{rng.randrange(100)}",
               "pcie.link.gen.current": rng.choice([1, 2, 3, 4, 5, None]), "pcie.link.width.current": rng.choice([1, 8, 16, None]),
               "pcie.link.gen.max": rng.choice([3, 4, 5, 6]), "pcie.link.width.max": rng.choice([8, 16]),
               "mig.mode.current": rng.choice([True, False, None])}
        cells = ["[N/A]" if v is None else ("Enabled" if v else "Disabled") if isinstance(v, bool) else str(v)
                 for v in row.values()]
        assert gc.parse_smi(", ".join(cells) + "\n") == [row]


def _facts(gen_current: int = 4, mig=False) -> dict:
    facts = json.loads((SYNTHETIC / "facts.json").read_text())
    device = facts["gpu"]["devices"][0]
    device["pcie_gen_current"]["value"] = gen_current
    device["mig_mode"]["value"] = mig
    return facts


H100_SMI = "0, GPU-4d18a5ff-37f1-44af-87c8-37fa76c44ef4, NVIDIA H100 80GB HBM3, 81559, 580.95.05, {gen}, 16, 5, 16, {mig}\n"


@pytest.mark.parametrize("before, after, facts_gen, status", [
    (1, 5, 5, gc.OK), (5, 1, 5, gc.OK), (1, 5, 1, gc.OK), (1, 5, 3, gc.MISMATCH), (5, 5, 4, gc.MISMATCH)])
def test_the_current_link_matches_either_nvidia_smi_reading_around_the_facts(before, after, facts_gen, status):
    checks = gc.judge_facts(_facts(facts_gen), H100_SMI.format(gen=before, mig="Disabled"),
                            H100_SMI.format(gen=after, mig="Disabled"))
    (check,) = [c for c in checks if c.what == "GPU 0 gen.current"]
    assert check.status == status
    assert all(c.ok for c in checks if c is not check)


def test_no_mig_on_nvidia_smi_is_nvml_s_not_supported():
    checks = gc.judge_facts(_facts(5, mig=False), H100_SMI.format(gen=5, mig="[N/A]"), None)
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]


def test_facts_without_nvml_or_nvidia_smi_are_not_measured():
    cpu_box = json.loads(Path(REPO / "src/loaderdoc/system/machines/ci-2core.json").read_text())
    (check,) = gc.judge_facts(cpu_box, SMI_LAPTOP, SMI_LAPTOP)
    assert check.status == gc.NOT_MEASURED and "no NVIDIA driver" in check.note
    (check,) = gc.judge_facts(_facts(), None, None, error="nvidia-smi did not start: No such file or directory")
    assert check.status == gc.NOT_MEASURED and "nvidia-smi did not start" in check.note
    (check,) = gc.judge_facts(_facts(), "garbage\n", None)
    assert check.status == gc.NOT_MEASURED and "line 1: 1 fields" in check.note


def test_nominal_pcie_rates():
    assert gc.nominal_gbps(3, 16) == pytest.approx(15.76)
    assert gc.nominal_gbps(4, 16) == pytest.approx(31.5, rel=1e-3)
    assert gc.nominal_gbps(5, 16) == pytest.approx(63.0, rel=1e-3)
    assert gc.nominal_gbps(3, 8) == pytest.approx(7.88)
    assert gc.nominal_gbps(None, 16) is None and gc.nominal_gbps(9, 16) is None and gc.nominal_gbps(5, 0) is None


# ---- the figures as the steps read them from loaderdoc's own reports (recorded CPU runs) -------------

def test_a_cpu_probe_report_fails_every_cuda_check():
    report = json.loads((FIXTURES / "probe" / "image.json").read_text())
    figures = gc.probe_figures(report, 0, 20.0)
    assert figures["consumer"] == "cpu-sleep" and figures["configs"]
    failed = {c.what: c.status for c in gc.judge_probe(figures) if not c.ok}
    # the probe tries pin_memory only with CUDA
    assert failed == {"device": gc.MISMATCH, "consumer": gc.MISMATCH, "configurations with GPU copies": gc.MISMATCH,
                      "pin_memory=True measured": gc.MISMATCH}


def _jpeg_report(pinned_status: str = "ok", findings: tuple[str, ...] = ()) -> dict:
    """A probe --json over JPEGs on CUDA, as the probe-jpeg step reads it (hand-written)."""
    def result(workers: int, pin: bool, status: str = "ok") -> dict:
        return {"settings": {"num_workers": workers, "pin_memory": pin}, "status": status,
                "error": None if status == "ok" else "loaderdoc's measuring process failed: ..."}

    return {"device": "cuda", "results": [result(0, False), result(12, False), result(12, True, pinned_status)],
            "recommended": {"num_workers": 12, "pin_memory": True},
            "prediction": {"pick_predicted_per_s": 30.5, "pick_measured_per_s": 22.0},
            "findings": [{"rule_id": rule} for rule in findings]}


def test_the_jpeg_step_judges_pinned_memory_and_reports_the_rates_side_by_side():
    """Issue 48's probe over JPEGs against the real job: pinned configurations measured, nothing
    blamed, the job run with the pick; the probe's and the job's rates reported, not judged."""
    job = {"settings": {"num_workers": 12, "pin_memory": True}, "steps_per_s": 9.7, "step_ms_median": 59.7}
    fig = gc.jpeg_figures({"step_ms": 31.6}, _jpeg_report(), 0, job, 0)
    checks = gc.judge_jpeg(fig)
    assert all(c.ok for c in checks), [(c.what, c.measured) for c in checks if not c.ok]
    side = next(c for c in checks if c.what == "steps/s: the probe's pick vs the real job")
    assert side.tolerance == "not judged"
    assert "probe 30.5 predicted / 22.0 measured, job 9.7 (0.44x the probe's" in side.measured
    # issue 48 as it was: the pinned configuration failed, and a finding blamed the dataset
    bad = gc.jpeg_figures({"step_ms": 31.6}, _jpeg_report("failed", ("worker-crashed",)), 0, None, None)
    failed = {c.what: c.status for c in gc.judge_jpeg(bad) if not c.ok}
    assert failed == {"failed configurations": gc.MISMATCH, "pinned configurations measured": gc.MISMATCH,
                      "findings blaming the dataset or loaderdoc": gc.MISMATCH, "job exit code": gc.NOT_MEASURED,
                      "job's workers = the probe's pick": gc.NOT_MEASURED}


def test_the_jpeg_step_without_torchvision_measures_nothing_and_says_why():
    checks = gc.judge_jpeg({"error": "torchvision does not import here (ModuleNotFoundError: ...)"})
    assert [(c.status, c.note.split(" (")[0]) for c in checks] == [(gc.NOT_MEASURED, "torchvision does not import here")]


def test_the_jpeg_step_runs_the_probe_at_the_jobs_timed_step_and_the_job_with_the_export():
    ga = _load("gpu_acceptance")
    step, probe, job = ga.jpeg_commands(Path("DIR"), "31.6")
    assert step[-2:] == ["jpeg-step", str(Path("DIR") / "reports" / "jpeg-step.json")]
    assert probe[probe.index("--step-ms") + 1] == "31.6" and "--export" in probe
    assert probe[probe.index("--dataset") + 1] == "benchmarks.torchvision_pipeline:make_job_dataset"
    assert job[-2] == probe[probe.index("--export") + 1]  # the job reads what the probe exported


def test_a_tune_report_gives_its_trials_and_pick():
    report = json.loads((FIXTURES / "tune" / "io-bound.json").read_text())
    figures = gc.tune_figures(report, 1)
    assert figures["pick"] == {"num_workers": 4, "gain": report["pick"]["gain"], "steps_per_s": report["pick"]["steps_per_s"]}
    assert [t["number"] for t in figures["trials"]] == [t["number"] for t in report["trials"]]
    assert all(c.ok for c in gc.judge_tune(figures) if c.what != "step seen as GPU work")


def test_a_watch_report_without_gpu_timing_says_why():
    report = json.loads((FIXTURES / "watch" / "starved-timeline.json").read_text())
    report["gpu"] = {"timing": "unavailable", "reason": "CUDA was not initialised by the program"}
    loop = {"steps": report["loaders"][0]["totals"]["steps"], "span_ms": 1000.0, "busy_ms": 400.0, "idle_ms": 600.0,
            "wait_idle_ms": 590.0}
    figures = gc.watch_figures(report, loop, 0)
    checks = {c.what: c for c in gc.judge_watch("watch-starved", figures, starved=True)}
    assert checks["watch's GPU timing"].status == gc.MISMATCH
    assert checks["GPU idle in waits: watch vs the loop's"].status == gc.NOT_MEASURED
    assert checks["watch's idle within the GPU's whole idle"].status == gc.NOT_MEASURED
    assert checks["the loop's GPU idle share"].ok


@pytest.mark.parametrize("args, reason", [
    ((None, False, 0, "No module named 'torch'"), "torch is not importable (No module named 'torch')"),
    (("2.13.0+cpu", False, 0), "torch 2.13.0+cpu is built without CUDA"),
    (("2.8.0+cu128", True, 0), "no CUDA device is visible to torch 2.8.0+cu128"),
    (("2.8.0+cu128", True, 0, "CUDA driver version is insufficient"), "CUDA does not start"),
    (("2.8.0+cu128", True, 1), None),
])
def test_why_a_machine_skips(args, reason):
    got = gc.cuda_skip_reason(*args)
    assert got == reason if reason is None else reason in got


# ---- the step runner: a hang is stopped at its limit, with everything it started ---------------------

def test_a_step_past_its_limit_is_stopped_with_its_whole_tree(tmp_path):
    ga = _load("gpu_acceptance")
    env, tag = fault_env()
    hang = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
            "print('started', flush=True); time.sleep(120)")
    ran = ga.run_process([sys.executable, "-c", hang], tmp_path / "step.log", 2.0, env=env)
    assert ran.code is None and ran.why == "stopped at its time limit, 2 s"
    assert 2.0 <= ran.wall_s < 2.0 + ga.GRACE_S
    assert "started" in (tmp_path / "step.log").read_text()
    assert_nothing_left(tag, timeout=0.0)


@pytest.mark.skipif(shutil.which("nvidia-smi") is not None, reason="nvidia-smi is here")
def test_the_facts_step_without_nvidia_smi_measures_nothing_and_says_why(tmp_path):
    ga = _load("gpu_acceptance")
    env, tag = fault_env()
    folder = tmp_path / "run"
    for sub in ("figures", "reports", "logs"):
        (folder / sub).mkdir(parents=True)
    ran = ga.run_step(ga.STEPS[0], folder, 30.0, env)
    assert ran.code is None and "nvidia-smi did not start" in ran.why
    figures = json.loads((folder / "figures" / "facts.json").read_text())
    (check,) = gc.judge_facts(None, None, None, error=figures["error"])
    assert check.status == gc.NOT_MEASURED and "nvidia-smi did not start" in check.note
    # the machine fixture is recorded all the same
    assert json.loads((folder / "facts.json").read_text())["gpu"]["nvml"]["unknown"]
    assert_nothing_left(tag)


def test_the_steps_fit_the_time_asked():
    ga = _load("gpu_acceptance")
    assert ga.TOTAL_S + ga.GRACE_S + 10 <= 8 * 60  # the steps, the last one's stop, the judging
    assert all(s.limit_s <= ga.TOTAL_S for s in ga.STEPS)
    assert os.path.exists(ga.STEPS_SCRIPT)


def test_ctrl_c_during_a_step_stops_its_whole_tree(tmp_path):
    env, tag = fault_env()
    log = tmp_path / "step.log"
    hang = ("import subprocess, sys, time; "
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], start_new_session=True); "
            "print('started', flush=True); time.sleep(120)")
    harness = (f"import importlib.util, sys\n"
               f"spec = importlib.util.spec_from_file_location('ga', {str(SCRIPT)!r})\n"
               f"ga = importlib.util.module_from_spec(spec); sys.modules['ga'] = ga; spec.loader.exec_module(ga)\n"
               f"try:\n    ga.run_process([sys.executable, '-c', {hang!r}], __import__('pathlib').Path({str(log)!r}), 60.0)\n"
               f"except KeyboardInterrupt:\n    sys.exit(130)\n")
    proc = subprocess.Popen([sys.executable, "-c", harness], env=env, cwd=REPO, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while "started" not in (log.read_text() if log.exists() else ""):  # the step and its child are up
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # as Ctrl+C sends it
    assert proc.wait(30) == 130, proc.stderr.read()
    assert_nothing_left(tag, timeout=0.0)
