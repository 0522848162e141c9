"""`loaderdoc --export PATH`: write the recommended settings (probed when a workload is named)."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from loaderdoc.base.errors import EXIT_OK


def run(args: argparse.Namespace) -> int:
    from loaderdoc.advice.recommend import recommend
    from loaderdoc.advice.rules import evaluate
    from loaderdoc.base.safe_write import check_writable
    from loaderdoc.commands.check import load_facts
    from loaderdoc.commands.common import sample_bytes
    from loaderdoc.export import export_header, format_for, write_export

    fmt = format_for(args.export, args.format)
    if args.export != "-":
        # refuse before any slow work (a probe takes 30 s) if the file can't be written
        check_writable(Path(args.export).expanduser(), force=args.force)

    facts = load_facts(getattr(args, "machine", None))
    probe_report = None
    if args.preset or args.dataset:
        from loaderdoc.base.preflight import check_workplace
        from loaderdoc.commands.probe import probe_from_args

        check_workplace("--export")

        probe_report = probe_from_args(args, progress=sys.stderr.isatty())
    rec = recommend(
        facts,
        batch_size=args.batch_size,
        sample_bytes=sample_bytes(args.sample_shape, args.dtype),
        probe=probe_report,
    )
    findings = evaluate(facts, rec.settings, batch_bytes=rec.batch_bytes, probe=probe_report)
    if probe_report is not None and probe_report.recommended is None:
        # as `probe --export`: settings the probe could not measure once are not written as its pick
        from loaderdoc.commands.probe import NothingMeasured

        crash = next((f for f in findings if f.severity == "critical"), None)
        # the fix's first clause: the rest points at a probe table this command does not print
        first_clause = re.split(r"[;.](?:\s|$)", crash.fix)[0] if crash is not None else ""
        why = f"{crash.symptom}: {first_clause}; " if crash is not None else ""
        raise NothingMeasured(f"--export: no DataLoader configuration could be measured, so nothing was written; "
                              f"{' '.join(why.split())} see each failure with 'loaderdoc probe' and the same options")
    written = write_export(
        args.export, rec.settings, fmt=fmt, force=args.force, header=export_header(facts, rec, findings),
        torch_threads=getattr(args, "torch_threads", None),  # the job's thread count, as the user gave it
    )
    if written is not None:
        print(f"wrote {written} ({fmt})", file=sys.stderr)
    return EXIT_OK
