#!/usr/bin/env python
"""Regenerate the app's screenshots: screenshots/<name>.svg and .png (PNG via cairosvg).

    python scripts/screenshots.py            # every screen
    python scripts/screenshots.py probe      # only the names given

Views that explain a situation (a Kubernetes CPU quota, Docker's 64 MiB /dev/shm, a GPU laptop)
use the recorded machines shipped in loaderdoc/system/machines; the app's title bar names the
recorded machine. The probe screenshot is a real probe run on the machine running this script,
with that machine's detected facts: nothing in it is invented. If the probe is not available,
that screenshot is skipped and the script says so. Likewise the watched-run screenshots open the
report of a real `loaderdoc watch --report` of a small training loop run here (WATCHED_LOOP), and
the job-report screenshots open a real job report: rank 0's `check --distributed --json` of two
torchrun nodes on one machine, node 1 in a 64 MiB /dev/shm and pinned to one core (JOB_REPORT,
recorded once; tests/test_cluster_real.py runs the same job); the tune-report screenshots open a
real `loaderdoc tune --report` of an I/O-bound loop whose fourth worker fails (TUNE_REPORT).
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.session import ProbeRequest
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import LoaderDocApp, make_app

OUT = Path(__file__).resolve().parent.parent / "screenshots"
BIG = (120, 40)
SMALL = (80, 24)
PNG_FONT = "DejaVu Sans Mono"  # installed here; Textual's SVGs ask for Fira Code


async def _settle(pilot) -> None:
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    pilot.app.clear_notifications()
    await pilot.pause(0.2)


async def shoot(name: str, app: LoaderDocApp, size: tuple[int, int],
                steps: Callable[[object], Awaitable[None]] | None = None) -> Path:
    async with app.run_test(size=size) as pilot:
        await _settle(pilot)
        if steps is not None:
            await steps(pilot)
        await pilot.pause(0.3)
        svg = app.export_screenshot(title=f"loaderdoc - {name}")
    svg_path = OUT / f"{name}.svg"
    svg_path.write_text(svg, encoding="utf-8")
    png_path = svg_path.with_suffix(".png")
    import cairosvg

    cairosvg.svg2png(bytestring=re.sub(r"Fira Code", PNG_FONT, svg).encode(), write_to=str(png_path))
    print(f"wrote {svg_path.relative_to(OUT.parent)} and .png")
    return svg_path


def recorded(machine: str, **kwargs) -> LoaderDocApp:
    return make_app(facts=load_machine(machine), **kwargs)


async def machine(size=BIG, name="machine"):
    await shoot(name, recorded("k8s-4cpu-quota"), size)


async def machine_small():
    await machine(SMALL, "machine-80x24")


async def probe(size=BIG, name="probe"):
    try:
        import torch  # noqa: F401  (the probe measures real DataLoaders)
    except ImportError as exc:
        print(f"skipped {name}: {exc}")
        return

    async def run(pilot):
        await pilot.press("ctrl+r")
        await pilot.app.workers.wait_for_complete()
        await pilot.pause()
        pilot.app.clear_notifications()
        if pilot.app.session.probe_state != "done":
            raise SystemExit(f"the probe did not finish: {pilot.app.session.probe_state} {pilot.app.session.probe_error}")

    # this machine, measured for real
    app = make_app(workload=ProbeRequest(preset="image", batch_size=32, step_ms=20.0, budget_s=20.0))
    await shoot(name, app, size, run)


async def probe_small():
    await probe(SMALL, "probe-80x24")


async def diagnoses():
    app = recorded("docker-64m-shm", settings=LoaderSettings(batch_size=64, num_workers=16, prefetch_factor=4),
                   workload=ProbeRequest(preset="image", batch_size=64, batch_size_given=True,
                                     sample_bytes=3 * 224 * 224))

    async def run(pilot):
        await pilot.press("3")

    await shoot("diagnoses", app, BIG, run)


async def tradeoffs():
    async def run(pilot):
        await pilot.press("4", "down")

    app = recorded("laptop-rtx3050", workload=ProbeRequest(preset="image", batch_size=64, batch_size_given=True,
                                                        sample_bytes=3 * 224 * 224))
    await shoot("tradeoffs", app, BIG, run)


async def settings():
    async def run(pilot):
        await pilot.press("ctrl+s")
        pilot.app.screen.query_one("#set-num_workers").value = "0"
        await pilot.pause()

    await shoot("settings", recorded("k8s-4cpu-quota"), BIG, run)


CONFIG_SHOT = Path(__file__).resolve().parent.parent / "tests/fixtures/configs/projects/mmdet3/configs/retinanet/" \
    "retinanet_r50_fpn_8xb8-amp-lsj-200e_coco.py"


async def config(size=BIG, name="config"):
    """`loaderdoc --config FILE`: a real mmdet 3.x config (three files of _base_), each field's source."""
    from loaderdoc.commands.app import config_choice

    async def run(pilot):
        await pilot.press("ctrl+s")
        await pilot.pause()

    os.chdir(CONFIG_SHOT.parent)  # the path as a user in the project's folder gives it
    try:
        chosen = config_choice(CONFIG_SHOT.name)
    finally:
        os.chdir(OUT.parent)
    await shoot(name, recorded("ci-2core", config=chosen), size, run)


