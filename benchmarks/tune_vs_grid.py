#!/usr/bin/env python
"""`loaderdoc tune`'s pick against an exhaustive grid of real runs of the same job, with the
probe's pick beside it.

    PYTHONPATH=src:TVSITE python benchmarks/tune_vs_grid.py [--jobs cpu_cnn,io_bound,lightning_fit]
        [--steps 40] [--reruns 3] [--seed 0] [--quick] [--dry-run] [--table-from FILE]

Three real training jobs (``benchmarks/watch_loops/``, see ``benchmarks/watch_fixes.py`` for what
they are and how torchvision is put beside the venv), each run as its author wrote it and long
enough that no run ends before its window settled (``--steps 1000000``; ``lightning_fit``
``--epochs 1000``: every run is stopped once measured):

- ``cpu_cnn``: a CNN trained on the CPU over 2560 real JPEGs (ImageFolder, the ImageNet training
  transforms), batch 64, ``num_workers=0`` as written;
- ``io_bound``: 8 ms of sleep a sample, batch 8, a 16 ms sleeping (GPU-like) step,
  ``num_workers=8`` as written;
- ``lightning_fit``: ``Trainer.fit`` of the same CNN over the same images, train and val loaders
  with ``num_workers=0`` (only the training loader is tuned; a rate is batches over the training
  loop's own time, waits, steps and epochs' first batches, so the validation between epochs is in
  neither the grid's rates nor tune's, only in each run's duration).

For each job:

1. **tune**: ``loaderdoc tune --report R.json --steps N -- JOB`` in a subprocess (its default
   budget, 900 s, and trials, 6): its wall time, its trials and its pick.
2. **the probe** (where its data can be probed): ``loaderdoc probe --dataset MOD:FACTORY
   --batch-size B --step-ms S --json``, with the job's own Dataset (the factories below) and ``S``
   the step time tune's first trial measured (``step_ms`` of trial 1). The probe simulates the
   step by sleeping, so for ``cpu_cnn``, whose step is CPU work, it is told the step's length but
   not that the step holds the CPUs. ``lightning_fit`` is not probed: the probe takes a Dataset,
   not a ``Trainer.fit`` (its dataset is ``cpu_cnn``'s, whose row shows what the probe makes of it).
3. **the grid**: ``tuning.trial.run_trial`` (what tune runs for each trial, inside
   ``probing.reaper.contained()`` as the CLI runs it) for ``num_workers`` 0 .. 4x the CPUs
   (``os.sched_getaffinity``), each with ``prefetch_factor`` 2 and 4 (0 workers once), with the
   same ``TrialLimits(steps=N)`` as tune, in a shuffled order (``--seed``), workers not persistent
   (as the jobs write them); tune's or the probe's pick is added where the grid lacks it (an extra
   row, not counted in the grid's time: e.g. tune's persistent-workers twin). The training
   loader is the one tune's report names (``loader.key``; where tune failed, a first run of the job
   as written names it). Each run: steps/s of its steady window (the slowest rank's; one here), the
   workers' PSS (peak in the window), its whole duration (start-up and stop included). The grid's
   time is the sum of its runs' durations (one pass).
4. **the grid against itself**: the grid's best ``--reruns`` (3) configurations run once more; their
   spread (``|a - b| / max(a, b)``, the largest of them) is the grid's reproducibility on this
   machine at that moment. Every configuration's rate is the mean of its runs.

Verdicts (per job, :func:`judge`): **speed** the grid's rate at tune's pick is >= 97 % of the
grid's best, or within the grid's spread of it; **time** tune's wall time is <= 25 % of the grid's;
**memory** the pick has no more workers than the leanest grid configuration within 3 % of the best
(the fewest workers, then the least worker PSS). The probe's pick is shown beside tune's with its
predicted / measured rate at the pick and the grid's rate there (no verdict: it measures a
simulated step, not the job).

``--quick``: a smoke test (workers 0, 2, 4 at prefetch 2, 2 reruns); the verdicts mean nothing
there. ``--dry-run``: prints the commands and the grid, runs nothing. ``--table-from FILE``: judges
a saved run again and prints its table.

How long: a grid run is a whole run of the job (start-up, the queue drained, a window of at
least ``--steps`` batches and 3 s whose halves agree within 10 %, else up to 4x ``--steps``, the
stop), so each job costs 17 grid runs, 3 reruns, up to 2 extras and tune's 3-6 trials. Estimated for
the quiet 2-CPU dev VM from the loops' quiet rates (``benchmarks/watch_fixes.py``: about 7 steps/s
for the CNNs at 0-2 workers, 12-58 for io_bound) and a start-up of 3-5 s (Lightning's import
+5 s): at ``--steps 20`` about 15 s a CNN run, 20 s a Lightning run, 7 s an io_bound run, some
18-22 minutes for the three jobs; at tune's default ``--steps 40`` (windows over about one
40-batch epoch, each with its workers' restart) some 25-30 minutes. Not yet measured quiet: the
one smoke run so far (``--quick --jobs cpu_cnn``, 2026-11-24, beside another session's tests, load
4-5) took 24-75 s a run, tune 223 s for 2 trials, 9.4 minutes in all.

Results: ``benchmarks/results/tune_vs_grid-<timestamp>.json`` (written after each job, so a run cut
short keeps what it measured) and the table printed at the end. Not a pass/fail test;
``tests/test_tune_bench.py`` checks the verdicts and the table on fake numbers. Needs torch,
torchvision and Pillow, lightning for ``lightning_fit``; the first run generates the images (about
15 s). The machine must be otherwise quiet: these are CPU-bound jobs on all the CPUs.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LOOPS_DIR = REPO / "benchmarks" / "watch_loops"
RESULTS = REPO / "benchmarks" / "results"

SPEED_BAR = 0.97  # the pick's grid rate over the grid's best
TIME_BAR = 0.25  # tune's wall time over the grid's
LEAN_TOLERANCE = 0.03  # the leanest configuration within this of the best
FOREVER = "1000000"  # steps (epochs): a run the trial stops, never one that ends

Key = tuple[int, int, bool]  # (num_workers, prefetch depth (0 without workers), persistent_workers)


@dataclass
class Job:
    name: str
    script: str
    args: list[str]
    batch_size: int
    factory: str | None  # "module:function" returning the job's Dataset, for the probe; None: not probed
    why_not_probed: str = ""
    label: str = ""
    extra: dict[str, Any] = field(default_factory=dict)


JOBS = {
    "cpu_cnn": Job("cpu_cnn", "cpu_cnn", ["--steps", FOREVER], 64, "benchmarks.tune_vs_grid:cpu_cnn_dataset",
                   label="CPU CNN over JPEGs, num_workers=0"),
    "io_bound": Job("io_bound", "io_bound", ["--steps", FOREVER], 8, "benchmarks.tune_vs_grid:io_bound_dataset",
                    label="sleeping reads + sleeping step, num_workers=8"),
    "lightning_fit": Job("lightning_fit", "lightning_fit", ["--epochs", FOREVER], 64, None,
                         why_not_probed="Trainer.fit (the probe takes a Dataset; this one is cpu_cnn's)",
                         label="Lightning Trainer.fit, num_workers=0"),
}


# ---- the probe's datasets (``loaderdoc probe --dataset benchmarks.tune_vs_grid:...``) -------------
def _loops_on_path() -> None:
    if str(LOOPS_DIR) not in sys.path:
        sys.path.insert(0, str(LOOPS_DIR))


def cpu_cnn_dataset():
    """cpu_cnn's training set: the JPEG ImageFolder with the ImageNet training transforms."""
    _loops_on_path()
    import _common

    return _common.train_folder(_common.image_root())


