"""`loaderdoc tune -- COMMAND [ARGS...]`: the best DataLoader settings, measured on the user's real job.

Runs the command a few times (:mod:`loaderdoc.tuning.trial`), the first with the script's own
settings, each later one with the settings the search (:mod:`loaderdoc.tuning.search`) chose from
what the earlier trials measured, put into the training loader as it is built (``watch --apply``'s
mechanism, no code change). Prints the trials and the pick on stdout (progress on stderr), writes
the pick with ``--export`` in any export format and the whole report with ``--report`` (JSON,
``loaderdoc.tune/1``, which ``loaderdoc --report FILE`` opens). The launcher imports neither torch
nor textual.

Exit code: 0 the script's own settings are within the tolerance of the fastest trial; 1 the pick
is faster (worth changing); 4 nothing to compare: the script's own settings could not be measured
(it failed, hung before its first batch, or never iterated a DataLoader) or no other trial was; 3
bad usage; 130 interrupted (the trials so far are printed and written; no pick, no --export).
"""

from __future__ import annotations

import argparse
import sys

from loaderdoc.text.tune import render, shell
from loaderdoc.tuning.result import TUNE_SCHEMA

DEFAULT_BUDGET_S = 900.0
DEFAULT_STEPS = 40
DEFAULT_FIRST_BATCH_S = 180.0
DEFAULT_TRIALS = 6
MEASURED = ("num_workers", "prefetch_factor", "persistent_workers")  # what the trials decide


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from loaderdoc.commands.common import positive_float, positive_int
    from loaderdoc.export import FORMATS

    parser.usage = ("loaderdoc tune [--budget S] [--steps N] [--trials N] [--first-batch-timeout S]\n"
                    "                      [--export FILE [--format F] [--force]] [--report FILE] -- COMMAND [ARGS...]")
    parser.epilog = (
        "exit code: 0 your settings are within tolerance of the fastest trial; 1 the pick is faster (worth\n"
        "  changing); 4 nothing to compare: your own settings could not be measured (the command failed, hung\n"
        "  before its first batch or never iterated a DataLoader), or no other trial was; 3 bad usage, before\n"
        "  anything runs; 130 interrupted (no pick, no --export: the search did not finish)\n"
        "\nThe command runs for real, a few times (3-6 trials), each stopped once its steady window settled\n"
        "  (its whole process tree: workers and helpers too). Every trial sets LOADERDOC_TUNE_TRIAL=<n> in\n"
        "  its environment: a script may skip checkpoints and uploads when it is set. Only the training\n"
        "  loader is changed (the one a framework names train, else the shuffled one, else the one whose\n"
        "  loop took longest; known by the line that built it), and only num_workers, prefetch_factor and\n"
        "  persistent_workers, and the training process's intra-op threads: batch size, shuffle, sampler\n"
        "  and collate stay as written. Before it concludes, the pick's neighbours (a worker either side,\n"
        "  the other thread count) are measured, whatever its model predicts; your settings and the pick\n"
        "  are measured again in turns where other processes' load or the noise could decide, and no gain\n"
        "  inside the noise is called worth changing. How it searches: docs/tune.md.\n"
        "\nexamples:\n"
        "  loaderdoc tune -- python train.py --epochs 1\n"
        "  loaderdoc tune --export loader.toml --report tune.json -- python train.py\n"
        "  loaderdoc --report tune.json  (the trials in the app)\n"
        "  loaderdoc watch --apply loader.toml -- python train.py  (run with the pick, watched)\n"
    )
    parser.add_argument("--budget", type=positive_float, default=DEFAULT_BUDGET_S, metavar="S",
                        help=f"seconds for all trials together (default {DEFAULT_BUDGET_S:.0f}): none starts after it, "
                             "and one running then is measured as it stands (your own settings' trial runs to the end)")
    parser.add_argument("--steps", type=positive_int, default=DEFAULT_STEPS, metavar="N",
                        help=f"steady batches a trial's window holds at least (default {DEFAULT_STEPS})")
    parser.add_argument("--trials", type=positive_int, default=DEFAULT_TRIALS, metavar="N",
                        help=f"at most this many trials, your settings' included (default {DEFAULT_TRIALS})")
    parser.add_argument("--first-batch-timeout", type=positive_float, default=DEFAULT_FIRST_BATCH_S, metavar="S",
                        help=f"a trial with no DataLoader batch this long after its start is stopped "
                             f"(default {DEFAULT_FIRST_BATCH_S:.0f})")
    parser.add_argument("--export", metavar="FILE", help="write the pick to FILE ('-' = stdout) in an export format")
    parser.add_argument("--format", choices=FORMATS, help="the export's format (default: from FILE's suffix)")
    parser.add_argument("--force", action="store_true",
                        help="overwrite an existing --export file, and let --report replace a file loaderdoc did not "
                             "write (never the command's own files)")
    parser.add_argument("--report", metavar="FILE",
                        help=f"write the report (JSON, schema {TUNE_SCHEMA}) to FILE, replacing an earlier tune "
                             "report there; "
                             "'loaderdoc --report FILE' opens it")
    parser.add_argument("tuned", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                        help="the training command, e.g. python train.py --epochs 1")


