"""Pilot tests of the interactive app: each screen's main action, probing, fixes, export.

The machine is a recorded fixture (no live values). Probes are either a scripted stand-in for
UI logic (its results are test data, not measurements) or, in test_real_probe_*, the real probe
with a tiny budget.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from pathlib import Path

import pytest
from textual.app import App
from textual.widgets import Checkbox, DataTable, Input, OptionList, Static, TabbedContent

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ConfigResult, ProbeReport, WaitStats, WorkloadInfo
from loaderdoc.session import ProbeRequest
from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import make_app

SIZE = (120, 40)


def fixed_header(facts, recommendation=None, findings=()):
    """An export header without a clock, so previews and snapshots are stable."""
    return ["DataLoader settings by loaderdoc (test header)", f"for {facts.label}"]


def scripted_results(batch_size: int = 32) -> list[ConfigResult]:
    """Test data shaped like a probe's results (not measurements)."""
    rows = [(0, 0, 9.0, 62.0, 48.0), (1, 2, 21.0, 18.0, 12.0), (2, 2, 24.0, 4.0, 3.0), (3, 2, 24.5, 2.0, 2.0)]
    out = []
    for workers, prefetch, bps, starved, p95 in rows:
        out.append(ConfigResult(
            settings=LoaderSettings(batch_size=batch_size, num_workers=workers,
                                    prefetch_factor=prefetch or None, persistent_workers=workers > 0),
            batches=40, duration_s=1.0, first_batch_s=0.05 * (workers + 1), batches_per_s=bps,
            samples_per_s=bps * batch_size, wait=WaitStats(p50_ms=p95 / 2, p95_ms=p95, max_ms=p95 * 2),
            starvation_pct=starved, worker_pss_bytes=workers * 90 * 2**20 or None,
        ))
    return out


def scripted_probe(dataset=None, *, preset=None, collate_fn=None, batch_size=32, step_ms=20.0, budget_s=30.0,
                   facts=None, on_result=None, on_progress=None, cancel=None, delay=0.0):
    """Stands in for loaderdoc.probing.probe.probe: same keywords, scripted results."""
    results = []
    for i, r in enumerate(scripted_results(batch_size)):
        if cancel is not None and cancel.is_set():
            break
        time.sleep(delay)
        results.append(r)
        on_result(r)
        on_progress((i + 1) / 4, f"num_workers={r.settings.num_workers}")
    cancelled = cancel is not None and cancel.is_set()
    best = results[2].settings if len(results) > 2 and not cancelled else None
    return ProbeReport(
        workload=WorkloadInfo(name=preset or "dataset", batch_size=batch_size, batch_bytes=batch_size * 150528,
                              sample_bytes=150528, step_ms=step_ms),
        results=results, recommended=best,
        reasons=["num_workers: 2 is within 3% of the best measured (3)"] if best else [],
        budget_s=budget_s, elapsed_s=1.5, stopped="cancelled" if cancelled else "not starved",
    )


def blocking_probe(started: threading.Event):
    """A probe that runs until cancelled, reporting one result first."""

    def probe(dataset=None, *, cancel, on_result, on_progress, preset=None, batch_size=32, **_):
        on_result(scripted_results(batch_size)[0])
        on_progress(0.25, "num_workers=0")
        started.set()
        assert cancel.wait(10), "the app never set the cancel event"
        return ProbeReport(workload=WorkloadInfo(name=preset, batch_size=batch_size),
                           results=scripted_results(batch_size)[:1], stopped="cancelled")

    return probe


def app_for(machine="ci-2core", **kwargs):
    kwargs.setdefault("header_fn", fixed_header)
    kwargs.setdefault("workload", ProbeRequest(preset="image", batch_size=32, budget_s=5))
    return make_app(facts=load_machine(machine), **kwargs)


# ---- machine view -----------------------------------------------------------------------
async def test_machine_view_shows_recorded_machine():
    app = app_for("k8s-4cpu-quota")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        table = app.screen.query_one("#machine-table", DataTable)
        values = [str(table.get_row_at(i)[2]) for i in range(table.row_count)]
        assert "4 CPUs (set by cgroup quota)" in values
        status = str(app.screen.query_one("#status", Static).render())
        assert "4 CPUs (cgroup quota)" in status


