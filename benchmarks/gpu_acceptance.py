#!/usr/bin/env python
"""Every CUDA path of loaderdoc, end to end on real DataLoaders, in one call on a GPU machine
(issue 33). After the README's test line (``pip install '.[test]'``), nothing else installed::

    python benchmarks/gpu_acceptance.py --out DIR        run every step, judge, print the table
    python benchmarks/gpu_acceptance.py --dry-run        the steps, commands, limits and tolerances
    python benchmarks/gpu_acceptance.py --replay DIR     judge a results folder again (no GPU needed)

The steps, each in a process of its own with a time limit (all of them within 8 minutes):

- ``facts``: ``loaderdoc facts --json`` (kept as ``DIR/facts.json``, a MachineFacts fixture of this
  machine) against ``nvidia-smi --query-gpu=...``, field by field: name, memory, driver, PCIe link
  generation and width (current and max), MIG mode, the GPU count;
- ``consumer``: the probe's CUDA consumer (calibrated spin kernel, ``non_blocking`` copy, a sync
  each step) at --step-ms 5, 20 and 50 ms, the kernel (CUDA events) and the step as the probe
  times it; NVML's utilisation while steps run back to back, and at a 50 % duty;
- ``h2d``: the probe's pinned vs pageable copy timing for a 4.6 MiB and a 74 MiB batch against
  the PCIe link's nominal rate;
- ``watch-starved``, ``watch-fed``: a loop starved by its loader (never synced) and a fed one
  (synced each step) under ``loaderdoc watch``: watch's GPU idle (CUDA events around each data
  wait) against the loop's own ``torch.cuda.Event`` pairs around the same ``next()`` calls, and
  within the GPU's whole idle that the loop's events around its steps give;
- ``probe``: ``loaderdoc probe image --step-ms 20`` on CUDA: the measuring processes run the CUDA
  consumer, the step lasts what was asked, pin_memory is tried;
- ``tune``: ``loaderdoc tune`` on a small CNN trained on the GPU, written with num_workers=0 and
  a loader far slower than its step: its step seen as GPU work, a pick with workers that pays;
- ``probe-jpeg`` (issue 48): a real job, ResNet-50 (bf16, channels_last, SGD, batch 64) over 1280
  JPEGs that torchvision decodes and augments on the CPU. Its step alone on the GPU is timed, then
  ``loaderdoc probe --dataset benchmarks.torchvision_pipeline:make_job_dataset`` simulates that
  step and exports its pick, and the job runs with the exported settings: pinned configurations
  measured (none failed, nothing blamed on the dataset), and the probe's predicted and measured
  rates beside the job's, reported side by side (not judged: what the probe leaves out is the
  question). Needs torchvision and Pillow; without them the step says so and measures nothing.

Tolerances are in ``benchmarks/gpu_checks.py`` and in the table beside each check. Everything
goes under DIR (a new or empty folder; nothing is overwritten): see ``gpu_checks`` for the layout.

Exit code: 0 every check within its tolerance; 1 a check beyond it, or a step that measured
nothing (failed, or stopped at its time limit); 3 bad usage (arguments, an --out folder already
in use, a --replay folder that is not a results folder); 4 skipped: no CUDA here, nothing
measured (one line says why); 130 interrupted (every process it started is stopped).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SRC = REPO / "src"
if __name__ == "__main__":  # as a script: the checkout's loaderdoc, as its steps import it
    sys.path.insert(0, str(SRC))
if str(REPO) not in sys.path:  # benchmarks.gpu_checks
    sys.path.insert(0, str(REPO))

from benchmarks import gpu_checks as gc  # noqa: E402

STEPS_SCRIPT = REPO / "benchmarks" / "gpu_steps.py"
TOTAL_S = 450.0  # every step together, under 8 minutes with the start, the last stop and the judging
EXIT_INTERNAL = 70
GRACE_S = 10.0  # a step past its limit gets SIGTERM (loaderdoc stops cleanly), then SIGKILL
PROBE_STEP_MS, PROBE_BUDGET_S = 20.0, 45
TUNE_OPTIONS = ("--budget", "100", "--trials", "4", "--steps", "30", "--first-batch-timeout", "60")
JPEG_DATASET = "benchmarks.torchvision_pipeline:make_job_dataset"
JPEG_PROBE_BUDGET_S = 40
STEP_MS_PLACEHOLDER = "STEP_MS"  # --dry-run: the job's step alone, timed by the step's first command


@dataclass(frozen=True)
class Step:
    name: str
    limit_s: float
    what: str


STEPS = (
    Step("facts", 60, "loaderdoc facts --json against nvidia-smi, field by field"),
    Step("consumer", 90, "the CUDA consumer's kernel and step against --step-ms; NVML's busy share"),
    Step("h2d", 60, "pinned vs pageable copies at two batch sizes against the PCIe link"),
    Step("watch-starved", 90, "watch's GPU idle (CUDA events) on a starved loop against the loop's events"),
    Step("watch-fed", 75, "the same on a fed loop"),
    Step("probe", 110, "loaderdoc probe image on CUDA"),
    Step("tune", 200, "loaderdoc tune on a small CUDA training job"),
    Step("probe-jpeg", 150, "loaderdoc probe --dataset over JPEGs, pinned, against the real ResNet-50 job"),
)
assert tuple(s.name for s in STEPS) == gc.STEP_NAMES


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(gc.EXIT_USAGE, f"gpu_acceptance: error: {message} (see --help)\n")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = _Parser(prog="gpu_acceptance.py", description=__doc__.split("\n\n")[0],
                     epilog="exit codes: 0 passed; 1 a check failed; 3 bad usage; 4 skipped: no CUDA; 130 interrupted")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--out", metavar="DIR", help="run every step; results under DIR (new or empty)")
    mode.add_argument("--dry-run", action="store_true", help="print the steps, commands, limits and tolerances")
    mode.add_argument("--replay", metavar="DIR", help="judge a results folder again and print its table")
    parser.add_argument("--only", metavar="STEP[,STEP]", help=f"run only these steps ({', '.join(gc.STEP_NAMES)})")
    args = parser.parse_args(argv)
    args.steps = list(gc.STEP_NAMES)
    if args.only is not None:
        if not args.out:
            parser.error("--only goes with --out")
        asked = [s.strip() for s in args.only.split(",") if s.strip()]
        unknown = [s for s in asked if s not in gc.STEP_NAMES]
        if unknown or not asked:
            parser.error(f"--only: unknown step {', '.join(unknown) or '(none given)'}; steps: {', '.join(gc.STEP_NAMES)}")
        args.steps = [s for s in gc.STEP_NAMES if s in asked]
    return args


def check_out_folder(folder: Path) -> None:
    """A new folder, or an empty one: results are never written over older ones."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--out {folder}: is a file; give a folder (new or empty) for the results")
    if folder.is_dir() and any(folder.iterdir()):
        raise UsageError(f"--out {folder}: the folder is not empty; give a new one (results are never overwritten)")
    parent = folder.resolve().parent
    while not parent.exists():
        parent = parent.parent
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {folder}: cannot create it under {parent} (permission denied); choose another path")


