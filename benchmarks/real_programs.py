#!/usr/bin/env python
"""Truth on real programs (issue 57): ``loaderdoc tune``'s pick and ``watch``'s fix chain on training
programs no one here wrote, against a grid of DataLoader workers x the training process's threads,
quiet and beside a process that burns one core.

    PYTHONPATH=src:TVSITE python benchmarks/real_programs.py --imagenet EXAMPLES/imagenet/main.py \\
        --timm TIMM [--jobs imagenet,timm] [--rounds 2] [--steps 20] [--no-burn] [--dry-run]

The programs are fetched by the user, not kept here (``git clone``, then ``git checkout``):

- ``imagenet``: pytorch/examples ``imagenet/main.py`` at 77f55b912142e11fcfdf5b530231fb9c52f181e8,
  ``-a shufflenet_v2_x0_5 -b 16 -j 0 --no-accel`` (as the issue ran it), trained on the CPU;
- ``timm``: huggingface/pytorch-image-models ``train.py`` at aa4b5850c1543fa488abf260f18390eda46cf85d
  (``--timm`` is the checkout: its ``train.py`` and the ``timm`` package beside it),
  ``--model mobilenetv3_small_100 --img-size 128 -b 16 --workers 2 --device cpu``.

Both train over the same generated JPEG folder (``--jpegs``, default
``~/.cache/loaderdoc/real-programs-jpegs``: ImageFolder ``train/`` 640 and ``val/`` 64 images in 4
classes, 256-400 px, made on first use). Both write into a scratch folder (checkpoints, timm's
``output/``), never the repository. torchvision: as ``benchmarks/watch_fixes.py`` says (TVSITE).

For each program (``thread_grid.py``'s machinery, which its jobs reuse):

1. **tune** (``--steps N``, its default budget and trials), quiet: wall time, trials, pick.
2. **watch's fix chain**: ``watch --fixes f1.toml -- PROGRAM --epochs 3``, then ``--apply f1.toml
   --fixes f2.toml``, at most 2 applications; each run's rate, proposal and expected gain.
3. **the grid**: num_workers {0, 1, 2, 3} x threads {1, 2} (2 is torch's default on the 2-CPU VM),
   ``--rounds`` (2) rounds in shuffled, interleaved order, each a ``tuning.trial.run_trial`` as tune runs
   its trials; a configuration's rate is the mean of its rounds.
4. **beside a burner** (unless ``--no-burn``): tune (``--budget 600``) and one watch run of one epoch
   again while another process spins on one core throughout (``while True: pass``), judged against
   the quiet grid (torch's 2 intra-op threads beside a burner ran the ImageNet script 20x slower, so
   the full budget and chain there take far longer than the quiet half).

Verdicts: **tune** its pick's grid rate >= 95 % of the grid's best, in <= 25 % of one grid pass's time
(the sum of the grid's run durations, both rounds; one round's is shown beside); **watch** the chain's last
settings' grid rate >= 95 % of the best within 2 applications; **gains** every expected gain within
25 % of the one the next run measured; **burner** tune's pick under the burner runs no slower on the
quiet grid than the program's own settings (within the two configurations' own spread between rounds), and its report says the
machine was busy (``busy machine: ...`` in its text, ``others_cpus`` in its trials).

Output: ``benchmarks/results/real_programs-<timestamp>.json`` and ``.md``, written after each program.
Not a test; the machine must be otherwise quiet for the quiet half.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from benchmarks import thread_grid as tg  # noqa: E402
from benchmarks import tune_vs_grid as tvg  # noqa: E402

REPO, RESULTS = tvg.REPO, tvg.RESULTS
TUNE_BAR, WATCH_BAR, GAIN_BAR, TIME_BAR = 0.95, 0.95, 0.25, 0.25
COMMITS = {"imagenet": "pytorch/examples@77f55b912142e11fcfdf5b530231fb9c52f181e8",
           "timm": "huggingface/pytorch-image-models@aa4b5850c1543fa488abf260f18390eda46cf85d"}
DEFAULT_JPEGS = Path.home() / ".cache" / "loaderdoc" / "real-programs-jpegs"
GRID = [(n, k) for n in range(4) for k in (1, 2)]
BURN_BUDGET_S = 600  # tune beside the burner: torch's 2 threads there ran one program 20x slower (trials of minutes)


def make_jpegs(folder: Path, train: int = 640, val: int = 64, classes: int = 4) -> Path:
    """An ImageFolder tree of deterministic JPEGs (smooth noise, 256-400 px a side), made once."""
    marker = folder / ".done"
    if marker.exists():
        return folder
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split, count in (("train", train), ("val", val)):
        for c in range(classes):
            d = folder / split / f"class{c}"
            d.mkdir(parents=True, exist_ok=True)
            for i in range(count // classes):
                w, h = int(rng.integers(256, 400)), int(rng.integers(256, 400))
                small = rng.integers(0, 255, (h // 8, w // 8, 3), dtype=np.uint8)
                Image.fromarray(small).resize((w, h), Image.BICUBIC).save(d / f"{i}.jpg", quality=90)
    marker.write_text("ok\n")
    return folder


def jobs(args, scratch: Path) -> dict[str, tvg.Job]:
    py, jpegs = sys.executable, str(args.jpegs)
    out: dict[str, tvg.Job] = {}
    if args.imagenet:
        base = [py, str(Path(args.imagenet).resolve()), "-a", "shufflenet_v2_x0_5", "-b", "16", "-j", "0",
                "--no-accel", "-p", "1000"]
        out["imagenet"] = tvg.Job("imagenet", "imagenet", [], 16, None,
                                  label="pytorch/examples imagenet/main.py, shufflenet_v2_x0_5, batch 16, -j 0",
                                  extra={"env": {}, "cwd": str(scratch / "imagenet"),
                                         "command": [*base, "--epochs", "1000", jpegs],
                                         "watch_command": [*base, "--epochs", "3", jpegs],
                                         "burn_watch_command": [*base, "--epochs", "1", jpegs]})
    if args.timm:
        timm = Path(args.timm).resolve()
        base = [py, str(timm / "train.py"), "--data-dir", jpegs, "--model", "mobilenetv3_small_100", "--img-size",
                "128", "-b", "16", "--workers", "2", "--device", "cpu", "--num-classes", "4", "--log-interval",
                "1000", "--output", str(scratch / "timm" / "output")]
        out["timm"] = tvg.Job("timm", "timm", [], 16, None,
                              label="timm train.py, mobilenetv3_small_100 at 128 px, batch 16, --workers 2",
                              extra={"env": {"PYTHONPATH": os.pathsep.join(filter(None, [str(timm),
                                                                                         os.environ.get("PYTHONPATH")]))},
                                     "cwd": str(scratch / "timm"),
                                     "command": [*base, "--epochs", "1000"], "watch_command": [*base, "--epochs", "3"],
                                     "burn_watch_command": [*base, "--epochs", "1"]})
    for job in out.values():
        Path(job.extra["cwd"]).mkdir(parents=True, exist_ok=True)
    return out


@contextmanager
def _cwd(folder: str):
    before = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(before)


@contextmanager
def burner():
    """Another process spinning on one core for as long as the block runs."""
    proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        yield proc.pid
    finally:
        proc.kill()
        proc.wait()


def user_config(tune: dict[str, Any]) -> list[int] | None:
    """The program's own (workers, threads) as tune's first trial measured them."""
    trials = tune.get("trial_list") or []
    first = (tune.get("report_trials") or [None])[0]
    if first is None or not trials:
        return None
    return [first["settings"]["num_workers"], first.get("torch_threads") or 2]


def judge(res: dict[str, Any]) -> dict[str, Any]:
    """thread_grid's figures, with this issue's bars: tune and watch against the grid's best, tune's
    time against one grid pass, the gains, and the burner's pick against the program's own settings."""
    tg.judge(res)
    grid = tg.mean_rates(res["grid"])
    top = res.get("best_steps_per_s")
    rounds = max((r["round"] for r in res["grid"]), default=1)
    whole = sum(r.get("duration_s") or 0.0 for r in res["grid"])
    res["grid_s"], res["grid_pass_s"] = whole, whole / rounds
    tune = res["tune"]
    tune["time_share"] = tune["wall_s"] / whole if whole else None  # the issue's bar: the grid's time, its rounds
    tune["passed"] = (tune.get("grid_share") is not None and tune["grid_share"] >= TUNE_BAR
                      and tune["time_share"] is not None and tune["time_share"] <= TIME_BAR)
    chain = res["watch"]
    chain["passed"] = (chain.get("grid_share") is not None and chain["grid_share"] >= WATCH_BAR
                       and chain.get("applications", 99) <= 2)
    burned = res.get("burned")
    if burned:
        user = user_config(res["tune"])
        pick = burned["tune"].get("pick_config")
        # the noise of the two configurations compared (their rounds' spread), not the grid's largest
        sp = tg.spreads(res["grid"])
        spread = max(sp.get(tuple(c), 0.0) for c in (user, pick) if c) if (user or pick) else 0.0
        at_pick = grid.get(tuple(pick)) if pick else None
        at_user = grid.get(tuple(user)) if user else None
        burned["tune"]["grid_share"] = at_pick / top if at_pick and top else None
        burned["tune"]["over_user"] = at_pick / at_user if at_pick and at_user else None
        burned["tune"]["passed"] = (burned["tune"]["over_user"] is not None
                                    and burned["tune"]["over_user"] >= 1 - spread and burned["tune"].get("busy_said"))
        last = ((burned.get("watch") or {}).get("runs") or [{}])[-1].get("config")
        if burned.get("watch") is not None:
            burned["watch"]["grid_share"] = grid.get(tuple(last)) / top if last and top and tuple(last) in grid else None
    return res


def run_tune(job: tvg.Job, steps: int, workdir: Path, tag: str = "", options: list[str] | None = None) -> dict[str, Any]:
    """thread_grid's tune run, with more of tune's options (``--budget``), named ``tag``."""
    name = job.name
    job.name = f"{name}{tag}"
    try:
        out = tvg.run_tune(job, steps, workdir, options)
    finally:
        job.name = name
    report = out.pop("report", None) or {}
    pick = report.get("pick")

    def cfg(settings: dict[str, Any]) -> list[int | None]:
        return [settings["num_workers"], settings.get("torch_threads") or 2]

    out["pick_config"] = cfg(pick["settings"]) if pick else None
    out["trial_list"] = [{"text": tg._cfg(cfg(t["settings"])), "steps_per_s": t.get("steps_per_s"),
                          "status": t.get("status")} for t in report.get("trials") or []]
    table = "\n".join(out.get("table") or [])
    out["busy_said"] = "busy machine:" in table
    report = json.loads((workdir / f"{name}{tag}-tune.json").read_text()) if (workdir / f"{name}{tag}-tune.json").exists() else {}
    out["report_trials"] = report.get("trials") or []
    out["others_cpus"] = [t.get("others_cpus") for t in out["report_trials"]]
    out["verdict_line"] = next((line for line in out.get("table") or [] if line.startswith("gain over")), None)
    out["noise_line"] = next((line for line in out.get("table") or [] if line.startswith("noise:")), None)
    return out


def watch_runs(job: tvg.Job, workdir: Path, tag: str, applications: int) -> dict[str, Any]:
    """thread_grid's fix chain, named ``tag``; a run past its time limit is said, not raised."""
    name = job.name
    job.name = f"{name}{tag}"
    try:
        return tg.watch_chain(job, 0, applications, workdir, 2)
    except subprocess.TimeoutExpired as exc:
        return {"runs": [], "outcome": f"timed out after {exc.timeout:.0f} s", "converged": False, "applications": 0}
    finally:
        job.name = name


