"""Machine view: every fact a DataLoader depends on, with where it was read from."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from loaderdoc.tui import model


class MachinePane(Vertical):
    def compose(self) -> ComposeResult:
        yield Static("", id="machine-note", classes="pane-note")
        table = DataTable(id="machine-table", cursor_type="row", zebra_stripes=True)
        table.add_columns("", "fact", "value", "read from")
        yield table

    def on_mount(self) -> None:
        self.refresh_state()

    def focus_main(self) -> None:
        self.query_one(DataTable).focus()

    def refresh_state(self) -> None:
        app = self.app
        note = self.query_one("#machine-note", Static)
        table = self.query_one(DataTable)
        if app.facts is None:
            note.update(app.facts_error or "Reading machine facts...")
            table.clear()
            return
        pending = app.pending_facts
        label = app.facts.label or "this machine"
        note.update(
            f"{label}" + ("  (still reading: " + ", ".join(sorted(pending)).replace("_", " ") + ")" if pending else "")
        )
        rows = model.machine_rows(app.facts, pending=pending)
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