def test_a_view_mounted_before_its_screen_draws_the_facts_that_arrive_meanwhile():
    # Python 3.12's eager tasks (textual turns them on there) run the first view's on_mount before
    # its screen's: facts that arrived in between were kept for the status bar and never drawn,
    # and `loaderdoc --machine NAME` showed "Reading machine facts..." for good
    from loaderdoc.tui.messages import MachineShown
    from loaderdoc.tui.screens.main import MainScreen

    class View:
        def __init__(self):
            self.drawn = []

        def on_machine_shown(self, message):
            self.drawn.append(message)

    screen = MainScreen()
    view = screen._views["machine"] = View()
    shown = MachineShown(load_machine("k8s-4cpu-quota"))
    screen.show(shown)
    assert view.drawn == [shown]


async def test_real_detection_paints_within_a_second_and_fills_slow_facts_later():
    slow_started = threading.Event()
    painted = threading.Event()

    def detect(cpu_info=False):
        from loaderdoc.system.detect import detect as real

        if cpu_info:
            slow_started.set()
            # py-cpuinfo takes a second or more: held here until the view has shown the fast facts,
            # which it must do without waiting for this stage
            painted.wait(10)
        return real(cpu_info=cpu_info)

    def note() -> str:
        return str(app.screen.query_one("#machine-note", Static).render())

    app = make_app(detect_fn=detect)
    async with app.run_test(size=SIZE) as pilot:
        start = time.monotonic()
        while app.session.facts is None and time.monotonic() - start < 1.0:
            await pilot.pause(0.02)
        assert app.session.facts is not None, "machine facts not shown within 1 s"
        assert "cpu_model" in app.session.pending_facts
        # the view gets the facts as a message: it shows them once it has handled it
        assert await _wait_for(pilot, lambda: "still reading" in note()), note()
        painted.set()
        # the slow stage starts after the first paint, then fills in the CPU model
        assert await _wait_for(pilot, lambda: app.session.pending_facts == frozenset(), timeout=10)
        assert slow_started.is_set()
        assert app.session.facts.cpu.model.known


async def test_detection_failure_is_shown_not_hidden():
    def broken(cpu_info=False):
        raise RuntimeError("sysfs exploded")

    app = make_app(detect_fn=broken)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.facts is None
        assert "sysfs exploded" in str(app.screen.query_one("#machine-note", Static).render())


# ---- settings editor ----------------------------------------------------------------------
async def test_settings_editor_validates_as_you_type():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        assert app.screen.query_one(TabbedContent).active == "settings"
        workers = app.screen.query_one("#set-num_workers", Input)
        assert workers.has_focus
        before = app.session.settings
        workers.value = ""
        await pilot.press("x")
        await pilot.pause()
        assert app.session.settings == before  # invalid: not applied
        assert "whole number" in str(app.screen.query_one("#msg-num_workers", Static).render())
        assert workers.has_class("-invalid-value")
        await pilot.press("backspace", "4")
        await pilot.pause()
        assert app.session.settings.num_workers == 4
        assert app.session.settings_origin == "edited"
        assert not workers.has_class("-invalid-value")


async def test_settings_editor_names_torch_cross_field_rules():
    app = app_for(settings=LoaderSettings(batch_size=32, num_workers=2, prefetch_factor=2))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        app.screen.query_one("#set-num_workers", Input).value = "0"
        await pilot.pause()
        assert app.session.settings.num_workers == 2
        assert "prefetch_factor needs num_workers > 0" in str(app.screen.query_one("#msg-prefetch_factor", Static).render())
        app.screen.query_one("#set-prefetch_factor", Input).value = ""
        await pilot.pause()
        assert app.session.settings.num_workers == 0 and app.session.settings.prefetch_factor is None