def io_bound_dataset():
    """io_bound's training set: 8 ms of sleep a sample."""
    _loops_on_path()
    import io_bound

    return io_bound.SlowReads()


# ---- the grid (pure) -------------------------------------------------------------------------------
def grid_keys(cpus: int, quick: bool = False) -> list[Key]:
    """0 workers, then 1 .. 4x the CPUs each at prefetch 2 and 4 (quick: 2 and 4 workers at 2);
    workers not persistent (as the three jobs write them; tune's persistent twin is an extra row)."""
    if quick:
        return [(0, 0, False), (2, 2, False), (4, 2, False)]
    return [(0, 0, False)] + [(n, pf, False) for n in range(1, 4 * cpus + 1) for pf in (2, 4)]


def key_of(workers: int, prefetch: int | None, persistent: bool | None = None) -> Key:
    """As TrialSettings.key compares settings (torch's prefetch 2 where unset), with persistence."""
    return (workers, (prefetch or 2) if workers else 0, bool(persistent) and workers > 0)


def as_key(value: list | tuple) -> Key:
    """A key read back from JSON (a saved file's two-element keys: not persistent)."""
    return (int(value[0]), int(value[1]), bool(value[2]) if len(value) > 2 else False)


def key_text(key: Key | list | None) -> str:
    if key is None:
        return "-"
    key = as_key(key)
    return "0" if key[0] == 0 else f"{key[0]}/pf{key[1]}" + ("/pw" if key[2] else "")


