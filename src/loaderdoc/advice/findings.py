"""A finding: one symptom this machine or loader shows, with the numbers that prove it.

Rules (``loaderdoc.advice.rules``) produce findings; ``check``, ``probe``, the export header
and the TUI render them. No torch, no textual.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from loaderdoc.base._serde import from_dict
from loaderdoc.base.jsondoc import Bad, get, obj

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
    # a measured run's finding that proposes a change: the steady rate it expects after the change
    # over the rate measured (1.0: no speed change, e.g. fewer workers as fast); None: not estimated
    expected_gain: float | None = None

    @property
    def rank(self) -> int:
        return SEVERITY_ORDER.get(self.severity, 0)

    @property
    def key(self) -> tuple[str, str]:
        """What makes two findings one: the rule and its symptom (whichever loader, rank or node)."""
        return self.rule_id, self.symptom


def new_findings(findings: list[Finding], seen: set[tuple[str, str]]) -> list[Finding]:
    """Those of ``findings`` not said yet (one rule's one symptom is said once, whichever loader,
    rank or node showed it); ``seen`` is updated."""
    out = []
    for f in findings:
        if f.key not in seen:
            seen.add(f.key)
            out.append(f)
    return out


def proposers(findings: list[Finding]) -> dict[str, Finding]:
    """Per setting, the finding whose value a merged proposal takes: the most severe that names it
    (the one place proposals are merged: :func:`proposed_change`, the check's recommendation)."""
    out: dict[str, Finding] = {}
    for f in sorted(findings, key=lambda f: -f.rank):
        for key in f.settings_change:
            out.setdefault(key, f)
    return out


def proposed_change(findings: list[Finding]) -> dict[str, Any] | None:
    """What one loader's findings propose, as one change: per setting the most severe finding's
    value (one truth: a report's findings never propose two values for one setting), the rules, and
    the gain expected (:func:`merged_gain`; None where one did not say). None: nothing proposed."""
    by = proposers(findings)
    change = {key: f.settings_change[key] for key, f in by.items()}
    taken = []
    for f in sorted(findings, key=lambda f: -f.rank):
        if not f.settings_change:
            continue
        if all(change[key] == value for key, value in f.settings_change.items()):
            taken.append(f)  # a finding whose value lost to a more severe one's neither speaks nor counts
    if not change:
        return None
    return {"change": change, "rules": [f.rule_id for f in taken], "expected_gain": merged_gain(taken)}


def merged_gain(findings: list[Finding]) -> float | None:
    """The one gain a merged change is expected to bring: findings whose changes share a setting
    priced the same change (each against the same measured rate), so among them the largest counts;
    groups that share none are independent and multiply. The product of all had a 0-worker run's fix
    expected at 1.67x in its finding and 2.77x in the --fixes file (issue 57). None where one did not say."""
    if any(f.expected_gain is None for f in findings):
        return None
    groups: list[tuple[set[str], float]] = []
    for f in findings:
        keys, gain = set(f.settings_change), f.expected_gain
        for other in [g for g in groups if g[0] & keys]:
            groups.remove(other)
            keys, gain = keys | other[0], max(gain, other[1])
        groups.append((keys, gain))
    return math.prod(gain for _, gain in groups)


def worst(findings: list[Finding]) -> str:
    """The most severe level among ``findings`` ("ok" when there are none)."""
    if not findings:
        return OK
    return max(findings, key=lambda f: f.rank).severity


def findings_from_json(items: Any, where: str = "findings") -> list[Finding]:
    """The findings a report wrote (``to_dict(Finding)``), read back checked: jsondoc.Bad naming
    the key for one that is not a finding. Keys this build does not know are ignored."""
    if not isinstance(items, list):
        raise Bad(f"{where}: missing; expected a list" if items is None else f"{where}: expected a list")
    out = []
    for i, raw in enumerate(items):
        at = f"{where}[{i}]"
        obj(raw, at)
        for key in ("rule_id", "symptom"):
            get(raw, key, str, at)
        if raw.get("severity") not in SEVERITY_ORDER:
            raise Bad(f"{at}.severity: expected one of {', '.join(SEVERITY_ORDER)}, got {raw.get('severity')!r}")
        out.append(from_dict(Finding, raw))
    return out
