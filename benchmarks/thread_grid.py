#!/usr/bin/env python
"""The thread budget (issue 47): ``loaderdoc tune``'s pick and ``watch``'s fix chain against a
real grid of DataLoader workers x the training process's intra-op threads.

    PYTHONPATH=src:TVSITE python benchmarks/thread_grid.py [--jobs cpu_cnn,sleep_step,sleep_step_omp8]
        [--steps 20] [--rounds 2] [--watch-steps 120] [--seed 0] [--quick] [--dry-run]

Jobs (``benchmarks/watch_loops/``, each run as written, long enough that the trial stops it once
its window settled: ``--steps 1000000``):

- ``cpu_cnn``: the CNN trained on the CPU over 2560 real JPEGs, batch 64, num_workers=0, torch's
  default threads (one per CPU);
- ``sleep_step``: the same ImageFolder and transforms, batch 64, num_workers=0, a 35 ms sleeping
  (GPU-like) step with no torch compute (``watch_loops/sleep_step.py`` says how 35 was chosen:
  half a batch's load with one worker, so 2+ workers are needed);
- ``sleep_step_omp8``: the same, started with ``OMP_NUM_THREADS=8 MKL_DYNAMIC=FALSE`` (8 intra-op threads on
  the 2-CPU VM: without ``MKL_DYNAMIC=FALSE`` torch's MKL build caps the count at the physical cores).

For each job:

1. **tune**: ``loaderdoc tune --report R.json --steps N -- JOB`` (tune_vs_grid's ``run_tune``): its
   pick (workers, threads; threads None: the job's own).
2. **watch's fix chain**: ``loaderdoc watch --report r0.json --fixes f1.toml -- JOB --steps W``
   (``--watch-steps``, default 120: 3 epochs), then ``--apply f1.toml --fixes f2.toml``..., at most
   ``--max-applications`` (2) applications, until a run proposes nothing new (no file, or the
   file's tables are the ones applied: a fixed point). Each run: its steady rate (watch_fixes'
   ``steady_rate``), the train loader's workers and the threads its epochs began with.
3. **the grid**: num_workers {0,1,2,3,4} x threads {1, 2, the job's own} (own: what
   ``torch.get_num_threads()`` gives in the job's environment: 2 on the 2-CPU VM, 8 for
   ``sleep_step_omp8``; run with ``torch_threads`` None, i.e. as started), each through
   ``tuning.trial.run_trial`` (inside ``probing.reaper.contained()``) with ``TrialLimits(steps=N)``
   as tune, ``TrialSettings(num_workers=n, torch_threads=k)`` (OMP_NUM_THREADS=k in the trial's
   environment and torch.set_num_threads(k) by the hook). ``--rounds`` (2) rounds, interleaved: all
   configurations in one shuffled order, then all in another. A configuration's rate is the mean
   of its rounds; its spread ``|a - b| / max(a, b)``.

Verdicts: **tune** the grid's rate at tune's pick >= 95 % of the grid's best; **watch** the grid's
rate at the last run's (workers, threads) within 10 % of the best, converged within 2
applications; **gains** every proposal's ``expected_gain`` within 25 % of the gain the next run
measured (its rate / the previous run's).

Output: ``benchmarks/results/thread_grid-<timestamp>.json`` (every run: config, round, rate,
window, duration; written after each job) and ``.md`` (the tables). ``--quick``: a smoke test
(``sleep_step`` only unless ``--jobs``; workers {0,2} x threads {1,2}, one round, 10-step windows,
tune ``--trials 3``, watch runs of 60 steps); its verdicts mean nothing. ``--dry-run`` prints what
would run.

How long (the 2-CPU dev VM): the smoke run (``--quick``, 2026-11-28, beside other sessions'
work, load 1.3-1.8) took 102 s: tune 60 s (3 trials; its first, the job as written, measured
1.2 steps/s over 31 s where the grid and watch measured 9-10, a disturbed window), 2 watch runs
of 60 steps 9 + 6 s, 4 grid runs 6-9 s each (10-step windows settle on their 3 s minimum here,
so 20-step ones cost the same for sleep_step). The full run: 70 grid runs (cpu_cnn 20, sleep_step
20, sleep_step_omp8 30), 3 tunes (default 6 trials), 3 watch chains of 120-step runs. Estimated:
sleep_step grid runs ~8 s, cpu_cnn ~15 s (tune_vs_grid's figure at ``--steps 20``: 3-7 steps/s,
windows up to 4x steps where halves disagree) -> grids ~12 min, tunes ~4-5 min (cpu_cnn ~2,
each sleep_step ~1), watch chains ~2 min: **about 19-24 minutes** on a quiet machine. To fit the
~25 minute budget the defaults are ``--steps 20`` (tune's own default is 40; the grid and tune use
the same), 2 rounds, and workers 0-4 at the default prefetch (not tune_vs_grid's 0 .. 4x CPUs x
prefetch 2 and 4); ``--jobs`` runs a part (cpu_cnn ~9 min, sleep_step ~5, sleep_step_omp8 ~7).
The machine must be otherwise quiet.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import tune_vs_grid as tvg  # noqa: E402
from benchmarks import watch_fixes as wf  # noqa: E402
from loaderdoc.base._compat import tomllib  # noqa: E402

REPO, RESULTS, FOREVER = tvg.REPO, tvg.RESULTS, tvg.FOREVER
TUNE_BAR = 0.95  # tune's pick's grid rate over the grid's best
WATCH_BAR = 0.90  # the fix chain's last settings' grid rate over the grid's best
GAIN_BAR = 0.25  # |measured / expected - 1|
Config = tuple[int, int]  # (num_workers, intra-op threads)


def _job(name: str, script: str, label: str, env: dict[str, str] | None = None) -> tvg.Job:
    return tvg.Job(name, script, ["--steps", FOREVER], 64, None, label=label, extra={"env": env or {}})


JOBS = {
    "cpu_cnn": _job("cpu_cnn", "cpu_cnn", "CPU CNN over JPEGs, num_workers=0, torch's default threads"),
    "sleep_step": _job("sleep_step", "sleep_step", "JPEG loading + 35 ms sleeping step, num_workers=0"),
    # MKL_DYNAMIC=FALSE: torch's MKL build caps OMP_NUM_THREADS at the physical cores (8 runs 2 threads
    # on the 2-CPU VM); a container that sees a 64-core host and has a quota of 2 gets no such cap
    "sleep_step_omp8": _job("sleep_step_omp8", "sleep_step", "sleep_step started with OMP_NUM_THREADS=8",
                            {"OMP_NUM_THREADS": "8", "MKL_DYNAMIC": "FALSE"}),
}


@contextlib.contextmanager
def job_env(env: dict[str, str]):
    """``env`` (a job's environment as started: OMP_NUM_THREADS=8...) for everything run meanwhile:
    tune, watch and run_trial all copy os.environ."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def own_threads() -> int | None:
    """torch.get_num_threads() in the current environment (the job's own)."""
    proc = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                          capture_output=True, text=True, env=tvg._env(), cwd=REPO)
    return int(proc.stdout.strip()) if proc.returncode == 0 and proc.stdout.strip().isdigit() else None


