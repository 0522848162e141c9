"""`loaderdoc check --distributed`: every rank of a torchrun or srun job checks its own machine and
settings; rank 0 prints one report for the job (a table per node, the odd node out, each node's
own findings) and exits with the job's worst status. The other ranks print nothing but errors
and exit 0, so the launcher's exit code is rank 0's (srun reports the highest of its tasks).

torch is imported here (torch.distributed is the transport), and only under --distributed.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
from collections.abc import Callable

from loaderdoc.errors import EXIT_USAGE


def run(args: argparse.Namespace, build_report: Callable[[argparse.Namespace], dict]) -> int:
    """``build_report`` is check's: this rank's own report, before it joins the job."""
    from loaderdoc._serde import from_dict, to_dict
    from loaderdoc.cluster.gather import JobStopped, gather
    from loaderdoc.cluster.job import RankEntry, build_job_report
    from loaderdoc.cluster.launch import read_place

    place = read_place(os.environ)
    report = build_report(args)  # this rank's own check; a bad --config fails here, on every rank
    hostname = report["machine"].get("platform", {}).get("hostname", {}).get("value") or socket.gethostname()
    entry = RankEntry(place.rank, place.node, place.node_source, place.local_rank, hostname, report)
    try:
        gathered, listens_on = gather(place, to_dict(entry), hostname, args.timeout)
    except JobStopped:  # rank 0 prints why
        return EXIT_USAGE
    if place.rank != 0:
        return 0
    entries = [from_dict(RankEntry, item) for item in gathered or []]  # keys a newer rank adds are ignored
    job = build_job_report(entries, launcher=place.launcher, world_size=place.world_size)
    job["store"] = store_entry(place, listens_on)
    sys.stdout.write(json.dumps(job, indent=2) + "\n" if args.json else render_text(job))
    return job["exit_code"]


def store_entry(place, listens_on: str) -> dict:
    """Where the job's store was and who could reach it: torch's TCPStore has no authentication."""
    from loaderdoc.cluster.gather import EVERY_INTERFACE, where

    served_by = "rank 0" if listens_on else "torchrun's agent"
    note = ""
    if listens_on == EVERY_INTERFACE:
        note = ("MASTER_ADDR is a host name or not an address of this host; a literal address of rank 0's host "
                "(MASTER_ADDR=10.1.2.3) keeps it to that one, as torch's store has no authentication")
    return {"address": where(place), "served_by": served_by,
            "listens_on": listens_on or EVERY_INTERFACE, "note": note}


def render_text(job: dict) -> str:
    from loaderdoc._serde import from_dict
    from loaderdoc.advice.findings import Finding
    from loaderdoc.cluster.job import job_table
    from loaderdoc.commands.layout import output_width, table_lines, wrap
    from loaderdoc.summary import finding_lines

    nodes = job["nodes"]
    width = output_width()
    source = nodes[0]["node_source"] if nodes else "-"
    out = wrap(f"loaderdoc check --distributed ({job['launcher']}): {job['world_size']} "
               f"rank{'s' if job['world_size'] != 1 else ''} on {len(nodes)} node{'s' if len(nodes) != 1 else ''} "
               f"(by {source})", width) + [""]
    table = job_table(job)
    header = [""] + table.columns
    rows = [[label] + cells for _, label, cells in table.rows]
    out += wrap(f"One column per node, one row per fact (transposed to fit {width} columns):", width)
    out += table_lines(header, rows, [""] * len(rows), width)
    out.append("")
    findings = job["findings"]
    out.append("Findings:" if findings else "Findings: none - the nodes agree and none has a problem")
    for f in findings:  # the job's findings are JSON (gathered from the ranks, or read from a report)
        out.extend(finding_lines(from_dict(Finding, f)))
    out.append("")
    store = job.get("store")
    if store:  # while the check ran, whoever reached this port could read and write the store (no authentication)
        text = f"store: {store['address']}, served by {store['served_by']} on {store['listens_on']}"
        out.extend(wrap(text + (f" ({store['note']})" if store["note"] else ""), width))
    out.append(f"status: {job['status']} (exit {job['exit_code']})")
    return "\n".join(out) + "\n"

