"""A job's text, as `check --distributed` prints it (and the app without a terminal): the job's
line, its table of nodes, its findings, where its store listened, its status."""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc.text.findings import finding_lines
from loaderdoc.text.layout import output_width, table_lines, wrap

if TYPE_CHECKING:
    from loaderdoc.cluster.job_report import JobReport


def render_text(job: JobReport, *, with_store: bool = True) -> str:
    """The job as `check --distributed` prints it; ``with_store``: the line saying where the job's
    store listened (the live check's; a report opened again is printed without it, as it always was)."""
    nodes = job.nodes
    width = output_width()
    out = wrap(f"loaderdoc check --distributed ({job.launcher}): {job.world_size} "
               f"rank{'s' if job.world_size != 1 else ''} on {len(nodes)} node{'s' if len(nodes) != 1 else ''} "
               f"(by {job.node_source})", width) + [""]
    table = job.table
    header = [""] + table.columns
    rows = [[label] + cells for _, label, cells in table.rows]
    out += wrap(f"One column per node, one row per fact (transposed to fit {width} columns):", width)
    out += table_lines(header, rows, [""] * len(rows), width)
    out.append("")
    findings = job.findings
    out.append("Findings:" if findings else "Findings: none - the nodes agree and none has a problem")
    for f in findings:
        out.extend(finding_lines(f))
    out.append("")
    store = job.store if with_store else None
    if store:  # while the check ran, whoever reached this port could read and write the store (no authentication)
        text = f"store: {store['address']}, served by {store['served_by']} on {store['listens_on']}"
        out.extend(wrap(text + (f" ({store['note']})" if store["note"] else ""), width))
    out.append(f"status: {job.status} (exit {job.exit_code})")
    return "\n".join(out) + "\n"
