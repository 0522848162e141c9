"""What the app shows of a watched run: :class:`WatchRun`, its loaders (:class:`LoaderRun`) and
their stretches of time (:class:`Interval`). Read from a report by :mod:`.report_file`; shown by the
app's Run view and the no-terminal printout. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loaderdoc.advice.findings import Finding
from loaderdoc.advice.watched import wait_share_of


@dataclass
class Interval:
    """One stretch of a loader's run: a timeline interval or a whole epoch."""

    label: str  # "at 12.0 s" (the end of the interval) or "epoch 3"
    x: float  # where it sits on the chart's x axis: seconds into the run, or the epoch number
    steps: int
    wait_s: float
    step_s: float

    @property
    def wait_share(self) -> float | None:
        return wait_share_of(self.wait_s, self.step_s)


@dataclass
class LoaderRun:
    name: str  # "loader 1 (DataLoader, num_workers=0, batch_size=4)"
    steps: int
    wait_share: float | None
    intervals: list[Interval] = field(default_factory=list)
    per: str = "epoch"  # "interval" (from the timeline) or "epoch": what one point of the chart is
    rank: int | None = None
    pid: int | None = None
    workers_pss_max_bytes: int | None = None
    gpu_idle_share: float | None = None
    cpu_line: str | None = None  # where its CPU time went (summary_text.cpu_text); None: not recorded
    io_line: str | None = None  # what it read and from where (summary_text.io_text); None: not recorded


@dataclass
class WatchRun:
    """What the app shows of one watched run."""

    path: str
    command: list[str] | None
    exit_code: int | None
    steps: int
    wait_share: float | None
    findings: list[Finding]
    loaders: list[LoaderRun]
    main_pss_peak_bytes: int | None = None  # over every process's samples
    workers_pss_peak_bytes: int | None = None
    shm_peak_bytes: int | None = None
    shm_total_bytes: int | None = None
    gpu_timing: str | None = None  # "cuda-events" | "unavailable" | None (not recorded)
