"""Command line: parses arguments and dispatches to a headless command or the TUI.

Kept cheap to import: nothing here imports torch or textual at module load, so ``--help`` and
``check`` stay fast. Each command's module, ``loaderdoc.commands.<command>``, exposes
``add_arguments(parser)`` and ``run(args)``, and is imported only when its command is named.
"""

from __future__ import annotations

import argparse
import gc
import importlib
import signal
import sys
import threading
import traceback
from collections.abc import Iterable
from typing import NoReturn

from loaderdoc._version import __version__
from loaderdoc.base.errors import (
    EXIT_BROKEN_PIPE,
    EXIT_CRITICAL,
    EXIT_INTERNAL,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PROBE_FAILED,
    EXIT_USAGE,
    EXIT_WARNING,
    STOP_SIGNALS,
    UserError,
)

EXIT_CODES_HELP = f"""\
exit codes:
  {EXIT_OK}    healthy / done
  {EXIT_WARNING}    check: warnings found
  {EXIT_CRITICAL}    check: critical findings (the run would crash or starve)
  {EXIT_USAGE}    bad usage or input (arguments, config file, --dataset, export path); nothing written
  {EXIT_PROBE_FAILED}    probe: no configuration could be measured
  {EXIT_INTERNAL}   internal error: a bug in loaderdoc (the traceback is printed; please report it)
  {EXIT_INTERRUPTED}  interrupted (Ctrl+C, SIGTERM, SIGHUP, SIGQUIT, SIGUSR2); stopped cleanly
  {EXIT_BROKEN_PIPE}  standard output was closed by its reader (as with '| head'); stopped quietly
"""

# subcommand -> what it does; its module, loaderdoc.commands.<subcommand>, has add_arguments(parser) and run(args)
COMMANDS = {
    "check": "health check of this machine (and a config) before a long run",
    "probe": "measure real DataLoaders on this machine and recommend settings",
    "facts": "print the detected machine facts (JSON records a fixture)",
    "tradeoffs": "what each DataLoader knob costs and buys on this machine (measured with --probe-report)",
    "watch": "run a training command and measure its DataLoaders (exit code: the command's)",
    "tune": "try DataLoader settings on the real training job, a few runs, and pick the best measured",
}