async def test_settings_checkbox_toggles_from_keyboard():
    app = app_for(settings=LoaderSettings(batch_size=32, num_workers=2))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        app.screen.query_one("#set-persistent_workers", Checkbox).focus()
        await pilot.press("space")
        await pilot.pause()
        assert app.session.settings.persistent_workers is True


async def test_in_order_is_a_switch_whose_change_reaches_the_export_preview():
    app = app_for("ci-2core", settings=LoaderSettings(batch_size=32, num_workers=2))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        box = app.screen.query_one("#set-in_order", Checkbox)
        assert box.value is True and str(box.label) == "true"
        box.focus()
        await pilot.press("space")
        await pilot.pause()
        assert app.session.settings.in_order is False and str(box.label) == "false"
        await pilot.press("ctrl+e")
        await pilot.pause()
        assert "in_order = false" in app.screen.query_one("#preview-toml").text
        assert "in_order=False," in app.screen.query_one("#preview-py").text


# ---- diagnoses ----------------------------------------------------------------------------
async def test_apply_fix_changes_the_chosen_settings_and_clears_the_finding():
    app = app_for("docker-64m-shm", settings=LoaderSettings(batch_size=64, num_workers=16, prefetch_factor=4),
                  workload=ProbeRequest(preset="image", batch_size=64, sample_bytes=3 * 224 * 224))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        await pilot.press("3")
        options = app.screen.query_one("#findings", OptionList)
        assert options.has_focus
        ids = [f.rule_id for f in app.session.findings]
        assert ids[0] == "shm-too-small"
        finding = app.session.findings[0]
        assert finding.severity == "critical" and finding.settings_change
        detail = str(app.screen.query_one("#finding-detail", Static).render())
        assert "Evidence on this machine" in detail and "Fix" in detail
        await pilot.press("a")
        await pilot.pause()
        for key, value in finding.settings_change.items():
            assert getattr(app.session.settings, key) == value
        assert app.session.settings_origin == "fix applied: shm-too-small"
        assert "shm-too-small" not in [f.rule_id for f in app.session.findings if f.severity == "critical"]
        await pilot.press("ctrl+s")  # the editor shows the fixed settings
        await pilot.pause()
        for key, value in finding.settings_change.items():
            assert app.screen.query_one(f"#set-{key}", Input).value == str(value)


async def test_applying_the_fix_for_in_order_on_an_old_torch_turns_the_switch_back_on():
    app = app_for("laptop-rtx3050", settings=LoaderSettings(batch_size=32, num_workers=4, pin_memory=True,
                                                            persistent_workers=True, in_order=False))
    async with app.run_test(size=SIZE) as pilot:  # the laptop was recorded with torch 2.5.1
        await pilot.pause()
        await pilot.press("3")
        finding = app.session.findings[0]
        assert (finding.rule_id, finding.settings_change) == ("settings-rejected", {"in_order": True})
        await pilot.press("a")
        await pilot.pause()
        assert app.session.settings.in_order is True
        assert "settings-rejected" not in [f.rule_id for f in app.session.findings]
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen.query_one("#set-in_order", Checkbox).value is True


async def test_healthy_machine_says_so():
    app = app_for("h100x8-node")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        note = str(app.screen.query_one("#diagnoses-note", Static).render())
        if not app.session.findings:
            assert note.startswith("No problems found")


# ---- trade-offs ---------------------------------------------------------------------------
async def test_tradeoffs_view_follows_the_chosen_knob():
    app = app_for("laptop-rtx3050")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("4")
        knobs = app.screen.query_one("#knobs", OptionList)
        assert knobs.has_focus
        await pilot.press("down")
        await pilot.pause()
        here = str(app.screen.query_one("#knob-here", Static).render())
        assert here.startswith("prefetch_factor = ")
        about = str(app.screen.query_one("#knob-about", Static).render())
        assert "About prefetch_factor" in about


