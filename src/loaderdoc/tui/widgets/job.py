"""Job view: a job report (`loaderdoc --report job.json`, from `check --distributed --json`): the
job table as `check --distributed` prints it, one column per node and one row per fact, with the
odd node's values marked. The table keeps the facts' column while it scrolls sideways, so a job of
many nodes reads at 80 columns."""

from __future__ import annotations

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.widgets import DataTable, Static

from loaderdoc.cluster.job_report import JobReport
from loaderdoc.tui import model
from loaderdoc.tui.widgets.diagnoses import SEVERITY_STYLE
from loaderdoc.tui.widgets.view import View

# fixed colours, as in run.py: readable on the dark and the light theme; the mark says it without colour
ODD = Style(color=Color.from_rgb(255, 255, 255), bgcolor=Color.from_rgb(170, 40, 40), bold=True)
ODD_NODE = Style(color=Color.from_rgb(220, 50, 47), bold=True)


class JobPane(View, Vertical):
    MAIN = "#job-table"
    given: JobReport | None  # the job report opened with --report; it does not change while the app runs

    def compose(self) -> ComposeResult:
        job = self.given
        yield Static("", id="job-head")
        yield Static("", id="job-note", classes="pane-note")
        table: DataTable = DataTable(id="job-table", cursor_type="cell", zebra_stripes=True, fixed_columns=1)
        yield table
        if job is None:
            return
        grid = job.table
        odd_columns = {i for _, i in grid.odd}
        table.add_column("", key="fact")
        for i, name in enumerate(grid.columns):
            marked = i in odd_columns
            table.add_column(Text(f"{name} {model.ODD_MARK}" if marked else name, style=ODD_NODE if marked else "bold"),
                             key=f"col-{i}")
        for key, label, cells in grid.rows:
            row = [Text(label, style="bold")]
            for i, cell in enumerate(cells):
                if (key, i) in grid.odd:
                    row.append(Text(f"{cell} {model.ODD_MARK}", style=ODD))
                elif key == "status":
                    row.append(Text(cell, style=SEVERITY_STYLE.get(cell, "")))
                else:
                    row.append(Text(cell))
            table.add_row(*row, key=key)
        table.cursor_coordinate = table.cursor_coordinate._replace(column=1 if grid.columns else 0)  # on a node

    def on_mount(self) -> None:
        job = self.given
        head = self.query_one("#job-head", Static)
        note = self.query_one("#job-note", Static)
        if job is None:
            head.update("No job report open. Open one with 'loaderdoc --report job.json' (write it with "
                        "'torchrun ... -m loaderdoc check --distributed --json > job.json').")
            note.display = False
        else:
            text = Text()
            text.append("Job  ", style="bold")
            text.append(model.job_summary(job), style=SEVERITY_STYLE.get(job.status, "") if job.status != "ok" else "")
            head.update(text)
            note.update(model.job_note(job))