class _Parser(argparse.ArgumentParser):
    """argparse exits 2 on bad usage, which `check` uses for 'critical'; use our own code."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(EXIT_USAGE, f"loaderdoc: error: {message} (see 'loaderdoc --help')\n")


def build_parser(commands: Iterable[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; with ``commands``, only those commands' options are built (the others are
    listed by name and help, which is all ``loaderdoc --help`` shows), so a start imports only the
    command it runs."""
    parser = _Parser(
        prog="loaderdoc",
        description=(
            "Measure, diagnose and export PyTorch DataLoader settings for this machine. "
            "With no command, opens the interactive app in a terminal (without one, runs 'check')."
        ),
        epilog=EXIT_CODES_HELP
        + "\nexamples:\n"
        "  loaderdoc                                   interactive app (also over SSH; no terminal: check)\n"
        "  loaderdoc check --config train.yaml         lint a config against this machine\n"
        "  loaderdoc probe image --batch-size 64       measure and recommend\n"
        "  loaderdoc watch -- python train.py          measure the real training loop's data wait\n"
        "  loaderdoc tune -- python train.py           try settings on the real job, pick the best measured\n"
        "  loaderdoc --export loader.toml              write recommended settings\n"
        "  loaderdoc --report run.json                 open a watched run in the app (written by 'watch --report')\n"
        "  loaderdoc --report job.json                 open a job's table of nodes (check --distributed --json)\n"
        "  loaderdoc --report tune.json                open a tune's trials and pick (written by 'tune --report')\n"
        "  loaderdoc --config train.yaml               open the app on a config's settings, each with its source\n",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"loaderdoc {__version__}")
    from loaderdoc.export import FORMATS as EXPORT_FORMATS

    export = parser.add_argument_group("headless export (no command)")
    export.add_argument("--export", metavar="PATH", help="write the recommended settings to PATH ('-' = stdout)")
    export.add_argument("--format", choices=EXPORT_FORMATS,
                      help="export format (default: from PATH's suffix): toml, yaml, json, py (a DataLoader snippet), "
                      "lightning (data.init_args), hydra (a _target_ node), hf (TrainingArguments keys)")
    export.add_argument("--force", action="store_true", help="overwrite an existing export file")
    from loaderdoc.commands import check  # no command module imports torch or textual at load
    from loaderdoc.commands.common import add_workload_arguments

    check.add_machine_argument(export)
    opened = parser.add_argument_group("the app (no command)")
    # its own dest: `watch --report FILE` (a file to write) must never receive this one (a file to read)
    opened.add_argument("--report", dest="open_report", metavar="FILE",
                        help="open a report in the app: a watched run's (from 'loaderdoc watch --report FILE'; "
                        "wait vs step per loader in Run), a job's (from 'check --distributed --json'; the "
                        "table of nodes in Job) or a tune's (from 'loaderdoc tune --report FILE'; the trials and "
                        "the pick in Tune); a run's or a job's findings lead Diagnoses")
    opened.add_argument("--config", metavar="FILE",
                        help="open the app with the DataLoader settings read from FILE (any config 'check --config' "
                        "reads; its training loader) as the chosen settings, each field saying the key and line "
                        "that set it, or 'not set (torch default ...)'")
    add_workload_arguments(parser, with_probe=True)

    built = set(COMMANDS) if commands is None else set(commands)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, help_text in COMMANDS.items():
        sp = sub.add_parser(
            name,
            help=help_text,
            description=help_text,
            epilog=EXIT_CODES_HELP,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        if name in built:
            module = importlib.import_module(f"loaderdoc.commands.{name}")
            module.add_arguments(sp)
            sp.set_defaults(_run=module.run)
            _keep_top_level_values(parser, sp)
    return parser


def _commands_named(argv: list[str]) -> set[str]:
    """The command names among the words: the one given is one of them (a word that is also an
    option's value, as in ``--preset check``, only builds one command more)."""
    return set(argv) & set(COMMANDS)


def _keep_top_level_values(parser: argparse.ArgumentParser, sub: argparse.ArgumentParser) -> None:
    """Options both levels define (--batch-size, --export, ...) work on either side of COMMAND.

    argparse lets a subcommand's defaults overwrite what was given before the command name;
    suppressing those defaults keeps `loaderdoc --batch-size 64 check` from losing the 64.
    """
    top_dests = {a.dest for a in parser._actions}
    for action in sub._actions:
        if action.dest in top_dests and action.dest != "help":
            action.default = argparse.SUPPRESS


def _terminate_as_interrupt(signum, frame) -> None:
    # a job scheduler's SIGTERM, a hangup, ...: the same clean stop as Ctrl+C, workers reaped, partial results kept
    raise KeyboardInterrupt


def _contained(args: argparse.Namespace):
    """Commands that may run a user's --dataset factory or a probe (probe, a probed --export, the
    app) kill, on the way out, every process started below loaderdoc, in whatever session: a
    factory's or a dataset's servers and daemons do not outlive the command."""
    import contextlib

    if args.command not in (None, "probe", "tune"):
        return contextlib.nullcontext()
    from loaderdoc.probing.reaper import contained

    return contained()


def run_as_program() -> NoReturn:
    """The ``loaderdoc`` program (and ``python -m loaderdoc``): main, then the process's end.

    Where a command imported torch, the collector tracks some 190 000 objects, and Python's
    shutdown walks them before freeing them: 0.3 CPU-s of a probe's 1.9 (measured on 2 cores).
    They are frozen first, so the shutdown frees what their counts free and skips the walk; atexit
    handlers, threads and files end as usual. Not in main: a caller that stays (a test) keeps its
    collector whole."""
    from loaderdoc.base.torchload import freeze_torch_once_imported

    freeze_torch_once_imported()
    code = main()
    if "torch" in sys.modules:
        gc.freeze()
    sys.exit(code)


def main(argv: list[str] | None = None) -> int:
    from loaderdoc.base import output, usercode

    code = _main(argv)
    usercode.leave_past_user_threads()  # a thread a --dataset factory left must not hold the exit
    output.exit_now_if_asked(code)  # a thread still inside torch must not wake during finalization
    return code


def _main(argv: list[str] | None) -> int:
    from loaderdoc.base import output
    from loaderdoc.base.usercode import UserCodeExit

    with output.standard_streams_guarded():
        try:
            code = _run(argv)
            output.finish_output()
            return code
        except UserError as err:  # output errors too: stdout closed or full is exit 3
            print(f"loaderdoc: error: {err}", file=sys.stderr)
            return err.exit_code
        except KeyboardInterrupt:
            print("loaderdoc: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        except UserCodeExit as exc:  # os._exit() in the user's Dataset, in this process, mid-probe
            print(f"loaderdoc: error: the --dataset code {exc} in loaderdoc's process; it stopped with "
                  "nothing written; the Dataset must not end the process", file=sys.stderr)
            return EXIT_USAGE
        except BrokenPipeError:
            output.discard_stdout()
            return EXIT_BROKEN_PIPE
        except Exception:  # a bug: never let it exit 1, which `check` uses for "warnings"
            traceback.print_exc()
            print(f"loaderdoc: internal error (exit {EXIT_INTERNAL}); please report the traceback above",
                  file=sys.stderr)
            return EXIT_INTERNAL


def _run(argv: list[str] | None) -> int:
    words = sys.argv[1:] if argv is None else argv
    args = build_parser(_commands_named(words)).parse_args(words)
    if threading.current_thread() is threading.main_thread():
        for name in STOP_SIGNALS:
            signum = getattr(signal, name, None)
            # one the process was started ignoring (nohup's SIGHUP) stays ignored, here and in what it runs
            if signum is not None and signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, _terminate_as_interrupt)
    if args.open_report is not None and (args.command or args.export is not None):
        given = f"'{args.command}'" if args.command else "--export"
        raise UserError(f"--report FILE opens a watched run, a job or a tune report in the app; it does not go with {given} "
                        "(to write a report: loaderdoc watch --report FILE -- COMMAND)")
    if args.command and getattr(args, "config", None) and args.command not in ("check", "tradeoffs"):
        raise UserError(f"--config FILE goes with the app, 'check' or 'tradeoffs', not '{args.command}'")
    with _contained(args):
        if args.command:
            return int(args._run(args))
        if args.export is not None:  # '' too: an error, not the app
            from loaderdoc.commands import export_cmd

            return export_cmd.run(args)
        from loaderdoc.commands.app import run_app

        return run_app(args)


if __name__ == "__main__":  # pragma: no cover
    run_as_program()