def grid_configs(own: int, quick: bool) -> list[Config]:
    if quick:
        return [(n, k) for n in (0, 2) for k in (1, 2)]
    return [(n, k) for n in range(5) for k in sorted({1, 2, own})]


# ---- the grid's figures (pure) -------------------------------------------------------------------
def rates(runs: list[dict[str, Any]]) -> dict[Config, list[float]]:
    out: dict[Config, list[float]] = {}
    for r in runs:
        out.setdefault(tuple(r["config"]), [])
        if r.get("steps_per_s"):
            out[tuple(r["config"])].append(r["steps_per_s"])
    return out


def mean_rates(runs: list[dict[str, Any]]) -> dict[Config, float]:
    return {c: statistics.fmean(v) for c, v in rates(runs).items() if v}


def spreads(runs: list[dict[str, Any]]) -> dict[Config, float]:
    return {c: (max(v) - min(v)) / max(v) for c, v in rates(runs).items() if len(v) >= 2}


def judge(res: dict[str, Any]) -> dict[str, Any]:
    """The grid's best; tune's pick, the fix chain's end and every expected gain against it."""
    grid = mean_rates(res["grid"])
    best = max(grid, key=lambda c: (grid[c], -c[0], -c[1])) if grid else None
    top = grid.get(best) if best else None
    res["best"], res["best_steps_per_s"] = list(best) if best else None, top
    sp = spreads(res["grid"])
    res["max_spread"] = max(sp.values()) if sp else None

    def share(config) -> float | None:
        return grid[tuple(config)] / top if config and top and tuple(config) in grid else None

    tune = res.get("tune") or {}
    tune["grid_share"] = share(tune.get("pick_config"))
    tune["passed"] = tune["grid_share"] is not None and tune["grid_share"] >= TUNE_BAR
    chain = res.get("watch") or {}
    runs = chain.get("runs") or []
    last = runs[-1]["config"] if runs else None
    chain["grid_share"] = share(last)
    chain["passed"] = (chain["grid_share"] is not None and chain["grid_share"] >= WATCH_BAR
                       and chain.get("converged", False) and chain.get("applications", 99) <= 2)
    gains = []
    for this, after in zip(runs, runs[1:], strict=False):
        if this.get("expected_gain") and this.get("rate") and after.get("rate"):
            measured = after["rate"] / this["rate"]
            gains.append({"run": this["run"], "change": this["proposed"], "expected": this["expected_gain"],
                          "measured": measured, "ok": abs(measured / this["expected_gain"] - 1) <= GAIN_BAR})
    res["gains"] = gains
    res["gains_passed"] = all(g["ok"] for g in gains) if gains else None
    return res


