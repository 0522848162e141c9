"""Trade-offs view: pick a knob, see what changing it costs and buys on this machine."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from loaderdoc.tui import model


class TradeoffsPane(Vertical):
    def compose(self) -> ComposeResult:
        yield Static("", id="tradeoffs-note", classes="pane-note")
        with Horizontal():
            yield OptionList(*[Option(k, id=k) for k in model.KNOBS], id="knobs")
            with VerticalScroll(id="knob-scroll"):
                yield Static("", id="knob-here")
                yield Static("", id="knob-about")

    def focus_main(self) -> None:
        self.query_one(OptionList).focus()

    def on_mount(self) -> None:
        self.query_one(OptionList).highlighted = 0

    def refresh_state(self) -> None:
        app = self.app
        note = self.query_one("#tradeoffs-note", Static)
        if app.facts is None:
            note.update("Waiting for machine facts...")
        elif app.tradeoffs_error:
            note.update(Text(f"Trade-offs unavailable: {app.tradeoffs_error}", style="bold red"))
        else:
            basis = "machine facts and the probe's measurements" if app.report else "machine facts (run a probe for measured numbers)"
            note.update(f"What each knob costs and buys around the chosen settings, from {basis}.")
        self._show()

    def _knob(self) -> str:
        idx = self.query_one(OptionList).highlighted
        return model.KNOBS[idx] if idx is not None else model.KNOBS[0]

    def _show(self) -> None:
        knob = self._knob()
        app = self.app
        here = Text()
        here.append(f"{knob} = {getattr(app.settings, knob)!r}  on this machine\n", style="bold underline")
        entry = _tradeoff_for(app.tradeoffs, knob)
        if app.tradeoffs_error:
            here.append("not available: " + app.tradeoffs_error + "\n")
        elif entry is None:
            here.append("no trade-off computed for this knob\n" if app.facts is not None else "waiting for machine facts\n")
        else:
            for key, body in model.describe(entry, skip=("knob", "name")):
                here.append(f"{key}: ", style="bold")
                here.append(f"{body}\n")
        self.query_one("#knob-here", Static).update(here)
        about = Text("\n")
        about.append(f"About {knob}\n", style="bold underline")
        try:
            explanation = _knob_explanation(knob)
        except model.Unavailable as exc:
            explanation = [("", f"not available: {exc}")]
        for key, body in explanation:
            if key:
                about.append(f"{key}: ", style="bold")
            about.append(f"{body}\n")
        self.query_one("#knob-about", Static).update(about)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show()


def _tradeoff_for(tradeoffs: list[Any], knob: str) -> Any:
    for t in tradeoffs:
        name = getattr(t, "knob", None) or getattr(t, "name", None)
        if name == knob:
            return t
    return None


def _knob_explanation(knob: str) -> list[tuple[str, str]]:
    knobs = model.core("loaderdoc.advice.knobs", "KNOBS")
    entry = knobs.get(knob) if isinstance(knobs, dict) else None
    if entry is None:
        return [("", "no explanation recorded for this knob")]
    return model.describe(entry, skip=("knob", "name"))