def run_job(job: tvg.Job, args, workdir: Path, save) -> dict[str, Any]:
    """One program's tune, fix chain and grid (quiet), then tune and one watch run beside a burner;
    ``save(res)`` after each phase, so that a run cut short keeps what it measured."""
    print(f"\n== {job.name}: {job.label} ({COMMITS[job.name]})", flush=True)
    started = time.monotonic()
    res: dict[str, Any] = {"job": job.name, "label": job.label, "commit": COMMITS[job.name],
                           "command": tvg.job_command(job), "grid": [], "burned": None}
    with tg.job_env(job.extra["env"]):
        res["tune"] = run_tune(job, args.steps, workdir)
        save(res)
        res["watch"] = watch_runs(job, workdir, "", 2)
        save(res)
        with _cwd(job.extra["cwd"]):  # run_trial starts the program here: its checkpoints stay in the scratch folder
            res["grid"], res["loader_key"] = tg.run_grid(job, res["tune"].get("key"), GRID, args.rounds, args.steps,
                                                         args.seed, 2)
        save(res)
        if args.burn:
            print("  beside a burner on one core:", flush=True)
            with burner():
                burned = {"tune": run_tune(job, args.steps, workdir, "-burn", ["--budget", str(BURN_BUDGET_S)])}
                res["burned"] = burned
                save(res)
                # one run of one epoch: torch's threads beside a burner can run 20x slower
                job.extra["watch_command"], full = job.extra["burn_watch_command"], job.extra["watch_command"]
                try:
                    burned["watch"] = watch_runs(job, workdir, "-burn", 0)
                finally:
                    job.extra["watch_command"] = full
    res["wall_s"] = time.monotonic() - started
    return judge(res)