# ---- the Markdown ---------------------------------------------------------------------------------
def _f(v: float | None, spec: str = ".1f") -> str:
    return "-" if v is None else format(v, spec)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.0f}%"


def _cfg(c) -> str:
    return "-" if not c else f"{c[0]}w/{c[1]}t"


def _yes(flag) -> str:
    return "-" if flag is None else ("yes" if flag else "**no**")


def grid_markdown(res: dict[str, Any]) -> list[str]:
    per = rates(res["grid"])
    threads = sorted({c[1] for c in per})
    tune_pick = tuple((res.get("tune") or {}).get("pick_config") or ())
    wruns = (res.get("watch") or {}).get("runs") or []
    watch_end = tuple(wruns[-1]["config"]) if wruns else ()
    lines = ["| workers | " + " | ".join(f"{k} threads{' (own)' if k == res.get('own_threads') else ''}"
                                         for k in threads) + " |", "|---" * (len(threads) + 1) + "|"]
    for n in sorted({c[0] for c in per}):
        cells = []
        for k in threads:
            v = per.get((n, k))
            mark = "".join(m for m, c in (("**best** ", res.get("best")), ("T ", tune_pick), ("W ", watch_end))
                           if c and tuple(c) == (n, k))
            cells.append(f"{mark}{_f(statistics.fmean(v)) if v else '-'} ({' / '.join(_f(x) for x in v) or 'failed'})"
                         if (n, k) in per else "")
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    return lines


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [f"# thread_grid {meta['started']}", "",
           f"`{' '.join(meta['argv']) or '(defaults)'}`; steps {meta['steps']}, rounds {meta['rounds']}, "
           f"{meta['cpus']} CPUs, commit {meta['commit']}, load at start {meta['load_at_start'][0]:.1f}.", "",
           "| job | grid best | max spread | tune pick: grid rate (>= 95%) | watch chain: last (within 10%, <= 2 applications) | gains (within 25%) |",
           "|---|---|---|---|---|---|"]
    for res in results:
        tune, chain = res.get("tune") or {}, res.get("watch") or {}
        wruns = chain.get("runs") or []
        gains = " ".join(f"{g['expected']:.2f}/{g['measured']:.2f}{'' if g['ok'] else '!'}" for g in res["gains"])
        out.append(f"| {res['job']} | {_cfg(res.get('best'))} {_f(res.get('best_steps_per_s'))} | "
                   f"{_pct(res.get('max_spread'))} | {_cfg(tune.get('pick_config'))} {_pct(tune.get('grid_share'))}: "
                   f"{_yes(tune.get('passed'))} | {' -> '.join(_cfg(r['config']) for r in wruns) or '-'} "
                   f"({chain.get('outcome', '-')}) {_pct(chain.get('grid_share'))}: {_yes(chain.get('passed'))} | "
                   f"{gains or 'none'}: {_yes(res.get('gains_passed'))} |")
    for res in results:
        out += ["", f"## {res['job']}: {res['label']}", "",
                f"steps/s, mean (each round); T: tune's pick, W: watch's last run. {len(res['grid'])} grid runs, "
                f"{_f(sum(r['duration_s'] for r in res['grid']), '.0f')} s; job {_f(res.get('wall_s'), '.0f')} s.", ""]
        out += grid_markdown(res)
        tune = res.get("tune") or {}
        out += ["", f"tune: {_f(tune.get('wall_s'), '.0f')} s, trials " + (" ".join(
            f"{t['text']}:{_f(t.get('steps_per_s')) if t.get('steps_per_s') else t.get('status')}"
            for t in tune.get("trial_list") or []) or tune.get("error", "-"))]
        for r in (res.get("watch") or {}).get("runs") or []:
            out.append(f"- watch run {r['run']}: {_cfg(r['config'])} {_f(r.get('rate'))} steps/s, proposes "
                       f"{r['proposed_text']} (expected {_f(r.get('expected_gain'), '.2f')}), {r['duration_s']:.0f} s")
    return "\n".join(out) + "\n"


