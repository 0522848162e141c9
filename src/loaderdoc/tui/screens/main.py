"""The main screen: a status bar, one tab per view, and the footer with the key bindings.

A key can arrive at any moment after the app starts: before this screen is built, or before
the view it asks for is mounted (the hidden views mount after the first paint, so the machine
view comes first). :meth:`MainScreen.show_tab` therefore never touches a widget that is not
there yet: it records the tab asked for, mounts that view at once if it is not mounting
already, and switches to it and focuses it as soon as it is mounted. It returns a future
that is done then; a key binding's action returns it, and textual finishes handling the key
only when it is done, so the next key (or a test's next step) sees the view.

The views never read the app's session: the app hands the screen typed messages
(:mod:`loaderdoc.tui.messages`' ``...Shown``) and the screen gives each view the latest of each
kind, when the view is mounted and whenever one changes; a report opened with --report is given
to its view when the view is built.

Likewise the app is never torn down in the middle of building a view (:meth:`settle`): textual
does not wait for widgets still being mounted, whose mount handlers then fail on children that
were never started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from textual.app import ComposeResult
from textual.message import Message
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, TabbedContent, TabPane

from loaderdoc.cluster.job_report import JobReport
from loaderdoc.reports import TuneRun
from loaderdoc.tui.widgets.diagnoses import DiagnosesPane
from loaderdoc.tui.widgets.job import JobPane
from loaderdoc.tui.widgets.machine import MachinePane
from loaderdoc.tui.widgets.probe import ProbePane
from loaderdoc.tui.widgets.run import RunPane
from loaderdoc.tui.widgets.settings_editor import SettingsPane
from loaderdoc.tui.widgets.status import StatusBar
from loaderdoc.tui.widgets.tradeoffs import TradeoffsPane
from loaderdoc.tui.widgets.tune import TunePane
from loaderdoc.watching.report import WatchReport

VIEWS: dict[str, tuple[str, type[Widget]]] = {
    "machine": ("1 Machine", MachinePane),
    "probe": ("2 Probe", ProbePane),
    "diagnoses": ("3 Diagnoses", DiagnosesPane),
    "tradeoffs": ("4 Trade-offs", TradeoffsPane),
    "settings": ("5 Settings", SettingsPane),
}
# the view of a report opened with --report FILE, by the report's type: (tab, title, what it is)
REPORT_VIEWS: dict[type, tuple[str, str, type[Widget], str]] = {
    WatchReport: ("run", "6 Run", RunPane, "The watched run {path}: wait vs step (6)"),
    JobReport: ("job", "6 Job", JobPane, "The job report {path}: one column per node (6)"),
    TuneRun: ("tune", "6 Tune", TunePane, "The tune report {path}: its trials and pick (6)"),
}
Opened = WatchReport | JobReport | TuneRun


def report_view(report: Opened | None) -> tuple[str, str, type[Widget], str] | None:
    """(tab, title, view, description) of an opened report's view; None without one."""
    return None if report is None else REPORT_VIEWS[type(report)]


