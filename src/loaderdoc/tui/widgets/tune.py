"""Tune view: a tune report (`loaderdoc --report tune.json`, from `loaderdoc tune --report FILE`):
the trials as `loaderdoc tune` prints them, one row each (a failed trial shows its status and
reason), the highlighted trial in full under the table, then the pick, its reason, the gain over
the script's own settings and the notes."""

from __future__ import annotations

import shlex

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widgets import DataTable, Static

from loaderdoc.base.units import fmt_bytes, fmt_cpus, fmt_share
from loaderdoc.reports import TuneRun
from loaderdoc.text.tune import busy_text, noise_text
from loaderdoc.tui.widgets.view import View
from loaderdoc.tuning.result import OK, Pick, Trial, TuneReport

# fixed colours, as in run.py and job.py: readable on the dark and the light theme; the mark says it without colour
PICKED = Style(color=Color.from_rgb(40, 160, 60), bold=True)
NOT_MEASURED = Style(color=Color.from_rgb(220, 50, 47), bold=True)
PICK_MARK = "✔"
# as `loaderdoc tune` prints them: workers ("4p": persistent_workers=True) and prefetch depth, then the measures
COLUMNS = ("trial", "workers", "prefetch", "steps/s", "predicted", "wait", "step ms", "workers mem", "status / purpose")
NUMBERS = range(1, 8)  # the columns right-aligned
MEASURES = range(3, 8)  # blank ("-") for a trial that did not measure


# ---- the text (no widgets: the tests read it as it is) ------------------------------------
def _num(x: float | None, spec: str = ".1f") -> str:
    return "-" if x is None else format(x, spec)


def tune_head(run: TuneRun) -> str:
    """One line: the command, the training loader and the CPUs per rank."""
    report = run.report
    parts = [shlex.join(report.command) if report.command else "(no command recorded)"]
    loader = report.loader or {}
    if loader:
        where = report.loader_site or loader.get("role") or "loader"
        asked = loader.get("asked") or loader.get("settings") or {}
        batch = f", batch_size={asked['batch_size']}" if asked.get("batch_size") is not None else ""
        parts.append(f"loader {where} ({loader.get('class') or 'DataLoader'}{batch})")
    if report.cpu_budget is not None:
        parts.append(f"{fmt_cpus(report.cpu_budget)} CPUs per rank")
    return "; ".join(parts)


def status_text(trial: Trial) -> str:
    """The last column: the purpose of a measured trial, the status and reason of one that was not."""
    if trial.ok and trial.status == OK:
        return trial.purpose
    code = f" (exit code {trial.exit_code})" if trial.exit_code is not None else ""
    reason = trial.reason or trial.purpose
    return f"{trial.status}{code}: {reason}" if reason else f"{trial.status}{code}"


def trial_cells(trial: Trial, pick: Pick | None) -> list[Text]:
    picked = pick is not None and pick.trial == trial.number
    style = PICKED if picked else ""
    number = Text(f"{trial.number} {PICK_MARK}" if picked else str(trial.number), style=style)
    settings = [Text(cell, style=style, justify="right") for cell in trial.columns()]
    if not trial.ok:  # its status where its rate would be (seen at 80 columns), in full in the last column
        blank = [Text("-", style="dim", justify="right") for _ in MEASURES[1:]]
        return [number, *settings, Text(trial.status, style=NOT_MEASURED, justify="right"), *blank,
                Text(status_text(trial), style=NOT_MEASURED)]
    return [
        number,
        *settings,
        Text(_num(trial.steps_per_s), style="bold" if picked else "", justify="right"),
        Text(_num(trial.predicted_per_s), justify="right"),
        Text(fmt_share(trial.wait_share), justify="right"),
        Text(_num(trial.step_ms), justify="right"),
        Text(fmt_bytes(trial.workers_pss_bytes) if trial.workers_pss_bytes else "-", justify="right"),
        Text(status_text(trial), style="" if trial.status == OK else "yellow"),
    ]