# ---- running --------------------------------------------------------------------------------------
def run_tune(job: tvg.Job, steps: int, workdir: Path, own: int | None, quick: bool) -> dict[str, Any]:
    out = tvg.run_tune(job, steps, workdir, ["--trials", "3"] if quick else None)
    report = out.pop("report", None) or {}
    pick = report.get("pick")

    def cfg(settings: dict[str, Any]) -> list[int | None]:
        return [settings["num_workers"], settings.get("torch_threads") or own]

    out["pick_config"] = cfg(pick["settings"]) if pick else None
    out["trial_list"] = [{"text": _cfg(cfg(t["settings"])), "steps_per_s": t.get("steps_per_s"),
                          "status": t.get("status")} for t in report.get("trials") or []]
    return out


def _threads_ran(entry: dict[str, Any], data: dict[str, Any]) -> int | None:
    seen = [e.get("torch_threads") for e in entry.get("epochs") or []]
    seen = [t for t in seen if isinstance(t, int)] or list(((data.get("apply") or {}).get("process") or {})
                                                              .get("torch_threads_ran") or [])
    return max(seen) if seen else None


def watch_chain(job: tvg.Job, steps: int, max_applications: int, workdir: Path, own: int | None) -> dict[str, Any]:
    """watch, then watch --apply the file it wrote, until nothing new is proposed."""
    runs: list[dict[str, Any]] = []
    applied: dict[str, Any] = {}
    apply_file: str | None = None
    outcome = "max-applications"
    while True:
        tag = f"{job.name}-w{len(runs)}"
        report, fixes = workdir / f"{tag}.json", workdir / f"{tag}.toml"
        # a program of its own says how a run of watch's length is started (real_programs.py); a loop, --steps
        program = job.extra.get("watch_command") or [sys.executable, str(tvg.LOOPS_DIR / f"{job.script}.py"),
                                                     "--steps", str(steps)]
        cmd = [sys.executable, "-m", "loaderdoc", "watch", "--report", str(report), "--fixes", str(fixes),
               *(["--apply", apply_file] if apply_file else []), "--", *program]
        print(f"  watch: {shlex.join(cmd)}", flush=True)
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=tvg._env(), cwd=job.extra.get("cwd") or REPO,
                              timeout=900)
        if proc.returncode != 0 or not report.exists():
            outcome = f"failed: exit {proc.returncode}: {proc.stderr.strip()[-400:]}"
            break
        data = json.loads(report.read_text())
        entry = wf.train_loader(data) or {}
        props = wf.proposals(data)
        tables = tomllib.loads(fixes.read_text()) if fixes.exists() else {}
        run = {"run": len(runs), "applied": applied, "rate": wf.steady_rate(data),
               "config": [(entry.get("settings") or {}).get("num_workers"), _threads_ran(entry, data) or own],
               "proposals": props, "proposed": next((p["change"] for p in props if p["train"]), None),
               "proposed_text": wf.proposals_text(props), "expected_gain": wf.expected_gain(props),
               "next_tables": tables, "duration_s": time.monotonic() - started}
        runs.append(run)
        print(f"  watch run {run['run']}: {_cfg(run['config'])} {_f(run['rate'], '.2f')} steps/s, proposes "
              f"{run['proposed_text']}; next: {wf.tables_text(tables) if tables else 'no --fixes file'}", flush=True)
        if not tables or tables == applied:
            outcome = "fixed-point"
            break
        if len(runs) > max_applications:
            break
        applied, apply_file = tables, str(fixes)
    return {"runs": runs, "outcome": outcome, "converged": outcome == "fixed-point", "applications": len(runs) - 1}


