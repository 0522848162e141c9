"""What every pane of the main screen shares: it tells the screen when it is mounted (the screen
then gives it the latest state, and shows and focuses it if it was asked for), and names the widget
that takes the focus when it is shown."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from textual.widget import Widget

    _Pane = Widget
else:
    _Pane = object  # a mixin, not a widget: textual takes a pane's CSS type names from its first widget base


class View(_Pane):
    """Mixed in before a container: ``class MachinePane(View, Vertical)``. Its ``on_mount`` runs
    after the pane's own (textual calls the handler of each class of the pane, the pane's first)."""

    MAIN = ""  # the selector of the widget focused when the view is shown
    BUILT_WITH: type | None = None  # the message a view's form is built from (given to it when it is built)

    def __init__(self, given: Any = None, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.given = given  # what the view draws first: the report opened with --report, the BUILT_WITH message

    def on_mount(self) -> None:
        self.screen.view_mounted(self)  # type: ignore[attr-defined]  (the main screen)

    def focus_main(self) -> None:
        self.screen.set_focus(self.query_one(self.MAIN))