async def config_small():
    await config(SMALL, "config-80x24")


async def export():
    async def run(pilot):
        await pilot.press("ctrl+e")

    await shoot("export", recorded("laptop-rtx3050", export_dir=Path("/home/me/project")), BIG, run)


async def light():
    async def run(pilot):
        await pilot.press("ctrl+t", "3")

    await shoot("light-theme", recorded("k8s-4cpu-quota"), SMALL, run)


# a small loop whose loading slows down for its middle epochs (a slower shard, say); timed for real
WATCHED_LOOP = """\
import time
import torch
from torch.utils.data import DataLoader, Dataset


class Shards(Dataset):
    epoch = 0

    def __len__(self):
        return 192

    def __getitem__(self, i):
        time.sleep(0.006 if Shards.epoch in (2, 3) else 0.002)  # reading a sample
        return torch.zeros(8)


loader = DataLoader(Shards(), batch_size=2, num_workers=0)
for epoch in range(6):
    Shards.epoch = epoch
    for batch in loader:
        time.sleep(0.006)  # the step
"""


def watched_report(directory: Path) -> Path | None:
    """A real `loaderdoc watch --report` of WATCHED_LOOP; None (said) where torch is missing."""
    import subprocess

    try:
        import torch  # noqa: F401
    except ImportError as exc:
        print(f"skipped the watched run: {exc}")
        return None
    script, report = directory / "train.py", directory / "run.json"
    script.write_text(WATCHED_LOOP, encoding="utf-8")
    # a sample every 0.2 s (the sampler may take 5 % of a core here) so the chart has a timeline
    env = {**os.environ, "LOADERDOC_WATCH_INTERVAL": "0.2", "LOADERDOC_WATCH_MAX_BUSY": "0.05"}
    subprocess.run([sys.executable, "-m", "loaderdoc", "watch", "--report", str(report), "--",
                    sys.executable, str(script)], check=True, cwd=directory, stderr=subprocess.DEVNULL, env=env)
    return report


async def watch_report(size=BIG, name="watch-report"):
    import tempfile

    from loaderdoc.watching.report_file import load_watch_report

    with tempfile.TemporaryDirectory(prefix="loaderdoc-shot-") as tmp:
        report = watched_report(Path(tmp))
        if report is None:
            return
        run = load_watch_report(report)
    run.command = ["python", "train.py"]  # not the temporary directory's path
    run.path = "run.json"
    await shoot(name, make_app(watch_run=run), size)


async def watch_report_small():
    await watch_report(SMALL, "watch-report-80x24")


JOB_REPORT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "job" / "two-nodes.json"


async def job_report(size=BIG, name="job-report"):
    from loaderdoc.cluster.job_file import load_job_report

    job = load_job_report(JOB_REPORT)
    job.path = "job.json"  # as a user would name it, not the repository's fixture path
    await shoot(name, make_app(job_run=job), size)


async def job_report_small():
    await job_report(SMALL, "job-report-80x24")


TUNE_REPORT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "tune" / "io-bound-worker-fails.json"


async def tune_report(size=BIG, name="tune-report"):
    from loaderdoc.reports import open_report

    tune = open_report(TUNE_REPORT)
    tune.path = "tune.json"  # as a user would name it, not the repository's fixture path
    await shoot(name, make_app(tune_run=tune), size)


async def tune_report_small():
    await tune_report(SMALL, "tune-report-80x24")


SHOTS = {
    "machine": machine,
    "machine-80x24": machine_small,
    "probe": probe,
    "probe-80x24": probe_small,
    "diagnoses": diagnoses,
    "tradeoffs": tradeoffs,
    "settings": settings,
    "config": config,
    "config-80x24": config_small,
    "export": export,
    "light-theme": light,
    "watch-report": watch_report,
    "watch-report-80x24": watch_report_small,
    "job-report": job_report,
    "job-report-80x24": job_report_small,
    "tune-report": tune_report,
    "tune-report-80x24": tune_report_small,
}


async def main(names: list[str]) -> int:
    OUT.mkdir(exist_ok=True)
    unknown = [n for n in names if n not in SHOTS]
    if unknown:
        print(f"unknown screenshot(s): {', '.join(unknown)}; choose from {', '.join(SHOTS)}", file=sys.stderr)
        return 2
    for name in names or list(SHOTS):
        await SHOTS[name]()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
