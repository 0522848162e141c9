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

from loaderdoc.base.errors import EXIT_USAGE


def run(args: argparse.Namespace, build_report: Callable[[argparse.Namespace], dict]) -> int:
    """``build_report`` is check's: this rank's own report, before it joins the job."""
    from loaderdoc.base._serde import from_dict, to_dict
    from loaderdoc.cluster.gather import JobStopped, gather
    from loaderdoc.cluster.job import RankEntry, build_job_report
    from loaderdoc.cluster.launch import read_place
    from loaderdoc.text.job import render_text

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
    job = build_job_report(entries, launcher=place.launcher, world_size=place.world_size,
                           store=store_entry(place, listens_on))
    sys.stdout.write(json.dumps(job.to_json(), indent=2) + "\n" if args.json else render_text(job))
    return job.exit_code


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
