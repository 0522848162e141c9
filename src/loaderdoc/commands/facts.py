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
    from loaderdoc.commands.layout import output_width

    facts = load_facts(args.machine, cpu_info=args.cpu_info)
    if args.label:
        facts.label = args.label
    if args.json:
        sys.stdout.write(facts.to_json() + "\n")
        return 0
    sys.stdout.write(render_text(facts, output_width()))
    return 0


VALUE_COLUMN = 16  # sources line up after values this long; a longer value just pushes its source on


def render_text(facts, width: int = 80) -> str:
    """The summary lines, then each reading with its source, in lines of at most ``width``."""
    from loaderdoc.commands.layout import wrap
    from loaderdoc.summary import machine_summary, reading_sections

    out = []
    for topic, line in machine_summary(facts):
        out += wrap(line, width, f"{topic:<9} ", " " * 10)
    out += ["", "Where each value was read from (name  value  <- source):"]
    sections = reading_sections(facts)
    name_w = max(len(name) for _, rows in sections for name, _, _ in rows)
    value_w = max([len(value) for _, rows in sections for _, value, _ in rows if len(value) <= VALUE_COLUMN] + [1])
    indent = " " * (2 + name_w + 2)
    for title, rows in sections:
        out += ["", title]
        for name, value, reading in rows:
            source = f"<- {reading.source}" if reading.source else "<- (source not recorded)"
            line = f"  {name:<{name_w}}  {value:<{value_w}}  {source}"
            if len(line) <= width:
                out.append(line)
                continue
            out += wrap(value, width, f"  {name:<{name_w}}  ", indent)
            out += wrap(reading.source or "(source not recorded)", width, indent + "<- ", indent + "   ")
    return "\n".join(out) + "\n"
