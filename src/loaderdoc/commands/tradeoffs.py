"""`loaderdoc tradeoffs`: what each DataLoader knob costs and buys on this machine, as the app's
Trade-offs view shows it, for a terminal, a pipe or a script.

Per knob (num_workers, prefetch_factor, pin_memory, persistent_workers, batch_size): what raising
and lowering it does here, the evidence, and a table of nearby values. The settings judged are
each loader of ``--config`` (one set of tables per loader), else the settings recommended for this
machine (from the probe report when one is given, as the app does). Numbers come from
``--probe-report`` where the probe measured them (rows marked ``*``, evidence saying "measured")
and are computed from machine facts otherwise.

``--json`` prints one document, schema ``loaderdoc.tradeoffs/1``::

    {"schema": "loaderdoc.tradeoffs/1",
     "machine_line": "host: 2 CPUs (logical), ...",
     "probe_report": null | {"path", "workload", "batch_size", "batch_bytes", "device",
                             "configurations", "measured"},
     "config": null | {"path", "skipped", "no_settings"},
     "loaders": [{"name", "layout", "settings_from", "settings", "unreadable", "not_set", "framework_defaults",
                  "batch_bytes",
                  "knobs": [{"knob", "current", "raising", "lowering", "evidence", "note", "columns",
                             "rows": [{"value", "cells", "data", "current", "measured", "fits"}]}]}],
     "machine": {the MachineFacts tree, as 'loaderdoc facts --json'}}

Imports neither torch nor textual (nor rich): it answers as fast as `check`.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

TRADEOFFS_SCHEMA = "loaderdoc.tradeoffs/1"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from loaderdoc.commands.check import add_machine_argument
    from loaderdoc.commands.common import add_workload_arguments

    parser.add_argument(
        "--config", metavar="FILE",
        help="the trade-offs of each DataLoader in FILE (any config 'check --config' reads; --batch-size "
        "replaces its batch_size); without it, of the settings recommended for this machine",
    )
    parser.add_argument(
        "--probe-report", metavar="FILE",
        help="measurements from 'loaderdoc probe ... --json > FILE': its rows are marked measured",
    )
    add_workload_arguments(parser, with_probe=False)
    parser.add_argument("--explain", action="store_true", help="also say what each knob does")
    parser.add_argument("--json", action="store_true", help=f"print one JSON document (schema {TRADEOFFS_SCHEMA})")
    add_machine_argument(parser)


def build_report(args: argparse.Namespace) -> dict[str, Any]:
    """The trade-offs of every loader, as the documented JSON structure (knobs as KnobTradeoff
    objects under ``"items"`` too, for the text renderer)."""
    from loaderdoc.advice.recommend import recommend
    from loaderdoc.advice.tradeoffs import tradeoffs
    from loaderdoc.base.summary import machine_line
    from loaderdoc.commands.check import load_facts
    from loaderdoc.commands.common import sample_bytes
    from loaderdoc.policy import batch_bytes_for

    facts = load_facts(args.machine)
    probe = None
    if args.probe_report:
        from loaderdoc.probing.report_file import load_report

        probe = load_report(args.probe_report)
    per_sample = sample_bytes(args.sample_shape, args.dtype)
    judged: list[dict[str, Any]] = []  # name, layout, settings_from, settings, unreadable
    config = None
    if args.config:
        from loaderdoc.checking.build import per_process_batch
        from loaderdoc.config import read_config
        from loaderdoc.config.report import describe_loader, not_set_text

        config = read_config(args.config)
        for loader in config.loaders:
            settings = config.settings(loader, strict=False)
            batch = args.batch_size or per_process_batch(loader, settings, facts)
            if batch is not None and batch != settings.batch_size:
                settings = settings.replace(batch_size=batch)
            not_set, framework = not_set_text(describe_loader(config, loader)["settings"])
            judged.append({"name": loader.name, "layout": loader.layout, "settings_from": "config",
                           "settings": settings, "unreadable": dict(loader.unreadable),
                           "not_set": not_set, "framework_defaults": framework})
    if not judged:  # no config, or one without DataLoader settings: the recommendation's tables
        rec = recommend(facts, batch_size=args.batch_size, sample_bytes=per_sample, probe=probe)
        origin = "recommended from the probe" if rec.source == "probe" else "recommended from machine facts"
        judged.append({"name": "", "layout": "", "settings_from": origin, "settings": rec.settings,
                       "unreadable": {}, "not_set": "", "framework_defaults": ""})
    loaders = []
    for entry in judged:
        settings = entry["settings"]
        # None: the probe's measured batch, scaled to this batch size, when there is a report
        batch_bytes = batch_bytes_for(settings.batch_size, per_sample)
        items = tradeoffs(facts, settings, batch_bytes=batch_bytes, probe=probe)
        shown_bytes = batch_bytes if batch_bytes is not None else _batch_bytes(items)
        loaders.append({**entry, "settings": settings.as_kwargs(), "batch_bytes": shown_bytes,
                        "knobs": [t.to_dict() for t in items], "items": items})
    return {
        "schema": TRADEOFFS_SCHEMA,
        "machine_line": machine_line(facts),
        "probe_report": _probe_json(args.probe_report, probe) if probe is not None else None,
        "config": {"path": args.config, "skipped": config.skipped,
                   "no_settings": None if config.loaders else config.no_settings_line()} if config is not None else None,
        "loaders": loaders,
        "machine": facts.to_dict(),
    }


def _batch_bytes(items: list[Any]) -> int | None:
    """The batch bytes the tables used (the batch_size table's current row), when they knew it."""
    for t in items:
        if t.knob == "batch_size":
            return next((r.data.get("batch_bytes") for r in t.rows if r.current), None)
    return None


def _probe_json(path: str, probe: Any) -> dict[str, Any]:
    w = probe.workload
    return {"path": path, "workload": w.name, "batch_size": w.batch_size, "batch_bytes": w.batch_bytes,
            "device": probe.device, "configurations": len(probe.results),
            "measured": len([r for r in probe.ok_results if r.batches_per_s])}


def run(args: argparse.Namespace) -> int:
    from loaderdoc.text.layout import output_width
    from loaderdoc.text.tradeoffs import render_text

    report = build_report(args)
    if args.json:
        doc = {**report, "loaders": [{k: v for k, v in entry.items() if k != "items"}
                                     for entry in report["loaders"]]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report, output_width(), explain_knobs=args.explain))
    return 0
