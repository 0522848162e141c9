"""Settings editor: every DataLoader knob, validated by torch's rules as you type."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from loaderdoc.tui import model
from loaderdoc.tui.messages import AdviceShown
from loaderdoc.tui.widgets.view import View

HINTS = {
    "batch_size": "samples per batch (empty = None)",
    "shuffle": "reshuffle every epoch (training)",
    "pin_memory": "page-locked batches: faster copies to a GPU",
    "drop_last": "drop the last, incomplete batch",
    "persistent_workers": "keep workers alive between epochs",
    "num_workers": "0 = load in the training process",
    "prefetch_factor": "batches per worker (empty = torch's 2)",
    "timeout": "seconds to wait for a batch (0 = forever)",
    "multiprocessing_context": "how workers start",
    "in_order": "off: ready batches may overtake a slow one",
}


class SettingsPane(View, VerticalScroll):
    MAIN = "#set-num_workers"
    BUILT_WITH = AdviceShown

    def compose(self) -> ComposeResult:
        self._advice: AdviceShown = self.given  # the chosen settings, their origin and sources, the recommendation
        yield Static("", id="settings-note", classes="pane-note")
        self._shown = self._advice.settings
        values = model.settings_form_values(self._advice.settings)
        for key in model.SETTING_KEYS:
            with Horizontal(classes="form-row setting-row", id=f"row-{key}"):
                yield Label(key, classes="setting-label")
                if key in model.BOOL_SETTINGS:
                    # the label says true/false: the box's colour alone is lost under NO_COLOR
                    yield Checkbox(_bool_label(values[key]), values[key], id=f"set-{key}", compact=True)
                elif key == "multiprocessing_context":
                    yield Select([(c, c) for c in model.CONTEXT_CHOICES], value=values[key], allow_blank=False,
                                 compact=True, id=f"set-{key}")
                else:
                    yield Input(values[key], id=f"set-{key}", compact=True, classes="num")
                yield Static(self._source_or_hint(key), id=f"msg-{key}", classes="setting-msg")
        with Horizontal(classes="form-row"):
            yield Button("Use recommendation", id="settings-adopt", compact=True)
            yield Button("Export... (^e)", id="settings-export", variant="primary", compact=True)
        yield Static("", id="settings-why")

    # ---- state -> widgets ------------------------------------------------------------------
    def on_advice_shown(self, advice: AdviceShown) -> None:
        self._advice = advice
        if advice.settings != getattr(self, "_shown", None):
            # the chosen settings changed elsewhere (a fix, the probe, the recommendation)
            self._load(advice.settings)
            self._show_errors({})
        self._note()
        rec = advice.recommendation
        self.query_one("#settings-adopt", Button).disabled = rec is None or rec.settings == advice.settings
        why = Text()
        if rec is not None:
            why.append("Why the recommendation chose its values\n", style="bold underline")
            for key, reason in rec.reasons.items():
                why.append(f"{key}: ", style="bold")
                why.append(f"{reason}\n")
        elif advice.recommend_error:
            why.append(f"No recommendation: {advice.recommend_error}\n", style="italic")
        self.query_one("#settings-why", Static).update(why)

    def _note(self) -> None:
        self.query_one("#settings-note", Static).update(
            Text.assemble(("Chosen settings", "bold"), f" [{self._advice.origin}]. ",
                          "Edits apply as soon as they are valid; space toggles a box."))

    def _load(self, settings) -> None:
        self._shown = settings
        values = model.settings_form_values(settings)
        with self.prevent(Input.Changed, Checkbox.Changed, Select.Changed):
            for key, value in values.items():
                widget = self.query_one(f"#set-{key}")
                widget.value = value
                if isinstance(widget, Checkbox):
                    widget.label = _bool_label(value)

    def _form_values(self) -> dict:
        return {key: self.query_one(f"#set-{key}").value for key in model.SETTING_KEYS}

    def _show_errors(self, errors: dict[str, str]) -> None:
        for key in model.SETTING_KEYS:
            widget = self.query_one(f"#set-{key}")
            msg = self.query_one(f"#msg-{key}", Static)
            widget.set_class(key in errors, "-invalid-value")
            if key in errors:
                msg.update(Text(errors[key], style="bold red"))
                msg.add_class("-error")
            else:
                msg.update(self._source_or_hint(key))
                msg.remove_class("-error")

    def _source_or_hint(self, key: str) -> str:
        """Where a value came from while the config's settings are the chosen ones (the file's key
        and line, or "not set (torch default 0)"), else what the knob does."""
        return self._advice.sources.get(key, HINTS.get(key, ""))

    # ---- widgets -> state ------------------------------------------------------------------
    def _edited(self) -> None:
        settings, errors = model.parse_settings_form(self._form_values())
        if settings == self._shown:
            self._show_errors(errors)
            self._note()
            return  # an event that changed nothing (e.g. a widget announcing its first value)
        if settings is not None:
            self._shown = settings
            self.app.set_settings(settings, "edited")
        self._show_errors(errors)  # after the change: the config's sources hold only for its own values
        if settings is None:
            note = self.query_one("#settings-note", Static)
            note.update(Text.assemble(("Not applied: ", "bold red"),
                                      f"fix the field marked below; the chosen settings stay "
                                      f"{model.settings_line(self._advice.settings)}"))

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id and event.input.id.startswith("set-"):
            event.stop()
            self._edited()

    def on_checkbox_changed(self, event: Checkbox.Changed) -> None:
        event.stop()
        event.checkbox.label = _bool_label(event.value)
        self._edited()

    def on_select_changed(self, event: Select.Changed) -> None:
        event.stop()
        self._edited()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "settings-adopt":
            self.app.adopt_recommendation()
        elif event.button.id == "settings-export":
            self.app.action_export()


def _bool_label(value: bool) -> str:
    return "true" if value else "false"
