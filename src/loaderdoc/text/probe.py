"""`loaderdoc probe`'s text report, in lines of at most the terminal's width.

Sections: the header, "Measured" (a compact table; the full one is in ``--json``), failures with
their tracebacks, "Where a step's time goes" (the breakdown), "Predicted vs measured" (the
curve, only the rows that matter), "Recommended" (the DataLoader call and its reasons) and the
findings. A narrow terminal gets fewer columns, never a cut number: columns are dropped in a
fixed order and the one free-text column is shortened or wrapped. A section with nothing to
show (a report from before ``loaderdoc.probe/2`` has no breakdown and no prediction) is left out.

Plain text, no rich: the same on a terminal and in a pipe.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from loaderdoc.base.units import MiB, fmt_bytes
from loaderdoc.probing.result import Breakdown, ConfigResult, Prediction, ProbeReport, step_note
from loaderdoc.text.findings import finding_parts
from loaderdoc.text.layout import LAST_MIN, table_lines, wrap

INDENT = "  "
MARK = "* "  # leads a measured row with the recommended workers and prefetch
WHY = "why tried"

# what limits a predicted rate, in words (the search's own words for them)
LIMITS = {"workers": "workers' loading", "CPU": "CPU budget", "step": "training step",
          "loading and the step take turns": "serial loading"}


def render_text(report: ProbeReport, findings: list[Any], width: int) -> str:
    """The whole report and the findings as text, no line longer than ``width``."""
    return "\n".join(report_lines(report, width) + findings_lines(findings, width)) + "\n"


def report_lines(report: ProbeReport, width: int) -> list[str]:
    out = header_lines(report, width)
    out += ["", *measured_lines(report, width)]
    out += failure_lines(report, width)
    for section in (breakdown_lines(report, width), prediction_lines(report, width)):
        if section:
            out += ["", *section]
    out += ["", *recommended_lines(report, width)]
    return out


# ---- numbers: every one whole, at a precision that fits ------------------------------------------
def rate(value: float | None) -> str:
    """Steps or batches per second: one decimal, two significant digits below 1 (0.04, not 0.0)."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value >= 1 or value == 0 else f"{value:.2g}"


def ms(value: float | None) -> str:
    """Milliseconds: one decimal below 100, whole above."""
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{value:.0f}"


def num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def mib(value: int | None) -> str:
    return "-" if value is None else f"{value / MiB:.0f}"


def yes_no(value: bool) -> str:
    return "yes" if value else "no"


# ---- header ----------------------------------------------------------------------------------------
def header_lines(report: ProbeReport, width: int) -> list[str]:
    w = report.workload
    title = f"{w.name}: {w.description}" if w.description else (w.name or "probe")
    setup = f"batch_size={w.batch_size}, step {w.step_ms:g} ms ({w.consumer})"
    if w.batch_bytes is not None:
        setup += f", batch {fmt_bytes(w.batch_bytes)}"
    if report.epoch_steps:
        setup += f", {report.epoch_steps} steps an epoch"
    setup += f"; device {report.device}"
    if w.torch_threads:
        plural = "" if w.torch_threads == 1 else "s"
        setup += f"; the training process at {w.torch_threads} torch thread{plural} ({w.torch_threads_source})"
    n = len(report.results)
    run = (f"{n} configuration{'' if n == 1 else 's'} in {report.elapsed_s:.1f} s of a {report.budget_s:g} s "
           f"budget; stopped: {report.stopped or 'unknown'}")
    return wrap(title, width, "", INDENT) + wrap(setup, width, "", INDENT) + wrap(run, width, "", INDENT)


# ---- measured -----------------------------------------------------------------------------------------
@dataclass
class Column:
    key: str
    head: tuple[str, str]  # two header lines
    cell: Any  # ConfigResult -> str (numbers, aligned to the right)


def config_label(r: ConfigResult) -> str:
    s = r.settings
    if s.num_workers == 0:
        return "num_workers=0"
    text = f"num_workers={s.num_workers} prefetch={s.effective_prefetch_factor}"
    if not s.in_order:
        text += " in_order=False"
    if s.persistent_workers:
        text += " persistent"
    if s.pin_memory:
        text += " pinned"
    return text