def settings_key(settings: dict[str, Any]) -> Key:
    """The key of a report's settings (tune's TrialSettings, the probe's LoaderSettings)."""
    return key_of(settings["num_workers"], settings.get("prefetch_factor"), settings.get("persistent_workers"))


def row_rate(row: dict[str, Any]) -> float | None:
    """A configuration's rate: the mean of its measured runs (None: none measured)."""
    rates = [r["steps_per_s"] for r in row["runs"] if r.get("steps_per_s")]
    return statistics.fmean(rates) if rates else None


def row_pss(row: dict[str, Any]) -> float | None:
    pss = [r["workers_pss_bytes"] for r in row["runs"] if r.get("steps_per_s") and r.get("workers_pss_bytes")]
    return statistics.fmean(pss) if pss else None


def rates_of(grid: dict[Key, dict[str, Any]]) -> dict[Key, float]:
    return {k: rate for k, row in grid.items() if (rate := row_rate(row)) is not None}


def best_and_lean(rates: dict[Key, float], pss: dict[Key, float | None],
                  tolerance: float = LEAN_TOLERANCE) -> tuple[Key | None, Key | None]:
    """The fastest configuration, and the leanest within ``tolerance`` of it: the fewest workers,
    then the least worker PSS (0 workers: none)."""
    if not rates:
        return None, None
    best = max(rates, key=lambda k: (rates[k], -k[0]))
    near = [k for k in rates if rates[k] >= rates[best] * (1 - tolerance)]
    lean = min(near, key=lambda k: (k[0], pss.get(k) or 0.0, k[1]))
    return best, lean


def rerun_keys(grid: dict[Key, dict[str, Any]], count: int) -> list[Key]:
    """The ``count`` fastest configurations of the grid's first pass (extras not included)."""
    first = {k: row["runs"][0]["steps_per_s"] for k, row in grid.items()
             if not row.get("extra") and row["runs"] and row["runs"][0].get("steps_per_s")}
    return sorted(first, key=lambda k: (-first[k], k))[:count]


def spread(grid: dict[Key, dict[str, Any]]) -> float | None:
    """The grid's reproducibility: the largest relative difference between two runs of one
    configuration (the reruns'), ``|a - b| / max(a, b)``; None where nothing ran twice."""
    out = None
    for row in grid.values():
        rates = [r["steps_per_s"] for r in row["runs"] if r.get("steps_per_s")]
        if len(rates) >= 2:
            s = (max(rates) - min(rates)) / max(rates)
            out = s if out is None else max(out, s)
    return out


def grid_seconds(grid: dict[Key, dict[str, Any]]) -> float:
    """One pass of the grid: the first run of each of its configurations (extras and reruns not counted)."""
    return sum(row["runs"][0]["duration_s"] for row in grid.values() if not row.get("extra") and row["runs"])


