"""Probe view: choose the workload, run the live probe, watch results arrive, stop it."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, DataTable, Input, Label, ProgressBar, Select, Static

from loaderdoc.probing.result import ConfigResult
from loaderdoc.session import ProbeRequest, parse_workload_field, preset_names
from loaderdoc.tui import model
from loaderdoc.tui.widgets.chart import SeriesPlot


class ProbePane(VerticalScroll):
    def compose(self) -> ComposeResult:
        app = self.app
        w: ProbeRequest = app.session.workload
        names = preset_names()
        options = [(name, name) for name, _ in names]
        self._descriptions = dict(names)
        if app.session.dataset_arg:
            options.insert(0, (f"your dataset: {app.session.dataset_arg}", model.DATASET_CHOICE))
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
        w = self.app.session.workload
        if w.dataset:
            return f"your Dataset from --dataset {w.dataset} (imported when the probe starts)"
        return self._descriptions.get(w.preset or "", "")

    def on_mount(self) -> None:
        self.refresh_state()
        self.screen.view_mounted(self)  # the main screen shows and focuses it if it was asked for

    def focus_main(self) -> None:
        self.screen.set_focus(self.query_one("#workload", Select))

    # ---- state -> widgets ------------------------------------------------------------------
    def refresh_state(self) -> None:
        app = self.app
        running = app.session.probe_running
        self.query_one("#run", Button).disabled = running
        self.query_one("#stop", Button).disabled = not running or app.session.probe_state == "stopping"
        for wid in ("#workload", "#batch_size", "#step_ms", "#budget_s"):
            self.query_one(wid).disabled = running
        self.show_progress()
        results = app.session.report.results if app.session.report is not None else app.session.live_results
        table = self.query_one("#results", DataTable)
        if table.row_count != len(results):
            table.clear()
            for r in results:
                table.add_row(*model.result_row(r))
        self._redraw_chart(results)
        summary = self.query_one("#probe-summary", Static)
        adopt = self.query_one("#adopt", Button)
        if app.session.probe_error:
            summary.update(Text(f"Probe failed: {app.session.probe_error}", style="bold red"))
        elif app.session.report is not None:
            summary.update("\n".join(model.report_summary(app.session.report, complete=app.session.report_complete)))
        elif not results and not running:
            summary.update("No probe run yet: choose a workload and press ctrl+r. "
                           "The probe runs real DataLoaders on this machine.")
        else:
            summary.update("")
        adopt.disabled = not (app.session.report is not None and app.session.report_complete
                              and app.session.recommendation is not None
                              and app.session.recommendation.settings != app.session.settings)

    def show_progress(self) -> None:
        app = self.app
        fraction, text = app.session.probe_progress
        bar = self.query_one("#progress", ProgressBar)
        bar.update(progress=max(0.0, min(1.0, fraction)))
        state = {"idle": "idle", "running": "running", "stopping": "stopping",
                 "done": "done", "cancelled": "cancelled", "failed": "failed"}[app.session.probe_state]
        self.query_one("#progress-text", Static).update(f"{state}: {text}" if text and text != state else state)

    def add_result(self, result: ConfigResult) -> None:
        self.query_one("#results", DataTable).add_row(*model.result_row(result))
        self._redraw_chart(self.app.session.live_results)

    def _redraw_chart(self, results: list[ConfigResult]) -> None:
        series = model.chart_series(results)
        self.query_one("#chart-throughput", SeriesPlot).show(series)
        self.query_one("#chart-starvation", SeriesPlot).show(series)

    # ---- widgets -> state ------------------------------------------------------------------
    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id != "workload" or event.value is Select.NULL:
            return
        w = self.app.session.workload
        if event.value == model.DATASET_CHOICE:
            w.dataset = self.app.session.dataset_arg
        elif str(event.value) != w.preset or w.dataset:  # the Select also reports its initial value
            batch = w.batch_size
            w.choose_preset(str(event.value))
            for key in ("batch_size", "step_ms"):  # the preset's own, unless the user typed one
                field = self.query_one(f"#{key}", Input)
                if field.value != f"{getattr(w, key):g}":
                    field.value = f"{getattr(w, key):g}"
            if w.batch_size != batch:
                self.app.workload_changed()  # the recommendation is sized for the batch
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
        if error is None and getattr(self.app.session.workload, key) != value:
            self.app.session.set_workload_field(key, value)
            if key == "batch_size":
                self.app.refresh_views()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "run":
            self.app.action_run_probe()
        elif event.button.id == "stop":
            self.app.action_stop_probe()
        elif event.button.id == "adopt":
            self.app.adopt_recommendation()