def _workers_only(fn: Any) -> Any:
    return lambda r: fn(r) if r.settings.num_workers else "-"


def _ok_only(fn: Any) -> Any:
    return lambda r: fn(r) if r.ok else "-"


GROWING = "+"  # after a PSS figure: the workers' memory was still rising at the end of the window


def _pss(r: ConfigResult) -> str:
    return mib(r.worker_pss_bytes) + (GROWING if r.worker_pss_bytes is not None and r.memory_still_growing else "")


def _wait(r: ConfigResult) -> str:
    if r.wait.p50_ms is None and r.wait.p95_ms is None:
        return "-"
    return f"{ms(r.wait.p50_ms)}/{ms(r.wait.p95_ms)}"


def short_purpose(purpose: str) -> str:
    """The words before the first ':', ',' or ' (': "verify: around the predicted size" -> "verify"."""
    return re.split(r":|,| \(", purpose, maxsplit=1)[0].strip() or "-"


ALWAYS = [
    Column("workers", ("", "workers"), lambda r: str(r.settings.num_workers)),
    Column("prefetch", ("pre-", "fetch"), _workers_only(lambda r: str(r.settings.effective_prefetch_factor))),
]
IDENTITY = {  # shown only when some run with workers was not torch's default
    "in_order": Column("in_order", ("", "in_order"), _workers_only(lambda r: yes_no(r.settings.in_order))),
    "persist": Column("persist", ("", "persist"), _workers_only(lambda r: yes_no(r.settings.persistent_workers))),
    "pin": Column("pin", ("", "pin"), lambda r: yes_no(r.settings.pin_memory)),
}
RATE = Column("steps/s", ("", "steps/s"), lambda r: rate(r.batches_per_s) if r.ok else r.status)
OPTIONAL = [  # measurements a narrow terminal may go without (the JSON has them all)
    Column("starved", ("", "starved %"), _ok_only(lambda r: num(r.starvation_pct, ".0f"))),
    Column("wait", ("wait ms", "p50/p95"), _ok_only(_wait)),
    Column("first", ("first", "batch s"), _ok_only(lambda r: num(r.first_batch_s, ".2f"))),
    Column("pss", ("PSS", "MiB"), _ok_only(_pss)),
]
DROP_ORDER = ["first", "pss", "wait", "starved"]  # the first goes first


def measured_columns(report: ProbeReport) -> list[Column]:
    """Every column this report can show, in the order shown (before fitting them to a width)."""
    results = report.results
    shown = [c for key, c in IDENTITY.items() if any(
        (key == "in_order" and not r.settings.in_order and r.settings.num_workers)
        or (key == "persist" and r.settings.persistent_workers and r.settings.num_workers)
        or (key == "pin" and r.settings.pin_memory) for r in results)]
    return ALWAYS + shown + [RATE] + OPTIONAL


def _span(columns: list[Column], cells: list[list[str]]) -> int:
    widths = [max(len(c.head[0]), len(c.head[1]), *(len(row[i]) for row in cells)) for i, c in enumerate(columns)]
    return len(INDENT) + len(MARK) + sum(widths) + 2 * (len(widths) - 1)


def fit_measured(report: ProbeReport, width: int) -> tuple[list[Column], list[str] | None]:
    """The columns that fit ``width`` and the "why tried" cells (None: left out).

    "Why tried" gives way first: a purpose too long for the room left is cut to its first words
    (short_purpose), wrapped there when even those are longer; with less than LAST_MIN columns
    left it goes. Then measurements go, in DROP_ORDER. Numbers are never shortened."""
    columns = measured_columns(report)
    full = [r.purpose or "-" for r in report.results]
    drop = list(DROP_ORDER)
    while True:
        cells = [[c.cell(r) for c in columns] for r in report.results]
        span = _span(columns, cells)
        room = width - span - 2
        fitted = [p if len(p) <= room else short_purpose(p) for p in full]
        if room >= len(WHY) and (room >= LAST_MIN or all(len(p) <= room for p in fitted)):
            return columns, fitted
        if span <= width or not drop:
            return columns, None
        key = drop.pop(0)
        columns = [c for c in columns if c.key != key]


