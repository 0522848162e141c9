"""Trade-offs view: pick a knob, see what changing it costs and buys on this machine, beside a
plain explanation of the knob."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import DataTable, OptionList, Static
from textual.widgets.option_list import Option

from loaderdoc.advice.knobs import explain
from loaderdoc.tui import model
from loaderdoc.tui.messages import AdviceShown
from loaderdoc.tui.widgets.view import View


def _blocks_text(blocks: list[tuple[str, str]], heading: str | None = None) -> Text:
    text = Text()
    if heading:
        text.append(f"{heading}\n", style="bold underline")
    for key, body in blocks:
        if key:
            text.append(f"{key}:", style="bold")
            text.append("\n" if body.startswith(("- ", "+ ")) else " ")
        text.append(f"{body}\n")
    return text


class TradeoffsPane(View, Vertical):
    MAIN = "#knobs"
    _advice: AdviceShown | None = None

    def compose(self) -> ComposeResult:
        yield Static("", id="tradeoffs-note", classes="pane-note")
        with Horizontal():
            yield OptionList(*[Option(k, id=k) for k in model.KNOBS], id="knobs")
            with VerticalScroll(id="knob-scroll"):
                yield Static("", id="knob-here")
                yield DataTable(id="knob-table", cursor_type="row", zebra_stripes=True, show_cursor=False)
                yield Static("", id="knob-legend")
                yield Static("", id="knob-about")

    def on_mount(self) -> None:
        self.query_one(OptionList).highlighted = 0

    def on_advice_shown(self, advice: AdviceShown) -> None:
        self._advice = advice
        note = self.query_one("#tradeoffs-note", Static)
        if not advice.facts_read:
            note.update("Waiting for machine facts...")
        elif advice.tradeoffs_error:
            note.update(Text(f"Trade-offs unavailable: {advice.tradeoffs_error}", style="bold red"))
        else:
            basis = ("machine facts and the probe's measurements" if advice.measured
                     else "machine facts (run a probe for measured throughput)")
            note.update(f"What each knob costs and buys around the chosen settings, from {basis}.")
        self._show()

    def _knob(self) -> str:
        idx = self.query_one(OptionList).highlighted
        return model.KNOBS[idx] if idx is not None else model.KNOBS[0]

    def _show(self) -> None:
        advice = self._advice
        if advice is None:
            return
        knob = self._knob()
        entry = _tradeoff_for(advice.tradeoffs, knob)
        heading = f"{knob} = {getattr(advice.settings, knob)!r} on this machine"
        if advice.tradeoffs_error:
            here = _blocks_text([("not available", advice.tradeoffs_error)], heading)
        elif entry is None:
            here = _blocks_text([("", "waiting for machine facts" if not advice.facts_read
                                  else "no trade-off computed for this knob")], heading)
        else:
            here = _blocks_text(model.tradeoff_blocks(entry), heading)
        self.query_one("#knob-here", Static).update(here)

        table = self.query_one("#knob-table", DataTable)
        table.clear(columns=True)
        columns, rows = model.tradeoff_table(entry) if entry is not None else ([], [])
        table.display = bool(rows)
        legend = self.query_one("#knob-legend", Static)
        legend.display = bool(rows)
        if rows:
            table.add_columns(*columns)
            for row in rows:
                table.add_row(*row)
            measured = any(r[0][1] == "*" for r in rows)
            legend.update("> chosen value   " + ("* measured by the probe; other rows computed from machine facts"
                                                  if measured else "numbers computed from machine facts"))
        try:
            about = _blocks_text(model.knob_blocks(explain(knob)), f"About {knob}")
        except KeyError:
            about = _blocks_text([("", "no explanation recorded for this knob")], f"About {knob}")
        self.query_one("#knob-about", Static).update(about)

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show()


def _tradeoff_for(tradeoffs: Iterable[Any], knob: str) -> Any:
    for t in tradeoffs:
        if getattr(t, "knob", None) == knob:
            return t
    return None