class MainScreen(Screen):
    def __init__(self, report: Opened | None = None) -> None:
        super().__init__()
        self._built = False  # this screen's widgets (the tabs) exist
        self._views: dict[str, Widget] = {}  # views whose on_mount has run: safe to query and refresh
        self._mounting: set[str] = set()  # views mounted or being mounted
        self._wanted: str | None = None  # the tab asked for, switched to and focused once its view is mounted
        self._shown: dict[str, asyncio.Future[None]] = {}
        self._view_mounts: list[Awaitable[None]] = []
        self._built_event = asyncio.Event()
        self._settling = False  # the app is stopping: mount no more views
        self._latest: dict[type[Message], Message] = {}  # the latest message of each kind the app gave
        self._report = report
        self._report_tab: str | None = None
        self.views: dict[str, tuple[str, type[Widget]]] = dict(VIEWS)
        self.initial = "machine"
        opened = report_view(report)
        if opened is not None:  # the report asked for comes first
            tab, title, view, _ = opened
            self.views[tab] = (title, view)
            self.initial = self._report_tab = tab

    def _make_view(self, tab: str) -> Widget:
        """The view of ``tab``, given what it draws when it is built (its report, the workload
        form's values, the settings form's values)."""
        view = self.views[tab][1]
        built_with = getattr(view, "BUILT_WITH", None)
        given = self._report if tab == self._report_tab else None if built_with is None else self._latest[built_with]
        return view(given, id=f"{tab}-pane")  # type: ignore[call-arg]  (a View)

    def compose(self) -> ComposeResult:
        yield Header(icon="")
        yield StatusBar(id="status")
        with TabbedContent(initial=self.initial, id="tabs"):
            for tab, (title, _) in self.views.items():
                with TabPane(title, id=tab):
                    if tab == self.initial:
                        self._mounting.add(tab)
                        yield self._make_view(tab)
        yield Footer()

    @property
    def probe_pane(self) -> ProbePane | None:
        pane = self._views.get("probe")
        return pane if isinstance(pane, ProbePane) else None

    def on_mount(self) -> None:
        self._built = True
        self._built_event.set()
        for bar in self.query(StatusBar):
            self._give(bar)
        self.refresh_bindings()
        if self._wanted is not None:
            self._show_wanted()
        elif self.initial in ("job", "tune"):  # its table takes the arrow keys at once: they scroll a wide job
            self.show_tab(self.initial)
        # the hidden views mount after the first paint: the first view comes first
        self.call_after_refresh(self._mount_views)

    def _mount_views(self) -> None:
        for tab in self.views:
            self._mount_view(tab)

    def _mount_view(self, tab: str) -> None:
        if tab in self._mounting or not self._built or self._settling:
            return
        self._mounting.add(tab)
        self._view_mounts.append(self.query_one(f"TabPane#{tab}", TabPane).mount(self._make_view(tab)))

    async def settle(self) -> None:
        """Mount no more views, and wait until this screen and the views being mounted are
        built: the app calls this before it stops."""
        self._settling = True
        await self._built_event.wait()
        await asyncio.gather(*self._view_mounts)
        for tab in list(self._shown):  # a view that will not be mounted now: nobody waits for it
            self._done(tab)

    def view_mounted(self, view: Widget) -> None:
        """Called by each view at the end of its on_mount: it draws the latest state, and is shown
        and focused if it was asked for."""
        self._give(view)
        tab = (view.id or "").removesuffix("-pane")
        self._views[tab] = view
        if self._wanted == tab and self._built:
            self._show_wanted()

    def show(self, *messages: Message) -> None:
        """Keep ``messages`` as the latest of their kinds and give them to the status bar and the
        views mounted (a view mounted later is given the latest then)."""
        for message in messages:
            self._latest[type(message)] = message
        # a view whose on_mount ran draws them now, even before this screen's own on_mount: with
        # Python 3.12's eager tasks (textual uses them there) the first view mounts before its screen
        for widget in list(self._views.values()):
            self._give(widget, messages)
        if not self._built:
            return  # on_mount gives the status bar the latest
        for widget in self.query(StatusBar):  # no bar while the screen is torn down
            self._give(widget, messages)
        self.refresh_bindings()

    def _give(self, widget: Widget, messages: tuple[Message, ...] | None = None) -> None:
        """Hand ``widget`` each message it has a handler for (textual's ``on_<message>`` name), now."""
        for message in self._latest.values() if messages is None else messages:
            handler = getattr(widget, message.handler_name, None)
            if handler is not None:
                handler(message)

    def show_tab(self, tab: str) -> asyncio.Future[None]:
        """Switch to ``tab`` and focus its main widget, now or as soon as its view is mounted.

        The returned future is done once that happened (or a later call asked for another tab).
        """
        if self._wanted is not None and self._wanted != tab:
            self._done(self._wanted)  # superseded: nobody should wait for it any more
        self._wanted = tab
        future = self._shown.get(tab)
        if future is None or future.done():
            future = self._shown[tab] = asyncio.get_running_loop().create_future()
        if self._built:
            self._show_wanted()
        return future

    def _show_wanted(self) -> None:
        tab = self._wanted
        assert tab is not None
        self.query_one(TabbedContent).active = tab
        view = self._views.get(tab)
        if view is None:
            self._mount_view(tab)  # view_mounted() comes back here
            if self._settling:
                self._done(tab)
            return
        self._wanted = None
        view.focus_main()
        self._done(tab)

    def _done(self, tab: str) -> None:
        future = self._shown.pop(tab, None)
        if future is not None and not future.done():
            future.set_result(None)
