#!/usr/bin/env python
"""Probe vs exhaustive grid vs rules of thumb, on loaderdoc's synthetic workloads.

Rerunnable, not a test: ``python benchmarks/probe_vs_grid.py [--quick] [--only NAME ...]``.
Writes ``benchmarks/results/probe_vs_grid-<timestamp>.json`` and prints a Markdown table.

For every workload, in the same run:

1. the probe with its default 30 s budget (``loaderdoc.probing.api.probe``);
2. a grid: num_workers 0..16 x prefetch_factor {2, 4} x persistent_workers {off, on}, each with
   the same runner and a 1 s steady window (prefetch 1 and 8 are left out to keep the grid
   under ~25 minutes for all six workloads on a 2-core machine);
3. an evaluation pass: the probe's pick, the grid's best and each rule of thumb are measured
   again, in turn, with a longer window, so the comparison is not the grid's own (noisy, and
   biased upward by picking the maximum) numbers.

Rules of thumb: 0 workers, 4, os.cpu_count(), min(8, cpu_count // 2) and Lightning's
suggestion cpus // devices - 1 (devices = 1 here).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

from loaderdoc._serde import to_dict
from loaderdoc.probing.api import probe
from loaderdoc.probing.isolate import run_config
from loaderdoc.probing.measure import LoadJob, RunPlan
from loaderdoc.probing.workloads import PRESETS
from loaderdoc.settings import LoaderSettings

RESULTS_DIR = Path(__file__).with_name("results")


@dataclass
class Case:
    label: str  # what kind of workload this stands for
    preset: str
    step_ms: float
    batch_size: int


CASES = [
    Case("I/O-bound (remote, 10 ms/sample)", "remote", 20.0, 32),
    Case("CPU-bound (image decode+augment)", "image", 20.0, 32),
    Case("in-memory (tensor)", "tensor", 20.0, 128),
    Case("large samples (2K uint16, batch 4)", "large-image", 50.0, 4),
    Case("slow consumer (image, 150 ms step)", "image", 150.0, 32),
    Case("spiky I/O (2 ms, +150 ms 1 in 25)", "spiky", 20.0, 32),
]


def rules_of_thumb(cpus: int) -> dict[str, int]:
    return {
        "0 workers": 0,
        "4 workers": 4,
        f"cpu_count ({cpus})": cpus,
        f"min(8, cpus//2) ({min(8, cpus // 2)})": min(8, cpus // 2),
        f"Lightning cpus-1 ({max(0, cpus - 1)})": max(0, cpus - 1),
    }


def settings_for(batch_size: int, workers: int, prefetch: int = 2, persistent: bool = False) -> LoaderSettings:
    if workers == 0:
        return LoaderSettings(batch_size=batch_size, shuffle=True)
    return LoaderSettings(batch_size=batch_size, shuffle=True, num_workers=workers,
                          prefetch_factor=prefetch, persistent_workers=persistent)


def key_of(s: LoaderSettings) -> tuple[int, int, bool]:
    return s.num_workers, s.effective_prefetch_factor, s.persistent_workers


def run_case(case: Case, max_workers: int, prefetches: list[int], grid_window: float,
             eval_window: float, eval_repeats: int, probe_budget: float) -> dict:
    spec = PRESETS[case.preset]
    dataset, collate = spec.build()
    workload = LoadJob(dataset=dataset, collate_fn=collate, step_ms=case.step_ms)
    print(f"\n== {case.label}", flush=True)

    # 1. the probe
    report = probe(dataset, collate_fn=collate, batch_size=case.batch_size, step_ms=case.step_ms,
                   budget_s=probe_budget, name=case.preset)
    rec = report.recommended
    print(f"probe: {report.elapsed_s:.1f} s, {len(report.results)} configs, stopped={report.stopped}, "
          f"recommends {rec.as_kwargs() if rec else None}", flush=True)

    # 2. the grid
    grid_plan = RunPlan(window_s=grid_window, loader_timeout_s=20.0, measure_restart=False)
    grid = []
    grid_started = time.monotonic()
    configs = [settings_for(case.batch_size, 0)] + [
        settings_for(case.batch_size, n, pf, persistent)
        for n in range(1, max_workers + 1) for pf in prefetches for persistent in (False, True)
    ]
    for settings in configs:
        r = run_config(workload, settings, grid_plan)
        grid.append(r)
        print(f"  grid {key_of(settings)}: {r.status} {r.batches_per_s or 0:.2f} steps/s", flush=True)
    grid_time = time.monotonic() - grid_started
    ok = [r for r in grid if r.ok and r.batches_per_s]
    grid_best = max(ok, key=lambda r: r.batches_per_s)

    # 3. evaluation pass: same longer window for everyone, measured in turn
    cpus = os.cpu_count() or 1
    candidates: dict[str, LoaderSettings] = {"grid best": grid_best.settings}
    if rec is not None:
        candidates["probe"] = rec.replace(persistent_workers=False) if rec.num_workers else rec
    for name, workers in rules_of_thumb(cpus).items():
        candidates[name] = settings_for(case.batch_size, workers)
    eval_plan = RunPlan(window_s=eval_window, loader_timeout_s=20.0, measure_restart=False)
    distinct = {key_of(s): s for s in candidates.values()}
    measured: dict[tuple, list] = {k: [] for k in distinct}
    for _ in range(eval_repeats):
        for k, settings in distinct.items():
            r = run_config(workload, settings, eval_plan)
            measured[k].append(r)
    evaluation = {}
    for name, settings in candidates.items():
        runs = [r for r in measured[key_of(settings)] if r.ok and r.batches_per_s]
        grid_row = next((r for r in grid if key_of(r.settings) == key_of(settings)), None)
        evaluation[name] = {
            "settings": settings.as_kwargs(),
            "steps_per_s": statistics.fmean(r.batches_per_s for r in runs) if runs else None,
            "worker_pss_mib": (max(r.worker_pss_bytes or 0 for r in runs) / 2**20) if runs else None,
            "grid_steps_per_s": grid_row.batches_per_s if grid_row and grid_row.ok else None,
        }
        print(f"  eval {name:28s} {key_of(settings)}: {evaluation[name]['steps_per_s'] or 0:.2f} steps/s", flush=True)
    return {
        "case": case.label, "preset": case.preset, "step_ms": case.step_ms, "batch_size": case.batch_size,
        "probe": {"elapsed_s": report.elapsed_s, "configs": len(report.results), "stopped": report.stopped,
                  "recommended": rec.as_kwargs() if rec else None, "reasons": report.reasons,
                  "report": report.to_dict()},
        "grid": {"elapsed_s": grid_time, "configs": len(grid), "best": grid_best.settings.as_kwargs(),
                 "best_steps_per_s": grid_best.batches_per_s,
                 "rows": [to_dict(r) for r in grid]},
        "evaluation": evaluation,
    }


def markdown(rows: list[dict]) -> str:
    """The comparison table. Percentages are of the grid's best configuration *re-measured* in the
    evaluation pass (the grid's own maximum is a lucky window), and in brackets of the best of all
    re-measured configurations in that row."""
    out = [
        "| workload | grid best: workers, prefetch (grid / re-measured steps/s) | probe pick | probe steps/s "
        "(% of grid best) [% of best re-measured] | probe time / grid time | 0 | 4 | cpu_count | "
        "min(8, cpus//2) | Lightning cpus-1 | worker PSS: probe / grid best |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        ev = row["evaluation"]
        best = ev["grid best"]["steps_per_s"] or 0.0
        best_any = max((v["steps_per_s"] or 0.0) for v in ev.values())

        def cell(name: str, ev: dict = ev, best: float = best, best_any: float = best_any) -> str:
            value = ev[name]["steps_per_s"]
            if value is None:
                return "failed"
            return f"{value:.1f} ({100 * value / best:.0f} %) [{100 * value / best_any:.0f} %]"

        rules = [k for k in ev if k not in ("grid best", "probe")]
        gb = row["grid"]["best"]
        pr = row["probe"]["recommended"] or {}
        pick = "none"
        if pr:
            pick = f"{pr.get('num_workers')}, {pr.get('prefetch_factor', '-')}" + (
                ", persistent" if pr.get("persistent_workers") else "")
        pss = "-"
        if "probe" in ev:
            pss = f"{ev['probe']['worker_pss_mib'] or 0:.0f} / {ev['grid best']['worker_pss_mib'] or 0:.0f} MiB"
        ratio = row["probe"]["elapsed_s"] / row["grid"]["elapsed_s"]
        out.append(
            f"| {row['case']} | {gb['num_workers']}, {gb.get('prefetch_factor', '-')} "
            f"({row['grid']['best_steps_per_s']:.1f} / {best:.1f}) | {pick} | "
            f"{cell('probe') if 'probe' in ev else 'none'} | {row['probe']['elapsed_s']:.0f} s / "
            f"{row['grid']['elapsed_s']:.0f} s = 1/{1 / ratio:.1f} | "
            + " | ".join(f"{(ev[k]['steps_per_s'] or 0):.1f} ({100 * (ev[k]['steps_per_s'] or 0) / best:.0f} %)"
                         for k in rules)
            + f" | {pss} |"
        )
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="*", help="presets to run (default: all cases)")
    parser.add_argument("--quick", action="store_true", help="smaller grid (0..8 workers, prefetch 2) for a smoke run")
    parser.add_argument("--grid-window", type=float, default=1.0)
    parser.add_argument("--eval-window", type=float, default=3.0)
    parser.add_argument("--eval-repeats", type=int, default=2)
    parser.add_argument("--probe-budget", type=float, default=30.0)
    parser.add_argument("--table-from", metavar="JSON", help="only print the table of an earlier results file")
    args = parser.parse_args()
    if args.table_from:
        print(markdown(json.loads(Path(args.table_from).read_text())["rows"]))
        return 0
    warnings.simplefilter("ignore", UserWarning)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # also when started in the background
    cases = [c for c in CASES if not args.only or c.preset in args.only]
    max_workers, prefetches = (8, [2]) if args.quick else (16, [2, 4])
    started = time.monotonic()
    rows = []
    RESULTS_DIR.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = RESULTS_DIR / f"probe_vs_grid-{stamp}.json"
    for case in cases:
        rows.append(run_case(case, max_workers, prefetches, args.grid_window, args.eval_window,
                             args.eval_repeats, args.probe_budget))
        meta = {"cpus": os.cpu_count(), "load_avg_end": os.getloadavg(), "total_s": time.monotonic() - started,
                "grid": {"max_workers": max_workers, "prefetch": prefetches, "window_s": args.grid_window},
                "eval": {"window_s": args.eval_window, "repeats": args.eval_repeats}}
        path.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    table = markdown(rows)
    path.with_suffix(".md").write_text(table + "\n")
    print("\n" + table)
    print(f"\ntotal {time.monotonic() - started:.0f} s; results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
