"""Diagnoses view: what this machine and the chosen settings show, the evidence, and the fix."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from loaderdoc.tui import model

SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow", "ok": "bold green"}


class DiagnosesPane(Vertical):
    BINDINGS = [Binding("a", "apply_fix", "Apply fix")]

    def compose(self) -> ComposeResult:
        yield Static("", id="diagnoses-note", classes="pane-note")
        with Horizontal():
            yield OptionList(id="findings")
            with Vertical(id="finding-side"):
                with VerticalScroll(id="finding-scroll"):
                    yield Static("", id="finding-detail")
                yield Button("Apply fix (a)", id="apply-fix", variant="primary", compact=True, disabled=True)

    def on_mount(self) -> None:
        self.refresh_state()
        self.screen.view_mounted(self)  # the main screen shows and focuses it if it was asked for

    def focus_main(self) -> None:
        self.screen.set_focus(self.query_one(OptionList))

    def refresh_state(self) -> None:
        app = self.app
        note = self.query_one("#diagnoses-note", Static)
        options = self.query_one(OptionList)
        highlighted = options.highlighted
        previous = options.get_option_at_index(highlighted).id if highlighted is not None and options.option_count else None
        options.clear_options()
        session = app.session
        opened = session.report_basis
        if session.findings_error:
            note.update(Text(f"Diagnoses unavailable: {session.findings_error}", style="bold red"))
        elif session.facts is None and opened is None:
            note.update("Waiting for machine facts...")
        elif not session.findings:
            note.update("No problems found for the chosen settings on this machine"
                        + (" and the probe's measurements." if session.report else " (no probe yet)."))
        else:
            crit = sum(f.severity == "critical" for f in session.findings)
            warn = sum(f.severity == "warning" for f in session.findings)
            basis = "machine facts and the probe's measurements" if session.report else "machine facts (no probe yet)"
            if opened is not None:
                basis = f"{opened}, " + ("and " + basis if session.facts else "(machine facts: reading)")
            note.update(f"{crit} critical, {warn} warning{'' if warn == 1 else 's'} for the chosen settings, "
                        f"from {basis}.")
        for i, f in enumerate(app.session.findings):
            label = Text()
            label.append(model.SEVERITY_LABEL.get(f.severity, f.severity.upper()), style=SEVERITY_STYLE.get(f.severity, ""))
            label.append(f"  {f.symptom}")
            options.add_option(Option(label, id=f"{f.rule_id}#{i}"))
        if app.session.findings:
            ids = [f"{f.rule_id}#{i}" for i, f in enumerate(app.session.findings)]
            index = next((i for i, oid in enumerate(ids) if previous and oid.split("#")[0] == previous.split("#")[0]), 0)
            options.highlighted = index
        self._show_detail()

    def _current(self):
        options = self.query_one(OptionList)
        idx = options.highlighted
        findings = self.app.session.findings
        return findings[idx] if idx is not None and 0 <= idx < len(findings) else None

    def _show_detail(self) -> None:
        f = self._current()
        detail = self.query_one("#finding-detail", Static)
        button = self.query_one("#apply-fix", Button)
        if f is None:
            detail.update("")
            button.disabled = True
            return
        text = Text()
        for heading, body in model.finding_detail(f, self.app.session.evidence_from(f)):
            text.append(f"{heading}\n", style="bold underline")
            text.append(f"{body}\n\n")
        detail.update(text)
        button.disabled = not f.settings_change
        button.label = "Apply fix (a)" if f.settings_change else "Fix is outside the DataLoader"

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        self._show_detail()
        self.refresh_bindings()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.action_apply_fix()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "apply-fix":
            self.action_apply_fix()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "apply_fix":
            f = self._current()
            return True if f is not None and f.settings_change else None  # None: shown disabled
        return True

    def action_apply_fix(self) -> None:
        f = self._current()
        if f is not None:
            self.app.apply_fix(f)
