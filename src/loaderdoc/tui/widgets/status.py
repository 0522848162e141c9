"""Two lines above the tabs: the machine at a glance, and the settings chosen so far."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from loaderdoc.tui import model


class StatusBar(Static):
    def refresh_state(self) -> None:
        app = self.app
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Machine ", style="bold")
        if app.session.facts is None and app.session.facts_error:
            text.append(app.session.facts_error, style="bold red")
        else:
            text.append(model.machine_status(app.session.facts))
        text.append("\n")
        text.append("Chosen  ", style="bold")
        text.append(f"[{app.session.settings_origin}] ", style="italic")
        text.append(model.settings_line(app.session.settings))
        self.update(text)
        crit = sum(1 for f in app.session.findings if f.severity == "critical")
        warn = sum(1 for f in app.session.findings if f.severity == "warning")
        self.set_class(crit > 0, "-critical")
        self.set_class(crit == 0 and warn > 0, "-warning")