def judge(res: dict[str, Any]) -> dict[str, Any]:
    """The grid's best, leanest within 3 % and spread; tune's (and the probe's) pick against them.
    ``res["grid"]``: rows {"key": [n, pf, persistent], "runs": [{steps_per_s, workers_pss_bytes, duration_s}],
    "extra": bool}; ``res["tune"]``: {"pick": key or None, "wall_s"}; ``res["probe"]``:
    {"pick": key} or {"skipped": why}. Also run on a saved file (``--table-from``)."""
    grid = {as_key(row["key"]): row for row in res.get("grid") or []}
    rates = rates_of(grid)
    pss = {k: row_pss(row) for k, row in grid.items()}
    best, lean = best_and_lean(rates, pss)
    noise = spread(grid)
    seconds = grid_seconds(grid)
    res.update({"best": list(best) if best else None, "best_steps_per_s": rates.get(best) if best else None,
                "lean": list(lean) if lean else None, "lean_steps_per_s": rates.get(lean) if lean else None,
                "lean_pss_bytes": pss.get(lean) if lean else None, "spread": noise, "grid_s": seconds,
                "grid_configs": sum(1 for row in grid.values() if not row.get("extra"))})
    tune = res.get("tune") or {}
    pick = as_key(tune["pick"]) if tune.get("pick") else None
    share = rates[pick] / rates[best] if pick in rates and best else None
    time_share = tune["wall_s"] / seconds if tune.get("wall_s") is not None and seconds > 0 else None
    verdict = {
        "share_of_best": share,
        "pick_grid_steps_per_s": rates.get(pick) if pick else None,
        "pick_pss_bytes": pss.get(pick) if pick else None,
        "time_share": time_share,
        "fast_enough": share is not None and (share >= SPEED_BAR or (noise is not None and share >= 1 - noise)),
        "within_noise_only": share is not None and share < SPEED_BAR and noise is not None and share >= 1 - noise,
        "quick_enough": time_share is not None and time_share <= TIME_BAR,
        "lean_enough": pick is not None and lean is not None and pick[0] <= lean[0],
    }
    verdict["passed"] = verdict["fast_enough"] and verdict["quick_enough"] and verdict["lean_enough"]
    res["verdict"] = verdict
    probe = res.get("probe") or {}
    if probe.get("pick"):
        ppick = as_key(probe["pick"])
        probe["grid_steps_per_s"] = rates.get(ppick)
        probe["share_of_best"] = rates[ppick] / rates[best] if ppick in rates and best else None
    return res


