"""SVG snapshots of every view on recorded machines (pytest-textual-snapshot).

Deterministic: recorded machine facts, a clock-free export header, and for the probe view the
scripted stand-in from test_tui_app (test data, not measurements). Update with
``pytest tests/test_tui_snapshots.py --snapshot-update`` and look at the SVGs before committing.
"""

from __future__ import annotations

from pathlib import Path

from test_tui_app import app_for, scripted_probe

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.session import ProbeRequest

BIG = (120, 40)
SMALL = (80, 24)


async def _settle(pilot):
    await pilot.app.workers.wait_for_complete()
    await pilot.pause()
    pilot.app.clear_notifications()
    await pilot.pause()


async def _show(pilot, *keys, pane: str):
    """Press ``keys``, then wait until the (lazily mounted) pane is on screen and drawn."""
    await pilot.press(*keys)
    for _ in range(100):
        found = [p for p in pilot.app.screen.query(f"#{pane}-pane") if p.is_mounted]
        if found and found[0].region.height > 0:
            break
        await pilot.pause(0.02)
    await pilot.wait_for_scheduled_animations()
    _no_blink(pilot)
    await pilot.pause(0.1)


def _no_blink(pilot):
    """A blinking cursor is on or off depending on when the picture is taken."""
    from textual.widgets import Input

    for screen in pilot.app.screen_stack:
        for widget in screen.query(Input):
            widget.cursor_blink = False


def test_machine_k8s_quota(snap_compare):
    assert snap_compare(app_for("k8s-4cpu-quota"), terminal_size=BIG, run_before=_settle)


def test_machine_gpu_node_80x24(snap_compare):
    assert snap_compare(app_for("h100x8-node"), terminal_size=SMALL, run_before=_settle)


def test_probe_after_run(snap_compare):
    async def run(pilot):
        await pilot.press("ctrl+r")
        await _settle(pilot)
        await _show(pilot, pane="probe")

    assert snap_compare(app_for("ci-2core", probe_fn=scripted_probe), terminal_size=BIG, run_before=run)


def test_diagnoses_docker_shm(snap_compare):
    app = app_for("docker-64m-shm", settings=LoaderSettings(batch_size=64, num_workers=16, prefetch_factor=4),
                  workload=ProbeRequest(preset="image", batch_size=64, sample_bytes=3 * 224 * 224))

    async def run(pilot):
        await _settle(pilot)
        await _show(pilot, "3", pane="diagnoses")

    assert snap_compare(app, terminal_size=BIG, run_before=run)


def test_tradeoffs_laptop(snap_compare):
    async def run(pilot):
        await _settle(pilot)
        await _show(pilot, "4", pane="tradeoffs")
        await pilot.press("down")
        await pilot.pause(0.1)

    assert snap_compare(app_for("laptop-rtx3050"), terminal_size=BIG, run_before=run)


def test_settings_with_invalid_edit(snap_compare):
    async def run(pilot):
        await _settle(pilot)
        await _show(pilot, "ctrl+s", pane="settings")
        pilot.app.screen.query_one("#set-num_workers").value = "0"
        await pilot.pause(0.1)

    app = app_for("ci-2core", settings=LoaderSettings(batch_size=32, num_workers=1, prefetch_factor=2))
    assert snap_compare(app, terminal_size=BIG, run_before=run)


def test_export_dialog(snap_compare):
    async def run(pilot):
        await _settle(pilot)
        await pilot.press("ctrl+e")
        await pilot.pause()
        _no_blink(pilot)
        await pilot.pause(0.1)

    assert snap_compare(app_for("laptop-rtx3050", export_dir=Path("/export")), terminal_size=BIG, run_before=run)


def test_light_theme_80x24(snap_compare):
    async def run(pilot):
        await _settle(pilot)
        await _show(pilot, "ctrl+t", "5", pane="settings")

    assert snap_compare(app_for("docker-64m-shm"), terminal_size=SMALL, run_before=run)


def test_watch_report_run_80x24(snap_compare):
    """`loaderdoc --report FILE` on the hand-written starved run with a timeline (test data)."""
    from loaderdoc.system.fixtures import load_machine
    from loaderdoc.tui.app import make_app
    from loaderdoc.watching.report_file import load_watch_report

    report = Path(__file__).resolve().parent / "fixtures" / "watch" / "starved-timeline.json"
    app = make_app(facts=load_machine("ci-2core"), watch_run=load_watch_report(report),
                   header_fn=lambda *a, **k: ["test header"])

    async def run(pilot):
        await _settle(pilot)
        await _show(pilot, pane="run")

    assert snap_compare(app, terminal_size=SMALL, run_before=run)


def test_job_report_80x24(snap_compare):
    """`loaderdoc --report job.json` on the hand-built four-node job, node 2 the odd one out (test data)."""
    from loaderdoc.cluster.job_file import load_job_report
    from loaderdoc.system.fixtures import load_machine
    from loaderdoc.tui.app import make_app

    report = Path(__file__).resolve().parent / "fixtures" / "job" / "four-nodes-odd.json"
    app = make_app(facts=load_machine("ci-2core"), job_run=load_job_report(report),
                   header_fn=lambda *a, **k: ["test header"])

    async def run(pilot):
        await _settle(pilot)
        await _show(pilot, pane="job")

    assert snap_compare(app, terminal_size=SMALL, run_before=run)