def cuda_skip_reason() -> str | None:
    """Why CUDA cannot run here (None: it can). Imports torch; does not create a CUDA context."""
    from loaderdoc.base.textfile import first_line

    try:
        import torch
    except Exception as exc:  # ImportError, or a broken install
        return gc.cuda_skip_reason(None, False, 0, first_line(exc))
    built = bool(torch.backends.cuda.is_built())
    try:
        count = torch.cuda.device_count() if built and torch.cuda.is_available() else 0
        error = None
    except Exception as exc:
        count, error = 0, first_line(exc)
    return gc.cuda_skip_reason(torch.__version__, built, count, error)


# ---- the steps' commands ---------------------------------------------------------------------------

def loaderdoc(*args: str) -> list[str]:
    return [sys.executable, "-m", "loaderdoc", *args]


def steps_script(*args: str) -> list[str]:
    return [sys.executable, str(STEPS_SCRIPT), *args]


def commands(name: str, folder: Path) -> list[list[str]]:
    """The commands a step runs, in order (for the run and for --dry-run)."""
    reports = folder / "reports"
    fig = str(folder / "figures" / f"{name}.json")
    if name == "facts":
        return [gc.smi_command(), loaderdoc("facts", "--json", "--label", "GPU acceptance run"), gc.smi_command()]
    if name in ("consumer", "h2d"):
        return [steps_script(name, fig)]
    if name.startswith("watch-"):
        mode = name.removeprefix("watch-")
        return [loaderdoc("watch", "--report", str(reports / f"{name}.json"), "--",
                          *steps_script("loop", mode, str(reports / f"loop-{mode}.json")))]
    if name == "probe":
        return [loaderdoc("probe", "image", "--json", "--step-ms", f"{PROBE_STEP_MS:g}", "--budget",
                          str(PROBE_BUDGET_S), "--no-progress")]
    if name == "tune":
        return [loaderdoc("tune", "--report", str(reports / "tune.json"), *TUNE_OPTIONS, "--",
                          *steps_script("train"))]
    if name == "probe-jpeg":
        return jpeg_commands(folder, STEP_MS_PLACEHOLDER)
    raise ValueError(name)


