"""Typed messages: those that background workers post to the app (thread-safe via post_message), and
those the app hands its views (``...Shown``: what a view draws, built from the session in one place).

What the user's code wrote into them (a dataset's error and traceback, a probe's progress text) is
made visible here, where it enters the app: a control sequence in it is shown escaped, never sent
to the terminal (opened reports are made visible in ``reports.open_report``)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from textual.message import Message

from loaderdoc.advice.findings import Finding
from loaderdoc.advice.recommend import Recommendation
from loaderdoc.advice.tradeoffs import KnobTradeoff
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.visible import visible
from loaderdoc.probing.real_loop import VersusRealLoop
from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.session import ProbeRequest
from loaderdoc.system.facts import MachineFacts

if TYPE_CHECKING:
    from loaderdoc.session import Session


def _made_visible(value: Any) -> Any:
    """``value`` with what the user's code wrote in it shown escaped: a string, a result's error and
    traceback, each result of a report (in place)."""
    if isinstance(value, str):
        return visible(value)
    if isinstance(value, ConfigResult):
        return dataclasses.replace(value, error=None if value.error is None else visible(value.error),
                                   traceback=None if value.traceback is None else visible(value.traceback))
    if isinstance(value, ProbeReport):
        value.results = [_made_visible(r) for r in value.results]
    return value


class _FromWorker(Message):
    """A worker's message; the fields named in ``VISIBLE`` are made visible as it is made."""

    VISIBLE: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in self.VISIBLE:
            setattr(self, name, _made_visible(getattr(self, name)))


@dataclass
class FactsReady(_FromWorker):
    """Machine facts were read; ``pending`` names slow facts still being read."""

    facts: MachineFacts
    pending: frozenset[str] = field(default_factory=frozenset)


@dataclass
class FactsFailed(_FromWorker):
    VISIBLE = ("error",)
    stage: str
    error: str


@dataclass
class ProbeProgress(_FromWorker):
    VISIBLE = ("text",)
    fraction: float
    text: str


@dataclass
class ProbeResultArrived(_FromWorker):
    VISIBLE = ("result",)
    result: ConfigResult


@dataclass
class ProbeFinished(_FromWorker):
    VISIBLE = ("report",)
    report: ProbeReport


@dataclass
class ProbeFailed(_FromWorker):
    VISIBLE = ("error", "detail")
    error: str
    detail: str = ""


# ---- what the app pushes into its views ----------------------------------------------------
# The app builds these from the session (the only place that reads it) and the main screen hands
# each view the latest of each kind, on mount and whenever it changes: a view's ``on_...`` handler
# draws what it is given and never reads the session. Not bubbling: a view handles its own.
@dataclass
class MachineShown(Message, bubble=False):
    """The machine facts (None until read), the slow facts still being read, or why none could be."""

    facts: MachineFacts | None
    pending: frozenset[str] = field(default_factory=frozenset)
    error: str | None = None

    @classmethod
    def of(cls, session: Session) -> MachineShown:
        return cls(session.facts, session.pending_facts, session.facts_error)


@dataclass
class AdviceShown(Message, bubble=False):
    """The chosen settings and what follows from them: the recommendation, the findings (each with
    where its evidence was found) and the trade-offs."""

    settings: LoaderSettings
    origin: str
    recommendation: Recommendation | None = None
    recommend_error: str | None = None
    findings: tuple[Finding, ...] = ()
    evidence: tuple[str, ...] = ()  # per finding: "on this machine", "in the watched run", ...
    findings_error: str | None = None
    tradeoffs: tuple[KnobTradeoff, ...] = ()
    tradeoffs_error: str | None = None
    facts_read: bool = False
    measured: bool = False  # the probe's report is in
    basis: str | None = None  # the opened report the findings lead with, as the diagnoses say it
    sources: dict[str, str] = field(default_factory=dict)  # per setting, while the config's settings are chosen

    @classmethod
    def of(cls, session: Session) -> AdviceShown:
        findings = tuple(session.findings)
        return cls(session.settings, session.settings_origin, session.recommendation, session.recommend_error,
                   findings, tuple(session.evidence_from(f) for f in findings), session.findings_error,
                   tuple(session.tradeoffs), session.tradeoffs_error, session.facts is not None,
                   bool(session.report), session.report_basis, session.setting_sources)


@dataclass
class ProbeShown(Message, bubble=False):
    """The probe: the workload it measures, its state and progress, the results so far or its report."""

    workload: ProbeRequest
    dataset_arg: str | None = None  # --dataset, offered while a preset is chosen
    state: str = "idle"  # idle | running | stopping | done | cancelled | failed
    progress: tuple[float, str] = (0.0, "")
    results: tuple[ConfigResult, ...] = ()
    report: ProbeReport | None = None
    complete: bool = False
    error: str | None = None
    can_adopt: bool = False  # a complete probe's recommendation differs from the chosen settings
    versus: VersusRealLoop | None = None  # the real loop's rate (opened report) against the probe's

    @property
    def running(self) -> bool:
        return self.state in ("running", "stopping")

    @classmethod
    def of(cls, session: Session) -> ProbeShown:
        rec = session.recommendation
        report = session.report
        results = report.results if report is not None else session.live_results
        return cls(dataclasses.replace(session.workload), session.dataset_arg, session.probe_state,
                   session.probe_progress, tuple(results), report, session.report_complete, session.probe_error,
                   report is not None and session.report_complete and rec is not None
                   and rec.settings != session.settings, session.probe_versus_real)
