"""What `loaderdoc watch` costs a fast training loop: the same loop with and without it.

The loop: an in-memory TensorDataset, num_workers=0, batch_size 4, a step that spins for
``--step-us`` microseconds, several thousand batches. Each round runs it once plain and once under
``loaderdoc watch`` (the order alternates between rounds) in fresh processes; the loop times
itself (iter() to the end), so the process start-up is reported apart. A third figure times the
wrapped ``__next__`` against the plain one in this process over a list: the hook's own cost per
batch, without the noise of two processes. The last times one tick of the sampler thread (its
own thread, once a period) in this process, with 0 and with 2 DataLoader workers.

    python benchmarks/watch_overhead.py [--rounds 7] [--batches 5000] [--step-us 200]

Not a test (no pass/fail): the issue's target is under 1 % of the loop's wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def child(batches: int, step_us: float) -> None:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(batches * 4, 16), torch.arange(batches * 4))
    loader = DataLoader(data, batch_size=4, num_workers=0)
    spin = step_us / 1e6
    started = time.perf_counter()
    n = 0
    for _batch in loader:
        end = time.perf_counter() + spin
        while time.perf_counter() < end:
            pass
        n += 1
    loop_s = time.perf_counter() - started
    print(json.dumps({"loop_s": loop_s, "batches": n}), flush=True)


def run_once(watched: bool, batches: int, step_us: float, env: dict[str, str]) -> tuple[float, float]:
    return timed_child(__file__, ["--batches", str(batches), "--step-us", str(step_us)], batches, watched, env)


def timed_child(script: str, args: list[str], batches: int, watched: bool, env: dict[str, str]) -> tuple[float, float]:
    """``script --child ARGS``, bare or under ``loaderdoc watch``: (the seconds its loop timed itself,
    the whole process's); the child prints ``{"loop_s", "batches"}`` first and must have run ``batches``."""
    cmd = [sys.executable, script, "--child", *args]
    if watched:
        cmd = [sys.executable, "-m", "loaderdoc", "watch", "--", *cmd]
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr[-800:]}")
    result = json.loads(proc.stdout.splitlines()[0])
    assert result["batches"] == batches, result
    return result["loop_s"], wall


def per_next_cost(n: int = 200_000) -> tuple[float, float]:
    """Seconds per __next__ over a list: plain iterator, then the hook's wrapper around it."""
    from loaderdoc.watching.hook import Recorder, clock

    items = list(range(n))
    best_plain = best_wrapped = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        for _x in iter(items):
            pass
        best_plain = min(best_plain, time.perf_counter() - t)
        wrapped = Recorder(sample=False).wrap(items, iter(items), clock())
        t = time.perf_counter()
        for _x in wrapped:
            pass
        best_wrapped = min(best_wrapped, time.perf_counter() - t)
    return best_plain / n, best_wrapped / n


def sampler_tick_cost(workers: int, ticks: int = 15) -> float:
    """Median seconds of one sampler tick with ``workers`` persistent DataLoader workers alive."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from loaderdoc.watching.hook import Recorder, clock
    from loaderdoc.watching.sampler import Sampler

    loader = DataLoader(TensorDataset(torch.randn(64, 16)), batch_size=4, num_workers=workers,
                        persistent_workers=workers > 0)
    recorder = Recorder(sample=False)
    it = recorder.wrap(loader, iter(loader), clock())
    next(it)
    sampler = Sampler(recorder, 1.0, None, max_busy=1.0)
    costs = []
    for _ in range(ticks):
        t = time.perf_counter()
        sampler.tick()
        costs.append(time.perf_counter() - t)
    assert sampler.samples[-1]["workers"] == workers, sampler.samples[-1]
    del it
    return statistics.median(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--batches", type=int, default=5000)
    parser.add_argument("--step-us", type=float, default=200.0)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.batches, args.step_us)
        return
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO / "src"), env.get("PYTHONPATH")) if p)
    sys.path.insert(0, str(REPO / "src"))
    loops: dict[bool, list[float]] = {False: [], True: []}
    walls: dict[bool, list[float]] = {False: [], True: []}
    run_once(False, args.batches, args.step_us, env)  # warm the page cache: not counted
    for r in range(args.rounds):
        for watched in ((False, True) if r % 2 == 0 else (True, False)):
            loop_s, wall = run_once(watched, args.batches, args.step_us, env)
            loops[watched].append(loop_s)
            walls[watched].append(wall)
    plain, with_watch = statistics.median(loops[False]), statistics.median(loops[True])
    paired = [100 * (w / p - 1) for p, w in zip(loops[False], loops[True], strict=True)]
    print(f"loop: {args.batches} batches of 4, num_workers=0, step {args.step_us:g} us; {args.rounds} rounds")
    print(f"  loop wall, median    plain {plain:.3f} s  watched {with_watch:.3f} s  "
          f"-> overhead {100 * (with_watch / plain - 1):+.2f} %")
    print(f"  paired rounds        overhead median {statistics.median(paired):+.2f} %  "
          f"(min {min(paired):+.2f}, max {max(paired):+.2f})")
    print(f"  per batch            plain {1e6 * plain / args.batches:.1f} us  "
          f"watched {1e6 * with_watch / args.batches:.1f} us")
    plain_next, wrapped_next = per_next_cost()
    extra = wrapped_next - plain_next
    print(f"  hook per __next__    {1e6 * extra:.2f} us over a plain list iterator "
          f"= {100 * extra / (plain / args.batches):.2f} % of this loop's batch")
    for workers in (0, 2):
        print(f"  sampler tick         {1e6 * sampler_tick_cost(workers):.0f} us with {workers} workers "
              f"(its own thread, every max(interval, tick / 1 %) s)")
    print(f"  process wall, median plain {statistics.median(walls[False]):.2f} s  "
          f"watched {statistics.median(walls[True]):.2f} s (start-up of the launcher and its report included)")


if __name__ == "__main__":
    main()