def settings_for(config: Config, own: int | None):
    from loaderdoc.tuning.result import TrialSettings

    threads = None if config[1] == own else config[1]  # the job's own: as started
    if "torch_threads" in {f.name for f in fields(TrialSettings)}:
        return TrialSettings(num_workers=config[0], torch_threads=threads), None
    return TrialSettings(num_workers=config[0]), threads  # an older tune: OMP_NUM_THREADS set here


def run_grid(job: tvg.Job, key: str | None, configs: list[Config], rounds: int, steps: int, seed: int,
             own: int | None) -> tuple[list[dict[str, Any]], str | None]:
    from loaderdoc.probing.reaper import contained
    from loaderdoc.tuning.trial import TrialLimits, run_trial

    command, limits = tvg.job_command(job), TrialLimits(steps=steps)
    runs: list[dict[str, Any]] = []
    with contained():
        if key is None:
            key = run_trial(command, 0, None, None, limits).key
            print(f"  the training loader (a first run as written): {key}", flush=True)
            if key is None:
                return runs, None
        for r in range(rounds):
            order = list(configs)
            random.Random(seed * 100 + r).shuffle(order)
            for config in order:
                settings, env_threads = settings_for(config, own)
                with job_env({"OMP_NUM_THREADS": str(env_threads)} if env_threads else {}):
                    run = run_trial(command, len(runs) + 1, settings, key, limits)
                entry = {"config": list(config), "round": r + 1, **tvg.trial_entry(run.trial),
                         "threads_ran": max((t for w in run.windows if (t := getattr(w, "torch_threads", None))),
                                            default=None)}
                runs.append(entry)
                print(f"  grid {len(runs)} (round {r + 1}): {_cfg(config)}: {_f(entry['steps_per_s'], '.2f')} "
                      f"steps/s{'' if entry['steps_per_s'] else ' ' + str(entry['status']) + ': ' + str(entry['reason'])}"
                      f", window {entry['window_steps']} steps / {_f(entry['window_s'])} s, ran "
                      f"{entry['threads_ran']} threads, {entry['duration_s']:.0f} s", flush=True)
    return runs, key