def command_of(args: argparse.Namespace) -> list[str]:
    from loaderdoc.base.preflight import check_startable, check_workplace
    from loaderdoc.commands.common import command_after_dashes

    command = command_after_dashes(args.tuned, "tune")
    check_workplace("tune")
    check_startable("tune", command)
    return command


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from loaderdoc.base.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBE_FAILED, EXIT_WARNING, UserError
    from loaderdoc.base.safe_write import check_writable
    from loaderdoc.export import format_for

    if args.trials < 2:  # one trial is your settings alone: nothing to compare, so nothing to conclude
        raise UserError(f"tune: --trials {args.trials} measures only your own settings, with nothing to compare "
                        "them with; give --trials 2 or more (or 'loaderdoc watch -- COMMAND' to measure them alone)")
    command = command_of(args)
    if args.budget is None:  # the top-level --budget (the probe's) shares the name and kept its None
        args.budget = DEFAULT_BUDGET_S
    fmt = None
    if args.export is not None:  # refused before any trial runs
        fmt = format_for(args.export, args.format)
        if args.export != "-":
            check_writable(Path(args.export).expanduser(), force=args.force)
    if args.report is not None:
        if args.report.strip() in ("", "-"):  # stdout holds the trials' table: a report there would mix in
            raise UserError(f"tune: --report needs a file name ('{args.report}' given); the trials' table "
                            "goes to stdout, and 'loaderdoc --report FILE' opens the file")
        check_writable(Path(args.report), force=True)
        _check_report(args, command)
    from loaderdoc.tuning.tuner import TuneOptions, Tuner

    tuner = Tuner(command, TuneOptions(steps=args.steps, first_batch_s=args.first_batch_timeout,
                                       budget_s=args.budget, trials=args.trials), _Progress(command))
    interrupted = False
    try:
        tuner.search()
    except KeyboardInterrupt:
        interrupted = True
        tuner.report.stopped = "interrupted"
    report = tuner.finish()
    # `--export -` puts the settings on stdout: the trials' table goes to stderr, or it would be mixed
    # into the TOML a pipe or a redirect receives (issue 49)
    table_out = sys.stderr if args.export == "-" else sys.stdout
    table_out.write(render(report))
    table_out.flush()
    code = (EXIT_INTERRUPTED if interrupted else EXIT_PROBE_FAILED if report.pick is None else
            EXIT_OK if report.pick.user_within_tolerance else EXIT_WARNING)
    report.exit_code = code
    _write_outputs(report, args, fmt, tuner)
    return code


