"""Export dialog: TOML and Python previews side by side, a path, overwrite confirmation.

Writing goes through :func:`loaderdoc.export.write_export` (atomic; refuses to overwrite
without ``force``). Its errors are shown in the dialog and nothing is written.

The dialog acts once (:class:`loaderdoc.tui.screens.dialog.Dialog`): Enter, ctrl+o and Esc are
taken in the order they were pressed, the first write or cancel wins, and nothing is written
after a cancel, nor asked again after a write.
"""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Button, Footer, Input, Label, Static, TextArea

from loaderdoc.base.errors import UserError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.export import render, write_export
from loaderdoc.tui.screens.confirm import ConfirmScreen
from loaderdoc.tui.screens.dialog import Dialog

ANSWER_KEYS = frozenset({"escape", "enter", "ctrl+o"})


class PathInput(Input):
    """The path to write to. The dialog acts on Enter once the key has come up to it, and text
    typed after the Enter reaches this field before that: it is dropped, so that the dialog
    writes (or asks about) the path as it was when Enter was pressed. Typing is taken again as
    soon as the dialog has acted on the key (it stays open on an error)."""

    holding = False

    async def _on_key(self, event: events.Key) -> None:
        if event.key in ANSWER_KEYS:
            self.holding = True
        elif self.holding and event.is_printable:
            event.stop()
            event.prevent_default()  # not typed into the path (Input's own _on_key is skipped)


class ExportScreen(Dialog[Path | None]):
    BINDINGS = [  # shown in the footer; the keys are answered in answer_key, in the order pressed
        Binding("escape", "cancel", "Cancel"),
        Binding("ctrl+o", "write", "Write file"),
    ]
    ANSWER_KEYS = ANSWER_KEYS

    def __init__(self, settings: LoaderSettings, header: list[str], directory: Path,
                 torch_threads: int | None = None) -> None:
        super().__init__()
        self.settings = settings
        self.torch_threads = torch_threads  # the process's intra-op threads, where a fix chose them
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
                yield PathInput(str(self.directory / "loaderdoc.toml"), id="export-path", compact=True)
            yield Static("Format from the suffix: .toml, .yaml, .json or .py. Enter (or ctrl+o) writes, Esc cancels.",
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
            return render(self.settings, fmt, self.header, self.torch_threads)
        except UserError as exc:
            return f"preview unavailable: {exc}"

    def _error(self, text: str) -> None:
        self.query_one("#export-error", Static).update(Text(text, style="bold red") if text else "")

    def on_input_changed(self, event: Input.Changed) -> None:
        self._error("")

    def answer_key(self, key: str) -> None:
        focused = self.focused
        if key == "escape" or (key == "enter" and isinstance(focused, Button) and focused.id == "cancel"):
            self.action_cancel()
        else:  # Enter in the path, on a preview or on the Write button; ctrl+o anywhere
            self.action_write()
        self.query_one("#export-path", PathInput).holding = False

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_write()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "write":
            self.action_write()
        else:
            self.action_cancel()

    def action_cancel(self) -> None:
        self.finish(None)

    def action_write(self) -> None:
        if not self.can_answer:  # answered already, or the overwrite question is open
            return
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
                if not self.can_answer:  # cancelled meanwhile: write nothing
                    return
                if yes:
                    self._write(target, force=True)
                else:
                    self._error(f"{target} exists; not overwritten. Choose another path or confirm.")

            self.app.push_screen(ConfirmScreen(f"{target} already exists.\nOverwrite it?"), answer)
            return
        self._write(target, force=False)

    def _write(self, target: Path, *, force: bool) -> None:
        try:
            written = write_export(target, self.settings, force=force, header=self.header,
                                   torch_threads=self.torch_threads)
        except UserError as exc:
            self._error(str(exc))
            return
        except OSError as exc:  # write_export turns these into ExportError; belt and braces
            self._error(f"cannot write {target}: {exc.strerror or exc}")
            return
        self.finish(written or target)