# ---- the table --------------------------------------------------------------------------------------
def _f(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _mib(v: float | None) -> str:
    return "-" if v is None else f"{v / 2**20:.0f} MiB"


def trials_text(trials: list[dict[str, Any]]) -> str:
    """``0:6.9 2/pf2:7.1 1/pf2:failed``: each of tune's trials, its settings and rate (or status)."""
    return " ".join(f"{key_text(t['key'])}:{_f(t.get('steps_per_s')) if t.get('steps_per_s') else t.get('status')}"
                    for t in trials)


def tune_text(res: dict[str, Any]) -> str:
    tune = res.get("tune") or {}
    if not tune.get("pick"):
        return f"no pick ({tune.get('error') or tune.get('stopped') or 'failed'})"
    return f"{key_text(tune['pick'])} ({_f(tune.get('pick_steps_per_s'))} in tune)"


def probe_text(res: dict[str, Any]) -> str:
    probe = res.get("probe") or {}
    if probe.get("skipped"):
        return f"not probed: {probe['skipped']}"
    if not probe.get("pick"):
        return f"no pick ({probe.get('error') or 'failed'})"
    return (f"{key_text(probe['pick'])} (pred {_f(probe.get('predicted_per_s'))} / meas "
            f"{_f(probe.get('measured_per_s'))}; grid {_f(probe.get('grid_steps_per_s'))} = "
            f"{_pct(probe.get('share_of_best'))}; {_f(probe.get('wall_s'), '.0f')} s)")


def verdict_text(res: dict[str, Any]) -> str:
    v = res.get("verdict") or {}
    if not v:
        return "-"
    fails = [name for name, flag in (("speed", v["fast_enough"]), ("time", v["quick_enough"]),
                                      ("memory", v["lean_enough"])) if not flag]
    if fails:
        return "no: " + ", ".join(fails)
    return "yes (speed within the grid's noise)" if v.get("within_noise_only") else "yes"


def table(results: list[dict[str, Any]]) -> str:
    head = ("job", "grid best", "leanest within 3%", "grid spread", "grid s (runs)", "tune pick",
            "grid rate at pick", "tune s (% grid)", "tune trials", "probe pick", "pass")
    rows = [head]
    for res in results:
        v = res.get("verdict") or {}
        tune = res.get("tune") or {}
        trials = trials_text(tune.get("trials") or [])
        rows.append((
            res["job"],
            f"{key_text(res.get('best'))} ({_f(res.get('best_steps_per_s'))})",
            f"{key_text(res.get('lean'))} ({_f(res.get('lean_steps_per_s'))}, {_mib(res.get('lean_pss_bytes'))})",
            _pct(res.get("spread")),
            f"{_f(res.get('grid_s'), '.0f')} ({res.get('grid_configs', 0)})",
            tune_text(res),
            f"{_f(v.get('pick_grid_steps_per_s'))} = {_pct(v.get('share_of_best'))}",
            f"{_f(tune.get('wall_s'), '.0f')} ({_pct(v.get('time_share'))})",
            trials or "-",
            probe_text(res),
            verdict_text(res),
        ))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


def grid_table(res: dict[str, Any]) -> str:
    """One job's grid, every configuration: each run's rate, worker PSS and duration."""
    lines = [f"{res['job']}: {'config':<8}{'steps/s (runs)':<22}{'mean':>7}{'workers PSS':>13}{'run s':>8}"]
    for row in sorted(res.get("grid") or [], key=lambda r: as_key(r["key"])):
        runs = " ".join(_f(r.get("steps_per_s")) if r.get("steps_per_s") else r.get("status", "?") for r in row["runs"])
        durations = " ".join(f"{r['duration_s']:.0f}" for r in row["runs"])
        lines.append(f"{'':<{len(res['job']) + 2}}{key_text(row['key']) + ('*' if row.get('extra') else ''):<8}"
                     f"{runs:<22}{_f(row_rate(row)):>7}{_mib(row_pss(row)):>13}{durations:>8}")
    return "\n".join(lines)


# ---- running ------------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)  # keeps the caller's PYTHONPATH (torchvision outside the venv)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), str(REPO), env.get("PYTHONPATH")) if p)
    return env


def job_command(job: Job) -> list[str]:
    if job.extra.get("command"):  # a program of its own (benchmarks/real_programs.py), not one of the loops
        return list(job.extra["command"])
    return [sys.executable, str(LOOPS_DIR / f"{job.script}.py"), *job.args]


def tune_command(job: Job, steps: int, report: Path, options: list[str] | None = None) -> list[str]:
    """``options``: more of tune's options (``--trials 3``), before the ``--``."""
    return [sys.executable, "-m", "loaderdoc", "tune", "--report", str(report), "--steps", str(steps),
            *(options or []), "--", *job_command(job)]


def probe_command(job: Job, step_ms: float) -> list[str]:
    return [sys.executable, "-m", "loaderdoc", "probe", "--dataset", job.factory or "", "--batch-size",
            str(job.batch_size), "--step-ms", f"{step_ms:.1f}", "--json", "--no-progress"]


def run_tune(job: Job, steps: int, workdir: Path, options: list[str] | None = None) -> dict[str, Any]:
    report = workdir / f"{job.name}-tune.json"
    cmd = tune_command(job, steps, report, *([options] if options else []))
    print(f"  tune: {shlex.join(cmd)}", flush=True)
    started = time.monotonic()
    lines: list[str] = []
    with open(workdir / f"{job.name}-tune.txt", "w") as text:  # its table; its progress (stderr) is shown as it comes
        proc = subprocess.Popen(cmd, stdout=text, stderr=subprocess.PIPE, text=True, env=_env(),
                                cwd=job.extra.get("cwd") or REPO)  # a program that writes checkpoints: its own folder
        for line in proc.stderr:
            lines.append(line.rstrip())
            print(f"    | {line.rstrip()}", flush=True)
        code = proc.wait()
    wall = time.monotonic() - started
    out: dict[str, Any] = {"wall_s": wall, "exit_code": code, "stderr_tail": lines[-30:],
                           "table": (workdir / f"{job.name}-tune.txt").read_text().splitlines()}
    if not report.exists():
        out["error"] = f"exit {code}, no report"
        return out
    data = json.loads(report.read_text())
    pick = data.get("pick")
    trials = data.get("trials") or []
    first = trials[0] if trials else {}
    out.update({
        "report": data, "elapsed_s": data.get("elapsed_s"), "stopped": data.get("stopped"),
        "key": (data.get("loader") or {}).get("key"),
        "pick": list(settings_key(pick["settings"])) if pick else None,
        "pick_steps_per_s": pick.get("steps_per_s") if pick else None,
        "first_step_ms": first.get("step_ms"),
        "trials": [{"key": list(settings_key(t["settings"])),
                    "steps_per_s": t.get("steps_per_s"), "status": t.get("status"), "duration_s": t.get("duration_s"),
                    "predicted_per_s": t.get("predicted_per_s"), "purpose": t.get("purpose")} for t in trials],
    })
    print(f"  tune: {wall:.0f} s, {len(trials)} trials ({trials_text(out['trials'])}), "
          f"pick {key_text(out['pick'])}, stopped: {out['stopped']}", flush=True)
    return out


def run_probe(job: Job, step_ms: float | None) -> dict[str, Any]:
    if job.factory is None:
        return {"skipped": job.why_not_probed}
    if not step_ms:
        return {"error": "tune's first trial measured no step time"}
    cmd = probe_command(job, step_ms)
    print(f"  probe: {shlex.join(cmd)}", flush=True)
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=600)
    wall = time.monotonic() - started
    try:
        data = json.loads(proc.stdout)
    except json.JSONDecodeError:
        print(proc.stderr[-2000:], flush=True)
        return {"error": f"exit {proc.returncode}, no JSON", "wall_s": wall}
    rec = data.get("recommended")
    pred = data.get("prediction") or {}
    out = {"wall_s": wall, "exit_code": proc.returncode, "step_ms": step_ms, "elapsed_s": data.get("elapsed_s"),
           "stopped": data.get("stopped"), "runs": len(data.get("results") or []),
           "pick": list(settings_key(rec)) if rec else None,
           "pick_settings": rec, "predicted_per_s": pred.get("pick_predicted_per_s"),
           "measured_per_s": pred.get("pick_measured_per_s")}
    print(f"  probe: {wall:.0f} s, pick {key_text(out['pick'])} (predicted {_f(out['predicted_per_s'])}, "
          f"measured {_f(out['measured_per_s'])})", flush=True)
    return out


