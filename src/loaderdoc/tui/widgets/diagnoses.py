"""Diagnoses view: what this machine and the chosen settings show, the evidence, and the fix."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, OptionList, Static
from textual.widgets.option_list import Option

from loaderdoc.advice.findings import Finding
from loaderdoc.tui import model
from loaderdoc.tui.messages import AdviceShown
from loaderdoc.tui.widgets.view import View

SEVERITY_STYLE = {"critical": "bold red", "warning": "bold yellow", "ok": "bold green"}


class DiagnosesPane(View, Vertical):
    BINDINGS = [Binding("a", "apply_fix", "Apply fix")]
    MAIN = "#findings"
    _findings: tuple[Finding, ...] = ()
    _evidence: tuple[str, ...] = ()

    def compose(self) -> ComposeResult:
        yield Static("", id="diagnoses-note", classes="pane-note")
        with Horizontal():
            yield OptionList(id="findings")
            with Vertical(id="finding-side"):
                with VerticalScroll(id="finding-scroll"):
                    yield Static("", id="finding-detail")
                yield Button("Apply fix (a)", id="apply-fix", variant="primary", compact=True, disabled=True)

    def on_advice_shown(self, advice: AdviceShown) -> None:
        note = self.query_one("#diagnoses-note", Static)
        options = self.query_one(OptionList)
        highlighted = options.highlighted
        previous = options.get_option_at_index(highlighted).id if highlighted is not None and options.option_count else None
        options.clear_options()
        self._findings, self._evidence = advice.findings, advice.evidence
        findings = advice.findings
        opened = advice.basis
        if advice.findings_error:
            note.update(Text(f"Diagnoses unavailable: {advice.findings_error}", style="bold red"))
        elif not advice.facts_read and opened is None:
            note.update("Waiting for machine facts...")
        elif not findings:
            note.update("No problems found for the chosen settings on this machine"
                        + (" and the probe's measurements." if advice.measured else " (no probe yet)."))
        else:
            crit, warn = model.severity_counts(findings)
            basis = "machine facts and the probe's measurements" if advice.measured else "machine facts (no probe yet)"
            if opened is not None:
                basis = f"{opened}, " + ("and " + basis if advice.facts_read else "(machine facts: reading)")
            # a report's findings are about the run it watched, not about settings chosen here
            about = "" if opened is not None else " for the chosen settings"
            note.update(f"{crit} critical, {warn} warning{'' if warn == 1 else 's'}{about}, from {basis}.")
        for i, f in enumerate(findings):
            label = Text()
            label.append(model.SEVERITY_LABEL.get(f.severity, f.severity.upper()), style=SEVERITY_STYLE.get(f.severity, ""))
            label.append(f"  {f.symptom}")
            options.add_option(Option(label, id=f"{f.rule_id}#{i}"))
        if findings:
            ids = [f"{f.rule_id}#{i}" for i, f in enumerate(findings)]
            index = next((i for i, oid in enumerate(ids) if previous and oid.split("#")[0] == previous.split("#")[0]), 0)
            options.highlighted = index
        self._show_detail()

    def _current(self) -> Finding | None:
        idx = self.query_one(OptionList).highlighted
        return self._findings[idx] if idx is not None and 0 <= idx < len(self._findings) else None

    def _show_detail(self) -> None:
        f = self._current()
        where = self._evidence[self.query_one(OptionList).highlighted or 0] if f is not None else ""
        detail = self.query_one("#finding-detail", Static)
        button = self.query_one("#apply-fix", Button)
        if f is None:
            detail.update("")
            button.disabled = True
            return
        text = Text()
        for heading, body in model.finding_detail(f, where):
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
