"""Typed messages that background workers post to the app (thread-safe via post_message).

What the user's code wrote into them (a dataset's error and traceback, a probe's progress text) is
made visible here, where it enters the app: a control sequence in it is shown escaped, never sent
to the terminal (opened reports are made visible in ``reports.open_report``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from textual.message import Message

from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.system.facts import MachineFacts
from loaderdoc.visible import visible


def _visible_result(result: ConfigResult) -> ConfigResult:
    return dataclasses.replace(result, error=None if result.error is None else visible(result.error),
                               traceback=None if result.traceback is None else visible(result.traceback))


@dataclass
class FactsReady(Message):
    """Machine facts were read; ``pending`` names slow facts still being read."""

    facts: MachineFacts
    pending: frozenset[str] = field(default_factory=frozenset)


@dataclass
class FactsFailed(Message):
    stage: str
    error: str

    def __post_init__(self) -> None:
        super().__post_init__()
        self.error = visible(self.error)


@dataclass
class ProbeProgress(Message):
    fraction: float
    text: str

    def __post_init__(self) -> None:
        super().__post_init__()
        self.text = visible(self.text)


@dataclass
class ProbeResultArrived(Message):
    result: ConfigResult

    def __post_init__(self) -> None:
        super().__post_init__()
        self.result = _visible_result(self.result)


@dataclass
class ProbeFinished(Message):
    report: ProbeReport

    def __post_init__(self) -> None:
        super().__post_init__()
        self.report.results = [_visible_result(r) for r in self.report.results]


@dataclass
class ProbeFailed(Message):
    error: str
    detail: str = ""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.error, self.detail = visible(self.error), visible(self.detail)