def measured_lines(report: ProbeReport, width: int) -> list[str]:
    if not report.results:
        return ["Measured: nothing (no configuration ran to the end)"]
    columns, why = fit_measured(report, width)
    marks = [MARK if report.is_pick(r) else " " * len(MARK) for r in report.results]  # the pick's evidence
    head1 = [c.head[0] for c in columns]
    head2 = [c.head[1] for c in columns]
    rows = [[c.cell(r) for c in columns] for r in report.results]
    if why is not None:
        head1, head2 = head1 + [""], head2 + [WHY]
        rows = [row + [w] for row, w in zip(rows, why, strict=True)]
    title = "Measured, in the order tried"
    keys = []
    if MARK in marks:
        keys.append(f"{MARK.strip()} the recommended workers and prefetch")
    if any(c.key == "pss" for c in columns) and any(r.ok and r.memory_still_growing for r in report.results):
        keys.append(f"{GROWING} after PSS: still rising when the window ended")
    if keys:
        title += f" ({'; '.join(keys)})"
    if why is None:
        title += "; why each was tried: --json"
    # the second header line goes in as a row; the numbers' columns align right, "why tried" left
    return wrap(title, width, "", INDENT) + table_lines(
        head1, [head2, *rows], [" " * len(MARK), *marks], width, right=set(range(len(columns))),
        wrap_last=why is not None)


def failure_lines(report: ProbeReport, width: int) -> list[str]:
    out: list[str] = []
    for r in report.results:
        if r.status not in ("failed", "timeout"):
            continue
        out += ["", *wrap(f"{config_label(r)} {r.status}: {r.error or 'no error recorded'}", width, "", INDENT)]
        for line in (r.traceback or "").rstrip().splitlines():
            line = INDENT + line
            if len(line) <= width:
                out.append(line.rstrip())
            else:  # a long source line: wrapped under its own indentation, not cut
                lead = line[:len(line) - len(line.lstrip())]
                out += wrap(line.strip(), width, lead, lead + "    ")
    return out


# ---- where a step's time goes ---------------------------------------------------------------------------
def breakdown_lines(report: ProbeReport, width: int) -> list[str]:
    entries = [b for b in report.breakdown if b.stages or b.why]
    if not entries:
        return []
    out = ["Where a step's time goes"]
    out += wrap("ms: per batch, in the process that pays it; batches/s: what that stage alone could sustain",
                width, INDENT, INDENT)
    for b in entries:
        out += ["", *_breakdown_entry(b, width)]
    return out


def _breakdown_entry(b: Breakdown, width: int) -> list[str]:
    head = b.label or "configuration"
    facts = []
    if b.measured_per_s is not None:
        facts.append(f"{rate(b.measured_per_s)} steps/s")
    if b.wait_ms is not None:
        facts.append(f"the step waits {ms(b.wait_ms)} ms a batch")
    out = wrap(head + (" - " + ", ".join(facts) if facts else ""), width, INDENT, INDENT * 2)
    stages = [s for s in b.stages if s.per_s is not None or round(s.ms, 1) != 0]
    if stages:
        out += _stage_table(stages, width)
    if b.why or b.bottleneck:
        first = INDENT * 2 + "bottleneck: "
        out += wrap(b.why or b.bottleneck, width, first, " " * len(first))
    return out


NOTE_MIN = 20  # a note column narrower than this: each note goes on a line of its own under its stage


