"""Two lines above the tabs: the machine at a glance, and the settings chosen so far."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static

from loaderdoc.tui import model
from loaderdoc.tui.messages import AdviceShown, MachineShown


class StatusBar(Static):
    """Drawn from the latest machine and advice the app gave (:meth:`MainScreen.show`)."""

    _machine: MachineShown | None = None
    _advice: AdviceShown | None = None

    def on_machine_shown(self, message: MachineShown) -> None:
        self._machine = message
        self._draw()

    def on_advice_shown(self, message: AdviceShown) -> None:
        self._advice = message
        self._draw()

    def _draw(self) -> None:
        machine, advice = self._machine, self._advice
        if machine is None or advice is None:
            return
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append("Machine ", style="bold")
        if machine.facts is None and machine.error:
            text.append(machine.error, style="bold red")
        else:
            text.append(model.machine_status(machine.facts))
        text.append("\n")
        text.append("Chosen  ", style="bold")
        text.append(f"[{advice.origin}] ", style="italic")
        text.append(model.settings_line(advice.settings))
        self.update(text)
        crit, warn = model.severity_counts(advice.findings)
        self.set_class(crit > 0, "-critical")
        self.set_class(crit == 0 and warn > 0, "-warning")