# ---- export -------------------------------------------------------------------------------
async def test_export_writes_toml(tmp_path: Path):
    app = app_for(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+e")
        path_input = app.screen.query_one("#export-path", Input)
        assert path_input.value == str(tmp_path / "loaderdoc.toml")
        toml_preview = app.screen.query_one("#preview-toml").text
        py_preview = app.screen.query_one("#preview-py").text
        assert "[dataloader]" in toml_preview and "DataLoader(dataset, **kwargs)" in py_preview
        await pilot.press("enter")
        await pilot.pause()
        written = (tmp_path / "loaderdoc.toml").read_text()
        assert written == toml_preview
        assert f"num_workers = {app.session.settings.num_workers}" in written
        assert app.screen is app.main_screen


async def test_export_asks_before_overwriting(tmp_path: Path):
    target = tmp_path / "loader.py"
    target.write_text("# mine\n")
    app = app_for(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+e")
        app.screen.query_one("#export-path", Input).value = str(target)
        await pilot.press("enter")
        await pilot.pause()
        assert "Overwrite" in str(app.screen.query_one("#confirm-question", Static).render())
        await pilot.press("n")
        await pilot.pause()
        assert target.read_text() == "# mine\n"
        assert "not overwritten" in str(app.screen.query_one("#export-error", Static).render())
        await pilot.press("enter")
        await pilot.pause()
        await pilot.press("y")
        await pilot.pause()
        assert "def make_loader(dataset" in target.read_text()
        assert app.screen is app.main_screen


async def test_export_error_stays_in_dialog_and_writes_nothing(tmp_path: Path):
    app = app_for(export_dir=tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+e")
        app.screen.query_one("#export-path", Input).value = str(tmp_path / "missing" / "x.toml")
        await pilot.press("enter")
        await pilot.pause()
        error = str(app.screen.query_one("#export-error", Static).render())
        assert "does not exist" in error
        app.screen.query_one("#export-path", Input).value = str(tmp_path / "x.ini")
        await pilot.press("enter")
        await pilot.pause()
        assert "suffix" in str(app.screen.query_one("#export-error", Static).render())
        assert list(tmp_path.iterdir()) == []
        await pilot.press("escape")
        assert app.screen is app.main_screen


async def test_export_header_says_when_settings_differ_from_the_recommendation():
    app = app_for("ci-2core")
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        app.set_settings(app.session.settings.replace(num_workers=0, prefetch_factor=None, persistent_workers=False), "edited")
        header = app.session.export_header()
        assert "settings: edited" in header
        assert any(line.startswith("differs from the recommendation: num_workers") for line in header)


# ---- probe --------------------------------------------------------------------------------
async def test_probe_run_fills_table_chart_and_recommendation():
    app = app_for(probe_fn=scripted_probe)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "done"
        table = app.screen.query_one("#results", DataTable)
        assert table.row_count == 4
        chart = app.screen.query_one("#chart-throughput")
        assert chart._series.workers == [0, 1, 2, 3]
        assert app.session.recommendation.source == "probe"
        assert app.session.settings.num_workers == 2  # untouched settings follow the probe
        assert "recommended from the probe" in app.session.settings_origin
        summary = str(app.screen.query_one("#probe-summary", Static).render())
        assert "stopped: not starved" in summary


async def test_probe_passes_the_workload_and_dataset():
    seen = {}

    def probe(dataset=None, **kwargs):
        seen.update(kwargs, dataset=dataset)
        return scripted_probe(**{k: v for k, v in kwargs.items()})

    app = app_for(probe_fn=probe, load_dataset_fn=lambda spec: (f"dataset from {spec}", "collate"),
                  workload=ProbeRequest(dataset="mymod:make", batch_size=8, step_ms=5.0, budget_s=3.0))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert seen["dataset"] == "dataset from mymod:make" and seen["collate_fn"] == "collate"
    assert (seen["batch_size"], seen["step_ms"], seen["budget_s"]) == (8, 5.0, 3.0)
    assert seen["facts"].label == load_machine("ci-2core").label


async def test_the_app_probes_a_preset_as_the_probe_command_does():
    # `loaderdoc probe tensor` measures the preset's own batch size (128) and step; so does the app
    from loaderdoc.commands.app import workload_from_args
    from loaderdoc.probing.workloads import get_preset

    seen = {}

    def probe(dataset=None, **kwargs):
        seen.update(kwargs)
        return scripted_probe(**kwargs)

    spec = get_preset("tensor")
    args = argparse.Namespace(preset="tensor", dataset=None, batch_size=None, step_ms=None, budget=7.0,
                              sample_shape=None, dtype=None)
    app = app_for(probe_fn=probe, workload=workload_from_args(args))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
    assert (seen["preset"], seen["batch_size"], seen["step_ms"], seen["budget_s"]) == (
        "tensor", spec.batch_size, spec.step_ms, 7.0)


async def test_probe_workload_form_edits_apply():
    seen = {}

    def probe(dataset=None, **kwargs):
        seen.update(kwargs)
        return scripted_probe(**kwargs)

    app = app_for(probe_fn=probe)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("2")
        app.screen.query_one("#batch_size", Input).value = "abc"
        await pilot.pause()
        assert "expected a number" in str(app.screen.query_one("#workload-error", Static).render())
        app.screen.query_one("#batch_size", Input).value = "16"
        app.screen.query_one("#budget_s", Input).value = "2"
        await pilot.pause()
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
    assert seen["batch_size"] == 16 and seen["budget_s"] == 2.0 and seen["preset"] == "image"


async def test_probe_cancel_with_escape():
    started = threading.Event()
    app = app_for(probe_fn=blocking_probe(started))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        assert await _wait_for(pilot, started.is_set)
        await pilot.pause()
        assert app.session.probe_state == "running"
        assert app.screen.query_one("#results", DataTable).row_count == 1
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "cancelled"
        assert app.screen.query_one("#results", DataTable).row_count == 1
        assert app.session.recommendation.source == "facts"  # a partial search does not replace it


async def test_probe_failure_is_shown():
    def failing(dataset=None, **kwargs):
        from loaderdoc.base.errors import UserError

        raise UserError("cannot import module 'nope' (check --dataset)")

    app = app_for(probe_fn=failing)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "failed"
        assert "cannot import module 'nope'" in str(app.screen.query_one("#probe-summary", Static).render())


async def test_quit_while_probing_cancels_the_probe_first():
    started = threading.Event()
    app = app_for(probe_fn=blocking_probe(started))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        assert await _wait_for(pilot, started.is_set)
        await pilot.press("ctrl+q")
        await pilot.pause()
    assert app.session.cancel.is_set()
    assert app.return_value == 0


# ---- keyboard, themes, small terminals ------------------------------------------------------
async def test_number_keys_switch_views_and_theme_toggles():
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        tabs = app.screen.query_one(TabbedContent)
        for key, tab in zip("12345", ("machine", "probe", "diagnoses", "tradeoffs", "settings"), strict=True):
            app.screen.set_focus(None)
            await pilot.press(key)
            assert tabs.active == tab
        assert app.theme == "textual-dark"
        await pilot.press("ctrl+t")
        assert app.theme == "textual-light"


async def test_command_palette_lists_the_app_commands():
    app = app_for()
    async with app.run_test(size=SIZE):
        titles = [c.title for c in app.get_system_commands(app.screen)]
    for title in ("Run probe", "Stop probe", "Export settings", "Toggle light/dark theme", "Show Diagnoses"):
        assert title in titles


@pytest.mark.parametrize("tab", ["machine", "probe", "diagnoses", "tradeoffs", "settings"])
async def test_every_view_fits_80x24(tab):
    app = app_for("k8s-4cpu-quota")
    async with app.run_test(size=(80, 24)) as pilot:
        await app.action_show_tab(tab)  # done once the view is mounted and focused
        await pilot.pause()
        pane = app.screen.query_one(f"#{tab}-pane")
        assert pane.region.width > 0 and pane.region.height >= 10
        assert pane.region.right <= 80 and pane.region.bottom <= 24


class _Held:
    """Holds the building of one part of the app (its compose) until released, so a test can send
    a key at the moment a user on a slow machine can: after the app started, before that part
    of it exists."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()

    def wrap(self, cls):
        held = self

        class Held(cls):
            async def _on_compose(self, event) -> None:
                held.entered.set()
                await held.release.wait()
                await super()._on_compose(event)

        Held.__name__ = cls.__name__
        return Held


async def _run_from_the_start(app, scenario, held: _Held) -> None:
    """Run ``app`` headless with ``scenario(pilot)`` starting the moment the app is ready, as a
    user's keys can (``run_test`` would first wait for the screen to be built); re-raise what
    the scenario raised, and fail if the app itself crashed."""
    failed: list[BaseException] = []

    async def pilot_scenario(pilot) -> None:
        try:
            await scenario(pilot)
        except BaseException as exc:
            failed.append(exc)
        finally:
            held.release.set()  # a failed scenario must not leave the app unable to finish building
        pilot.app.exit(0)

    await app.run_async(headless=True, size=SIZE, auto_pilot=pilot_scenario)
    if failed:
        raise failed[0]
    assert app.return_code == 0, "the app crashed"


@pytest.mark.parametrize("part", ["screen", "probe view"])
async def test_a_probe_key_before_the_view_is_built_waits_for_it(part, monkeypatch):
    """ctrl+r as the first thing a user does: before the main screen or the probe view exists
    (the views are built after the first paint). It used to crash the app (no tab 'probe', or
    NoMatches '#workload'); now the probe starts and the key is done once its view is shown."""
    from loaderdoc.tui.screens import main

    held = _Held()
    if part == "screen":
        monkeypatch.setattr(main, "MainScreen", held.wrap(main.MainScreen))
    else:
        title, view = main.VIEWS["probe"]
        monkeypatch.setitem(main.VIEWS, "probe", (title, held.wrap(view)))
    probe_called = threading.Event()

    def probe(*args, **kwargs):
        probe_called.set()
        return scripted_probe(*args, **kwargs)

    async def scenario(pilot) -> None:
        app = pilot.app
        await held.entered.wait()  # the held part is being built: the key arrives now
        assert app.main_screen.probe_pane is None
        key = asyncio.create_task(pilot.press("ctrl+r"))
        assert await asyncio.to_thread(probe_called.wait, 10), "ctrl+r did not start the probe"
        assert not key.done()  # handling the key waits for the view ...
        held.release.set()
        await key  # ... and ends once it is shown
        assert app.screen.query_one(TabbedContent).active == "probe"
        assert app.main_screen.probe_pane is not None
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "done"
        assert app.screen.query_one("#results", DataTable).row_count == 4
        assert "stopped: not starved" in str(app.screen.query_one("#probe-summary", Static).render())

    await _run_from_the_start(app_for(probe_fn=probe), scenario, held)


async def test_a_view_key_before_the_view_is_built_focuses_it_once_built(monkeypatch):
    from loaderdoc.tui.screens import main

    held = _Held()
    title, view = main.VIEWS["settings"]
    monkeypatch.setitem(main.VIEWS, "settings", (title, held.wrap(view)))
    asked = asyncio.Event()
    show_tab = main.MainScreen.show_tab

    def recording_show_tab(self, tab):
        shown = show_tab(self, tab)
        asked.set()
        return shown

    monkeypatch.setattr(main.MainScreen, "show_tab", recording_show_tab)

    async def scenario(pilot) -> None:
        app = pilot.app
        await held.entered.wait()
        key = asyncio.create_task(pilot.press("ctrl+s"))
        await asked.wait()  # the app handles the key while the view is being built
        assert not key.done()
        held.release.set()
        await key
        assert app.screen.query_one(TabbedContent).active == "settings"
        workers = app.screen.query_one("#set-num_workers", Input)
        assert workers.has_focus and workers.value == str(app.session.settings.num_workers)

    await _run_from_the_start(app_for(), scenario, held)


@pytest.mark.parametrize("stop", ["ctrl+q", "teardown"])
async def test_stopping_while_a_view_is_being_built_waits_for_it(stop, monkeypatch):
    """Quitting right after the start, while the hidden views are still being mounted (textual
    tears the DOM down without waiting for them: their mount handlers failed with NoMatches on
    children that were never started, e.g. the probe view's Select)."""
    from loaderdoc.tui.screens import main

    held = _Held()
    title, view = main.VIEWS["probe"]
    monkeypatch.setitem(main.VIEWS, "probe", (title, held.wrap(view)))
    stopping = asyncio.Event()
    teardown = App._shutdown

    async def recording_teardown(self):
        stopping.set()
        await teardown(self)

    monkeypatch.setattr(App, "_shutdown", recording_teardown)  # textual's teardown
    settle = main.MainScreen.settle
    settled = []

    async def recording_settle(self):
        settled.append(stopping.is_set())
        held.release.set()  # the app is stopping with the probe view half built: let it finish now
        await settle(self)

    monkeypatch.setattr(main.MainScreen, "settle", recording_settle)

    async def release_on_teardown() -> None:  # without the fix: let the app show what it does then
        await stopping.wait()
        held.release.set()

    releaser = asyncio.create_task(release_on_teardown())
    app = app_for()
    async with app.run_test(size=SIZE) as pilot:
        await held.entered.wait()
        if stop == "ctrl+q":
            await pilot.press("ctrl+q")
    releaser.cancel()
    assert settled and settled[0] is False, "textual's teardown began before the views were built"
    assert app.main_screen.probe_pane is not None
    assert app.return_code == (0 if stop == "ctrl+q" else None)


def test_no_color_is_honoured(monkeypatch):
    monkeypatch.setenv("NO_COLOR", "1")
    assert app_for().no_color is True
    monkeypatch.delenv("NO_COLOR")
    assert app_for().no_color is False


async def _wait_for(pilot, predicate, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.02)
    return predicate()


async def test_settings_follow_the_recommendation_when_facts_arrive_late():
    def slow_detect(cpu_info=False):
        time.sleep(0.3)
        return load_machine("k8s-4cpu-quota")

    app = make_app(detect_fn=slow_detect, header_fn=fixed_header)
    async with app.run_test(size=SIZE) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.settings_origin == "recommended from machine facts"
        assert app.session.settings == app.session.recommendation.settings
        await pilot.press("ctrl+s")
        await pilot.pause()
        assert app.screen.query_one("#set-num_workers", Input).value == str(app.session.settings.num_workers)


# ---- the real probe, briefly --------------------------------------------------------------
def _worker_children(baseline: frozenset = frozenset()) -> list:
    """Child processes alive now that were not alive at ``baseline`` (pids)."""
    import psutil

    return [p for p in psutil.Process().children(recursive=True)
            if p.pid not in baseline and p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _baseline() -> frozenset:
    return frozenset(p.pid for p in _worker_children())


async def test_real_probe_short_run_fills_the_view():
    before = _baseline()
    app = app_for("ci-2core", workload=ProbeRequest(preset="tensor", batch_size=16, step_ms=2.0, budget_s=2.0))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "done", app.session.probe_error
        assert app.session.report is not None and app.session.report.results
        assert app.screen.query_one("#results", DataTable).row_count == len(app.session.report.results)
        assert app.session.report.elapsed_s < 10
    assert await _no_children_soon(before)


async def test_real_probe_cancel_leaves_no_worker_processes():
    before = _baseline()
    app = app_for("ci-2core", workload=ProbeRequest(preset="image", batch_size=32, step_ms=20.0, budget_s=30.0))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        # wait until DataLoader workers exist, then cancel while they run
        assert await _wait_for(pilot, lambda: len(_worker_children(before)) > 0, timeout=20)
        start = time.monotonic()
        await pilot.press("escape")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert time.monotonic() - start < 10
        assert app.session.probe_state == "cancelled"
        assert app.session.report is not None and app.session.report.stopped == "cancelled"
    assert await _no_children_soon(before)


async def _no_children_soon(baseline: frozenset = frozenset(), timeout=5.0) -> bool:
    import asyncio

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _worker_children(baseline):
            return True
        await asyncio.sleep(0.05)
    return not _worker_children(baseline)


async def test_real_probe_of_a_user_dataset_module(tmp_path, monkeypatch):
    before = _baseline()
    (tmp_path / "tiny_ds.py").write_text(
        "import torch\n"
        "from torch.utils.data import TensorDataset\n\n"
        "def make():\n"
        "    return TensorDataset(torch.zeros(256, 8), torch.zeros(256))\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    app = app_for("ci-2core", workload=ProbeRequest(dataset="tiny_ds:make", batch_size=16, step_ms=1.0, budget_s=2.0))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "done", app.session.probe_error
        assert app.session.report.results and app.session.report.workload.batch_size == 16
    assert await _no_children_soon(before)


def test_run_app_rejects_an_unknown_preset_before_opening():
    import argparse

    from loaderdoc.base.errors import UserError
    from loaderdoc.commands.app import run_app

    args = argparse.Namespace(batch_size=None, sample_shape=None, dtype="uint8", preset="imagez", dataset=None,
                              step_ms=None, budget=None)
    with pytest.raises(UserError, match="unknown preset 'imagez'"):
        run_app(args)


def test_workload_from_args():
    import argparse

    from loaderdoc.commands.app import workload_from_args

    args = argparse.Namespace(batch_size=64, sample_shape=(3, 224, 224), dtype="uint8", preset="text",
                              dataset=None, step_ms=5.0, budget=12.0)
    w = workload_from_args(args)
    assert (w.preset, w.batch_size, w.batch_size_given, w.step_ms, w.budget_s) == ("text", 64, True, 5.0, 12.0)
    assert w.sample_bytes == 3 * 224 * 224


async def test_failing_core_pieces_are_shown_as_unavailable(monkeypatch):
    # a bug in the rules, the trade-offs or the probe must not take the app down: each view says so
    from loaderdoc import session as session_module

    def broken(*args, **kwargs):
        raise RuntimeError("broken in this test")

    monkeypatch.setattr(session_module, "evaluate", broken)
    monkeypatch.setattr(session_module, "tradeoffs", broken)
    app = app_for(probe_fn=broken)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("3")
        await pilot.pause()
        assert "Diagnoses unavailable: the rules failed: RuntimeError: broken in this test" in str(
            app.screen.query_one("#diagnoses-note", Static).render())
        await pilot.press("4")
        await pilot.pause()
        assert "Trade-offs unavailable" in str(app.screen.query_one("#tradeoffs-note", Static).render())
        await pilot.press("ctrl+r")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert app.session.probe_state == "failed" and "broken in this test" in app.session.probe_error
        assert app.session.findings == [] and app.session.tradeoffs == []


async def test_a_config_opened_in_the_app_says_where_each_setting_came_from_or_that_none_set_it():
    """`loaderdoc --config opt.yaml`: YOLOv5's batch_size and workers are the file's, with their lines;
    pin_memory is not set: YOLO's own create_dataloader decides it (loaderdoc knows no rule of it), torch's
    default named beside; the read is partial; an edit drops the sources."""
    from loaderdoc.commands.app import config_choice

    config = config_choice(str(Path(__file__).parent / "fixtures/configs/projects/yolov5/runs/train/exp/opt.yaml"))
    app = app_for(config=config)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("ctrl+s")
        assert app.session.settings.num_workers == 8 and app.session.settings.batch_size == 16
        assert app.session.settings_origin.startswith("read from ") and app.session.settings_origin.endswith(
            "opt.yaml, loader train; read partial")

        def msg(key: str) -> str:
            return str(app.screen.query_one(f"#msg-{key}", Static).render())

        assert msg("num_workers") == "from workers:54"
        assert msg("batch_size") == "from batch_size:35; in total over all GPUs"
        assert msg("pin_memory") == "not set (the training code decides; torch default False)"
        assert msg("shuffle").startswith("not set; YOLO's train.py shuffles its training set")
        app.screen.query_one("#set-num_workers", Input).value = "4"
        await pilot.pause()
        assert app.session.settings.num_workers == 4 and app.session.settings_origin == "edited"
        assert msg("pin_memory") == "page-locked batches: faster copies to a GPU"