def _stage_table(stages: list[Any], width: int) -> list[str]:
    header = ["stage", "ms", "batches/s"]
    rows = [[s.stage, ms(s.ms), rate(s.per_s)] for s in stages]
    indent = INDENT * 2
    numbers = table_lines(header, rows, [""] * len(rows), width, indent=indent, right={1, 2})
    span = max(len(line) for line in numbers)
    notes = [s.note for s in stages]
    if not any(notes):
        return numbers
    if width - span - 2 >= NOTE_MIN:
        return table_lines(header + [""], [row + [note] for row, note in zip(rows, notes, strict=True)],
                           [""] * len(rows), width, indent=indent, right={1, 2}, wrap_last=True)
    if len(numbers) != len(rows) + 1:  # the numbers alone did not fit on one line a row: no notes
        return numbers
    out = numbers[:1]
    for line, note in zip(numbers[1:], notes, strict=True):
        out.append(line)
        if note:
            out += wrap(note, width, indent + INDENT, indent + INDENT)
    return out


# ---- predicted vs measured --------------------------------------------------------------------------------
def prediction_lines(report: ProbeReport, width: int) -> list[str]:
    p = report.prediction
    if p is None or not p.curve:
        return []
    recommended = report.recommended.num_workers if report.recommended is not None else p.pick_workers
    keep = {pt.workers for pt in p.curve if pt.measured_per_s is not None} | {p.workers, p.pick_workers, recommended}
    rows, marks = [], []
    for pt in p.curve:
        if pt.workers not in keep:
            continue
        roles = (["predicted best"] if pt.workers == p.workers else []) + (
            ["recommended"] if pt.workers == recommended else [])
        rows.append([str(pt.workers), rate(pt.predicted_per_s), rate(pt.measured_per_s),
                     LIMITS.get(pt.limit, pt.limit or "-"), ", ".join(roles)])
        marks.append(MARK if pt.workers == recommended else " " * len(MARK))
    out = ["Predicted vs measured, steps/s by num_workers"]
    if p.model:
        out += wrap(f"from the 0-worker run: {p.model}", width, INDENT, INDENT * 2)
    header = ["workers", "predicted", "measured", "limited by", ""]
    table = table_lines(header, rows, marks, width, right={0, 1, 2})
    if max(len(line) for line in table) <= width and "" not in table:
        out += table
    else:  # no room for the roles beside the numbers: say them under the table
        out += table_lines(header[:-1], [row[:-1] for row in rows], marks, width, right={0, 1, 2})
        out += wrap(f"predicted best: num_workers={p.workers} (the fewest workers at the top of the curve)",
                    width, INDENT, INDENT * 2)
    line = pick_line(p)
    if line:
        out += wrap(line, width, INDENT, INDENT * 2)
    note = step_note(report.workload.consumer)
    if note:
        out += wrap(f"note: {note}", width, INDENT, INDENT * 2)
    return out


def pick_line(p: Prediction) -> str:
    if p.pick_workers is None:
        return ""
    text = f"pick: num_workers={p.pick_workers}"
    if p.pick_predicted_per_s is not None:
        text += f" predicted {rate(p.pick_predicted_per_s)} steps/s"
    if p.pick_measured_per_s is None:
        return text + ", not measured"
    text += f", measured {rate(p.pick_measured_per_s)}"
    error = p.error_pct
    return text + (f" ({error:+.0f} %)" if error is not None else "")


# ---- recommended and findings -------------------------------------------------------------------------------
def recommended_lines(report: ProbeReport, width: int) -> list[str]:
    rec = report.recommended
    if rec is None:
        out = ["No recommendation: no configuration could be measured."]
    else:
        args = ", ".join(f"{k}={v!r}" for k, v in rec.as_kwargs().items())
        out = ["Recommended (* above):", *wrap(f"DataLoader(dataset, {args})", width, INDENT, INDENT + " " * 11)]
    for reason in report.reasons:
        out += wrap(reason, width, INDENT + "- ", INDENT + "  ")
    return out


def findings_lines(findings: list[Any], width: int) -> list[str]:
    """Each finding as `check` prints it (text.findings.finding_parts), wrapped: a part's text continues
    under itself, after its "WARNING", "evidence:", "cause:" or "fix:"."""
    if not findings:
        return ["", "Findings: none"]
    out = ["", "Findings:"]
    for f in findings:
        for indent, label, text in finding_parts(f):
            out += wrap(text, width, indent + label, " " * len(indent + label))
    return out
