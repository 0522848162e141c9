"""A finding as the text commands print it: its symptom line, then its evidence, cause and fix."""

from __future__ import annotations

from loaderdoc.advice.findings import Finding


def finding_parts(f: Finding, *, ok_brief: bool = False) -> list[tuple[str, str, str]]:
    """A finding as the text commands print it, part by part: (indent, label, text) for the
    symptom line ("  ", "WARNING  ", "rule-id: symptom"), then its evidence, cause and fix
    (" " * 11, "evidence: ", ...). ``ok_brief``: an ``ok`` finding's symptom line alone."""
    parts = [("  ", f"{f.severity.upper():<8} ", f"{f.rule_id}: {f.symptom}")]
    if not (ok_brief and f.severity == "ok"):
        parts += [(" " * 11, "evidence: ", ev) for ev in f.evidence or []]
        parts += [(" " * 11, f"{label}: ", text) for label, text in (("cause", f.cause), ("fix", f.fix)) if text]
    return parts


def finding_lines(f: Finding, width: int | None = None, *, ok_brief: bool = False) -> list[str]:
    """A finding as the text commands print: the symptom line, then evidence, cause and fix,
    indented under it (:func:`finding_parts`). ``width``: wrapped to it (words never cut), each
    part's next lines two columns past its indent, as ``watch``'s summary on stderr is."""
    import textwrap

    parts = finding_parts(f, ok_brief=ok_brief)
    if width is None:
        return [indent + label + text for indent, label, text in parts]
    lines: list[str] = []
    for indent, label, text in parts:
        more = " " * 11 if indent == "  " else " " * 13  # under the rule id; under the label's word
        lines += textwrap.wrap(label + text, width, initial_indent=indent, subsequent_indent=more,
                               break_on_hyphens=False, break_long_words=False) or [indent.rstrip()]
    return lines