def jpeg_commands(folder: Path, step_ms: str) -> list[list[str]]:
    """The job's step alone, the probe at that step (exporting its pick), the job with the pick."""
    reports = folder / "reports"
    return [steps_script("jpeg-step", str(reports / "jpeg-step.json")),
            loaderdoc("probe", "--dataset", JPEG_DATASET, "--batch-size", "64", "--step-ms", step_ms, "--budget",
                      str(JPEG_PROBE_BUDGET_S), "--json", "--no-progress", "--export", str(reports / "probe-jpeg.toml")),
            steps_script("jpeg-train", str(reports / "probe-jpeg.toml"), str(reports / "jpeg-job.json"))]


def plan() -> str:
    import shlex

    folder = Path("DIR")
    lines = [f"{len(STEPS)} steps, {TOTAL_S:.0f} s at most in all; each in its own process group, stopped at its limit",
             ""]
    for step in STEPS:
        lines.append(f"{step.name} (limit {step.limit_s:.0f} s): {step.what}")
        lines += [f"  $ {shlex.join(cmd)}" for cmd in commands(step.name, folder)]
    lines += ["", "tolerances:",
              f"  kernel vs --step-ms ±{gc.STEP_KERNEL_REL:.0%}; the step as the probe times it ±{gc.STEP_HOST_REL:.0%} "
              f"±{gc.STEP_HOST_ABS_MS} ms",
              f"  NVML busy >= {gc.BUSY_MIN_PCT:.0f} % back to back, {gc.HALF_DUTY_PCT:.0f} ± {gc.HALF_DUTY_TOL_PCT:.0f} % "
              "at half duty",
              f"  copies <= {gc.LINK_OVER:.2f}x the link's nominal rate; the large pinned one >= {gc.LINK_UNDER:.0%} of it; "
              f"pinned time <= {gc.PINNED_SLACK:.2f}x pageable",
              f"  watch's GPU idle in waits vs the loop's events around the same waits ±{gc.IDLE_REL:.0%} "
              f"±{gc.IDLE_ABS_PER_WAIT_MS} ms a wait, and within the GPU's whole idle; "
              f"idle share starved >= {gc.STARVED_MIN_IDLE:.0%}, fed <= {gc.FED_MAX_IDLE:.0%}",
              f"  tune: a pick of >= {gc.TUNE_MIN_WORKERS} workers, >= {gc.TUNE_MIN_GAIN}x the job as written",
              "  facts: equal to nvidia-smi (memory ±1 MiB; the current link: either nvidia-smi reading)"]
    return "\n".join(lines) + "\n"


# ---- running a step ------------------------------------------------------------------------------

@dataclass
class Ran:
    code: int | None  # None: stopped at its limit
    wall_s: float
    why: str = ""  # one line for a run that did not end well


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the step's process group (loaderdoc then stops cleanly), then everything below
    it killed, in whatever session."""
    import contextlib

    import psutil

    from loaderdoc.probing.reaper import kill_tree

    try:  # before the SIGTERM: a process whose parent dies goes to init, out of the tree's reach
        below = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        below = []
    with contextlib.suppress(ProcessLookupError, PermissionError, subprocess.TimeoutExpired):
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(GRACE_S)
    kill_tree(proc.pid)
    killed = []
    for process in below:  # is_running() compares start times: a reused pid is left alone
        with contextlib.suppress(psutil.Error):
            if process.is_running():
                process.kill()
                killed.append(process)
    psutil.wait_procs(killed, timeout=3.0)  # gone (or a zombie) when the step is reported stopped


STOPS = (signal.SIGINT, signal.SIGTERM)


def _defer_stops(deferred: list[int]) -> dict[int, object] | None:
    """SIGINT and SIGTERM noted in ``deferred`` instead of handled (None off the main thread,
    where no handler can be set: nothing is deferred there)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return {sig: signal.signal(sig, lambda signum, _frame: deferred.append(signum)) for sig in STOPS}


def _restore_stops(previous: dict[int, object] | None, deferred: list[int]) -> None:
    """The handlers back, and a stop that came meanwhile delivered to them now."""
    if previous is None:
        return
    for sig, handler in previous.items():
        signal.signal(sig, handler)
    for sig in deferred:
        signal.raise_signal(sig)


