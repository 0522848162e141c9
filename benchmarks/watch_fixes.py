"""Do `loaderdoc watch`'s proposed fixes pay off? (issue 28) Each of three real training loops
runs under ``loaderdoc watch --report``; the findings that propose a DataLoader change
(``settings_change``) are written to a settings file and the loop runs again under
``loaderdoc watch --apply FILE``, until no finding proposes anything new (a fixed point) or
``--max-applications`` (3) changes were applied. Every configuration runs ``--repeats`` (2) times
to show the noise.

    PYTHONPATH=src:TVSITE python benchmarks/watch_fixes.py [--dry-run] [--repeats 2]
        [--loops cpu_cnn,io_bound,lightning_fit] [--steps N] [--max-applications 3]

``--dry-run``: no ``--apply``, one round per loop (what watch proposes, and the expected gain
where a finding gives one); it works with any watch. Without it the driver first checks that
``loaderdoc watch --help`` lists ``--apply`` and stops with a message where it does not.

Read from each report: the train loader (the one with the most waited batches) gives the steady
rate, ``waits / (wait_s + step_s)`` of its totals (an epoch's first batch is start-up, not
steady). The findings give ``settings_change`` and, where a finding has one, ``expected_gain``
(a ratio, e.g. 1.25; None until watch writes it). When several findings propose a change, the
most severe one's value wins per key; when repeats disagree, the change most repeats proposed is
taken. Measured gain: the next round's mean rate over this round's. A change that proposes a
configuration already tried is a cycle, and the run stops there. The settings file is a
``[dataloader]`` table (every loader of the script gets it).

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
What watch proposed then: cpu_cnn at 0 workers num_workers=2 once, 1 in both dry-run repeats
(watch-data-starved; the size depends on the measured wait); at 3, num_workers=1
(cpu-oversubscribed). io_bound at 8 or 4 workers num_workers=1 (cpu-oversubscribed: a 4x slowdown
for this sleep-bound load), at 2 or 1 num_workers=5 (watch-data-starved): a cycle once applied.
lightning_fit at 0: watch-data-starved for both loaders (val 4, train 1); 2 workers gained nothing.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
LOOPS_DIR = REPO / "benchmarks" / "watch_loops"
RESULTS = REPO / "benchmarks" / "results"
LOOPS = ("cpu_cnn", "io_bound", "lightning_fit")


# ---- reading reports (pure) ---------------------------------------------------------------------
def train_loader(report: dict[str, Any]) -> dict[str, Any] | None:
    """The loader with the most waited batches: the training loop's, not validation's."""
    loaders = report.get("loaders") or []
    return max(loaders, key=lambda entry: entry["totals"].get("waits", 0), default=None)


def steady_rate(report: dict[str, Any]) -> float | None:
    """Steps/s of the train loader after each epoch's first batch."""
    entry = train_loader(report)
    if entry is None:
        return None
    t = entry["totals"]
    seconds = t.get("wait_s", 0.0) + t.get("step_s", 0.0)
    return t.get("waits", 0) / seconds if seconds > 0 and t.get("waits") else None


def proposals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The findings that propose a settings change: the train loader's first (the rate measured
    is its rate, and a ``[dataloader]`` table sets every loader), then the report's order (most
    severe first). A finding names its loader only in its symptom ("loader 2 (DataLoader, ...")."""
    out = []
    train = (train_loader(report) or {}).get("loader")
    for f in report.get("findings") or []:
        if f.get("settings_change"):
            gain = f.get("expected_gain")
            named = re.match(r"loader (\d+)\b", f.get("symptom") or "")
            out.append({"rule_id": f.get("rule_id"), "severity": f.get("severity"),
                        "loader": int(named.group(1)) if named else None,
                        "symptom": f.get("symptom"), "settings_change": dict(f["settings_change"]),
                        "expected_gain": float(gain) if isinstance(gain, (int, float)) else None})
    return sorted(out, key=lambda p: p["loader"] != train or train is None)  # stable: keeps severity order


def merged_change(props: list[dict[str, Any]]) -> dict[str, Any]:
    """One change from several findings: per key, the first finding's value (see proposals)."""
    change: dict[str, Any] = {}
    for p in props:
        for key, value in p["settings_change"].items():
            change.setdefault(key, value)
    return change


