"""Export dialog: TOML and Python previews side by side, a path, overwrite confirmation.

Writing goes through :func:`loaderdoc.export.write_export` (atomic; refuses to overwrite
without ``force``). Its errors are shown in the dialog and nothing is written.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Footer, Input, Label, Static, TextArea

from loaderdoc.errors import UserError
from loaderdoc.export import render, write_export
from loaderdoc.settings import LoaderSettings
from loaderdoc.tui.screens.confirm import ConfirmScreen


class ExportScreen(ModalScreen[Path | None]):
    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+o", "write", "Write file", priority=True),
    ]

    def __init__(self, settings: LoaderSettings, header: list[str], directory: Path) -> None:
        super().__init__()
        self.settings = settings
        self.header = header
        self.directory = directory

    def compose(self) -> ComposeResult:
        with Vertical(id="export-box", classes="dialog"):
            yield Static("Export the chosen settings", id="export-title")
            with Horizontal(id="previews"):
                with Vertical(classes="preview"):
                    yield Label("TOML (.toml)", classes="preview-label")
                    yield TextArea(self._preview("toml"), read_only=True, show_line_numbers=False,
                                   soft_wrap=True, id="preview-toml")
                with Vertical(classes="preview"):
                    yield Label("Python (.py)", classes="preview-label")
                    yield TextArea(self._preview("py"), read_only=True, show_line_numbers=False,
                                   soft_wrap=True, id="preview-py")
            with Horizontal(classes="form-row"):
                yield Label("Write to", classes="form-label")
                yield Input(str(self.directory / "loaderdoc.toml"), id="export-path", compact=True)
            yield Static("Format from the suffix: .toml, .py or .json. Enter (or ctrl+o) writes, Esc cancels.",
                         id="export-hint")
            yield Static("", id="export-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Write (Enter)", id="write", variant="primary", compact=True)
                yield Button("Cancel (Esc)", id="cancel", compact=True)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#export-path", Input).focus()
        # the settings come after the header comments: show them first
        self.call_after_refresh(self._show_settings)

    def _show_settings(self) -> None:
        for area in self.query(TextArea):
            area.scroll_end(animate=False)

    def _preview(self, fmt: str) -> str:
        try:
            return render(self.settings, fmt, self.header)
        except UserError as exc:
            return f"preview unavailable: {exc}"

    def _error(self, text: str) -> None:
        self.query_one("#export-error", Static).update(Text(text, style="bold red") if text else "")

    def on_input_changed(self, event: Input.Changed) -> None:
        self._error("")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.action_write()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "write":
            self.action_write()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_write(self) -> None:
        raw = self.query_one("#export-path", Input).value.strip()
        if not raw:
            self._error("Give a path to write to.")
            return
        if raw == "-":
            self._error("'-' (stdout) is for the command line; give a file path here.")
            return
        target = Path(raw).expanduser()
        if not target.is_absolute():
            target = self.directory / target
        if target.exists() and not target.is_dir():
            def answer(yes: bool | None) -> None:
                if yes:
                    self._write(target, force=True)
                else:
                    self._error(f"{target} exists; not overwritten. Choose another path or confirm.")

            self.app.push_screen(ConfirmScreen(f"{target} already exists.\nOverwrite it?"), answer)
            return
        self._write(target, force=False)

    def _write(self, target: Path, *, force: bool) -> None:
        try:
            written = write_export(target, self.settings, force=force, header=self.header)
        except UserError as exc:
            self._error(str(exc))
            return
        except OSError as exc:  # write_export turns these into ExportError; belt and braces
            self._error(f"cannot write {target}: {exc.strerror or exc}")
            return
        self.dismiss(written or target)