def _f(v, spec=".2f") -> str:
    return "-" if v is None else format(v, spec)


def markdown(results: list[dict[str, Any]], meta: dict[str, Any]) -> str:
    out = [f"# real_programs {meta['started']} (loaderdoc {meta['commit']}, {meta['cpus']} CPUs)", ""]
    for res in results:
        grid = tg.mean_rates(res["grid"])
        sp = tg.spreads(res["grid"])
        out += [f"## {res['job']}: {res['label']}", f"`{res['commit']}`", "",
                "| workers \\ threads | 1 | 2 |", "|---|---|---|"]
        for n in range(4):
            cells = [f"{_f(grid.get((n, k)))} (+/-{_f(sp.get((n, k), 0) * 50, '.0f')}%)" for k in (1, 2)]
            out.append(f"| {n} | {' | '.join(cells)} |")
        t, w = res["tune"], res["watch"]
        out += ["", f"grid best {tg._cfg(res.get('best'))} {_f(res.get('best_steps_per_s'))} steps/s; the grid "
                    f"{res['grid_s']:.0f} s ({res['grid_pass_s']:.0f} s a round); largest spread between rounds "
                    f"{_f((res.get('max_spread') or 0) * 100, '.0f')}%",
                f"- tune: pick {tg._cfg(t.get('pick_config'))}, {_f((t.get('grid_share') or 0) * 100, '.0f')}% of the best, "
                f"{t['wall_s']:.0f} s = {_f((t.get('time_share') or 0) * 100, '.0f')}% of the grid's time, "
                f"{len(t.get('report_trials') or [])} trials: **{'pass' if t['passed'] else 'FAIL'}**; "
                f"{t.get('verdict_line')}; {t.get('noise_line')}",
                f"- watch chain: {' -> '.join(tg._cfg(r['config']) + ' ' + _f(r['rate']) for r in w.get('runs') or [])}; "
                f"last {_f((w.get('grid_share') or 0) * 100, '.0f')}% of the best, {w.get('applications')} "
                f"application(s): **{'pass' if w['passed'] else 'FAIL'}**"]
        for g in res.get("gains") or []:
            out.append(f"- gain of run {g['run']}'s {g['change']}: expected {g['expected']:.2f}x, measured "
                       f"{g['measured']:.2f}x: **{'pass' if g['ok'] else 'FAIL'}**")
        b = res.get("burned")
        if b:
            bt = b["tune"]
            out.append(f"- beside a burner: tune's pick {tg._cfg(bt.get('pick_config'))} runs "
                       f"{_f(bt.get('over_user'))}x the program's own settings on the quiet grid, busy said: "
                       f"{bt.get('busy_said')}, others' CPUs per trial {[_f(c) for c in bt.get('others_cpus') or []]}: "
                       f"**{'pass' if bt['passed'] else 'FAIL'}**; {bt.get('verdict_line')}")
            bw = b.get("watch") or {}
            out.append(f"- beside a burner, watch chain: {' -> '.join(tg._cfg(r['config']) + ' ' + _f(r['rate']) for r in bw.get('runs') or [])}"
                       f"; last at {_f((bw.get('grid_share') or 0) * 100, '.0f')}% of the quiet best")
        out.append("")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--imagenet", help="pytorch/examples' imagenet/main.py (at the commit above)")
    parser.add_argument("--timm", help="a pytorch-image-models checkout: train.py and the timm package")
    parser.add_argument("--jpegs", type=Path, default=DEFAULT_JPEGS, help="the ImageFolder tree (made if missing)")
    parser.add_argument("--jobs", help="comma-separated: imagenet, timm (default: those given)")
    parser.add_argument("--steps", type=int, default=20, help="tune's --steps and the grid's windows (default 20)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-burn", dest="burn", action="store_false", help="skip the runs beside a burner")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--judge", type=Path, metavar="FILE", help="judge a saved run again and print its tables")
    args = parser.parse_args(argv)
    if args.judge:
        data = json.loads(args.judge.read_text())
        results = [judge(res) for res in data["jobs"] if res.get("grid") and res.get("watch")]
        args.judge.write_text(json.dumps({"meta": data["meta"], "jobs": results}, indent=1, default=str) + "\n")
        args.judge.with_suffix(".md").write_text(markdown(results, data["meta"]))
        print(markdown(results, data["meta"]))
        return 0
    if not (args.imagenet or args.timm):
        parser.error("give --imagenet and/or --timm (see the module's docstring for the commits)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory(prefix="real_programs-") as tmp:
        all_jobs = jobs(args, Path(tmp))
        names = [n for n in (args.jobs or ",".join(all_jobs)).split(",") if n]
        if args.dry_run:
            for name in names:
                print(f"{name}: {shlex.join(tvg.job_command(all_jobs[name]))}")
            return 0
        make_jpegs(args.jpegs)
        meta = {"started": stamp, "cpus": len(os.sched_getaffinity(0)), "load_at_start": os.getloadavg(),
                "steps": args.steps, "rounds": args.rounds, "burn": args.burn,
                "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                         cwd=REPO).stdout.strip() or None}
        out = RESULTS / f"real_programs-{stamp}"
        results: list[dict[str, Any]] = []

        def save(partial=None) -> None:
            meta["load_now"] = os.getloadavg()
            jobs_now = results + ([partial] if partial is not None else [])
            out.with_suffix(".json").write_text(json.dumps({"meta": meta, "jobs": jobs_now}, indent=1, default=str) + "\n")

        for name in names:
            results.append(run_job(all_jobs[name], args, Path(tmp), save))
            save()
            out.with_suffix(".md").write_text(markdown(results, meta))
    print("\n" + markdown(results, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
