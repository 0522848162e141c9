"""What `loaderdoc watch` costs per epoch as the epochs recorded grow (issue 49).

The loop: a DataLoader over a 1-sample TensorDataset, num_workers=0, iterated N times (N epochs
of one batch each, no step). Each round runs it once plain and once under ``loaderdoc watch``
(the order alternates between rounds) in fresh processes, at N = 500, 1000 and 2000; the loop
times itself (the N epochs, torch's import left out), the process's wall time is reported apart
(the launcher's start-up and its report included). The hook's cost is the watched loop less the
plain one: per epoch it should stay flat as N grows (it grew with N when every epoch's end
rewrote every epoch recorded so far: 11 s watched at N = 1000, 40 s at 2000).

    python benchmarks/watch_epochs.py [--rounds 3] [--epochs 500 1000 2000]

Not a test (no pass/fail).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks.watch_overhead
from benchmarks.watch_overhead import timed_child  # noqa: E402

REPO = Path(__file__).resolve().parent.parent


def child(epochs: int) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    loader = DataLoader(TensorDataset(torch.zeros(1, 4)), batch_size=1, num_workers=0)
    started = time.perf_counter()
    n = 0
    for _ in range(epochs):
        for _batch in loader:
            n += 1
    loop_s = time.perf_counter() - started
    print(json.dumps({"loop_s": loop_s, "batches": n}), flush=True)


def run_once(watched: bool, epochs: int, env: dict[str, str]) -> tuple[float, float]:
    return timed_child(__file__, ["--epochs", str(epochs)], epochs, watched, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--epochs", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.epochs[0])
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    run_once(False, 10, env)  # warm the page cache: not counted
    print(f"loop: N epochs of a 1-batch DataLoader (1-sample TensorDataset, num_workers=0, no step); "
          f"{args.rounds} rounds, medians")
    print(f"  {'N':>5}  {'plain loop':>10}  {'watched loop':>12}  {'plain/epoch':>11}  {'watched/epoch':>13}  "
          f"{'watch/epoch':>11}  {'process plain':>13}  {'process watched':>15}")
    extra_per_epoch = {}
    for n in args.epochs:
        loops: dict[bool, list[float]] = {False: [], True: []}
        walls: dict[bool, list[float]] = {False: [], True: []}
        for r in range(args.rounds):
            for watched in ((False, True) if r % 2 == 0 else (True, False)):
                loop_s, wall = run_once(watched, n, env)
                loops[watched].append(loop_s)
                walls[watched].append(wall)
        plain, with_watch = statistics.median(loops[False]), statistics.median(loops[True])
        extra_per_epoch[n] = (with_watch - plain) / n
        print(f"  {n:>5}  {plain:>8.3f} s  {with_watch:>10.3f} s  {1e3 * plain / n:>8.3f} ms  "
              f"{1e3 * with_watch / n:>10.3f} ms  {1e3 * extra_per_epoch[n]:>8.3f} ms  "
              f"{statistics.median(walls[False]):>11.2f} s  {statistics.median(walls[True]):>13.2f} s")
    first, last = args.epochs[0], args.epochs[-1]
    if extra_per_epoch[first] > 0:
        print(f"  watch's cost per epoch at N={last} / at N={first}: {extra_per_epoch[last] / extra_per_epoch[first]:.2f}x "
              f"(flat: ~1x; growing with the epochs recorded: ~{last / first:g}x)")


if __name__ == "__main__":
    main()
