"""A finding: one symptom this machine or loader shows, with the numbers that prove it.

Rules (``loaderdoc.advice.rules``) produce findings; ``check``, ``probe``, the export header
and the TUI render them. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK = "ok"
WARNING = "warning"
CRITICAL = "critical"
SEVERITY_ORDER = {OK: 0, WARNING: 1, CRITICAL: 2}


@dataclass
class Finding:
    rule_id: str  # stable identifier, e.g. "shm-too-small"
    severity: str  # "ok" | "warning" | "critical"
    symptom: str  # what the user sees or will see, one line
    evidence: list[str] = field(default_factory=list)  # the numbers this machine/loader showed
    cause: str = ""
    fix: str = ""  # plain words, plus a command where there is one
    settings_change: dict[str, Any] = field(default_factory=dict)  # applied by "apply fix"
    threshold: str = ""  # where the threshold comes from

    @property
    def rank(self) -> int:
        return SEVERITY_ORDER.get(self.severity, 0)


def worst(findings: list[Finding]) -> str:
    """The most severe level among ``findings`` ("ok" when there are none)."""
    if not findings:
        return OK
    return max(findings, key=lambda f: f.rank).severity
