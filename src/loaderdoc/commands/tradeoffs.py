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
    from loaderdoc.commands.check import load_facts
    from loaderdoc.commands.common import sample_bytes
    from loaderdoc.policy import batch_bytes_for
    from loaderdoc.summary import machine_line

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


def render_text(report: dict[str, Any], width: int = 80, *, explain_knobs: bool = False) -> str:
    """The trade-off tables in lines of at most ``width`` columns: per loader a title and its
    settings, then per knob what raising and lowering it does, the evidence and the table."""
    from loaderdoc.commands.layout import wrap
    from loaderdoc.units import fmt_bytes

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
    from loaderdoc.commands.layout import wrap
    from loaderdoc.units import fmt_bytes

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
    from loaderdoc.advice.knobs import explain
    from loaderdoc.advice.tradeoffs import BOOLEAN_KNOBS
    from loaderdoc.commands.layout import table_lines, wrap

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


def run(args: argparse.Namespace) -> int:
    from loaderdoc.commands.layout import output_width

    report = build_report(args)
    if args.json:
        doc = {**report, "loaders": [{k: v for k, v in entry.items() if k != "items"}
                                     for entry in report["loaders"]]}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report, output_width(), explain_knobs=args.explain))
    return 0
