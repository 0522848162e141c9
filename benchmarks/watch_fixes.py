"""Do `loaderdoc watch`'s proposed fixes pay off? (issue 28) Each of three real training loops
runs under ``loaderdoc watch --report R.json --fixes NEXT.toml``: watch writes NEXT.toml itself,
per loader role, what ``--apply`` set in that run plus the change that loader's findings propose
(``[dataloader]`` for unnamed loaders, ``[train_dataloader]``, ``[val_dataloader]``... where
Lightning or Hugging Face built them). The next round runs the loop under ``loaderdoc watch --apply
NEXT.toml --fixes NEXT2.toml``, and so on, until watch proposes nothing beyond what was applied (a
fixed point), a cycle, or ``--max-applications`` (3) rounds applied a file. Every configuration
runs ``--repeats`` (2) times to show the noise.

    PYTHONPATH=src:TVSITE python benchmarks/watch_fixes.py [--dry-run] [--repeats 2]
        [--loops cpu_cnn,io_bound,lightning_fit] [--steps N] [--max-applications 3]

``--dry-run``: one round per loop, nothing applied (what watch proposes, and the gain it expects).
The driver needs a watch with ``--apply`` and ``--fixes`` (it stops with a message where
``loaderdoc watch --help`` lists them not).

Read from each repeat's report: the train loader (role "train", else the one with the most waited
batches) gives the steady rate, ``waits / (wait_s + step_s)`` of its totals (an epoch's first batch
is start-up, not steady), and its CPU ceiling (``cpu.ceiling_per_s``: the steps/s these CPUs allow
at most). Each loader's ``proposed`` gives its change, the rules behind it and the gain expected
(a ratio, e.g. 1.25; the train loader's is the round's expected gain). The next round's tables are
``loaderdoc.watching.fixes.fix_tables(report)``, the tables watch wrote to that repeat's
``--fixes`` file (the driver checks the two agree); when repeats disagree, the tables most repeats
wrote are taken (ties: the earliest repeat's), and that repeat's file is the next ``--apply``.
Measured gain: the next round's mean rate over this round's. Tables are compared less what the
script sets itself (a value every loader of the table ran with in round 0): tables equal to the
applied ones are a fixed point, tables already applied in an earlier round (round 0: none) a
cycle, and the run stops there. Each applied table is checked against the settings its loaders
ran with (``[dataloader]``: every loader; ``[train_dataloader]``: the train loaders...); a round
whose loaders did not run with them stops the loop (``not-applied``): its rate says nothing.

The table is printed and saved as JSON in ``benchmarks/results/watch_fixes-<timestamp>.json``.
Not a pass/fail test; ``tests/test_watch_fixes_bench.py`` checks the table logic on fake reports.

The loops (``benchmarks/watch_loops/``, each ``python benchmarks/watch_loops/X.py [--steps N]``,
10-30 s here): ``cpu_cnn`` (ImageFolder over 2560 generated JPEGs, the ImageNet training
transforms at 160 px, a small CNN, SGD, batch 64, num_workers=0, 3 epochs of 40 steps),
``io_bound`` (8 ms sleep a sample, batch 8, num_workers=8, 16 ms sleep a step, 3 epochs of 200)
and ``lightning_fit`` (``Trainer.fit`` of the same CNN, train and val loaders with
num_workers=0, 3 epochs).

Needs: torch; torchvision and Pillow (cpu_cnn, lightning_fit); lightning (lightning_fit). On a
CPU-only torch whose only torchvision wheel is the CUDA-linked one, install that wheel outside the
venv (``pip install --no-deps --target TVSITE torchvision==0.28.0``) and put TVSITE on
PYTHONPATH: installed into the venv, it breaks ``import lightning`` (torchmetrics imports
torchvision) for every other program there; the loops import it through
``benchmarks/torchvision_pipeline.import_torchvision``, which copes. The first run generates the
images (about 15 s, see ``watch_loops/_common.py``).

Measured on the 2-core dev VM (torch 2.13 CPU, lightning 2.6), steady steps/s, one run each of
plain ``python`` / under ``loaderdoc watch``, the worker count edited into a copy of the script
(2026-11-24, while another session's tests shared the machine for part of it: the CPU loops'
rates swung 2-3x between minutes, e.g. cpu_cnn at 0 workers gave 7.2, 3.6, 2.5 and 6.8 plain
within half an hour; the sleep-bound io_bound did not move; repeat before believing a gain):
    cpu_cnn        0 workers 2.45 / 3.53 (quiet minutes: 6.7-7.2 / 6.7-6.8); 2: 5.9 / 6.9; 3: 3.4 / 6.5
    io_bound       8 workers 58.7 / 58.4; 4: 58.8 / 58.8; 2: 30.4 / 30.4; 1: 15.2 / 15.2
    lightning_fit  0 workers 7.6 / 7.7 (both loaders); 2: 7.0 / 7.0

With the CPU accounting (results/watch_fixes-20261124-221026.json, quiet machine, 2 repeats):
every loop reached a fixed point within 1 application; expected vs measured gain 1.00/0.99
(cpu_cnn_w6: 6 -> 2 workers), 1.52/1.48 (cpu_cnn_t1: 0 -> 1), 3.76/3.89 (io_bound_w1: 1 -> 4),
1.59/1.41 (lightning_fit_t1: train 0 -> 1, val 0 -> 2); cpu_cnn, io_bound and lightning_fit as
written drew no proposal (the CPU loops sit at their CPU ceiling, io_bound is fed).

What watch proposed before issue 28's CPU accounting (commit 5c611c1): cpu_cnn at 0 workers
num_workers=2 once, 1 in both dry-run repeats (watch-data-starved; the size depends on the
measured wait); at 3, num_workers=1 (cpu-oversubscribed). io_bound at 8 or 4 workers
num_workers=1 (cpu-oversubscribed: a 4x slowdown for this sleep-bound load), at 2 or 1
num_workers=5 (watch-data-starved): a cycle once applied. lightning_fit at 0: watch-data-starved
for both loaders (val 4, train 1); 2 workers gained nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaderdoc.base._compat import tomllib
from loaderdoc.watching.apply import table_key
from loaderdoc.watching.fixes import TABLE_OF_ROLE
from loaderdoc.watching.fixes import fix_tables as _fix_tables
from loaderdoc.watching.report import WatchReport
from loaderdoc.watching.watched import LoaderReport, LoaderTotals

REPO = Path(__file__).resolve().parent.parent
LOOPS_DIR = REPO / "benchmarks" / "watch_loops"
RESULTS = REPO / "benchmarks" / "results"
# name -> (script in watch_loops/, its arguments): the three loops as their authors wrote them, and
# four started from settings a user copies (a large worker count, a single worker, one thread)
LOOPS = {
    "cpu_cnn": ("cpu_cnn", []),
    "cpu_cnn_w6": ("cpu_cnn", ["--workers", "6"]),
    "cpu_cnn_t1": ("cpu_cnn", ["--threads", "1"]),  # one torch thread: loading and step take turns on 1 CPU
    "io_bound": ("io_bound", []),
    "io_bound_w1": ("io_bound", ["--workers", "1"]),
    "lightning_fit": ("lightning_fit", []),
    "lightning_fit_t1": ("lightning_fit", ["--threads", "1"]),  # train and val loaders: per-role tables
}

Tables = dict[str, dict[str, Any]]  # table name ("dataloader", "train_dataloader", ...) -> settings
Repeat = tuple[dict[str, Any], str | None]  # a repeat's report, and the --fixes file it wrote (None: none)


# ---- reading reports (pure) ---------------------------------------------------------------------
def _waits(entry: dict[str, Any]) -> int:
    return (entry.get("totals") or {}).get("waits", 0)


def train_loader(report: dict[str, Any]) -> dict[str, Any] | None:
    """The training loop's loader: the train role's where a framework named it, else the one with
    the most waited batches (not validation's)."""
    loaders = report.get("loaders") or []
    trains = [e for e in loaders if table_key(e.get("role")) == "train"] or loaders
    return max(trains, key=_waits, default=None)


def steady_rate(report: dict[str, Any]) -> float | None:
    """Steps/s of the train loader after each epoch's first batch."""
    entry = train_loader(report)
    if entry is None:
        return None
    t = entry["totals"]
    seconds = t.get("wait_s", 0.0) + t.get("step_s", 0.0)
    return t.get("waits", 0) / seconds if seconds > 0 and t.get("waits") else None


def cpu_ceiling(report: dict[str, Any]) -> float | None:
    """The train loader's CPU ceiling: the steps/s these CPUs allow at most (None: not accounted)."""
    value = ((train_loader(report) or {}).get("cpu") or {}).get("ceiling_per_s")
    return float(value) if isinstance(value, (int, float)) else None


def proposals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """What each loader's findings propose (its entry's ``proposed``): the train loader's first,
    then the report's order."""
    train = train_loader(report)
    out = []
    for entry in report.get("loaders") or []:
        proposed = entry.get("proposed") or {}
        if proposed.get("change"):
            gain = proposed.get("expected_gain")
            out.append({"loader": entry.get("loader"), "role": entry.get("role"), "train": entry is train,
                        "change": dict(proposed["change"]), "rules": list(proposed.get("rules") or []),
                        "expected_gain": float(gain) if isinstance(gain, (int, float)) else None})
    return sorted(out, key=lambda p: not p["train"])  # stable: keeps the report's order


def expected_gain(props: list[dict[str, Any]]) -> float | None:
    """The gain the train loader's findings expect (None: none proposed, or no gain given)."""
    return next((p["expected_gain"] for p in props if p["train"]), None)


def table_of(entry: dict[str, Any]) -> str | None:
    """The role table a loader reads (None: a role no table names, e.g. predict)."""
    return TABLE_OF_ROLE.get(table_key(entry.get("role")) or "")


def applies_to(name: str, entry: dict[str, Any]) -> bool:
    """Whether --apply gives table ``name`` to the loader: ``[dataloader]`` goes to every loader."""
    return name == "dataloader" or table_of(entry) == name


def pick_tables(candidates: list[Tables]) -> tuple[Tables, int]:
    """The tables most repeats wrote (ties: the earliest repeat's), so one noisy repeat does not
    steer the next round, and the first repeat that wrote them (-1: no repeats)."""
    if not candidates:
        return {}, -1
    keys = [json.dumps(c, sort_keys=True) for c in candidates]
    best = max(Counter(keys).items(), key=lambda kv: (kv[1], -keys.index(kv[0])))[0]
    return candidates[keys.index(best)], keys.index(best)


def normalized(tables: Tables, base: dict[str, Any] | None) -> Tables:
    """``tables`` less what the script sets itself: a value every loader the table applies to ran
    with in ``base`` (round 0's report, nothing applied), and the tables that leaves empty; so
    proposing what the script already has is nothing new."""
    loaders = (base or {}).get("loaders") or []
    out: Tables = {}
    for name, table in tables.items():
        ran = [e.get("settings") or {} for e in loaders if applies_to(name, e)]
        kept = {k: v for k, v in table.items() if not ran or any(s.get(k) != v for s in ran)}
        if kept:
            out[name] = kept
    return out


def settings_seen(report: dict[str, Any], tables: Tables) -> bool | None:
    """Whether every loader an applied table goes to ran with its values (None: nothing applied;
    False too where no loader of the table's role ran)."""
    if not tables:
        return None
    loaders = report.get("loaders") or []
    for name, table in tables.items():
        ran = [e.get("settings") or {} for e in loaders if applies_to(name, e)]
        if not ran or any(s.get(k) != v for s in ran for k, v in table.items()):
            return False
    return True


def fix_tables(data: dict[str, Any]):
    """``--fixes``'s tables for a report as the bench keeps it (its JSON): the loaders' keys
    ``fix_tables`` reads, typed (the bench's own fakes hold no more than those)."""
    loaders = [LoaderReport(number=e.get("loader"), role=e.get("role"), settings=dict(e.get("settings") or {}),
                            applied={k: e[k] for k in ("asked", "applied", "apply_tables") if k in e},
                            totals=LoaderTotals(waits=(e.get("totals") or {}).get("waits") or 0),
                            proposed=e.get("proposed"))
               for e in data.get("loaders") or []]
    return _fix_tables(WatchReport(command=data.get("command"), loaders=loaders))


# ---- one loop's rounds (pure given the runner) --------------------------------------------------
def _mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def round_entry(index: int, applied: Tables, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's repeats: rates, CPU ceilings, what each loader proposed, the next tables."""
    by_repeat = [fix_tables(r)[0] for r in reports]
    chosen, which = pick_tables(by_repeat)
    props = proposals(reports[which]) if reports else []
    rates = [steady_rate(r) for r in reports]
    ceilings = [cpu_ceiling(r) for r in reports]
    return {"round": index, "tables": applied, "rates": rates, "mean_rate": _mean(rates),
            "ceilings": ceilings, "ceiling": _mean(ceilings),
            "train_cpu": [(train_loader(r) or {}).get("cpu") for r in reports],
            "settings_seen": [settings_seen(r, applied) for r in reports],
            "proposals": props, "tables_by_repeat": by_repeat, "next_tables": chosen, "chosen_repeat": which,
            "expected_gain": expected_gain(props), "measured_gain": None}


def iterate(run: Callable[[Tables, str | None], list[Repeat]], max_applications: int,
            dry_run: bool = False) -> dict[str, Any]:
    """Rounds until a fixed point, a cycle, a failure or ``max_applications`` applied files.
    ``run(tables, apply_file) -> [(report, fixes_file or None), ...]``, one per repeat: the loop
    under ``watch --apply apply_file`` (None in round 0), whose tables are ``tables``; raises
    RuntimeError on a failed run."""
    rounds: list[dict[str, Any]] = []
    applied: Tables = {}
    apply_file: str | None = None
    base: dict[str, Any] | None = None  # round 0's report: the script's own settings
    tried: list[Tables] = [{}]  # normalized: round 0 applies nothing
    outcome = "max-applications"
    while True:
        try:
            repeats = run(applied, apply_file)
        except RuntimeError as exc:
            outcome = f"failed: {exc}"
            break
        reports = [report for report, _ in repeats]
        if base is None:
            base = reports[0] if reports else {}
        rounds.append(round_entry(len(rounds), applied, reports))
        if not all(seen is not False for seen in rounds[-1]["settings_seen"]):
            outcome = "not-applied"  # the loaders ran without the tables: the rate says nothing
            break
        chosen = rounds[-1]["next_tables"]
        if normalized(chosen, base) == normalized(applied, base):
            outcome = "fixed-point"
            break
        if dry_run:
            outcome = "dry-run"
            break
        if normalized(chosen, base) in tried:
            outcome = "cycle"  # back to a configuration already measured
            break
        if len(rounds) > max_applications:
            break
        apply_file = repeats[rounds[-1]["chosen_repeat"]][1]
        if apply_file is None:
            outcome = "failed: the repeat whose tables were taken wrote no --fixes file"
            break
        applied = chosen
        tried.append(normalized(chosen, base))
    for this, after in zip(rounds, rounds[1:], strict=False):
        if this["mean_rate"] and after["mean_rate"] is not None:
            this["measured_gain"] = after["mean_rate"] / this["mean_rate"]
    return {"rounds": rounds, "outcome": outcome, "fixed_point": outcome == "fixed-point",
            "applications": max(0, len(rounds) - 1)}


# ---- the table ------------------------------------------------------------------------------------
def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items()))