def run_process(cmd: list[str], log: Path, limit_s: float, *, stdout: Path | None = None,
                env: dict[str, str] | None = None) -> Ran:
    """Run ``cmd`` to its end or to ``limit_s``; its output in ``log`` (stdout in ``stdout`` when
    given). Nothing it started survives a timeout or a Ctrl+C."""
    started = time.monotonic()
    with open(log, "a", encoding="utf-8") as err, open(stdout or log, "a", encoding="utf-8") as out:
        err.write(f"$ {' '.join(cmd)}\n")
        err.flush()
        # a Ctrl+C (or the SIGTERM main() turns into one) that lands while the step starts, before
        # its Popen is known here, would leave it running: it waits until the step can be stopped
        deferred: list[int] = []
        previous = _defer_stops(deferred)
        try:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, cwd=REPO,
                                    start_new_session=True)
        except OSError as exc:
            _restore_stops(previous, deferred)
            return Ran(None, 0.0, f"{cmd[0]} did not start: {exc.strerror or exc}")
        try:
            _restore_stops(previous, deferred)
            code = proc.wait(limit_s)
        except subprocess.TimeoutExpired:
            _stop_group(proc)
            return Ran(None, time.monotonic() - started, f"stopped at its time limit, {limit_s:.0f} s")
        except BaseException:  # Ctrl+C, SIGTERM: nothing of it outlives us
            _stop_group(proc)
            raise
    return Ran(code, time.monotonic() - started)


def _last_line(log: Path) -> str:
    try:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip() and not ln.startswith("$ ")]
    except OSError:
        return ""
    return lines[-1][:200] if lines else ""


def _write(path: Path, text: str) -> None:
    from loaderdoc.base.safe_write import write_text

    write_text(path, text, force=False)