def trial_entry(trial) -> dict[str, Any]:
    return {"steps_per_s": trial.steps_per_s if trial.ok else None, "status": trial.status, "reason": trial.reason,
            "workers_pss_bytes": trial.workers_pss_bytes, "duration_s": trial.duration_s,
            "first_batch_s": trial.first_batch_s, "window_steps": trial.window_steps, "window_s": trial.window_s,
            "settled": trial.settled, "applied": trial.applied, "step_ms": trial.step_ms,
            "wait_share": trial.wait_share}


def run_grid(job: Job, key: str | None, keys: list[Key], extras: list[Key], steps: int, reruns: int,
             seed: int) -> tuple[dict[Key, dict[str, Any]], str | None]:
    """The grid's pass in a shuffled order, the extras, then the best ``reruns`` again. Returns the
    rows and the training loader's key (from a first run as written where none was given)."""
    from loaderdoc.probing.reaper import contained
    from loaderdoc.tuning.result import TrialSettings
    from loaderdoc.tuning.trial import TrialLimits, run_trial

    command = job_command(job)
    limits = TrialLimits(steps=steps)
    grid: dict[Key, dict[str, Any]] = {}
    number = 0

    def one(k: Key) -> dict[str, Any]:
        nonlocal number
        number += 1
        settings = TrialSettings(num_workers=k[0], prefetch_factor=k[1] if k[0] else None,
                                 persistent_workers=True if k[2] else None)
        run = run_trial(command, number, settings, key, limits)
        entry = trial_entry(run.trial)
        print(f"  grid {number}: {key_text(k)}: {_f(entry['steps_per_s'])} steps/s"
              f"{'' if entry['steps_per_s'] else ' ' + str(entry['status']) + ': ' + str(entry['reason'])}, "
              f"PSS {_mib(entry['workers_pss_bytes'])}, {entry['duration_s']:.0f} s", flush=True)
        return entry

    with contained():
        if key is None:
            first = run_trial(command, 0, None, None, limits)
            key = first.key
            print(f"  the training loader (a first run as written): {key}", flush=True)
            if key is None:
                return grid, None
        order = list(keys)
        random.Random(seed).shuffle(order)
        for k in order:
            grid[k] = {"key": list(k), "runs": [one(k)], "extra": False}
        for k in extras:
            if k not in grid:
                grid[k] = {"key": list(k), "runs": [one(k)], "extra": True}
        for k in rerun_keys(grid, reruns):
            grid[k]["runs"].append(one(k))
    return grid, key


