"""How long `loaderdoc check` takes here, as a user runs it (a fresh process each time).

Not a pass/fail test: rerun it after changes and compare with the figure in docs/dev/measurements.md.

    python benchmarks/check_speed.py [--runs 20]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time

TARGET_S = 0.5


def time_command(cmd: list[str], runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True)
        times.append(time.perf_counter() - start)
        if proc.returncode not in (0, 1, 2):
            sys.exit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.decode()[-500:]}")
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    exe = shutil.which("loaderdoc")
    commands = {
        "loaderdoc --help": [exe, "--help"] if exe else [sys.executable, "-m", "loaderdoc", "--help"],
        "loaderdoc check": [exe, "check"] if exe else [sys.executable, "-m", "loaderdoc", "check"],
        "loaderdoc check --json": [exe, "check", "--json"] if exe else [sys.executable, "-m", "loaderdoc", "check", "--json"],
        "python -c pass (interpreter floor)": [sys.executable, "-c", "pass"],
    }
    print(f"{'command':<38} {'median':>8} {'p90':>8} {'max':>8}   (n={args.runs})")
    for name, cmd in commands.items():
        times = sorted(time_command(cmd, args.runs))
        p90 = times[int(0.9 * (len(times) - 1))]
        flag = "" if "check" not in name or statistics.median(times) < TARGET_S else "  <-- over the 0.5 s target"
        print(f"{name:<38} {statistics.median(times):>7.3f}s {p90:>7.3f}s {max(times):>7.3f}s{flag}")


if __name__ == "__main__":
    main()
