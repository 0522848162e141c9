"""Run view: a watched run's report (`loaderdoc --report FILE`): the command, its outcome and
memory peaks, then per loader the share of its time spent waiting for data against the share
spent stepping, over the run (its timeline's intervals, else its epochs)."""

from __future__ import annotations

from rich.color import Color
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical, VerticalScroll
from textual.widget import Widget
from textual.widgets import Static

from loaderdoc.text.watch import cpu_text, io_text
from loaderdoc.tui import model
from loaderdoc.tui.widgets.view import View
from loaderdoc.watching.report import WatchReport
from loaderdoc.watching.watched import Interval, LoaderReport, wait_share_of

# fixed colours, as in chart.py; without colour (NO_COLOR) the wait is solid and the step shaded
WAIT_COLOR = (220, 50, 47)
STEP_COLOR = (0, 130, 200)
WAIT = Style(color=Color.from_rgb(*WAIT_COLOR))
STEP = Style(color=Color.from_rgb(*STEP_COLOR))
EDGE = Style(color=Color.from_rgb(*WAIT_COLOR), bgcolor=Color.from_rgb(0, 70, 110))
EIGHTHS = " ▁▂▃▄▅▆▇█"
AXIS = 5  # "100%" and a space


class WaitShareChart(Widget):
    """One loader over the run: each column is a stretch of it (timeline intervals or epochs,
    merged or widened to the width), filled from the bottom with the share of its time spent
    waiting for data (red) and above it the share spent stepping (blue).

    Drawn from text blocks (eighths of a cell), not plotext: two lines of seconds collapse onto
    the same row at 80x24 and one hides the other; a share stacked to 100 % cannot."""

    def __init__(self, loader: LoaderReport, *, id: str | None = None) -> None:
        super().__init__(id=id, classes="run-chart")
        self._loader = loader

    def render(self) -> Text:
        width, height = self.size.width, self.size.height
        return chart_text(self._loader, width, height)


def chart_text(loader: LoaderReport, width: int, height: int) -> Text:
    """The chart as ``height`` lines of ``width`` cells (the x labels are the last line)."""
    points = loader.intervals
    plot_w, plot_h = max(1, width - AXIS), max(1, height - 1)
    shares = column_shares(points, plot_w)
    text = Text(no_wrap=True, overflow="crop")
    for row in range(plot_h):
        level_row = plot_h - 1 - row  # 0 = the bottom row
        label = {0: "100%", plot_h // 2: " 50%", plot_h - 1: "  0%"}.get(row, "") if plot_h >= 3 else ""
        text.append(f"{label:>4} ", style="dim")
        for share in shares:
            if share is None:
                text.append(" ")
                continue
            fill = share * plot_h - level_row  # how much of this cell the wait fills, in cells
            if fill >= 1:
                text.append("█", WAIT)
            elif fill <= 0:
                text.append("░", STEP)
            else:
                eighths = round(fill * 8)
                text.append(EIGHTHS[eighths], EDGE) if 0 < eighths < 8 else \
                    text.append("█" if eighths else "░", WAIT if eighths else STEP)
        text.append("\n")
    first, last = (points[0].label, points[-1].label) if points else ("", "")
    gap = max(1, plot_w - len(first) - len(last))
    text.append(" " * AXIS + first + " " * gap + last, style="dim")
    return text


def column_shares(points: list[Interval], columns: int) -> list[float | None]:
    """The wait share of each of ``columns`` columns: intervals summed into a column when there are
    more of them than columns, one interval widened over several when there are fewer; None
    where no time was measured."""
    n = len(points)
    if not n:
        return [None] * columns
    out: list[float | None] = []
    for c in range(columns):
        lo = c * n // columns
        hi = max((c + 1) * n // columns, lo + 1)
        wait = sum(p.wait_s for p in points[lo:hi])
        step = sum(p.step_s for p in points[lo:hi])
        out.append(wait_share_of(wait, step))
    return out


class RunPane(View, Vertical):
    MAIN = "#run-scroll"
    given: WatchReport | None  # the watched run opened with --report; it does not change while the app runs

    def compose(self) -> ComposeResult:
        run = self.given
        with VerticalScroll(id="run-scroll"):
            yield Static(self._header(), id="run-head")
            if run is None:
                return
            if not run.loaders:
                yield Static("No torch DataLoader was iterated in this run; nothing was measured.",
                             classes="pane-note")
            for i, loader in enumerate(run.loaders):
                yield Static(Text(model.loader_title(loader), style="bold"), classes="run-title")
                if cpu_text(loader.cpu):
                    yield Static(cpu_text(loader.cpu), classes="run-cpu")
                if io_text(loader.io):
                    yield Static(io_text(loader.io), classes="run-cpu")
                yield WaitShareChart(loader, id=f"run-chart-{i}")
                yield Static(self._legend(loader), classes="run-note")

    @staticmethod
    def _legend(loader: LoaderReport) -> Text:
        text = Text()
        text.append("█ waiting for data", WAIT)
        text.append("  ")
        text.append("░ stepping", STEP)
        text.append(f"  {model.loader_chart_note(loader)}")
        return text

    def _header(self) -> Text:
        run = self.given
        text = Text()
        if run is None:
            text.append("No watched run open. Open one with 'loaderdoc --report run.json' "
                        "(write it with 'loaderdoc watch --report run.json -- python train.py').")
            return text
        lines = model.run_header(run)
        for n, (label, body) in enumerate(lines):
            text.append(f"{label:<8}", style="bold")
            text.append(body + ("\n" if n < len(lines) - 1 else ""))
        return text
