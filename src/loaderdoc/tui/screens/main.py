"""The main screen: a status bar, one tab per view, and the footer with the key bindings.

A key can arrive at any moment after the app starts: before this screen is built, or before
the view it asks for is mounted (the hidden views mount after the first paint, so the machine
view comes first). :meth:`MainScreen.show_tab` therefore never touches a widget that is not
there yet: it records the tab asked for, mounts that view at once if it is not mounting
already, and switches to it and focuses it as soon as it is mounted. It returns a future
that is done then; a key binding's action returns it, and textual finishes handling the key
only when it is done, so the next key (or a test's next step) sees the view.

Likewise the app is never torn down in the middle of building a view (:meth:`settle`): textual
does not wait for widgets still being mounted, whose mount handlers then fail on children that
were never started.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, Header, TabbedContent, TabPane

from loaderdoc.tui.widgets.diagnoses import DiagnosesPane
from loaderdoc.tui.widgets.job import JobPane
from loaderdoc.tui.widgets.machine import MachinePane
from loaderdoc.tui.widgets.probe import ProbePane
from loaderdoc.tui.widgets.run import RunPane
from loaderdoc.tui.widgets.settings_editor import SettingsPane
from loaderdoc.tui.widgets.status import StatusBar
from loaderdoc.tui.widgets.tradeoffs import TradeoffsPane
from loaderdoc.tui.widgets.tune import TunePane

VIEWS: dict[str, tuple[str, type[Widget]]] = {
    "machine": ("1 Machine", MachinePane),
    "probe": ("2 Probe", ProbePane),
    "diagnoses": ("3 Diagnoses", DiagnosesPane),
    "tradeoffs": ("4 Trade-offs", TradeoffsPane),
    "settings": ("5 Settings", SettingsPane),
}
RUN_VIEW = ("6 Run", RunPane)  # only with a watched run's report (`loaderdoc --report FILE`)
JOB_VIEW = ("6 Job", JobPane)  # only with a job report (`loaderdoc --report job.json`)
TUNE_VIEW = ("6 Tune", TunePane)  # only with a tune report (`loaderdoc --report tune.json`)


class MainScreen(Screen):
    def __init__(self) -> None:
        super().__init__()
        self._built = False  # this screen's widgets (the tabs) exist
        self._views: dict[str, Widget] = {}  # views whose on_mount has run: safe to query and refresh
        self._mounting: set[str] = set()  # views mounted or being mounted
        self._wanted: str | None = None  # the tab asked for, switched to and focused once its view is mounted
        self._shown: dict[str, asyncio.Future[None]] = {}
        self._view_mounts: list[Awaitable[None]] = []
        self._built_event = asyncio.Event()
        self._settling = False  # the app is stopping: mount no more views
        self.views = dict(VIEWS)
        self.initial = "machine"

    def compose(self) -> ComposeResult:
        if self.app.session.watch_run is not None:  # the report asked for comes first
            self.views["run"] = RUN_VIEW
            self.initial = "run"
        elif self.app.session.job_run is not None:
            self.views["job"] = JOB_VIEW
            self.initial = "job"
        elif self.app.session.tune_run is not None:
            self.views["tune"] = TUNE_VIEW
            self.initial = "tune"
        yield Header(icon="")
        yield StatusBar(id="status")
        with TabbedContent(initial=self.initial, id="tabs"):
            for tab, (title, view) in self.views.items():
                with TabPane(title, id=tab):
                    if tab == self.initial:
                        self._mounting.add(tab)
                        yield view(id=f"{tab}-pane")
        yield Footer()

    @property
    def probe_pane(self) -> ProbePane | None:
        pane = self._views.get("probe")
        return pane if isinstance(pane, ProbePane) else None

    def on_mount(self) -> None:
        self._built = True
        self._built_event.set()
        self.refresh_state()
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
        self._view_mounts.append(self.query_one(f"TabPane#{tab}", TabPane).mount(self.views[tab][1](id=f"{tab}-pane")))

    async def settle(self) -> None:
        """Mount no more views, and wait until this screen and the views being mounted are
        built: the app calls this before it stops."""
        self._settling = True
        await self._built_event.wait()
        await asyncio.gather(*self._view_mounts)
        for tab in list(self._shown):  # a view that will not be mounted now: nobody waits for it
            self._done(tab)

    def view_mounted(self, view: Widget) -> None:
        """Called by each view at the end of its on_mount (it has drawn the app's state)."""
        tab = (view.id or "").removesuffix("-pane")
        self._views[tab] = view
        if self._wanted == tab and self._built:
            self._show_wanted()

    def refresh_state(self) -> None:
        if not self._built:
            return  # on_mount draws it
        for bar in self.query(StatusBar):  # none while the screen is being torn down
            bar.refresh_state()
        for view in self._views.values():  # a hidden view may not be mounted yet: it draws itself then
            view.refresh_state()
        self.refresh_bindings()

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