def run_job(job: tvg.Job, args, workdir: Path) -> dict[str, Any]:
    print(f"\n== {job.name}: {job.label}", flush=True)
    started = time.monotonic()
    with job_env(job.extra["env"]):
        own = own_threads()
        configs = grid_configs(own or 2, args.quick)
        print(f"  own threads: {own}; grid {', '.join(map(_cfg, configs))} x {args.rounds} round(s)", flush=True)
        tune = run_tune(job, args.steps, workdir, own, args.quick)
        chain = watch_chain(job, args.watch_steps, args.max_applications, workdir, own)
        grid, key = run_grid(job, tune.get("key"), configs, args.rounds, args.steps, args.seed, own)
    res = {"job": job.name, "label": job.label, "env": job.extra["env"], "own_threads": own,
           "command": tvg.job_command(job), "loader_key": key, "tune": tune, "watch": chain, "grid": grid,
           "wall_s": time.monotonic() - started}
    return judge(res)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", help=f"comma-separated, of {', '.join(JOBS)} (default: all; --quick: sleep_step)")
    parser.add_argument("--steps", type=int, help="TrialLimits.steps and tune's --steps (default 20; quick 10)")
    parser.add_argument("--rounds", type=int, help="grid rounds, interleaved (default 2; quick 1)")
    parser.add_argument("--watch-steps", type=int, help="each watch run's --steps (default 120; quick 60)")
    parser.add_argument("--max-applications", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="smoke test: one job, 2x2 grid, one round")
    parser.add_argument("--dry-run", action="store_true", help="print what would run; run nothing")
    args = parser.parse_args(argv)
    args.steps = args.steps or (10 if args.quick else 20)
    args.rounds = args.rounds or (1 if args.quick else 2)
    args.watch_steps = args.watch_steps or (60 if args.quick else 120)
    names = [n for n in (args.jobs or ("sleep_step" if args.quick else ",".join(JOBS))).split(",") if n]
    if unknown := [n for n in names if n not in JOBS]:
        parser.error(f"unknown job(s) {', '.join(unknown)}; known: {', '.join(JOBS)}")
    if args.dry_run:
        for name in names:
            job = JOBS[name]
            env = " ".join(f"{k}={v}" for k, v in job.extra["env"].items())
            print(f"{name}: {env + ' ' if env else ''}{shlex.join(tvg.job_command(job))}")
            print(f"  tune:  {shlex.join(tvg.tune_command(job, args.steps, Path('R.json'), ['--trials', '3'] if args.quick else None))}")
            print(f"  watch: loaderdoc watch --report r0.json --fixes f1.toml -- {job.script}.py --steps "
                  f"{args.watch_steps}, then --apply f1.toml --fixes f2.toml ... (<= {args.max_applications})")
            configs = grid_configs(8 if job.extra["env"] else 2, args.quick)  # own: 2 CPUs assumed here
            print(f"  grid:  {len(configs)} configs ({', '.join(map(_cfg, configs))}) x {args.rounds} round(s), "
                  f"run_trial, TrialLimits(steps={args.steps})")
        return 0
    cpus = len(os.sched_getaffinity(0))
    if os.getloadavg()[0] > 0.5 * cpus:
        print(f"thread_grid: load average {os.getloadavg()[0]:.1f} on {cpus} CPUs: rates will move (see the spread)",
              file=sys.stderr)
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"thread_grid-{stamp}"
    meta = {"argv": sys.argv[1:] if argv is None else argv, "started": stamp, "steps": args.steps,
            "rounds": args.rounds, "watch_steps": args.watch_steps, "quick": args.quick, "seed": args.seed,
            "cpus": cpus, "load_at_start": os.getloadavg(),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=REPO).stdout.strip() or None}
    results: list[dict[str, Any]] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="thread_grid-") as tmp:
        for name in names:
            results.append(run_job(JOBS[name], args, Path(tmp)))
            meta.update(elapsed_s=time.monotonic() - started, load_now=os.getloadavg())
            out.with_suffix(".json").write_text(json.dumps({"meta": meta, "jobs": results}, indent=1, default=str) + "\n")
            out.with_suffix(".md").write_text(markdown(results, meta))
    print("\n" + markdown(results, meta))
    print(f"{time.monotonic() - started:.0f} s in all; saved {out.relative_to(REPO)}.json and .md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
