"""Workers' memory with large samples, at glibc's default malloc and with its mmap threshold fixed.

Two parts, each run in fresh processes, once with glibc's defaults and once with
``GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072`` (set before the process starts, as a user
would launch training):

- **growth**: a plain DataLoader over 8 MiB int16 slices (batch 4, 5 ms of sleep a sample, a 50 ms
  step), 3 workers, ``--seconds`` long; the workers' summed PSS and malloc heap beyond the
  training process's, once a second;
- **probe windows**: the probe's own measurement (``measure_in_process``) of the ``large-image``
  preset at 2, 3 and 4 workers, ``--rounds`` times: steps/s, the workers' peak PSS and what the
  steady window saw (``worker_memory_growth``).

    python benchmarks/worker_heap.py [--seconds 12] [--rounds 2] [--json FILE]

Not a test (no pass/fail): the numbers behind the worker-memory paragraph of docs/guide/probe.md.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TUNABLE = "glibc.malloc.mmap_threshold=131072"


def growth(seconds: float) -> list[dict]:
    import time

    import psutil
    import torch
    from torch.utils.data import DataLoader, Dataset

    from loaderdoc.probing.monitor import heap_bytes

    class Slices(Dataset):
        def __init__(self) -> None:
            self.slice = torch.randint(0, 2**15, (1, 2048, 2048), dtype=torch.int16)

        def __len__(self) -> int:
            return 100_000

        def __getitem__(self, index: int):
            time.sleep(0.005)
            return self.slice.clone(), index % 10

    iterator = iter(DataLoader(Slices(), batch_size=4, shuffle=True, num_workers=3))
    started = time.perf_counter()
    rows, batches, last = [], 0, 0.0
    while time.perf_counter() - started < seconds:
        next(iterator)
        batches += 1
        time.sleep(0.05)
        now = time.perf_counter() - started
        if now - last >= 1.0:
            last = now
            workers = psutil.Process().children()
            own = heap_bytes() or 0
            rows.append({"s": round(now, 1), "batches": batches,
                         "pss_mib": round(sum(w.memory_full_info().pss for w in workers) / 2**20),
                         "heap_grown_mib": round(sum(max(0, (heap_bytes(w.pid) or 0) - own) for w in workers) / 2**20)})
    return rows


def windows(rounds: int) -> list[dict]:
    from loaderdoc.base.settings import LoaderSettings
    from loaderdoc.probing import measure
    from loaderdoc.probing.probe import build_workload

    dataset, collate, _info, batch, step = build_workload(preset="large-image")
    job = measure.LoadJob(dataset=dataset, collate_fn=collate, step_ms=50.0)
    rows = []
    for _ in range(rounds):
        for workers in (2, 3, 4):
            r = measure.measure_in_process(job, LoaderSettings(batch_size=batch, shuffle=True, num_workers=workers,
                                                               prefetch_factor=2),
                                           measure.RunPlan(window_s=2.0, measure_restart=False))
            g = r.worker_memory_growth
            rows.append({"workers": workers, "steps_per_s": round(r.batches_per_s or 0.0, 2),
                         "pss_peak_mib": round((r.worker_pss_bytes or 0) / 2**20),
                         "window": None if g is None else {
                             "first_mib": round(g.first_bytes / 2**20), "last_mib": round(g.last_bytes / 2**20),
                             "seconds": g.seconds, "heap_grown_mib": round((g.heap_grown_bytes or 0) / 2**20)}})
    return rows


def child(part: str, seconds: float, rounds: int) -> None:
    import warnings

    warnings.simplefilter("ignore", UserWarning)  # torch's "suggested max workers" on 2 CPUs
    print(json.dumps(growth(seconds) if part == "growth" else windows(rounds)))


def run(part: str, tuned: bool, seconds: float, rounds: int) -> list[dict]:
    env = {**os.environ, "PYTHONPATH": f"{REPO / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("GLIBC_TUNABLES", None)
    if tuned:
        env["GLIBC_TUNABLES"] = TUNABLE
    out = subprocess.run([sys.executable, __file__, "--child", part, "--seconds", str(seconds), "--rounds", str(rounds)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", choices=("growth", "windows"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child, args.seconds, args.rounds)
        return
    results = {}
    for tuned in (False, True):
        name = TUNABLE if tuned else "glibc defaults"
        results[name] = {"growth": run("growth", tuned, args.seconds, args.rounds),
                         "windows": run("windows", tuned, args.seconds, args.rounds)}
        print(f"== {name}")
        print("  3 workers, plain DataLoader: " + ", ".join(
            f"{r['s']:.0f} s {r['pss_mib']} MiB (heap +{r['heap_grown_mib']})" for r in results[name]["growth"]))
        for r in results[name]["windows"]:
            w = r["window"]
            seen = f"window {w['first_mib']} -> {w['last_mib']} MiB in {w['seconds']} s, heap +{w['heap_grown_mib']}" \
                if w else "window: too few samples"
            print(f"  probe window, {r['workers']} workers: {r['steps_per_s']:.2f} steps/s, peak {r['pss_peak_mib']} MiB; "
                  f"{seen}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
