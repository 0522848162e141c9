"""The loaderdoc app: machine view, live probe, diagnoses, trade-offs, settings and export.

The app owns the state (facts, workload, chosen settings, probe report) and asks the headless
core for everything derived from it (recommendation, findings, trade-offs); the panes in
``widgets/`` only render :mod:`loaderdoc.tui.model`'s output. Slow work (reading facts,
importing torch, probing) runs in thread workers that post typed messages back.

Build it with :func:`make_app`, which the CLI, the tests and ``scripts/screenshots.py`` share.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import traceback
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Input, Select, TextArea
from textual.worker import Worker, WorkerState

from loaderdoc.errors import SettingsError, UserError
from loaderdoc.probe.result import ConfigResult, ProbeReport
from loaderdoc.settings import LoaderSettings
from loaderdoc.system.facts import MachineFacts
from loaderdoc.tui import model
from loaderdoc.tui.messages import (
    FactsFailed,
    FactsReady,
    ProbeFailed,
    ProbeFinished,
    ProbeProgress,
    ProbeResultArrived,
)
from loaderdoc.tui.model import Unavailable, Workload

DetectFn = Callable[..., MachineFacts]
ProbeFn = Callable[..., ProbeReport]

TABS = ("machine", "probe", "diagnoses", "tradeoffs", "settings")
SETTLE_TIMEOUT_S = 10.0  # longest wait, when stopping, for the views being mounted
DARK, LIGHT = "textual-dark", "textual-light"


class LoaderDocApp(App[int]):
    """``loaderdoc`` with no command: see :func:`make_app`."""

    CSS_PATH = "loaderdoc.tcss"
    TITLE = "loaderdoc"
    SUB_TITLE = "DataLoader settings for this machine"

    # classes on the screen: small terminals (80x24 over SSH) get smaller charts
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (100, "-wide")]
    VERTICAL_BREAKPOINTS = [(0, "-short"), (34, "-tall")]

    BINDINGS = [
        Binding("ctrl+q", "quit", "Quit", priority=True),
        Binding("ctrl+r", "run_probe", "Probe", tooltip="Run the probe with the chosen workload", priority=True),
        Binding("escape", "stop_probe", "Stop", tooltip="Stop the running probe"),
        Binding("ctrl+s", "show_tab('settings')", "Settings", priority=True),
        Binding("ctrl+e", "export", "Export", priority=True),
        Binding("ctrl+t", "toggle_theme", "Theme", tooltip="Toggle light/dark", priority=True),
        # 1-5 switch views before the focused widget sees the key (priority), so that the next key
        # typed goes to the view shown; not where the digit is text (check_action)
        Binding("1", "view_key('machine')", "Machine", show=False, priority=True),
        Binding("2", "view_key('probe')", "Probe", show=False, priority=True),
        Binding("3", "view_key('diagnoses')", "Diagnoses", show=False, priority=True),
        Binding("4", "view_key('tradeoffs')", "Trade-offs", show=False, priority=True),
        Binding("5", "view_key('settings')", "Settings", show=False, priority=True),
    ]

    def __init__(
        self,
        *,
        facts: MachineFacts | None = None,
        detect_fn: DetectFn | None = None,
        probe_fn: ProbeFn | None = None,
        load_dataset_fn: Callable[[str], Any] | None = None,
        workload: Workload | None = None,
        settings: LoaderSettings | None = None,
        export_dir: Path | None = None,
        header_fn: Callable[..., list[str]] | None = None,
        early_facts: Future | None = None,
    ) -> None:
        super().__init__()
        self._early_facts = early_facts
        self._fixed_facts = facts
        self._detect_fn = detect_fn
        self._probe_fn = probe_fn
        self._load_dataset_fn = load_dataset_fn
        self._header_fn = header_fn
        self.export_dir = export_dir or Path.cwd()
        self.theme = DARK

        self.facts: MachineFacts | None = None
        self.pending_facts: frozenset[str] = frozenset()
        self.facts_error: str | None = None
        self.workload = workload or Workload()
        self.dataset_arg = self.workload.dataset  # --dataset, kept while a preset is chosen
        self.settings = settings or LoaderSettings(batch_size=self.workload.batch_size)
        self.settings_origin = "torch defaults: machine facts not read yet" if settings is None else "given"
        self._user_touched = settings is not None
        self.recommendation: Any = None
        self.recommend_error: str | None = None
        self.findings: list[Any] = []
        self.findings_error: str | None = None
        self.tradeoffs: list[Any] = []
        self.tradeoffs_error: str | None = None

        self.live_results: list[ConfigResult] = []
        self.report: ProbeReport | None = None
        self.report_complete = False  # False for a cancelled probe's partial report
        self.probe_state = "idle"  # idle | running | stopping | done | cancelled | failed
        self.probe_progress: tuple[float, str] = (0.0, "")
        self.probe_error: str | None = None
        self._cancel: threading.Event | None = None
        self._probe_worker: Worker | None = None
        self._slow_started = False

    # ---- screens --------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        from loaderdoc.tui.screens.main import MainScreen

        self.main_screen = MainScreen()
        return self.main_screen

    def on_mount(self) -> None:
        if self._fixed_facts is not None:
            self.post_message(FactsReady(self._fixed_facts))
        else:
            self._read_facts()

    def refresh_views(self) -> None:
        """Re-render every pane from the app's state."""
        screen = getattr(self, "main_screen", None)
        if screen is not None:
            screen.refresh_state()  # draws the views that are mounted; the others draw themselves then

    # ---- machine facts --------------------------------------------------------------------
    def _detect(self) -> DetectFn:
        return self._detect_fn or model.core("loaderdoc.system.detect", "detect")

    @work(thread=True, exclusive=True, exit_on_error=False, group="facts")
    def _read_facts(self) -> None:
        """The fast facts (cgroups, /proc, NVML, torch's version file): well under a second."""
        try:
            if self._early_facts is not None:
                facts = self._early_facts.result()
            else:
                facts = self._detect()(cpu_info=False)
        except Exception as exc:  # Unavailable, or a reader bug: it must not take the app down
            self.post_message(FactsFailed("detect", _one_line(exc)))
            return
        pending = {"cpu_model"}
        if not facts.torch.installed.known:
            pending.add("torch")
        self.post_message(FactsReady(facts, frozenset(pending)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="slow-facts")
    def _read_slow_facts(self) -> None:
        """py-cpuinfo takes a second or more and competes for the CPU: started after first paint."""
        try:
            full = self._detect()(cpu_info=True)
        except Exception as exc:
            self.post_message(FactsFailed("cpu model", _one_line(exc)))
            return
        self.post_message(FactsReady(full, frozenset()))

    def _start_slow_facts(self) -> None:
        if not self._slow_started:
            self._slow_started = True
            self._read_slow_facts()

    def on_facts_ready(self, message: FactsReady) -> None:
        if message.pending and not self._slow_started:
            # let the fast facts reach the screen before py-cpuinfo competes for the CPU
            self.main_screen.call_after_refresh(lambda: self.set_timer(0.3, self._start_slow_facts))
        self.facts = message.facts
        self.pending_facts = message.pending
        if message.facts.label:
            self.sub_title = message.facts.label
        self._recommend()
        self.update_advice()

    def on_facts_failed(self, message: FactsFailed) -> None:
        if self.facts is None:
            self.facts_error = f"could not read machine facts: {message.error}"
        self.pending_facts = frozenset()
        self.notify(f"{message.stage}: {message.error}", title="Machine facts", severity="error", timeout=8)
        self.refresh_views()

    # ---- recommendation, findings, trade-offs ---------------------------------------------
    @property
    def batch_bytes(self) -> int | None:
        if self.report is not None and self.report.workload.batch_bytes:
            per_sample = self.report.workload.batch_bytes / max(1, self.report.workload.batch_size)
            return int(per_sample * (self.settings.batch_size or self.report.workload.batch_size))
        if self.workload.sample_bytes is not None:
            return self.workload.sample_bytes * (self.settings.batch_size or self.workload.batch_size)
        return None

    def _recommend(self) -> None:
        if self.facts is None:
            return
        try:
            recommend = model.core("loaderdoc.advice.recommend", "recommend")
            self.recommendation = recommend(
                self.facts,
                batch_size=self.workload.batch_size if self.workload.batch_size_given else None,
                sample_bytes=self._sample_bytes(),
                probe=self.report if self.report_complete else None,
            )
            self.recommend_error = None
        except (Unavailable, UserError) as exc:
            self.recommendation, self.recommend_error = None, str(exc)
        except Exception as exc:
            self.recommendation, self.recommend_error = None, f"recommend() failed: {type(exc).__name__}: {exc}"
        if self.recommendation is not None and not self._user_touched:
            self.settings = self.recommendation.settings
            self.settings_origin = self._recommendation_origin()
        elif self.recommendation is None and not self._user_touched:
            self.settings_origin = "torch defaults: no recommendation available"

    def _recommendation_origin(self) -> str:
        src = getattr(self.recommendation, "source", "facts")
        return "recommended from the probe" if src == "probe" else "recommended from machine facts"

    def _sample_bytes(self) -> int | None:
        if self.workload.sample_bytes is not None:
            return self.workload.sample_bytes
        w = self.report.workload if self.report is not None else None
        if w is not None and w.batch_bytes and w.batch_size:
            return w.batch_bytes // w.batch_size
        return None

    def update_advice(self) -> None:
        """Re-run the rules and the trade-offs for the chosen settings, then redraw."""
        if self.facts is not None:
            try:
                evaluate = model.core("loaderdoc.advice.rules", "evaluate")
                self.findings = model.sort_findings(
                    evaluate(self.facts, self.settings, batch_bytes=self.batch_bytes, probe=self.report)
                )
                self.findings_error = None
            except Unavailable as exc:
                self.findings, self.findings_error = [], str(exc)
            except Exception as exc:
                self.findings, self.findings_error = [], f"the rules failed: {type(exc).__name__}: {exc}"
            try:
                tradeoffs = model.core("loaderdoc.advice.tradeoffs", "tradeoffs")
                self.tradeoffs = list(
                    tradeoffs(self.facts, self.settings, batch_bytes=self.batch_bytes, probe=self.report)
                )
                self.tradeoffs_error = None
            except Unavailable as exc:
                self.tradeoffs, self.tradeoffs_error = [], str(exc)
            except Exception as exc:
                self.tradeoffs, self.tradeoffs_error = [], f"trade-offs failed: {type(exc).__name__}: {exc}"
        self.refresh_views()

    def workload_changed(self) -> None:
        """The workload's batch size changed: the recommendation (and advice) follow it."""
        self._recommend()
        self.update_advice()

    # ---- chosen settings ------------------------------------------------------------------
    def set_settings(self, settings: LoaderSettings, origin: str) -> None:
        """Make ``settings`` the chosen settings (already validated), then re-run the advice."""
        if settings == self.settings and origin == "edited":
            return
        self.settings = settings.validate()
        self.settings_origin = origin
        self._user_touched = True
        self.update_advice()

    def apply_fix(self, finding: Any) -> bool:
        """Apply a finding's settings change to the chosen settings; False (and a message) if
        the result would be invalid."""
        if not finding.settings_change:
            self.notify("This finding has no settings change to apply; its fix is outside the DataLoader.",
                        severity="warning")
            return False
        try:
            new = model.apply_change(self.settings, finding.settings_change)
        except SettingsError as exc:
            self.notify(f"Not applied: {exc}", title="Apply fix", severity="error", timeout=8)
            return False
        diff = model.settings_diff(self.settings, new)
        self.set_settings(new, f"fix applied: {finding.rule_id}")
        self.notify(diff, title=f"Applied fix for {finding.rule_id}")
        return True

    def adopt_recommendation(self) -> None:
        if self.recommendation is None:
            self.notify(self.recommend_error or "no recommendation yet", severity="warning")
            return
        self.set_settings(self.recommendation.settings, self._recommendation_origin())

    # ---- probe ----------------------------------------------------------------------------
    @property
    def probe_running(self) -> bool:
        return self.probe_state in ("running", "stopping")

    def action_run_probe(self) -> Awaitable[None] | None:
        """Start the probe and show its view; the result is done once the view is on screen."""
        if not isinstance(self.screen, type(self.main_screen)):
            return None  # a dialog is open
        if self.probe_running:
            self.notify("A probe is already running; Esc stops it.", severity="warning")
            return None
        if not self.workload.preset and not self.workload.dataset:
            self.notify("Choose a workload (a preset or --dataset) first.", severity="warning")
            return self.action_show_tab("probe")
        self.live_results = []
        self.report = None
        self.report_complete = False
        self.probe_error = None
        self.probe_state = "running"
        self.probe_progress = (0.0, f"starting: {self.workload.source}")
        self._cancel = threading.Event()
        self.refresh_views()
        self._probe_worker = self._run_probe(self.workload, self.facts, self._cancel)
        return self.action_show_tab("probe")

    def action_stop_probe(self) -> None:
        if not self.probe_running or self._cancel is None:
            return
        self._cancel.set()
        self.probe_state = "stopping"
        self.probe_progress = (self.probe_progress[0], "waiting for the DataLoader workers to exit")
        self.refresh_views()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_probe":
            return bool(self.probe_running)
        if action == "run_probe":
            return None if self.probe_running else True
        if action == "view_key":
            return self._digits_switch_views()
        return True

    def _digits_switch_views(self) -> bool:
        """1-5 switch views unless a dialog is open or the focused widget takes the digit as text
        (an input, a select's list searching as you type)."""
        if not isinstance(self.screen, type(self.main_screen)):
            return False
        focused = self.focused
        if focused is None:
            return True
        return not (isinstance(focused, (Input, TextArea)) or any(isinstance(a, Select) for a in focused.ancestors))

    @work(thread=True, exclusive=True, exit_on_error=False, group="probe")
    def _run_probe(self, workload: Workload, facts: MachineFacts | None, cancel: threading.Event) -> None:
        try:
            probe = self._probe_fn or model.core("loaderdoc.probe.api", "probe")
            kwargs: dict[str, Any] = dict(
                batch_size=workload.batch_size,
                step_ms=workload.step_ms,
                budget_s=workload.budget_s,
                facts=facts,
                on_result=lambda r: self.post_message(ProbeResultArrived(r)),
                on_progress=lambda f, m: self.post_message(ProbeProgress(float(f), str(m))),
                cancel=cancel,
            )
            if workload.dataset:
                load = self._load_dataset_fn or model.core("loaderdoc.probe.workloads", "load_user_dataset")
                loaded = load(workload.dataset)
                dataset, collate = loaded if isinstance(loaded, tuple) else (loaded, None)
                report = probe(dataset, collate_fn=collate, **kwargs)
            else:
                report = probe(preset=workload.preset, **kwargs)
        except (Unavailable, UserError) as exc:
            self.post_message(ProbeFailed(str(exc)))
            return
        except Exception as exc:
            self.post_message(ProbeFailed(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return
        self.post_message(ProbeFinished(report))

    def on_probe_progress(self, message: ProbeProgress) -> None:
        if self.probe_state == "running":
            self.probe_progress = (message.fraction, message.text)
        pane = self.main_screen.probe_pane
        if pane is not None:
            pane.show_progress()

    def on_probe_result_arrived(self, message: ProbeResultArrived) -> None:
        self.live_results.append(message.result)
        pane = self.main_screen.probe_pane
        if pane is not None:
            pane.add_result(message.result)

    def on_probe_finished(self, message: ProbeFinished) -> None:
        report = message.report
        self.report = report
        cancelled = (self._cancel is not None and self._cancel.is_set()) or report.stopped == "cancelled"
        # a cancelled run's measurements are shown and feed the diagnoses, but its partial
        # search does not replace the recommendation
        self.report_complete = not cancelled
        self.probe_state = "cancelled" if cancelled else "done"
        fraction = self.probe_progress[0] if cancelled else 1.0
        self.probe_progress = (fraction, f"{len(report.results)} configurations in {report.elapsed_s:.1f} s"
                               + ("" if cancelled else f", stopped: {report.stopped or 'done'}"))
        self._recommend()
        if cancelled:
            self.notify(f"Stopped after {len(report.results)} configurations; the recommendation is unchanged.",
                        title="Probe cancelled")
        elif report.recommended is not None:
            if self._user_touched:
                self.notify("The probe has a recommendation; 'Use recommendation' (Probe or Settings) adopts it.",
                            title="Probe finished")
            else:
                self.notify(model.settings_line(self.settings), title="Probe finished: settings chosen")
        self.update_advice()

    def on_probe_failed(self, message: ProbeFailed) -> None:
        self.probe_state = "failed"
        self.probe_error = message.error
        self.probe_progress = (self.probe_progress[0], "")
        self.notify(message.error, title="Probe failed", severity="error", timeout=10)
        self.refresh_views()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        # the workers catch their own errors; this is the last line of defence
        if event.state == WorkerState.ERROR:
            err = event.worker.error
            text = f"{type(err).__name__}: {err}"
            if event.worker.group == "probe":
                self.post_message(ProbeFailed(text))
            else:
                self.post_message(FactsFailed(event.worker.group, text))

    async def action_quit(self) -> None:
        if self.probe_running and self._cancel is not None:
            self._cancel.set()
            self.probe_state = "stopping"
            self.notify("Stopping the probe before quitting...")
            if self._probe_worker is not None:
                await self._probe_worker.wait()
        await self._settle_views()
        self.exit(0)

    async def _settle_views(self) -> None:
        """Let the views being mounted finish (ctrl+q right after the start comes while they
        are): textual stops the app without waiting for them, and they failed then."""
        screen = getattr(self, "main_screen", None)
        if screen is None:
            return
        # a view that never finishes must not keep the app from stopping
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(screen.settle(), timeout=SETTLE_TIMEOUT_S)

    async def _shutdown(self) -> None:
        # textual's own teardown (that of run_test too) does not wait for widgets still being
        # mounted; while the message loop runs they can still finish (after it, action_quit did it)
        if self.is_running:
            await self._settle_views()
        await super()._shutdown()

    # ---- navigation, export, theme --------------------------------------------------------
    def action_view_key(self, tab: str) -> Awaitable[None] | None:
        return self.action_show_tab(tab)

    def action_show_tab(self, tab: str) -> Awaitable[None] | None:
        """Switch to ``tab``; the result is done once its view is mounted and focused (a key that
        arrives before the view is built waits for it instead of failing)."""
        if not isinstance(self.screen, type(self.main_screen)):
            return None
        return self.main_screen.show_tab(tab)

    def export_header(self) -> list[str]:
        if self.facts is None:
            return ["DataLoader settings by loaderdoc (machine facts were not read)"]
        fn = self._header_fn or model.core("loaderdoc.export", "export_header")
        rec = self.recommendation
        matches = rec is not None and rec.settings == self.settings
        header = list(fn(self.facts, rec if matches else None, self.findings))
        if not matches:
            header.insert(2, f"settings: {self.settings_origin}")
            if rec is not None:
                header.insert(3, "differs from the recommendation: " + model.settings_diff(rec.settings, self.settings))
        return header

    def action_export(self) -> None:
        if not isinstance(self.screen, type(self.main_screen)):
            return
        from loaderdoc.tui.screens.export import ExportScreen

        def done(path: Path | None) -> None:
            if path is not None:
                self.notify(f"Wrote {path}", title="Exported")

        self.push_screen(ExportScreen(self.settings, self.export_header(), self.export_dir), done)

    def action_toggle_theme(self) -> None:
        self.theme = LIGHT if self.theme == DARK else DARK

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        yield SystemCommand("Run probe", "Measure real DataLoaders with the chosen workload (ctrl+r)",
                            self.action_run_probe)
        yield SystemCommand("Stop probe", "Cancel the running probe (Esc)", self.action_stop_probe)
        yield SystemCommand("Export settings", "Write the chosen settings as TOML, Python or JSON (ctrl+e)",
                            self.action_export)
        yield SystemCommand("Toggle light/dark theme", "Switch between textual-light and textual-dark (ctrl+t)",
                            self.action_toggle_theme)
        yield SystemCommand("Use the recommendation", "Replace the chosen settings with the recommended ones",
                            self.adopt_recommendation)
        for key, title in zip(TABS, ("Machine", "Probe", "Diagnoses", "Trade-offs", "Settings"), strict=True):
            yield SystemCommand(f"Show {title}", f"Switch to the {title} view",
                                lambda key=key: self.action_show_tab(key))


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if isinstance(exc, (Unavailable, UserError)) and text else f"{type(exc).__name__}: {' '.join(text)}"


def make_app(
    *,
    facts: MachineFacts | None = None,
    detect_fn: DetectFn | None = None,
    probe_fn: ProbeFn | None = None,
    load_dataset_fn: Callable[[str], Any] | None = None,
    workload: Workload | None = None,
    settings: LoaderSettings | None = None,
    export_dir: Path | None = None,
    header_fn: Callable[..., list[str]] | None = None,
    early_facts: Future | None = None,
) -> LoaderDocApp:
    """Build the app.

    ``facts`` fixes the machine (a recorded one, for tests and screenshots) instead of
    detecting it; ``detect_fn(cpu_info=...)`` replaces :func:`loaderdoc.system.detect.detect`;
    ``probe_fn`` replaces :func:`loaderdoc.probe.api.probe` (same keyword arguments);
    ``header_fn`` replaces :func:`loaderdoc.export.export_header` (snapshots want no clock);
    ``early_facts`` is a future of the fast ``detect(cpu_info=False)`` started before textual
    was imported (``run_app`` does this so the machine view paints sooner).
    """
    if workload is None:
        workload = Workload()
    if workload.preset is None and workload.dataset is None:
        names, _ = model.preset_names()
        available = [n for n, _ in names]
        workload.preset = "image" if "image" in available else (available[0] if available else None)
    return LoaderDocApp(
        facts=facts,
        detect_fn=detect_fn,
        probe_fn=probe_fn,
        load_dataset_fn=load_dataset_fn,
        workload=workload,
        settings=settings,
        export_dir=export_dir,
        header_fn=header_fn,
        early_facts=early_facts,
    )
