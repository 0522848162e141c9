"""The main screen: a status bar, one tab per view, and the footer with the key bindings."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.lazy import Lazy
from textual.screen import Screen
from textual.widgets import Footer, Header, TabbedContent, TabPane

from loaderdoc.tui.widgets.diagnoses import DiagnosesPane
from loaderdoc.tui.widgets.machine import MachinePane
from loaderdoc.tui.widgets.probe import ProbePane
from loaderdoc.tui.widgets.settings_editor import SettingsPane
from loaderdoc.tui.widgets.status import StatusBar
from loaderdoc.tui.widgets.tradeoffs import TradeoffsPane


class MainScreen(Screen):
    def compose(self) -> ComposeResult:
        yield Header(icon="")
        yield StatusBar(id="status")
        with TabbedContent(initial="machine", id="tabs"):
            with TabPane("1 Machine", id="machine"):
                yield MachinePane(id="machine-pane")
            # the hidden views mount after the first paint (Lazy): the machine view comes first
            with TabPane("2 Probe", id="probe"):
                yield Lazy(ProbePane(id="probe-pane"))
            with TabPane("3 Diagnoses", id="diagnoses"):
                yield Lazy(DiagnosesPane(id="diagnoses-pane"))
            with TabPane("4 Trade-offs", id="tradeoffs"):
                yield Lazy(TradeoffsPane(id="tradeoffs-pane"))
            with TabPane("5 Settings", id="settings"):
                yield Lazy(SettingsPane(id="settings-pane"))
        yield Footer()

    @property
    def probe_pane(self) -> ProbePane | None:
        panes = [p for p in self.query(ProbePane) if p.is_mounted]
        return panes[0] if panes else None

    def on_mount(self) -> None:
        self.refresh_state()

    def refresh_state(self) -> None:
        self.query_one(StatusBar).refresh_state()
        for pane_type in (MachinePane, ProbePane, DiagnosesPane, TradeoffsPane, SettingsPane):
            for pane in self.query(pane_type):  # a Lazy pane may not be mounted yet
                if pane.is_mounted:
                    pane.refresh_state()
        self.refresh_bindings()

    def show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        panes = self.query(f"#{tab}-pane")
        if panes:
            panes.first().focus_main()
        else:
            self.call_after_refresh(self._focus_pane, tab)

    def _focus_pane(self, tab: str) -> None:
        for pane in self.query(f"#{tab}-pane"):
            pane.focus_main()
