#!/usr/bin/env python
"""Where the test suite's CPU goes (issue 31: the suite under 5 minutes on 2 cores).

    python benchmarks/suite_cpu.py [--top N] [PYTEST ARGS...]

Runs ``pytest`` (the suite's own options: eight xdist workers) with a small plugin that records,
for each test, its wall time, the CPU its worker spent on it and the CPU of the processes it
started and waited for (the loaderdoc commands, training scripts and torchrun jobs a real-run test
starts, and the commands the worker's warm interpreter forked for it: tests/support/warm.py).
Prints the totals, the wall time of the ``alone`` tests (the other workers idle meanwhile), and the
files and tests that cost the most CPU. On 2 cores with a busy core the suite gets at most 2 x 8/9
of a CPU (eight workers beside the burner): CPU is what has to shrink.
``--durations-out tests/durations.json`` writes each slow test's wall time, from which
``tests/conftest.py`` starts the slowest tests first.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PLUGIN = '''
import json, os, resource, sys, time
import pytest

def _cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime

def _warm():
    """CPU of the commands this worker's warm interpreter ran for it (tests/support/warm.py): not
    its children, so not in its RUSAGE_CHILDREN."""
    warm = sys.modules.get("support.warm")
    return warm.CPU_S[0] if warm else 0.0

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    t, w, s, c, m = time.time(), time.monotonic(), _cpu(resource.RUSAGE_SELF), _cpu(resource.RUSAGE_CHILDREN), _warm()
    yield
    warm = _warm() - m
    row = {"id": item.nodeid, "start": t, "wall": time.monotonic() - w, "self": _cpu(resource.RUSAGE_SELF) - s,
           "children": _cpu(resource.RUSAGE_CHILDREN) - c + warm, "warm": warm,
           "alone": item.get_closest_marker("alone") is not None}
    with open(os.path.join(os.environ["LOADERDOC_SUITE_CPU_DIR"], f"{os.getpid()}.jsonl"), "a") as f:
        f.write(json.dumps(row) + "\\n")
'''


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=25, help="files and tests to list (default 25)")
    parser.add_argument("--durations-out", type=Path, metavar="FILE",
                        help="write the wall time of each test of a second or more (tests/durations.json)")
    parser.add_argument("--rows-out", type=Path, metavar="FILE",
                        help="write every test's row (id, worker, start, wall, CPU) as JSON lines, for a timeline")
    args, pytest_args = parser.parse_known_args()
    with tempfile.TemporaryDirectory(prefix="loaderdoc-suite-cpu-") as tmp:
        (Path(tmp) / "_suite_cpu_plugin.py").write_text(PLUGIN)
        rows_dir = Path(tmp) / "rows"
        rows_dir.mkdir()
        env = dict(os.environ, LOADERDOC_SUITE_CPU_DIR=str(rows_dir),
                   PYTHONPATH=os.pathsep.join(filter(None, [tmp, os.environ.get("PYTHONPATH")])))
        started, started_at = time.monotonic(), time.time()
        before = os.times()
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "-p", "_suite_cpu_plugin", *pytest_args],
                               cwd=REPO, env=env)
        after = os.times()
        wall = time.monotonic() - started
        rows = [dict(json.loads(line), worker=path.stem) for path in rows_dir.glob("*.jsonl")
                for line in path.read_text().splitlines()]
    if args.rows_out:
        args.rows_out.write_text("".join(json.dumps(dict(r, start=r["start"] - started_at)) + "\n" for r in rows))
    # pytest's own processes and what they waited for, and the commands run warm (counted in the rows);
    # not the warm interpreters' own start, about 1 CPU-s a worker
    warm = sum(r.get("warm", 0.0) for r in rows)
    suite_cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system) + warm
    in_tests = sum(r["self"] + r["children"] for r in rows)
    print(f"\npytest exit {code}; wall {wall:.0f} s; the whole suite's CPU {suite_cpu:.0f} s "
          f"({in_tests:.0f} s inside tests: {sum(r['self'] for r in rows):.0f} in the workers, "
          f"{sum(r['children'] for r in rows):.0f} in processes they started)")
    workers: dict[str, list[dict]] = collections.defaultdict(list)
    for r in rows:
        workers[r["worker"]].append(r)
    for name, done in sorted(workers.items()):
        last = max(r["start"] + r["wall"] for r in done) - started_at
        print(f"  worker {name}: {len(done)} tests, {sum(r['wall'] for r in done):.0f} s in them, "
              f"its last ended at {last:.0f} s")
    alone = [r for r in rows if r["alone"]]
    print(f"'alone' tests: {len(alone)}, {sum(r['wall'] for r in alone):.0f} s of wall time with the other workers idle")
    files: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0.0, 0])
    for r in rows:
        f = files[r["id"].split("::")[0]]
        f[0] += r["self"] + r["children"]
        f[1] += r["wall"]
        f[2] += r["children"]
        f[3] += 1
    print(f"\n{'cpu s':>7} {'wall s':>7} {'started':>8} {'tests':>5}  file (started: CPU of the processes its tests ran)")
    for name, (cpu, w, children, n) in sorted(files.items(), key=lambda kv: -kv[1][0])[:args.top]:
        print(f"{cpu:7.1f} {w:7.1f} {children:8.1f} {n:5d}  {name}")
    print(f"\n{'cpu s':>7} {'wall s':>7}  test")
    for r in sorted(rows, key=lambda r: -(r["self"] + r["children"]))[:args.top]:
        print(f"{r['self'] + r['children']:7.1f} {r['wall']:7.1f}  {r['id'][:100]}")
    if args.durations_out:
        slow = {r["id"].removesuffix("@alone"): round(r["wall"], 1) for r in sorted(rows, key=lambda r: r["id"])
                if r["wall"] >= 1.0}
        args.durations_out.write_text(json.dumps(slow, indent=0) + "\n")
        print(f"\n{len(slow)} tests of a second or more written to {args.durations_out}")
    return code


if __name__ == "__main__":
    sys.exit(main())
