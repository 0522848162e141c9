"""The loaderdoc app: machine view, live probe, diagnoses, trade-offs, settings and export.

The state (facts, workload, chosen settings, recommendation, findings, trade-offs, the probe's
progress and report) is a headless :class:`loaderdoc.session.Session`; the app turns keys into its
method calls and runs its slow parts (reading facts, importing torch, probing) in thread workers
that post typed messages back. After each change the app hands the main screen typed messages
built from the session (:mod:`loaderdoc.tui.messages`' ``MachineShown``, ``AdviceShown``,
``ProbeShown``), which give them to the panes in ``widgets/``: a pane draws what it is given
(through :mod:`loaderdoc.tui.model`'s strings) and never reads the session.

Build it with :func:`make_app`, which the CLI, the tests and ``scripts/screenshots.py`` share.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import traceback
from collections.abc import Awaitable, Callable, Iterable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from textual import work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Input, Select, TextArea
from textual.worker import Worker, WorkerState

from loaderdoc.advice.findings import Finding
from loaderdoc.base.errors import UserError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.cluster.job_report import JobReport
from loaderdoc.reports import TuneRun
from loaderdoc.session import ConfigChoice, DetectFn, ProbeFn, ProbeRequest, Session, one_line
from loaderdoc.system.facts import MachineFacts
from loaderdoc.tui.messages import (
    AdviceShown,
    FactsFailed,
    FactsReady,
    MachineShown,
    ProbeFailed,
    ProbeFinished,
    ProbeProgress,
    ProbeResultArrived,
    ProbeShown,
)
from loaderdoc.watching.report import WatchReport

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
        # q and ? as in htop, nvitop and k9s; not while typing in a field (check_action)
        Binding("q", "quit_key", "Quit", show=False, priority=True),
        Binding("question_mark", "keys_key", "Keys", tooltip="Show or hide the keys", priority=True),
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
        # the report opened with --report FILE: the Run view (a watched run), the Job view (a job) or
        # the Tune view (a tune's trials)
        Binding("6", "view_key('report')", "Report", show=False, priority=True),
    ]

    def __init__(self, session: Session, *, facts: MachineFacts | None = None, export_dir: Path | None = None,
                 early_facts: Future | None = None) -> None:
        """See :func:`make_app`, which builds the session."""
        super().__init__()
        self._early_facts = early_facts
        self._fixed_facts = facts
        self.export_dir = export_dir or Path.cwd()
        self.theme = DARK
        self.session = session
        self._probe_worker: Worker | None = None
        self._slow_started = False

    # ---- screens --------------------------------------------------------------------------
    def get_default_screen(self) -> Screen:
        from loaderdoc.tui.screens.main import MainScreen

        self.main_screen = MainScreen(self.session.opened_report)
        self.main_screen.show(*self._state_messages())  # what its views draw first
        return self.main_screen

    def on_mount(self) -> None:
        if self._fixed_facts is not None:
            self.post_message(FactsReady(self._fixed_facts))
        else:
            self._read_facts()

    def refresh_views(self) -> None:
        """Give the views the session's state as typed messages."""
        self._show(*self._state_messages())

    def _state_messages(self) -> tuple[Message, ...]:
        session = self.session
        return MachineShown.of(session), AdviceShown.of(session), ProbeShown.of(session)

    def _show(self, *messages: Message) -> None:
        """Hand the main screen ``messages`` for its views; nothing once the app is stopping (its
        views are being taken down: a late message, the slow facts after a quit, finds them half gone)."""
        screen = getattr(self, "main_screen", None)
        if screen is not None and self.is_running:
            screen.show(*messages)

    # ---- machine facts --------------------------------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="facts")
    def _read_facts(self) -> None:
        """The fast facts (cgroups, /proc, NVML, torch's version file): well under a second."""
        try:
            if self._early_facts is not None:
                facts = self._early_facts.result()
            else:
                facts = self.session.read_facts(cpu_info=False)
        except Exception as exc:  # Unavailable, or a reader bug: it must not take the app down
            self.post_message(FactsFailed("detect", one_line(exc)))
            return
        pending = {"cpu_model"}
        if not facts.torch.installed.known:
            pending.add("torch")
        self.post_message(FactsReady(facts, frozenset(pending)))

    @work(thread=True, exclusive=True, exit_on_error=False, group="slow-facts")
    def _read_slow_facts(self) -> None:
        """py-cpuinfo takes a second or more and competes for the CPU: started after first paint."""
        try:
            full = self.session.read_facts(cpu_info=True)
        except Exception as exc:
            self.post_message(FactsFailed("cpu model", one_line(exc)))
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
        if message.facts.label:
            self.sub_title = message.facts.label
        self.session.facts_arrived(message.facts, message.pending)
        self.refresh_views()

    def on_facts_failed(self, message: FactsFailed) -> None:
        self.session.facts_failed(message.stage, message.error)
        self.notify(f"{message.stage}: {message.error}", title="Machine facts", severity="error", timeout=8)
        self.refresh_views()

    # ---- the chosen settings (the session decides; the app redraws and says what happened) -----
    def update_advice(self) -> None:
        """Re-run the rules and the trade-offs for the chosen settings, then redraw."""
        self.session.update_advice()
        self.refresh_views()

    def choose_workload(self, preset: str | None) -> ProbeRequest:
        """Make preset ``preset`` (None: the user's --dataset) the workload the probe measures; the
        recommendation follows a new batch size. The workload, as it is now."""
        if self.session.choose_workload(preset):
            self.refresh_views()
        return dataclasses.replace(self.session.workload)

    def set_workload_field(self, key: str, value: Any) -> ProbeRequest:
        """A valid value typed for the workload (batch_size, step_ms, budget_s); the workload, as
        it is now."""
        if self.session.set_workload_field(key, value) and key == "batch_size":
            self.refresh_views()
        return dataclasses.replace(self.session.workload)

    def set_settings(self, settings: LoaderSettings, origin: str) -> None:
        """Make ``settings`` the chosen settings (already validated), then re-run the advice."""
        if self.session.set_settings(settings, origin):
            self.refresh_views()

    def apply_fix(self, finding: Finding) -> bool:
        """Apply a finding's settings change; False (and a message) if it has none or the result
        would be invalid."""
        applied, message = self.session.apply_fix(finding)
        if applied:
            self.refresh_views()
            self.notify(message, title=f"Applied fix for {finding.rule_id}")
        else:
            self.notify(message, title="Apply fix", severity="warning" if not finding.settings_change else "error",
                        timeout=8)
        return applied

    def adopt_recommendation(self) -> None:
        why_not = self.session.adopt_recommendation()
        if why_not is not None:
            self.notify(why_not, severity="warning")
            return
        self.refresh_views()

    # ---- probe ----------------------------------------------------------------------------
    def action_run_probe(self) -> Awaitable[None] | None:
        """Start the probe and show its view; the result is done once the view is on screen."""
        if not isinstance(self.screen, type(self.main_screen)):
            return None  # a dialog is open
        why_not = self.session.start_probe()
        if why_not is not None:
            self.notify(why_not, severity="warning")
            return None if self.session.probe_running else self.action_show_tab("probe")
        self.refresh_views()
        self._probe_worker = self._run_probe()
        return self.action_show_tab("probe")

    def action_stop_probe(self) -> None:
        if self.session.stop_probe():
            self.refresh_views()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "stop_probe":
            return self.session.probe_running
        if action == "run_probe":
            return None if self.session.probe_running else True
        if action == "view_key" and parameters == ("report",) and self._report_tab() is None:
            return False
        if action in ("view_key", "quit_key", "keys_key"):
            return self._digits_switch_views()
        return True

    async def action_quit_key(self) -> None:
        await self.action_quit()

    def action_keys_key(self) -> None:
        """Toggle textual's keys panel (the bindings of what has focus)."""
        from textual.widgets import HelpPanel

        if self.screen.query(HelpPanel):
            self.action_hide_help_panel()
        else:
            self.action_show_help_panel()

    def _digits_switch_views(self) -> bool:
        """1-5, q and ? act unless a dialog is open or the focused widget takes the key as text
        (an input, a select's list searching as you type)."""
        if not isinstance(self.screen, type(self.main_screen)):
            return False
        focused = self.focused
        if focused is None:
            return True
        return not (isinstance(focused, (Input, TextArea)) or any(isinstance(a, Select) for a in focused.ancestors))

    @work(thread=True, exclusive=True, exit_on_error=False, group="probe")
    def _run_probe(self) -> None:
        try:
            report = self.session.run_probe(
                on_result=lambda r: self.post_message(ProbeResultArrived(r)),
                on_progress=lambda f, m: self.post_message(ProbeProgress(float(f), str(m))),
            )
        except UserError as exc:
            self.post_message(ProbeFailed(str(exc)))
            return
        except Exception as exc:
            self.post_message(ProbeFailed(f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return
        self.post_message(ProbeFinished(report))

    def on_probe_progress(self, message: ProbeProgress) -> None:
        self.session.probe_progressed(message.fraction, message.text)
        self._show(ProbeShown.of(self.session))

    def on_probe_result_arrived(self, message: ProbeResultArrived) -> None:
        self.session.result_arrived(message.result)
        self._show(ProbeShown.of(self.session))

    def on_probe_finished(self, message: ProbeFinished) -> None:
        title, text = self.session.probe_finished(message.report)
        self.notify(text, title=title)
        self.refresh_views()

    def on_probe_failed(self, message: ProbeFailed) -> None:
        self.session.probe_failed(message.error)
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
        if self.session.stop_probe():
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

    @contextlib.asynccontextmanager
    async def run_test(self, *args: Any, **kwargs: Any):
        """textual's ``run_test``, letting the views being mounted finish before its teardown, as
        :meth:`action_quit` does for a user (the teardown does not wait for them: they failed)."""
        async with super().run_test(*args, **kwargs) as pilot:
            try:
                yield pilot
            finally:
                if self.is_running:
                    await self._settle_views()

    # ---- navigation, export, theme --------------------------------------------------------
    def action_view_key(self, tab: str) -> Awaitable[None] | None:
        if tab == "report":
            tab = self._report_tab() or tab
        return self.action_show_tab(tab)

    def _report_tab(self) -> str | None:
        """The view of the report opened with --report FILE; None without one."""
        from loaderdoc.tui.screens.main import report_view

        opened = report_view(self.session.opened_report)
        return None if opened is None else opened[0]

    def action_show_tab(self, tab: str) -> Awaitable[None] | None:
        """Switch to ``tab``; the result is done once its view is mounted and focused (a key that
        arrives before the view is built waits for it instead of failing)."""
        if not isinstance(self.screen, type(self.main_screen)) or tab not in self.main_screen.views:
            return None
        return self.main_screen.show_tab(tab)

    def action_export(self) -> None:
        if not isinstance(self.screen, type(self.main_screen)):
            return
        from loaderdoc.tui.screens.export import ExportScreen

        def done(path: Path | None) -> None:
            if path is not None:
                self.notify(f"Wrote {path}", title="Exported")

        self.push_screen(ExportScreen(self.session.settings, self.session.export_header(), self.export_dir,
                                      torch_threads=self.session.torch_threads), done)

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
        from loaderdoc.tui.screens.main import report_view

        opened = self.session.opened_report
        view = report_view(opened)
        if opened is not None and view is not None:
            tab, title, _, about = view
            yield SystemCommand(f"Show {title[2:]}", about.format(path=opened.path), lambda: self.action_show_tab(tab))

def make_app(
    *,
    facts: MachineFacts | None = None,
    detect_fn: DetectFn | None = None,
    probe_fn: ProbeFn | None = None,
    load_dataset_fn: Callable[[str], Any] | None = None,
    workload: ProbeRequest | None = None,
    settings: LoaderSettings | None = None,
    export_dir: Path | None = None,
    header_fn: Callable[..., list[str]] | None = None,
    early_facts: Future | None = None,
    watch_run: WatchReport | None = None,
    job_run: JobReport | None = None,
    tune_run: TuneRun | None = None,
    config: ConfigChoice | None = None,
) -> LoaderDocApp:
    """Build the app.

    ``facts`` fixes the machine (a recorded one, for tests and screenshots) instead of
    detecting it; ``detect_fn(cpu_info=...)`` replaces :func:`loaderdoc.system.detect.detect`;
    ``probe_fn`` replaces :func:`loaderdoc.probing.probe.probe` (same keyword arguments);
    ``header_fn`` replaces :func:`loaderdoc.export.export_header` (snapshots want no clock);
    ``early_facts`` is a future of the fast ``detect(cpu_info=False)`` started before textual
    was imported (``run_app`` does this so the machine view paints sooner); ``watch_run`` is a
    watched run's report (:func:`loaderdoc.watching.report_file.load_watch_report`): its findings
    lead the diagnoses and the app opens on its Run view; ``job_run`` likewise is a job report
    (:func:`loaderdoc.cluster.job_file.load_job_report`), opened on its Job view; ``tune_run`` a
    tune report (:func:`loaderdoc.reports.open_report`), opened on its Tune view (no findings);
    ``config`` a loader read from the user's config file: the chosen settings, each with its source.
    """
    session = Session(workload=workload, settings=settings, detect_fn=detect_fn, probe_fn=probe_fn,
                      load_dataset_fn=load_dataset_fn, header_fn=header_fn, watch_run=watch_run, job_run=job_run,
                      tune_run=tune_run, config=config)
    return LoaderDocApp(session, facts=facts, export_dir=export_dir, early_facts=early_facts)
