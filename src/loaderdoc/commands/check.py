"""`loaderdoc check`: a fast health check before a long run, with exit codes for job scripts.

Imports neither torch nor textual: it must answer in well under half a second.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import TYPE_CHECKING

from loaderdoc.base.errors import EXIT_OK, UserError
from loaderdoc.checking import CHECK_SCHEMA

if TYPE_CHECKING:
    from loaderdoc.checking.report import CheckReport



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


def build_report(args: argparse.Namespace) -> CheckReport:
    """Everything `check` knows, typed: the arguments into :func:`loaderdoc.checking.build.build_check`."""
    from loaderdoc.checking.build import build_check
    from loaderdoc.commands.common import sample_bytes

    return build_check(load_facts(args.machine), config_path=args.config, batch_size=args.batch_size,
                       sample_bytes=sample_bytes(args.sample_shape, args.dtype))


def run(args: argparse.Namespace) -> int:
    if getattr(args, "show_read", False):
        from loaderdoc.text.config import render_read
        from loaderdoc.text.layout import output_width

        report = read_report(args)
        if args.json:
            sys.stdout.write(json.dumps(report, indent=2) + "\n")
        else:
            sys.stdout.write("\n".join(render_read(report, output_width())) + "\n")
        return EXIT_OK
    if getattr(args, "distributed", False):
        from loaderdoc.commands import check_distributed

        return check_distributed.run(args, lambda a: build_report(a).to_json())
    report = build_report(args)
    if args.json:
        sys.stdout.write(json.dumps(report.to_json(), indent=2) + "\n")
    else:
        from loaderdoc.text.check import render_text

        sys.stdout.write(render_text(report))
    return report.exit_code