def pick_change(changes: list[dict[str, Any]]) -> dict[str, Any]:
    """The change most repeats proposed (ties: the earliest repeat's), so one noisy repeat does
    not steer the next round."""
    if not changes:
        return {}
    keys = [json.dumps(c, sort_keys=True) for c in changes]
    best = max(Counter(keys).items(), key=lambda kv: (kv[1], -keys.index(kv[0])))[0]
    return changes[keys.index(best)]


def expected_gain(props: list[dict[str, Any]], change: dict[str, Any]) -> float | None:
    """The product of the expected gains of the findings whose whole change is being applied
    (None when none of them gives one)."""
    gains = [p["expected_gain"] for p in props if p["expected_gain"] is not None
             and all(change.get(k) == v for k, v in p["settings_change"].items())]
    return math.prod(gains) if gains else None


def next_settings(applied: dict[str, Any], change: dict[str, Any],
                  base: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The settings for the next round, or None when the change adds nothing (a fixed point).
    ``base``: the script's own settings (round 0's loader), so proposing a value the script
    already has is nothing new either."""
    base = base or {}
    new = {**applied, **change}
    return None if {**base, **new} == {**base, **applied} else new


def settings_seen(report: dict[str, Any], applied: dict[str, Any]) -> bool | None:
    """Whether the train loader ran with the applied settings (None: nothing was applied)."""
    if not applied:
        return None
    entry = train_loader(report) or {}
    used = entry.get("settings") or {}
    return all(used.get(k) == v for k, v in applied.items())


def to_toml(settings: dict[str, Any]) -> str:
    """A ``[dataloader]`` table (what ``loaderdoc export`` writes; every loader gets it)."""
    def value(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if v is None:
            return '"none"'  # TOML has no null: the export spells an unset value "none"
        if isinstance(v, (int, float)):
            return repr(v)
        return json.dumps(str(v))
    return "[dataloader]\n" + "".join(f"{k} = {value(v)}\n" for k, v in sorted(settings.items()))


# ---- one loop's rounds (pure given the runner) --------------------------------------------------
def round_entry(index: int, applied: dict[str, Any], reports: list[dict[str, Any]]) -> dict[str, Any]:
    """One configuration's repeats: rates, what each proposed, the change taken."""
    props = [proposals(r) for r in reports]
    rates = [steady_rate(r) for r in reports]
    known = [r for r in rates if r is not None]
    change = pick_change([merged_change(p) for p in props])
    chosen = next((p for p, r in zip(props, reports, strict=True) if merged_change(p) == change), [])
    return {"round": index, "settings": dict(applied), "rates": rates,
            "mean_rate": statistics.fmean(known) if known else None,
            "settings_seen": [settings_seen(r, applied) for r in reports],
            "findings": chosen, "proposed_by_repeat": [merged_change(p) for p in props],
            "change": change, "expected_gain": expected_gain(chosen, change), "measured_gain": None}


def iterate(run, max_applications: int, dry_run: bool = False) -> dict[str, Any]:
    """Rounds until a fixed point, a cycle, a failure or ``max_applications`` changes.
    ``run(settings) -> list of reports`` (one per repeat; raises RuntimeError on a failed run)."""
    rounds: list[dict[str, Any]] = []
    applied: dict[str, Any] = {}
    base: dict[str, Any] = {}  # the script's own settings, as round 0's train loader ran
    tried: list[dict[str, Any]] = []
    outcome = "max-applications"
    while True:
        try:
            reports = run(applied)
        except RuntimeError as exc:
            outcome = f"failed: {exc}"
            break
        if not rounds:
            base = dict((train_loader(reports[0]) or {}).get("settings") or {}) if reports else {}
            tried.append(base)
        rounds.append(round_entry(len(rounds), applied, reports))
        if not all(seen is not False for seen in rounds[-1]["settings_seen"]):
            outcome = "not-applied"  # the loader ran without the settings: its rate says nothing
            break
        new = next_settings(applied, rounds[-1]["change"], base)
        if new is None:
            outcome = "fixed-point"
            break
        if dry_run:
            outcome = "dry-run"
            break
        if {**base, **new} in tried:
            outcome = "cycle"  # back to a configuration already measured
            break
        if len(rounds) > max_applications:
            break
        applied = new
        tried.append({**base, **new})
    for this, after in zip(rounds, rounds[1:], strict=False):
        if this["mean_rate"] and after["mean_rate"] is not None:
            this["measured_gain"] = after["mean_rate"] / this["mean_rate"]
    return {"rounds": rounds, "outcome": outcome, "fixed_point": outcome == "fixed-point",
            "applications": max(0, len(rounds) - 1)}


