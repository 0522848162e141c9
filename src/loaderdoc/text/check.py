"""`loaderdoc check`'s text: the machine, the config's loaders as read, the findings, the
recommendation and the status, from the typed :class:`~loaderdoc.checking.report.CheckReport`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc.base.units import fmt_bytes
from loaderdoc.text.config import config_lines
from loaderdoc.text.findings import finding_lines

if TYPE_CHECKING:
    from loaderdoc.checking.report import CheckReport


def render_text(report: CheckReport) -> str:
    out = ["loaderdoc check", ""]
    for topic, line in report.summary_lines.items():
        out.append(f"  {topic:<9} {line}")
    out.append("")
    if report.config_path:
        out.extend(config_lines(report))
    if report.batch_bytes:
        out.append(f"Batch size in memory: {fmt_bytes(report.batch_bytes)}")
    findings = report.findings
    out.append("Findings:" if findings else "Findings: none - nothing here will starve or crash a DataLoader")
    for f in findings:
        out.extend(finding_lines(f))
    out.append("")
    rec = report.recommendation
    out.append("Recommended for this machine (from facts; 'loaderdoc probe' measures):")
    for key, value in rec.settings.as_kwargs().items():
        reason = rec.reasons.get(key, "")
        out.append(f"  {key:<19}= {value!r:<7} {reason}")
    out.append("")
    out.append(f"status: {report.status} (exit {report.exit_code})")
    return "\n".join(out) + "\n"