def trial_detail(trial: Trial) -> str:
    """The highlighted trial in full: why it ran (or why it did not measure), then its window."""
    lines = [f"Trial {trial.number} ({trial.settings.text()}): {status_text(trial) or trial.status}"]
    if trial.ok:
        settled = "settled" if trial.settled else "not settled"
        first = f", first batch after {trial.first_batch_s:.1f} s" if trial.first_batch_s is not None else ""
        lines.append(f"{trial.window_steps} batches in {trial.window_s:.1f} s ({settled}){first}; "
                     f"{trial.duration_s:.0f} s in all")
    elif trial.duration_s:
        lines.append(f"{trial.duration_s:.0f} s in all")
    return "\n".join(lines)


def pick_lines(report: TuneReport) -> list[tuple[str, str]]:
    """(label, text) lines under the table: the pick and why, the gain, what was not picked, the notes."""
    pick = report.pick
    lines: list[tuple[str, str]] = [("Busy", busy_text(report).replace("below", "here"))] if report.busy else []
    if pick is None:
        lines.append(("No pick", report.no_pick_reason))
    else:
        lines.append(("Pick", pick.headline()))
        if pick.gain is not None:
            lines.append(("Gain", f"{pick.gain:.2f}x the steps/s of your settings ({pick.verdict})"))
        lines.append(("Noise", noise_text(report)))
        lines.append(("Why", pick.reason))
        lines += [("Not", f"{key}: {why}") for key, why in pick.excluded.items()]
    if any(t.settings.persistent for t in report.trials):
        lines.append(("Note", "p after the workers: persistent_workers=True"))
    lines += [("Note", note) for note in report.notes]
    stopped = report.stopped_text
    lines.append(("Search", f"{len(report.trials)} trial{'' if len(report.trials) == 1 else 's'} in "
                            f"{report.elapsed_s:.0f} s" + (f"; {stopped}" if stopped else "")
                  + f" (exit code {report.exit_code})"))
    return lines


# ---- the view -----------------------------------------------------------------------------
class TunePane(View, Vertical):
    MAIN = "#tune-table"
    given: TuneRun | None  # the tune report opened with --report; it does not change while the app runs

    def compose(self) -> ComposeResult:
        run = self.given
        yield Static("", id="tune-head")
        table: DataTable = DataTable(id="tune-table", cursor_type="row", zebra_stripes=True, fixed_columns=1)
        yield table
        yield Static("", id="tune-trial")
        with VerticalScroll(id="tune-scroll"):
            yield Static("", id="tune-pick")
        if run is None:
            return
        for i, name in enumerate(COLUMNS):
            table.add_column(Text(name, justify="right") if i in NUMBERS else name, key=name)
        for trial in run.report.trials:
            table.add_row(*trial_cells(trial, run.report.pick), key=str(trial.number))

    def on_mount(self) -> None:
        run = self.given
        head = self.query_one("#tune-head", Static)
        if run is None:
            head.update("No tune report open. Open one with 'loaderdoc --report tune.json' (write it with "
                        "'loaderdoc tune --report tune.json -- python train.py').")
            for wid in ("#tune-table", "#tune-trial", "#tune-scroll"):
                self.query_one(wid).display = False
        else:
            text = Text()
            text.append("Tune  ", style="bold")
            text.append(tune_head(run))
            head.update(text)
            self.query_one("#tune-pick", Static).update(self._pick_text(run.report))
            self._show_trial(0)

    @staticmethod
    def _pick_text(report: TuneReport) -> Text:
        text = Text()
        lines = pick_lines(report)
        for n, (label, body) in enumerate(lines):
            style = "bold" if label not in ("No pick",) else NOT_MEASURED
            text.append(f"{label:<8}", style=style)
            text.append(body + ("\n" if n < len(lines) - 1 else ""))
        return text

    def _show_trial(self, row: int) -> None:
        run = self.given
        detail = self.query_one("#tune-trial", Static)
        trials = run.report.trials if run is not None else []
        if not trials:
            detail.update("No trial ran.")
            return
        detail.update(trial_detail(trials[max(0, min(row, len(trials) - 1))]))

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        self._show_trial(event.cursor_row)
