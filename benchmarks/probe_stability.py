#!/usr/bin/env python
"""Are repeated probes of one workload one answer? Rerunnable, not a test.

``python benchmarks/probe_stability.py [--runs 3] [--budget 30] [--only image ...] [--burn]``

For each workload: the probe is run ``--runs`` times with the same budget (as `loaderdoc probe`
runs it: this machine's facts, the preset's batch size and step). Then every distinct pick is
measured again side by side, in turn, over ``--repeats`` rounds with a longer window, so the
comparison does not rest on the probes' own short windows. A workload passes when every pick
reaches at least ``1 - tolerance`` of the fastest pick, the tolerance being the policy's own
(3 %, widened to the spread seen between repeated runs of one pick, at most 10 %).

``--burn`` keeps one core busy with another process throughout (a loaded machine).

Writes ``benchmarks/results/probe_stability-<timestamp>.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import time
import warnings
from pathlib import Path

from loaderdoc import policy
from loaderdoc.probing.api import probe
from loaderdoc.probing.isolate import run_config
from loaderdoc.probing.measure import LoadJob, RunPlan
from loaderdoc.probing.workloads import PRESETS
from loaderdoc.settings import LoaderSettings

RESULTS_DIR = Path(__file__).with_name("results")
WORKLOADS = ["image", "remote", "tensor", "large-image", "spiky"]


def _burn() -> None:  # pragma: no cover - a busy loop in a child process
    while True:
        pass


def run_workload(name: str, runs: int, budget: float, repeats: int, window: float) -> dict:
    spec = PRESETS[name]
    picks = []
    for i in range(runs):
        report = probe(preset=name, budget_s=budget, step_ms=None)  # None: the preset's step, as the CLI
        rec = report.recommended
        picks.append({"settings": rec.as_kwargs() if rec else None, "elapsed_s": report.elapsed_s,
                      "stopped": report.stopped, "configs": len(report.results)})
        print(f"  probe {i + 1}: {rec.num_workers if rec else None} workers "
              f"(prefetch {rec.effective_prefetch_factor if rec else '-'}), {report.elapsed_s:.1f} s, "
              f"stopped {report.stopped}", flush=True)
    dataset, collate = spec.build()
    workload = LoadJob(dataset=dataset, collate_fn=collate, step_ms=spec.step_ms)
    plan = RunPlan(window_s=window, loader_timeout_s=20.0, measure_restart=False)
    distinct = {}
    for p in picks:
        if p["settings"] is not None:
            s = LoaderSettings(**p["settings"])
            distinct[policy.stream_key(s)] = s.replace(persistent_workers=False) if s.num_workers else s
    measured: dict[tuple, list[float]] = {k: [] for k in distinct}
    for _ in range(repeats):
        for key, settings in distinct.items():
            r = run_config(workload, settings, plan)
            if r.ok and r.batches_per_s:
                measured[key].append(r.batches_per_s)
    rates = {k: statistics.fmean(v) for k, v in measured.items() if v}
    spreads = [(max(v) - min(v)) / (2 * statistics.fmean(v)) for v in measured.values() if len(v) >= 2]
    tolerance = min(policy.MAX_NOISE, max([policy.TOLERANCE, *spreads]))
    best = max(rates.values()) if rates else None
    ratios = {f"{k[0]}w/pf{k[1]}": rates[k] / best for k in rates} if best else {}
    ok = bool(ratios) and min(ratios.values()) >= 1 - tolerance and len(rates) == len(distinct)
    print("  side by side: " + ", ".join(f"{k}: {rates[kk]:.2f} steps/s ({ratios[k]:.0%})"
                                          for kk, k in zip(rates, ratios, strict=True))
          + f"; tolerance {tolerance:.0%}: {'PASS' if ok else 'FAIL'}", flush=True)
    return {"workload": name, "picks": picks, "side_by_side": {k: measured[kk] for kk, k in zip(rates, ratios, strict=True)},
            "ratios": ratios, "tolerance": tolerance, "pass": ok}


def markdown(rows: list[dict], burn: bool) -> str:
    out = [f"| workload | picks (workers) | worst pick vs best pick, side by side | tolerance | {'loaded' if burn else 'quiet'} |",
           "|---|---|---|---|---|"]
    for row in rows:
        workers = ", ".join(str(p["settings"]["num_workers"]) if p["settings"] else "none" for p in row["picks"])
        worst = min(row["ratios"].values()) if row["ratios"] else float("nan")
        out.append(f"| {row['workload']} | {workers} | {worst:.0%} | {row['tolerance']:.0%} | "
                   f"{'pass' if row['pass'] else 'FAIL'} |")
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--budget", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3, help="side-by-side rounds")
    parser.add_argument("--window", type=float, default=3.0, help="side-by-side window (s)")
    parser.add_argument("--only", nargs="*", default=WORKLOADS)
    parser.add_argument("--burn", action="store_true", help="keep one core busy throughout")
    args = parser.parse_args()
    burner = None
    if args.burn:
        burner = multiprocessing.get_context("fork").Process(target=_burn, daemon=True)
        burner.start()
    started = time.time()
    rows = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for name in args.only:
                print(f"\n== {name}", flush=True)
                rows.append(run_workload(name, args.runs, args.budget, args.repeats, args.window))
    finally:
        if burner is not None:
            burner.kill()
    RESULTS_DIR.mkdir(exist_ok=True)
    path = RESULTS_DIR / f"probe_stability-{time.strftime('%Y%m%d-%H%M%S')}.json"
    path.write_text(json.dumps({"args": vars(args), "elapsed_s": time.time() - started, "rows": rows}, indent=2))
    print("\n" + markdown(rows, args.burn))
    print(f"\nwrote {path} ({time.time() - started:.0f} s)")
    return 0 if all(r["pass"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