def tables_text(tables: Tables) -> str:
    """``train: num_workers=2; val: num_workers=1`` (``all``: the [dataloader] table)."""
    def short(name: str) -> str:
        return "all" if name == "dataloader" else name.removesuffix("_dataloader")
    return "; ".join(f"{short(n)}: {_kv(t)}" for n, t in sorted(tables.items())) or "(script's own)"


def proposals_text(props: list[dict[str, Any]]) -> str:
    """``train: num_workers=1 (watch-data-starved)``; a loader without a role by its number."""
    return "; ".join(f"{p['role'] or 'loader ' + str(p['loader'])}: {_kv(p['change'])}"
                     + (f" ({', '.join(p['rules'])})" if p["rules"] else "") for p in props) or "none"


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ("loop", "round", "applied", "steps/s (each repeat)", "CPU ceiling", "proposed (per loader)",
            "expected", "measured")
    rows = [head]
    for loop, res in results.items():
        for r in res["rounds"]:
            note = "" if not r["tables"] or all(r["settings_seen"]) else " (NOT applied)"
            rows.append((loop, str(r["round"]), tables_text(r["tables"]) + note,
                         " ".join(_fmt(x) for x in r["rates"]), _fmt(r["ceiling"], ".1f"),
                         proposals_text(r["proposals"]), _fmt(r["expected_gain"]), _fmt(r["measured_gain"])))
        rows.append((loop, "", f"-> {res['outcome']} after {res['applications']} application(s)", "", "", "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


# ---- running --------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)  # keeps the caller's PYTHONPATH (torchvision outside the venv)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return env


def watch_has_fixes() -> bool:
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "watch", "--help"], capture_output=True,
                          text=True, env=_env(), cwd=REPO)
    return "--apply" in proc.stdout and "--fixes" in proc.stdout


