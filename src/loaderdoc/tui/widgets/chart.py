"""Throughput and starvation against num_workers, redrawn as each probe result arrives."""

from __future__ import annotations

import math

from textual_plotext import PlotextPlot

from loaderdoc.tui.model import ChartSeries

# Fixed colours: left to plotext, a series takes the next colour of the plot's theme, which is
# plotext's own 16-colour palette until the widget first renders (a hidden tab never has) and
# textual-plotext's truecolour palette after, so the same results were drawn in different colours
# depending on whether the probe view had been on screen before they arrived.
LINE_COLOR = (0, 130, 200)
POINT_COLOR = (60, 180, 75)


class SeriesPlot(PlotextPlot):
    """One measured quantity against num_workers (best configuration at each worker count)."""

    def __init__(self, title: str, unit: str, *, percent: bool = False, id: str | None = None) -> None:
        super().__init__(id=id)
        self._title = title
        self._unit = unit
        self._percent = percent
        self._series: ChartSeries | None = None

    def on_mount(self) -> None:
        super().on_mount()
        self.show(ChartSeries())

    def show(self, series: ChartSeries) -> None:
        self._series = series
        plt = self.plt
        plt.clear_data()
        ys = series.starvation_pct if self._percent else series.batches_per_s
        points = [(x, y) for x, y in zip(series.workers, ys, strict=True) if not math.isnan(y)]
        plt.xlabel("num_workers")
        if points:
            xs = [p[0] for p in points]
            # quadrant blocks, not braille: more terminal fonts (and SVG->PNG) have them
            plt.plot(xs, [p[1] for p in points], marker="hd", color=LINE_COLOR)
            plt.scatter(xs, [p[1] for p in points], marker="●", color=POINT_COLOR)
            plt.xticks(xs)
            plt.title(self._title + (f" ({self._unit})" if self._unit else ""))
        else:
            plt.title(self._title + ": no results yet")
        if self._percent:
            plt.ylim(0, 100)
        else:
            top = max((p[1] for p in points), default=1.0)
            plt.ylim(0, top * 1.15 if top > 0 else 1.0)
        self.refresh()
