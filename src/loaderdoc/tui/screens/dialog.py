"""A modal dialog that answers once, in the order its keys were pressed.

Textual routes a key through several message queues: from the app to the focused widget, then
up through its parents back to the app, where the non-priority key bindings run; a priority
binding runs as soon as the key reaches the app; a button's press or an input's submit is one
more message, sent up from the widget after the key. Under a storm of keys (Enter and Escape in
one read from the terminal, a key repeated) the dialog therefore got two answers before it was
popped: a cancel, then a write from an Enter pressed before it; a second write that asked to
overwrite the file just written, from a dialog already closed. And ``Screen.dismiss`` pops
whatever screen is on top, so a second dismiss closed the screen underneath, or raised
``ScreenStackError`` when none was left.

So a :class:`Dialog`

- handles the keys that answer it (:attr:`Dialog.ANSWER_KEYS`) itself, as each passes through
  it on its way up: in the order they were pressed, after the keys typed before them;
- answers once (:meth:`Dialog.finish`), and only while it is the screen on top: a later answer,
  from a key, a button or a result callback, does nothing;
- once answered, keeps the keys still on their way through it from reaching the app, where they
  would act on the screen underneath (Escape would stop a running probe).
"""

from __future__ import annotations

from typing import ClassVar, TypeVar

from textual import events
from textual.screen import ModalScreen

ResultType = TypeVar("ResultType")


class Dialog(ModalScreen[ResultType]):
    ANSWER_KEYS: ClassVar[frozenset[str]] = frozenset()

    def __init__(self) -> None:
        super().__init__()
        self._finished = False

    @property
    def finished(self) -> bool:
        """The dialog has answered (it is closed, or being closed)."""
        return self._finished

    @property
    def can_answer(self) -> bool:
        """Not answered yet, and on top (not under a question of its own)."""
        return not self._finished and self.is_active

    def finish(self, result: ResultType) -> bool:
        """Close the dialog with ``result``; False (and nothing done) if it cannot answer now."""
        if not self.can_answer:
            return False
        self._finished = True
        self.dismiss(result)
        return True

    def on_key(self, event: events.Key) -> None:
        if self._finished:
            event.stop()  # sent to this dialog: not to the screen underneath
            event.prevent_default()
        elif event.key in self.ANSWER_KEYS:
            event.stop()  # answered here, not by the bindings when the key reaches the app
            event.prevent_default()
            self.answer_key(event.key)

    def answer_key(self, key: str) -> None:
        """One of :attr:`ANSWER_KEYS` was pressed while the dialog is open."""
        raise NotImplementedError
