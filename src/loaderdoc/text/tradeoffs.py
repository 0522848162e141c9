"""What each knob costs and buys, as text: `loaderdoc tradeoffs`'s report fitted to the width
(:func:`render_text`), and the knobs' plain blocks the docs' scenario pages show (:func:`knob_text`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loaderdoc.advice.knobs import explain
from loaderdoc.advice.tradeoffs import BOOLEAN_KNOBS
from loaderdoc.base.units import fmt_bytes
from loaderdoc.text.layout import table_lines, wrap

if TYPE_CHECKING:
    from loaderdoc.advice.tradeoffs import KnobTradeoff


def render_text(report: dict[str, Any], width: int = 80, *, explain_knobs: bool = False) -> str:
    """The trade-off tables in lines of at most ``width`` columns: per loader a title and its
    settings, then per knob what raising and lowering it does, the evidence and the table."""
    out = ["loaderdoc tradeoffs: what each knob costs and buys here", ""]
    out += wrap(report["machine_line"], width, "machine:  ", " " * 10)
    probe = report["probe_report"]
    if probe is not None:
        batch = f", batch {fmt_bytes(probe['batch_bytes'])}" if probe["batch_bytes"] else ""
        out += wrap(f"{probe['path']}: {probe['workload']}, batch_size {probe['batch_size']}{batch}, "
                    f"device {probe['device']}; {probe['measured']} of {probe['configurations']} "
                    "configurations measured", width, "measured: ", " " * 10)
        legend = ("rows: > current value, * measured by the probe; rows without * are computed "
                  "from machine facts and the batch size, not measured")
    else:
        legend = ("rows: > current value; every number is computed from machine facts and the batch "
                  "size, none measured (give --probe-report for throughput)")
    out += wrap(legend, width, "", " " * 6)
    config = report["config"]
    if config is not None and config["skipped"]:
        out += wrap("; ".join(config["skipped"]), width, "skipped:  ", " " * 10)
    if config is not None and config["no_settings"]:
        out += wrap(config["no_settings"] + "; the tables below are the recommendation's", width, "config:   ",
                    " " * 10)
        config = None
    for entry in report["loaders"]:
        out += ["", *_loader_title(entry, config, width)]
        for t in entry["items"]:
            out += ["", *_knob_lines(t, width, explain_knobs)]
    return "\n".join(out) + "\n"


def _loader_title(entry: dict[str, Any], config: dict[str, Any] | None, width: int) -> list[str]:
    if config is not None and entry["settings_from"] == "config":
        title = f"== loader '{entry['name'] or 'loader'}' ({entry['layout']}, {config['path']}) "
    else:
        title = f"== {entry['settings_from']} "
    lines = wrap(title.rstrip(), width)
    fill = width - len(lines[-1]) - 1
    if fill >= 2:  # the closing rule only where it fits: a long path can fill the title's last line
        lines[-1] = lines[-1] + " " + "=" * fill
    kwargs = ", ".join(f"{k}={v!r}" for k, v in entry["settings"].items())
    lines += wrap(kwargs, width, "settings: ", " " * 10)
    if entry["not_set"]:  # not in the file: the tables judge the DataLoader's defaults, said as such
        lines += wrap(entry["not_set"], width, "not set:  ", " " * 10)
    if entry["framework_defaults"]:
        lines += wrap(entry["framework_defaults"], width, "defaults: ", " " * 10)
    if entry["batch_bytes"]:
        lines.append(f"batch:    {fmt_bytes(entry['batch_bytes'])} per batch")
    for key, source in entry["unreadable"].items():
        lines += wrap(f"{key} is computed when the config runs ({source}); these tables assume torch's "
                      f"default, {key}={entry['settings'].get(key)!r}", width, "note:     ", " " * 10)
    return lines


def _knob_lines(t: Any, width: int, explain_knobs: bool) -> list[str]:
    lines = [f"{t.knob} (now {t.current!r})"]
    if explain_knobs:
        lines += wrap(explain(t.knob).what, width, "  about: ", "    ")
    if t.note:
        lines += wrap(t.note, width, "  note: ", "    ")
    up, down = ("turn on", "turn off") if t.knob in BOOLEAN_KNOBS else ("raise", "lower")
    lines += wrap(t.raising, width, f"  {up}: ", "    ")
    lines += wrap(t.lowering, width, f"  {down}: ", "    ")
    for ev in t.evidence:
        lines += wrap(ev, width, "  evidence: ", "    ")
    if t.rows:
        marks = [(">" if r.current else " ") + ("*" if r.measured else " ") for r in t.rows]
        table = t.table()
        lines += table_lines(table[0], table[1:], marks, width)
    return lines


def _text_table(table: list[list[str]], marks: list[str]) -> list[str]:
    widths = [max(len(row[c]) for row in table) for c in range(len(table[0]))]
    lines = []
    for mark, row in zip(["  "] + marks, table, strict=True):
        lines.append(mark + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
    return lines


def knob_text(items: list[KnobTradeoff], *, explain_knobs: bool = False) -> str:
    """Plain text, one block per knob; ``>`` marks the current value, ``*`` measured rows."""
    out: list[str] = []
    for t in items:
        out.append(f"{t.knob} (now {t.current!r})")
        if explain_knobs:
            out.append(f"  {explain(t.knob).what}")
        if t.note:
            out.append(f"  note: {t.note}")
        up, down = ("turn on", "turn off") if t.knob in BOOLEAN_KNOBS else ("raise", "lower")
        out.append(f"  {up}: {t.raising}")
        out.append(f"  {down}: {t.lowering}")
        for ev in t.evidence:
            out.append(f"  evidence: {ev}")
        if t.rows:
            marks = [("> " if r.current else "  ")[0] + ("*" if r.measured else " ") for r in t.rows]
            out.extend("  " + line for line in _text_table(t.table(), marks))
        out.append("")
    if any(r.measured for t in items for r in t.rows):
        out.append("> current value   * measured by the probe (other numbers are computed from machine facts)")
    else:
        out.append("> current value   (numbers computed from machine facts; `loaderdoc probe` measures throughput)")
    return "\n".join(out) + "\n"