def run_job(job: Job, steps: int, keys: list[Key], reruns: int, seed: int, workdir: Path) -> dict[str, Any]:
    print(f"\n== {job.name}: {job.label}", flush=True)
    started = time.monotonic()
    tune = run_tune(job, steps, workdir)
    probe = run_probe(job, tune.get("first_step_ms"))
    extras = [as_key(p["pick"]) for p in (tune, probe) if p.get("pick")]
    grid, key = run_grid(job, tune.get("key"), keys, extras, steps, reruns, seed)
    res = {"job": job.name, "label": job.label, "command": job_command(job), "steps": steps, "loader_key": key,
           "tune": tune, "probe": probe, "grid": list(grid.values()), "wall_s": time.monotonic() - started}
    res = judge(res)
    print(grid_table(res), flush=True)
    print(f"  {job.name}: {res['wall_s']:.0f} s in all (tune, probe, grid, reruns)", flush=True)
    return res


def _machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "affinity": len(os.sched_getaffinity(0)), "python": platform.python_version(),
            "load_at_end": os.getloadavg(),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=REPO).stdout.strip() or None}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", default=",".join(JOBS))
    parser.add_argument("--steps", type=int, default=40, help="TrialLimits.steps, tune's --steps (default 40)")
    parser.add_argument("--reruns", type=int, help="the grid's best configurations run again (default 3; quick 2)")
    parser.add_argument("--quick", action="store_true", help="a smoke test: workers 0, 2, 4 at prefetch 2")
    parser.add_argument("--dry-run", action="store_true", help="print the commands and the grid; run nothing")
    parser.add_argument("--seed", type=int, default=0, help="the grid's shuffled order")
    parser.add_argument("--table-from", metavar="FILE", help="judge a saved run again and print its table")
    args = parser.parse_args(argv)
    if args.table_from:
        results = [judge(r) for r in json.loads(Path(args.table_from).read_text())["jobs"]]
        print(table(results))
        return 0
    names = [n for n in args.jobs.split(",") if n]
    unknown = [n for n in names if n not in JOBS]
    if unknown:
        parser.error(f"unknown job(s) {', '.join(unknown)}; known: {', '.join(JOBS)}")
    cpus = len(os.sched_getaffinity(0))
    keys = grid_keys(cpus, args.quick)
    reruns = args.reruns if args.reruns is not None else (2 if args.quick else 3)
    if args.dry_run:
        for name in names:
            job = JOBS[name]
            print(f"{name}:\n  tune:  {shlex.join(tune_command(job, args.steps, Path('R.json')))}")
            print(f"  probe: {shlex.join(probe_command(job, 0.0)) if job.factory else 'not probed: ' + job.why_not_probed}"
                  + (" (--step-ms: tune's first trial's step)" if job.factory else ""))
            print(f"  grid:  {len(keys)} configurations ({', '.join(key_text(k) for k in keys)}), "
                  f"then the best {reruns} again; TrialLimits(steps={args.steps})")
        return 0

    load = os.getloadavg()[0]
    if load > 0.5 * cpus:
        print(f"tune_vs_grid: the load average is {load:.1f} on {cpus} CPUs: these jobs measure CPU work, "
              "and what else runs moves their rates (the grid's spread will show it)", file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"tune_vs_grid-{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta = {"argv": sys.argv[1:] if argv is None else argv, "steps": args.steps, "quick": args.quick,
            "reruns": reruns, "seed": args.seed, "grid": [list(k) for k in keys], "load_at_start": os.getloadavg()}
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tune_vs_grid-") as tmp:
        for name in names:
            results.append(run_job(JOBS[name], args.steps, keys, reruns, args.seed, Path(tmp)))
            doc = {"meta": {**meta, "machine": _machine(), "elapsed_s": time.monotonic() - started},
                   "jobs": results, "table": table(results).splitlines()}
            out.write_text(json.dumps(doc, indent=1, default=str) + "\n")
    text = table(results)
    print("\n" + text)
    print(f"\n{time.monotonic() - started:.0f} s in all; saved {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
