"""Probe view: choose the workload, run the live probe, watch results arrive, stop it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Select, Static

from loaderdoc.probing.result import ConfigResult
from loaderdoc.session import parse_workload_field, preset_names
from loaderdoc.tui import model
from loaderdoc.tui.messages import ProbeShown
from loaderdoc.tui.widgets.chart import SeriesPlot
from loaderdoc.tui.widgets.view import View


class ProbePane(View, VerticalScroll):
    MAIN = "#workload"
    BUILT_WITH = ProbeShown

    _results: tuple[ConfigResult, ...] | None = None  # those in the table and the charts

    def compose(self) -> ComposeResult:
        probe: ProbeShown = self.given
        self._workload = probe.workload  # the form's values; the app says what it is after each choice
        self._dataset_arg = probe.dataset_arg
        w = self._workload
        names = preset_names()
        options = [(name, name) for name, _ in names]
        self._descriptions = dict(names)
        if self._dataset_arg:
            options.insert(0, (f"your dataset: {self._dataset_arg}", model.DATASET_CHOICE))
        value = model.DATASET_CHOICE if w.dataset else (w.preset if w.preset in dict(names) else Select.NULL)
        with Horizontal(classes="form-row"):
            yield Label("Workload", classes="form-label")
            yield Select(options, value=value, allow_blank=not options, compact=True, id="workload",
                         prompt="no workload available")
            yield Button("Run (^r)", id="run", variant="primary", compact=True)
            yield Button("Stop (Esc)", id="stop", variant="error", compact=True, disabled=True)
        with Horizontal(classes="form-row"):
            yield Label("batch size", classes="form-label")
            yield Input(str(w.batch_size), id="batch_size", compact=True, classes="num")
            yield Label("step ms", classes="form-label-short")
            yield Input(f"{w.step_ms:g}", id="step_ms", compact=True, classes="num")
            yield Label("budget s", classes="form-label-short")
            yield Input(f"{w.budget_s:g}", id="budget_s", compact=True, classes="num")
        yield Static(self._describe(), id="workload-desc")
        err = Static("", id="workload-error", classes="field-error")
        err.display = False
        yield err
        with Horizontal(classes="form-row", id="progress-row"):
            yield ProgressBar(total=1.0, show_eta=False, id="progress")
            yield Static("", id="progress-text")
        with Horizontal(id="charts"):
            yield SeriesPlot("throughput", "batches/s", id="chart-throughput")
            yield SeriesPlot("starvation", "% of time waiting", percent=True, id="chart-starvation")
        table = DataTable(id="results", cursor_type="row", zebra_stripes=True)
        table.add_columns(*model.RESULT_COLUMNS)
        yield table
        yield Static("", id="probe-summary")
        yield Button("Use recommendation", id="adopt", compact=True, disabled=True)

    def _describe(self) -> str:
        w = self._workload
        if w.dataset:
            return f"your Dataset from --dataset {w.dataset} (imported when the probe starts)"
        return self._descriptions.get(w.preset or "", "")

    # ---- state -> widgets ------------------------------------------------------------------
    def on_probe_shown(self, probe: ProbeShown) -> None:
        running = probe.running
        self.query_one("#run", Button).disabled = running
        self.query_one("#stop", Button).disabled = not running or probe.state == "stopping"
        for wid in ("#workload", "#batch_size", "#step_ms", "#budget_s"):
            self.query_one(wid).disabled = running
        self._show_progress(probe)
        self._show_results(probe.results)
        summary = self.query_one("#probe-summary", Static)
        if probe.error:
            summary.update(Text(f"Probe failed: {probe.error}", style="bold red"))
        elif probe.report is not None:
            summary.update("\n".join(model.report_summary(probe.report, complete=probe.complete, versus=probe.versus)))
        elif not probe.results and not running:
            summary.update("No probe run yet: choose a workload and press ctrl+r. "
                           "The probe runs real DataLoaders on this machine.")
        else:
            summary.update("")
        self.query_one("#adopt", Button).disabled = not probe.can_adopt

    def _show_progress(self, probe: ProbeShown) -> None:
        fraction, text = probe.progress
        self.query_one("#progress", ProgressBar).update(progress=max(0.0, min(1.0, fraction)))
        state = probe.state
        self.query_one("#progress-text", Static).update(f"{state}: {text}" if text and text != state else state)

    def _show_results(self, results: tuple[ConfigResult, ...]) -> None:
        """The table and the charts: a row added as each result arrives, all of them again when
        the results are others (another run, the report's)."""
        shown = self._results
        if shown is not None and _same(results, shown):
            return  # a progress tick
        table = self.query_one("#results", DataTable)
        count = table.row_count
        if shown is not None and count == len(shown) < len(results) and _same(results[:count], shown):
            for r in results[count:]:
                table.add_row(*model.result_row(r))
        elif count != len(results):
            table.clear()
            for r in results:
                table.add_row(*model.result_row(r))
        self._results = results
        series = model.chart_series(results)
        self.query_one("#chart-throughput", SeriesPlot).show(series)
        self.query_one("#chart-starvation", SeriesPlot).show(series)

    # ---- widgets -> state ------------------------------------------------------------------
    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id != "workload" or event.value is Select.NULL:
            return
        before = self._workload
        dataset = event.value == model.DATASET_CHOICE
        w = self._workload = self.app.choose_workload(None if dataset else str(event.value))
        if not dataset and w != before:
            for key in ("batch_size", "step_ms"):  # the preset's own, unless the user typed one
                field = self.query_one(f"#{key}", Input)
                if field.value != f"{getattr(w, key):g}":
                    field.value = f"{getattr(w, key):g}"
        self.query_one("#workload-desc", Static).update(self._describe())

    def on_input_changed(self, event: Input.Changed) -> None:
        key = event.input.id
        if key not in ("batch_size", "step_ms", "budget_s"):
            return
        value, error = parse_workload_field(key, event.value)
        event.input.set_class(error is not None, "-invalid-value")
        err = self.query_one("#workload-error", Static)
        err.update(Text(f"{error} (the probe keeps the last valid value)", style="bold red") if error else "")
        err.display = error is not None
        if error is None:
            self._workload = self.app.set_workload_field(key, value)

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.app.action_run_probe()
        elif event.button.id == "stop":
            self.app.action_stop_probe()
        elif event.button.id == "adopt":
            self.app.adopt_recommendation()


def _same(a: tuple[ConfigResult, ...], b: tuple[ConfigResult, ...]) -> bool:
    """The same results (the same objects: a result's NaN is not equal to itself)."""
    return len(a) == len(b) and all(x is y for x, y in zip(a, b, strict=True))
