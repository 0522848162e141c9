"""`loaderdoc check`: a fast health check before a long run, with exit codes for job scripts.

Imports neither torch nor textual: it must answer in well under half a second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from loaderdoc.errors import EXIT_CRITICAL, EXIT_OK, EXIT_WARNING, UserError

CHECK_SCHEMA = "loaderdoc.check/1"
EXIT_FOR = {"ok": EXIT_OK, "warning": EXIT_WARNING, "critical": EXIT_CRITICAL}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from loaderdoc.commands.common import add_workload_arguments

    parser.add_argument(
        "--config", metavar="FILE",
        help="lint the DataLoader settings in FILE: TOML, YAML, JSON or a Python config (read, never run), in any "
        "layout: settings are found by their keys' meaning (workers, workers_per_gpu, IMS_PER_BATCH, pin_mem, ...) "
        "at any depth, and what the file inherits is followed (mmengine _base_ and read_base, detectron2 _BASE_ "
        "and LazyConfig imports, Hydra defaults and ${...}); loaderdoc's own [dataloader] table, and [training] "
        "to describe the script",
    )
    parser.add_argument("--show-read", action="store_true",
                        help="with --config: print what was read from FILE, from which file and line, and what is "
                        "not set; no machine checks (exit 0, or 3 when FILE cannot be read)")
    add_workload_arguments(parser, with_probe=False)
    parser.add_argument("--json", action="store_true", help=f"print one JSON document (schema {CHECK_SCHEMA}; "
                        "with --distributed, loaderdoc.job/1)")
    add_machine_argument(parser)
    add_distributed_arguments(parser)


MAX_JOB_TIMEOUT_S = 86_400  # a day: past any launcher's own wait; far larger ones overflow torch's timedelta


def job_timeout(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= MAX_JOB_TIMEOUT_S:  # NaN too
        raise argparse.ArgumentTypeError(f"expected seconds above 0 and at most {MAX_JOB_TIMEOUT_S} (a day), "
                                         f"got {text[:40]!r}")
    return value


def add_distributed_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("a whole job (under torchrun or srun)")
    g.add_argument("--distributed", action="store_true",
                   help="check every rank's machine of a torchrun/srun job and print one table for the job on "
                   "rank 0, naming the node that differs (needs torch; gloo, no GPU needed)")
    g.add_argument("--timeout", type=job_timeout, default=60.0, metavar="SECONDS",
                   help="--distributed: how long rank 0 waits for every rank to join (default 60); a node whose "
                   "torchrun never starts is torchrun's own wait: bound it with torchrun --rdzv-conf timeout=N "
                   "(static rendezvous) or join_timeout=N (c10d)")


def add_machine_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--machine", metavar="NAME|FILE",
        help="use recorded machine facts (a fixture name or a JSON file from 'loaderdoc facts --json') "
        "instead of detecting this machine",
    )


def load_facts(machine: str | None, *, cpu_info: bool = False):
    """Detect this machine, or load recorded facts when --machine is given."""
    if machine:
        from loaderdoc.system.fixtures import load_machine

        try:
            return load_machine(machine)
        except FileNotFoundError as exc:
            raise UserError(str(exc)) from None
        except ValueError as exc:  # MachineFileError: the file is not a recorded machine
            raise UserError(f"--machine {machine}: {exc}; record one with 'loaderdoc facts --json'") from None
    from loaderdoc.system.detect import detect

    return detect(cpu_info=cpu_info)


def read_report(args: argparse.Namespace) -> dict:
    """``--show-read``: what FILE sets and where, without the machine (schema loaderdoc.config/1)."""
    from loaderdoc.config import read_config
    from loaderdoc.config.report import CONFIG_SCHEMA, describe

    if not args.config:
        raise UserError("check: --show-read needs --config FILE (the config to read)")
    return {"schema": CONFIG_SCHEMA, **describe(read_config(args.config))}


def _is_loaderdoc_training(config, context_type) -> bool:
    """[training] describes the script for the rules when it is loaderdoc's: in a file of loaderdoc's
    own tables, or holding nothing but its facts; a project's `training:` (epochs, lr) is not."""
    from dataclasses import fields

    table = config.training_table
    if table is None:
        return False
    names = {f.name for f in fields(context_type)}
    return config.loaderdoc_shaped or bool(table) and all(key in names for key in table)