class _Progress:
    """The tune's progress, one line each on stderr (stdout holds the trials' table)."""

    def __init__(self, command: list[str]) -> None:
        self.command = command
        self.what = "your settings"  # the running trial's settings, as its failure names them

    def starting(self, max_trials: int) -> None:
        from loaderdoc.tuning.trial import ENV_TRIAL

        _say(f"runs `{shell(self.command)}` up to {max_trials} times, each stopped once its steady window "
             f"settled; each trial sets {ENV_TRIAL}=<n> (skip checkpoints and uploads when it is set); Ctrl+C stops")

    def trial_started(self, number: int, settings, purpose: str) -> None:
        self.what = settings.text() if settings is not None else "your settings"
        _say(f"trial {number}: {self.what}" + (f" ({purpose}) ..." if settings is not None else " ..."))

    def trial_ended(self, trial, predicted: float | None, log_tail: list[str]) -> None:
        from loaderdoc.base.units import fmt_share

        if trial.ok:
            predicted_text = f", predicted {predicted:.1f}" if predicted else ""
            _say(f"trial {trial.number}: {trial.steps_per_s:.1f} steps/s{predicted_text}, waited "
                 f"{fmt_share(trial.wait_share)} ({trial.window_steps} batches in {trial.window_s:.1f} s"
                 f"{'' if trial.settled else ', not settled'}; {trial.duration_s:.0f} s in all)")
        else:
            code = f" (exit code {trial.exit_code})" if trial.exit_code is not None else ""
            _say(f"trial {trial.number} ({self.what}): {trial.status}{code}: {trial.reason}")
            for line in log_tail:
                _say(f"  | {line}")


def _check_report(args, command: list[str]) -> None:
    """--report replaces an earlier tune report; any other file only with --force, never the command's own."""
    from pathlib import Path

    from loaderdoc.base.own_files import check_replaceable, command_files

    check_replaceable(Path(args.report), kind="tune report", option="--report", force=args.force,
                      protected=command_files(command))


def _write_outputs(report, args, fmt, tuner) -> None:
    """The report, then the export: each written whatever became of the other's path during the
    trials (an --export folder removed meanwhile lost the report too); the first failure is raised
    once both were tried."""
    import json
    from pathlib import Path

    from loaderdoc.base.errors import UserError
    from loaderdoc.base.safe_write import write_text

    failed: list[UserError] = []
    if args.report is not None:
        try:
            _check_report(args, tuner.command)  # again as it is written: a trial may have made a file there
            write_text(Path(args.report), json.dumps(report.to_dict(), indent=2) + "\n", force=True)
            _say(f"wrote {args.report} (open it with: loaderdoc --report {args.report})")
        except UserError as exc:
            failed.append(exc)
    if args.export is not None and report.pick is not None:
        from loaderdoc.advice.recommend import settled_for_machine
        from loaderdoc.export import write_export

        # what the trials did not measure follows this machine's findings (pin_memory without a GPU)
        settings, changed = settled_for_machine(report.pick_settings(), tuner.facts, MEASURED)
        header = export_lines(report, tuner.facts) + [f"also set for this machine: {line}" for line in changed]
        try:
            written = write_export(args.export, settings, fmt=fmt, force=args.force, header=header,
                                   torch_threads=report.pick.settings.torch_threads)
            if written is not None:
                _say(f"wrote {written} ({fmt})")
        except UserError as exc:
            failed.append(exc)
    elif args.export is not None:
        why = "nothing was measured to pick from" if not report.user_measured else f"no pick: {report.no_pick_reason}"
        _say(f"--export {args.export} not written: {why}")
    for exc in failed[1:]:
        _say(str(exc))
    if failed:
        raise failed[0]


def export_lines(report, facts) -> list[str]:
    from loaderdoc.base.summary import machine_line

    pick = report.pick
    lines = [f"measured by loaderdoc tune on the real job: {shell(report.command)}", f"for {machine_line(facts)}",
             f"pick: {pick.reason}"]
    if pick.gain is not None:
        lines.append(f"{pick.gain:.2f}x the steps/s of the script's own settings")
    return lines


def _say(message: str) -> None:
    print(f"loaderdoc tune: {message}", file=sys.stderr, flush=True)
