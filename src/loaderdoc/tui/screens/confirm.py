"""A yes/no question, answered once from the keyboard (y / n, Enter / Esc)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Static

from loaderdoc.tui.screens.dialog import Dialog


class ConfirmScreen(Dialog[bool]):
    BINDINGS = [  # shown in the footer and the command palette; the keys are answered in answer_key
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]
    ANSWER_KEYS = frozenset({"y", "n", "escape", "enter"})

    def __init__(self, question: str, yes: str = "Overwrite", no: str = "Cancel") -> None:
        super().__init__()
        self._question, self._yes, self._no = question, yes, no

    def compose(self) -> ComposeResult:
        with Vertical(id="confirm-box", classes="dialog"):
            yield Static(self._question, id="confirm-question")
            with Horizontal(classes="dialog-buttons"):
                yield Button(f"{self._yes} (y)", id="yes", variant="warning", compact=True)
                yield Button(f"{self._no} (n)", id="no", compact=True)

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def answer_key(self, key: str) -> None:
        if key == "enter":  # the focused button's answer (No until another is focused)
            self.finish(self.focused is not None and self.focused.id == "yes")
        else:
            self.finish(key == "y")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.finish(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.finish(yes)
