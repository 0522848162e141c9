"""Every command's output over the recorded fixtures, one file per invocation, to compare a
restructure's before and after (``diff -r BEFORE AFTER`` must be empty: issue 51).

    python scripts/render_outputs.py OUT_DIR

Runs ``loaderdoc`` through the CLI's own ``main`` in this process (as tests/faults_support.py's
``loaderdoc_here`` does): recorded machines only (``--machine``), nothing measured, no clock in the
output (an export's header dates are masked). Each file holds the exit code, stdout and stderr."""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
MACHINES = ["ci-2core", "k8s-4cpu-quota", "docker-64m-shm", "h100x8-node", "laptop-rtx3050", "h100-vm"]
FORMATS = ["toml", "yaml", "json", "py", "lightning", "hydra", "hf"]
DATED = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d)?(\.\d+)?(Z|[+-]\d\d:?\d\d)?")


def run(argv: list[str]) -> str:
    from loaderdoc.cli import main

    out, err = io.StringIO(), io.StringIO()
    os.environ.update(COLUMNS="100", NO_COLOR="1")
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exit_:
            code = exit_.code if isinstance(exit_.code, int) else int(exit_.code is not None)
    text = f"$ loaderdoc {' '.join(argv)}\nexit {code}\n--- stdout\n{out.getvalue()}--- stderr\n{err.getvalue()}"
    return DATED.sub("<date>", text.replace(str(ROOT), "<repo>"))


def invocations() -> list[list[str]]:
    out: list[list[str]] = [["--help"]] + [[c, "--help"] for c in ("check", "probe", "facts", "tradeoffs", "watch",
                                                                      "tune")]
    configs = sorted(p for p in (FIXTURES / "configs").rglob("*") if p.is_file() and p.suffix in (
        ".yaml", ".yml", ".toml", ".json", ".py") and "__pycache__" not in p.parts)
    for machine in MACHINES:
        out += [["facts", "--machine", machine], ["facts", "--machine", machine, "--json"],
                ["check", "--machine", machine], ["check", "--machine", machine, "--json"],
                ["tradeoffs", "--machine", machine], ["tradeoffs", "--machine", machine, "--json"]]
        out += [["--export", "-", "--machine", machine, "--format", f] for f in FORMATS]
    for config in configs:
        rel = str(config.relative_to(ROOT))
        out += [["check", "--machine", "ci-2core", "--config", rel], ["check", "--machine", "h100x8-node",
                "--config", rel, "--json"], ["check", "--config", rel, "--show-read", "--machine", "ci-2core"],
                ["tradeoffs", "--machine", "k8s-4cpu-quota", "--config", rel]]
    for probe in sorted((FIXTURES / "probe").glob("*.json")):
        rel = str(probe.relative_to(ROOT))
        out += [["tradeoffs", "--machine", "ci-2core", "--probe-report", rel],
                ["tradeoffs", "--machine", "ci-2core", "--probe-report", rel, "--json"]]
    for folder in ("watch", "tune", "job", "probe"):
        for report in sorted((FIXTURES / folder).glob("*.json")):
            out.append(["--report", str(report.relative_to(ROOT))])
    watches = sorted(str(p.relative_to(ROOT)) for p in (FIXTURES / "watch").glob("*.json"))
    out.append(["watch", "--merge", *watches[:2], "--json"])
    return out


def main(target: str) -> int:
    folder = Path(target)
    folder.mkdir(parents=True, exist_ok=False)
    os.chdir(ROOT)
    for n, argv in enumerate(invocations()):
        (folder / f"{n:04d}.txt").write_text(run(argv), encoding="utf-8")
    print(f"{n + 1} outputs in {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
