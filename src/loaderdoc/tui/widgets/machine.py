"""Machine view: every fact a DataLoader depends on, with where it was read from."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from loaderdoc.tui import model
from loaderdoc.tui.messages import MachineShown
from loaderdoc.tui.widgets.view import View


class MachinePane(View, Vertical):
    MAIN = "#machine-table"

    def compose(self) -> ComposeResult:
        yield Static("", id="machine-note", classes="pane-note")
        table = DataTable(id="machine-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("", "fact", "value", "read from")
        yield table
        yield Static("", id="machine-source")

    def on_machine_shown(self, message: MachineShown) -> None:
        note = self.query_one("#machine-note", Static)
        table = self.query_one(DataTable)
        if message.facts is None:
            note.update(message.error or "Reading machine facts...")
            table.clear()
            return
        pending = message.pending
        label = message.facts.label or "this machine"
        note.update(
            f"{label}" + ("  (still reading: " + ", ".join(sorted(pending)).replace("_", " ") + ")" if pending else "")
        )
        rows = model.machine_rows(message.facts, pending=pending)
        self._rows = rows
        cursor = table.cursor_row
        table.clear()
        last = None
        for row in rows:
            section = Text(row.section if row.section != last else "", style="bold")
            last = row.section
            value = Text(row.value)
            if row.value.startswith("unknown") or row.note == "pending":
                value.stylize("italic dim")
            if row.label == "budget":
                value.stylize("bold")
            table.add_row(section, row.label, value, Text(row.source, style="dim"))
        if 0 <= cursor < len(rows):
            table.move_cursor(row=cursor)
        self._show_source(table.cursor_row)

    def _show_source(self, index: int) -> None:
        rows = getattr(self, "_rows", [])
        line = self.query_one("#machine-source", Static)
        if 0 <= index < len(rows):
            row = rows[index]
            line.update(Text.assemble((f"{row.section} / {row.label}: ", "bold"), row.value,
                                      ("  read from: ", "bold"), row.source or "-"))
        else:
            line.update("")

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_source(event.cursor_row)