def watch_once(loop: str, apply_file: str | None, workdir: Path, tag: str, steps: int | None) -> Repeat:
    """One run of the loop under ``watch --report --fixes [--apply]``: its report, and its --fixes
    file (None: watch wrote none, having nothing to set). The file must hold ``fix_tables(report)``."""
    report, fixes = workdir / f"{tag}.json", workdir / f"{tag}.toml"
    cmd = [sys.executable, "-m", "loaderdoc", "watch", "--report", str(report), "--fixes", str(fixes)]
    if apply_file:
        cmd += ["--apply", apply_file]
    script, script_args = LOOPS[loop]
    cmd += ["--", sys.executable, str(LOOPS_DIR / f"{script}.py"), *script_args]
    if steps:
        cmd += ["--steps", str(steps)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=900)
    if proc.returncode != 0 or not report.exists():
        raise RuntimeError(f"{tag} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    data = json.loads(report.read_text())
    tables = fix_tables(data)[0]
    written = tomllib.loads(fixes.read_text()) if fixes.exists() else {}
    if written != tables:
        raise RuntimeError(f"{tag}: --fixes wrote {written or 'nothing'}, fix_tables(report) gives {tables or 'nothing'}")
    print(f"  {tag}: {_fmt(steady_rate(data))} steps/s (CPU ceiling {_fmt(cpu_ceiling(data), '.1f')}), "
          f"{time.perf_counter() - started:.0f} s wall, proposes {proposals_text(proposals(data))}; "
          f"next: {tables_text(tables) if tables else 'no --fixes file'}", flush=True)
    return data, str(fixes) if fixes.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="nothing applied: one round per loop")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--steps", type=int, help="passed to every loop (default: each loop's own)")
    parser.add_argument("--max-applications", type=int, default=3)
    args = parser.parse_args(argv)
    loops = [name for name in args.loops.split(",") if name]
    unknown = [name for name in loops if name not in LOOPS]
    if unknown:
        parser.error(f"unknown loop(s) {', '.join(unknown)}; known: {', '.join(LOOPS)}")
    if not watch_has_fixes():
        print("watch_fixes: this loaderdoc's `watch --help` lists no --apply or no --fixes; the driver runs "
              "`loaderdoc watch --apply PREV.toml --fixes NEXT.toml`", file=sys.stderr)
        return 2

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="watch_fixes-") as tmp:
        for loop in loops:
            print(f"{loop}:", flush=True)
            counter = {"round": 0}

            def run(tables: Tables, apply_file: str | None, loop: str = loop,
                    counter: dict = counter) -> list[Repeat]:
                k = counter["round"]
                counter["round"] += 1
                if tables:
                    print(f" round {k}: --apply {tables_text(tables)}", flush=True)
                return [watch_once(loop, apply_file, Path(tmp), f"{loop}-r{k}-{i}", args.steps)
                        for i in range(args.repeats)]

            results[loop] = iterate(run, args.max_applications, dry_run=args.dry_run)

    text = table(results)
    print("\n" + text)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"watch_fixes-{time.strftime('%Y%m%d-%H%M%S')}.json"
    meta = {"argv": sys.argv[1:], "dry_run": args.dry_run, "repeats": args.repeats, "steps": args.steps,
            "max_applications": args.max_applications, "cpus": os.cpu_count(), "python": platform.python_version(),
            "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                     cwd=REPO).stdout.strip() or None}
    out.write_text(json.dumps({"meta": meta, "loops": results, "table": text.splitlines()}, indent=1) + "\n")
    print(f"\nsaved {out.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