def per_process_batch(loader, settings, facts) -> int | None:
    """The batch one DataLoader makes: a total over all GPUs (detectron2's IMS_PER_BATCH, YOLO's
    batch) is split over this machine's GPUs, one process each; None when the file does not set it."""
    if "batch_size" not in loader.keys or settings.batch_size is None:
        return None
    if loader.batch_scope == "total":
        return max(1, settings.batch_size // max(1, facts.usable_gpus))
    return settings.batch_size


def build_report(args: argparse.Namespace) -> dict:
    """Everything `check` knows, as the documented JSON structure."""
    from loaderdoc.advice.findings import new_findings, worst
    from loaderdoc.advice.recommend import batch_bytes_for, recommend
    from loaderdoc.advice.rules import TrainingContext, evaluate
    from loaderdoc.commands.common import sample_bytes
    from loaderdoc.config import read_config
    from loaderdoc.summary import machine_summary

    facts = load_facts(args.machine)
    config = context = None
    per_sample = sample_bytes(args.sample_shape, args.dtype)
    checked: list[dict] = []  # one entry per DataLoader in the config
    if args.config:
        config = read_config(args.config)
        if _is_loaderdoc_training(config, TrainingContext):
            context = TrainingContext.from_mapping(config.training_table, where=str(config.path),
                                                   lines=config.training_lines)
        for loader in config.loaders:
            settings = config.settings(loader, strict=False)
            batch = args.batch_size or per_process_batch(loader, settings, facts)
            if batch is not None and batch != settings.batch_size:
                settings = settings.replace(batch_size=batch)
            loader_batch = batch_bytes_for(batch, per_sample)
            # a setting computed at run time is unknown, not torch's default: judge the machine only
            judged = None if loader.unreadable else settings
            checked.append({
                "loader": loader, "settings": settings, "batch_bytes": loader_batch, "batch": batch,
                "findings": evaluate(facts, judged, batch_bytes=loader_batch, context=context),
            })
    first = checked[0] if checked else None
    settings = first["settings"] if first else None
    # a batch size the file does not set is not "given": the recommendation names none
    batch_size = args.batch_size or (first["batch"] if first else None)
    batch_bytes = first["batch_bytes"] if first else batch_bytes_for(batch_size, per_sample)
    findings = first["findings"] if first else evaluate(facts, None, batch_bytes=batch_bytes, context=context)
    seen = {f.key for f in findings}
    for entry in checked[1:]:  # what only another loader (val, test) has
        findings = findings + new_findings(entry["findings"], seen)
    status = worst([f for entry in checked for f in entry["findings"]] + list(findings))
    rec = recommend(facts, batch_size=batch_size, sample_bytes=per_sample)
    from loaderdoc._serde import to_dict

    return {
        "schema": CHECK_SCHEMA,
        "status": status,
        "exit_code": EXIT_FOR[status],
        "summary": {
            "cpu_budget": facts.cpu.budget,
            "cpu_budget_source": facts.cpu.budget_source,
            "cpus_per_rank": facts.cpus_per_rank,
            "memory_budget_bytes": facts.memory.budget,
            "shm_free_bytes": facts.shm.free.get(),
            "gpus": facts.gpu.count,
            "usable_gpus": facts.usable_gpus,
            "lines": dict(machine_summary(facts)),
        },
        "config": _config_json(args, config, checked, settings, context),
        "batch_bytes": batch_bytes,
        "findings": [to_dict(f) for f in findings],
        "recommended": {"settings": rec.settings.as_kwargs(), "reasons": rec.reasons},
        "machine": facts.to_dict(),
    }


def _config_json(args, config, checked: list[dict], settings, context) -> dict:
    from loaderdoc.config.report import describe

    described = describe(config) if config is not None else {}
    return {
        "path": args.config,
        "settings": settings.as_kwargs() if settings else None,  # the first loader's, as before
        "training": context.to_dict() if context else None,
        **{k: v for k, v in described.items() if k not in ("path", "loaders")},
        "loaders": [_loader_json(config, entry, described_loader)
                    for entry, described_loader in zip(checked, described.get("loaders", []), strict=True)],
        "skipped": config.skipped if config else [],
    }


def _loader_json(config, entry: dict, described: dict) -> dict:
    from loaderdoc._serde import to_dict
    from loaderdoc.advice.findings import worst

    loader = entry["loader"]
    return {
        "name": loader.name,
        "layout": loader.layout,
        "settings": entry["settings"].as_kwargs(),  # as judged: the file's, else the defaults named in set_by
        "set_by": {k: v["set_by"] for k, v in described["settings"].items()},  # null: the file does not set it
        "read": described["settings"],
        "batch_scope": described["batch_scope"],
        "batch_per_process": entry["batch"],
        "unreadable": dict(loader.unreadable),  # computed at run time: its settings were not judged
        "found": {k: {"key": loader.where(k), "line": config.line_of_origin(loader.origins.get(k))}
                  for k in loader.keys},
        "batch_bytes": entry["batch_bytes"],
        "status": worst(entry["findings"]),
        "findings": [to_dict(f) for f in entry["findings"]],
    }


def render_text(report: dict) -> str:
    from loaderdoc.summary import finding_lines
    from loaderdoc.units import fmt_bytes

    out = ["loaderdoc check", ""]
    for topic, line in report["summary"]["lines"].items():
        out.append(f"  {topic:<9} {line}")
    out.append("")
    config = report["config"]
    if config["path"]:
        from loaderdoc.commands.config_text import config_lines

        out.extend(config_lines(config))
    if report["batch_bytes"]:
        out.append(f"Batch size in memory: {fmt_bytes(report['batch_bytes'])}")
    findings = report["findings"]
    out.append("Findings:" if findings else "Findings: none - nothing here will starve or crash a DataLoader")
    for f in findings:
        out.extend(finding_lines(f))
    out.append("")
    rec = report["recommended"]
    out.append("Recommended for this machine (from facts; 'loaderdoc probe' measures):")
    for key, value in rec["settings"].items():
        reason = rec["reasons"].get(key, "")
        out.append(f"  {key:<19}= {value!r:<7} {reason}")
    out.append("")
    out.append(f"status: {report['status']} (exit {report['exit_code']})")
    return "\n".join(out) + "\n"


def run(args: argparse.Namespace) -> int:
    if getattr(args, "show_read", False):
        from loaderdoc.commands.config_text import render_read
        from loaderdoc.commands.layout import output_width

        report = read_report(args)
        if args.json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            sys.stdout.write("\n".join(render_read(report, output_width())) + "\n")
        return EXIT_OK
    if getattr(args, "distributed", False):
        from loaderdoc.commands import check_distributed

        return check_distributed.run(args, build_report)
    report = build_report(args)
    if args.json:
        sys.stdout.write(json.dumps(report, indent=2) + "\n")
    else:
        sys.stdout.write(render_text(report))
    return report["exit_code"]
