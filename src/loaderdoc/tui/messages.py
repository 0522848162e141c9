"""Typed messages that background workers post to the app (thread-safe via post_message)."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message

from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.system.facts import MachineFacts


@dataclass
class FactsReady(Message):
    """Machine facts were read; ``pending`` names slow facts still being read."""

    facts: MachineFacts
    pending: frozenset[str] = field(default_factory=frozenset)


@dataclass
class FactsFailed(Message):
    stage: str
    error: str


@dataclass
class ProbeProgress(Message):
    fraction: float
    text: str


@dataclass
class ProbeResultArrived(Message):
    result: ConfigResult


@dataclass
class ProbeFinished(Message):
    report: ProbeReport


@dataclass
class ProbeFailed(Message):
    error: str
    detail: str = ""