# ---- the table ------------------------------------------------------------------------------------
def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def _kv(d: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(d.items())) or "(script's own)"


def table(results: dict[str, dict[str, Any]]) -> str:
    head = ("loop", "round", "settings", "steps/s (each repeat)", "proposed change (finding)", "expected", "measured")
    rows = [head]
    for loop, res in results.items():
        for r in res["rounds"]:
            rules = ", ".join(f"{p['rule_id']}" + (f" (loader {p['loader']})" if p.get("loader") else "")
                              + f": {_kv(p['settings_change'])}" for p in r["findings"])
            seen = r["settings_seen"]
            note = "" if not r["settings"] or all(seen) else " (NOT applied)"
            rows.append((loop, str(r["round"]), _kv(r["settings"]) + note,
                         " ".join(_fmt(x) for x in r["rates"]), rules or "none",
                         _fmt(r["expected_gain"]),
                         _fmt(r["measured_gain"])))
        rows.append((loop, "", f"-> {res['outcome']} after {res['applications']} application(s)", "", "", "", ""))
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in rows)


# ---- running --------------------------------------------------------------------------------------
def _env() -> dict[str, str]:
    env = dict(os.environ)  # keeps the caller's PYTHONPATH (torchvision outside the venv)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    return env


def watch_has_apply() -> bool:
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "watch", "--help"], capture_output=True,
                          text=True, env=_env(), cwd=REPO)
    return "--apply" in proc.stdout


def watch_once(loop: str, settings: dict[str, Any], workdir: Path, tag: str, steps: int | None) -> dict[str, Any]:
    report = workdir / f"{tag}.json"
    cmd = [sys.executable, "-m", "loaderdoc", "watch", "--report", str(report)]
    if settings:
        toml = workdir / f"{tag}.toml"
        toml.write_text(to_toml(settings))
        cmd += ["--apply", str(toml)]
    cmd += ["--", sys.executable, str(LOOPS_DIR / f"{loop}.py")]
    if steps:
        cmd += ["--steps", str(steps)]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=_env(), cwd=REPO, timeout=900)
    if proc.returncode != 0 or not report.exists():
        raise RuntimeError(f"{tag} exited {proc.returncode}: {proc.stderr.strip()[-600:]}")
    data = json.loads(report.read_text())
    print(f"  {tag}: {_fmt(steady_rate(data))} steps/s, {time.perf_counter() - started:.0f} s wall, "
          f"proposes {_kv(merged_change(proposals(data))) if proposals(data) else 'nothing'}", flush=True)
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="no --apply: one round per loop")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--loops", default=",".join(LOOPS))
    parser.add_argument("--steps", type=int, help="passed to every loop (default: each loop's own)")
    parser.add_argument("--max-applications", type=int, default=3)
    args = parser.parse_args(argv)
    loops = [name for name in args.loops.split(",") if name]
    unknown = [name for name in loops if name not in LOOPS]
    if unknown:
        parser.error(f"unknown loop(s) {', '.join(unknown)}; known: {', '.join(LOOPS)}")
    if not args.dry_run and not watch_has_apply():
        print("watch_fixes: this loaderdoc's `watch --help` lists no --apply, so a proposed fix cannot be "
              "applied yet; run with --dry-run (one round per loop, no changes applied)", file=sys.stderr)
        return 2

    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="watch_fixes-") as tmp:
        for loop in loops:
            print(f"{loop}:", flush=True)
            counter = {"round": 0}

            def run(settings: dict[str, Any], loop: str = loop, counter: dict = counter) -> list[dict[str, Any]]:
                k = counter["round"]
                counter["round"] += 1
                return [watch_once(loop, settings, Path(tmp), f"{loop}-r{k}-{i}", args.steps)
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