def _load(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_step(step: Step, folder: Path, limit_s: float, env: dict[str, str]) -> Ran:
    """Run one step and leave its figures in figures/<name>.json (an error where it measured none)."""
    log = folder / "logs" / f"{step.name}.log"
    fig_path = folder / "figures" / f"{step.name}.json"
    deadline = time.monotonic() + limit_s
    cmds = commands(step.name, folder)
    ran = Ran(None, 0.0)

    def left() -> float:
        return max(1.0, deadline - time.monotonic())

    if step.name == "facts":  # all three run: the facts are worth keeping without nvidia-smi
        smi_before, facts_cmd, smi_after = cmds
        wall, why, code = 0.0, None, 0
        for cmd, out in ((smi_before, "nvidia-smi-before.csv"), (facts_cmd, "facts.json"), (smi_after, "nvidia-smi-after.csv")):
            ran = run_process(cmd, log, min(30.0, left()), stdout=folder / out, env=env)
            wall += ran.wall_s
            if ran.code != 0 and why is None:
                name = "loaderdoc facts" if cmd[0] == sys.executable else cmd[0]
                why, code = ran.why or f"`{name}` exited {ran.code}: {_last_line(log)}", ran.code
        _write(fig_path, json.dumps({"error": why}) + "\n")
        return Ran(code, wall, why or "")
    if step.name == "probe-jpeg":
        return run_jpeg(folder, log, fig_path, left, env)
    stdout = folder / "reports" / "probe.json" if step.name == "probe" else None
    ran = run_process(cmds[0], log, left(), stdout=stdout, env=env)
    if step.name in ("consumer", "h2d"):
        if not fig_path.exists():
            why = ran.why or f"exited {ran.code}: {_last_line(log)}"
            _write(fig_path, json.dumps({"error": why}) + "\n")
            return Ran(ran.code, ran.wall_s, why)
        return ran
    if ran.code is None:  # stopped: its report, if any, is partial
        _write(fig_path, json.dumps({"error": ran.why}) + "\n")
        return ran
    reports = folder / "reports"
    if step.name.startswith("watch-"):
        mode = step.name.removeprefix("watch-")
        figures = gc.watch_figures(_load(reports / f"{step.name}.json"), _load(reports / f"loop-{mode}.json"), ran.code)
    elif step.name == "probe":
        figures = gc.probe_figures(_load(reports / "probe.json"), ran.code, PROBE_STEP_MS)
    else:
        figures = gc.tune_figures(_load(reports / "tune.json"), ran.code)
    _write(fig_path, json.dumps(figures, indent=1) + "\n")
    return ran


def run_jpeg(folder: Path, log: Path, fig_path: Path, left, env: dict[str, str]) -> Ran:
    """The probe-jpeg step: its three commands in turn, each fed by the one before."""
    reports = folder / "reports"
    try:
        from benchmarks.torchvision_pipeline import import_torchvision

        import_torchvision()
    except Exception as exc:
        why = f"torchvision does not import here ({type(exc).__name__}: {exc}); pip install torchvision pillow"
        _write(fig_path, json.dumps({"error": why}) + "\n")
        return Ran(None, 0.0, why)
    step_cmd = jpeg_commands(folder, STEP_MS_PLACEHOLDER)[0]
    wall = 0.0
    ran = run_process(step_cmd, log, left(), env=env)
    wall += ran.wall_s
    step = _load(reports / "jpeg-step.json")
    if ran.code != 0 or not step:
        why = ran.why or f"the step alone: exited {ran.code}: {_last_line(log)}"
        _write(fig_path, json.dumps({"error": why}) + "\n")
        return Ran(ran.code, wall, why)
    _, probe_cmd, job_cmd = jpeg_commands(folder, f"{step['step_ms']:.1f}")
    ran = run_process(probe_cmd, log, left(), stdout=reports / "probe-jpeg.json", env=env)
    wall += ran.wall_s
    probe_code = ran.code
    job, job_code = None, None
    if ran.code == 0 and (reports / "probe-jpeg.toml").exists():
        ran = run_process(job_cmd, log, left(), env=env)
        wall += ran.wall_s
        job_code = ran.code
        job = _load(reports / "jpeg-job.json")
    figures = gc.jpeg_figures(step, _load(reports / "probe-jpeg.json"), probe_code, job, job_code)
    _write(fig_path, json.dumps(figures, indent=1) + "\n")
    return Ran(job_code if job_code is not None else probe_code, wall, ran.why)


def run_all(folder: Path, names: list[str]) -> int:
    import platform

    import torch

    for sub in ("figures", "reports", "logs"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.pop("LOADERDOC_TUNE_TRIAL", None)
    _write(folder / "run.json", json.dumps({
        "schema": gc.SCHEMA, "synthetic": False, "started_at": time.strftime("%Y-%m-%d %H:%M:%S %z"),
        "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
        "host": platform.node(), "steps": names, "limits_s": {s.name: s.limit_s for s in STEPS if s.name in names},
    }, indent=1) + "\n")
    deadline = time.monotonic() + TOTAL_S
    for step in STEPS:
        if step.name not in names:
            continue
        left = deadline - time.monotonic()
        if left < 5.0:
            _write(folder / "figures" / f"{step.name}.json",
                   json.dumps({"error": f"not run: the {TOTAL_S:.0f} s for all steps were spent"}) + "\n")
            print(f"gpu_acceptance: {step.name}: not run, out of time", file=sys.stderr, flush=True)
            continue
        print(f"gpu_acceptance: {step.name}: {step.what} (limit {min(step.limit_s, left):.0f} s) ...",
              file=sys.stderr, flush=True)
        ran = run_step(step, folder, min(step.limit_s, left), env)
        print(f"gpu_acceptance: {step.name}: {ran.wall_s:.0f} s" + (f"; {ran.why}" if ran.why else ""),
              file=sys.stderr, flush=True)
    run, checks = gc.judge_folder(folder)
    text = gc.table(run, checks)
    _write(folder / "checks.json", gc.checks_json(checks))
    _write(folder / "table.txt", text)
    sys.stdout.write(text)
    return gc.exit_code(checks)


def replay(folder: Path) -> int:
    run, checks = gc.judge_folder(folder)
    sys.stdout.write(gc.table(run, checks))
    return gc.exit_code(checks)


def _terminate_as_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.dry_run:
            sys.stdout.write(plan())
            return 0
        if args.replay is not None:
            return replay(Path(args.replay))
        folder = Path(args.out)
        check_out_folder(folder)
        reason = cuda_skip_reason()
        if reason:
            print(f"gpu_acceptance: skipped: {reason}; nothing measured", file=sys.stderr)
            return gc.EXIT_SKIPPED
        from loaderdoc.probing.reaper import contained

        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
        with contained():  # whatever a step leaves (a worker in another session) goes with us
            return run_all(folder, args.steps)
    except (UsageError, gc.FolderError) as exc:
        print(f"gpu_acceptance: error: {exc}", file=sys.stderr)
        return gc.EXIT_USAGE
    except KeyboardInterrupt:
        print("gpu_acceptance: interrupted; the results so far are in the folder", file=sys.stderr)
        return gc.EXIT_INTERRUPTED
    except Exception:  # a bug here, not a finding about the GPU: never exit 0 or 1 for it
        import traceback

        traceback.print_exc()
        print(f"gpu_acceptance: internal error (exit {EXIT_INTERNAL}); the traceback is above", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
