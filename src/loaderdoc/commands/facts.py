"""`loaderdoc facts`: print what loaderdoc detects and where each value was read from;
`--json` records a machine fixture.

The text is the summary `check` prints, then every reading section by section as
``name  value  <- source`` (``unknown: why`` for one that could not be read), within the
terminal's width: a long value or source goes on lines of its own, a long path breaks after a
``/``, nothing is cut.
"""

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
    from loaderdoc.text.layout import output_width
    from loaderdoc.text.machine import render_facts

    facts = load_facts(args.machine, cpu_info=args.cpu_info)
    if args.label:
        facts.label = args.label
    if args.json:
        sys.stdout.write(facts.to_json() + "\n")
        return 0
    sys.stdout.write(render_facts(facts, output_width()))
    return 0
