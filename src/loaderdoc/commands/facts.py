"""`loaderdoc facts`: print what loaderdoc detects; `--json` records a machine fixture."""

from __future__ import annotations

import argparse
import sys


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from loaderdoc.commands.check import add_machine_argument

    parser.add_argument("--json", action="store_true", help="print the MachineFacts JSON (a recordable fixture)")
    parser.add_argument("--cpu-info", action="store_true", help="also read the CPU model and flags (slow, ~1 s)")
    parser.add_argument("--label", default="", help="a human name stored in the JSON, e.g. 'lab box 3'")
    add_machine_argument(parser)


def run(args: argparse.Namespace) -> int:
    from loaderdoc.commands.check import load_facts
    from loaderdoc.summary import machine_summary

    facts = load_facts(args.machine, cpu_info=args.cpu_info)
    if args.label:
        facts.label = args.label
    if args.json:
        sys.stdout.write(facts.to_json() + "\n")
        return 0
    for topic, line in machine_summary(facts):
        sys.stdout.write(f"{topic:<9} {line}\n")
    return 0
