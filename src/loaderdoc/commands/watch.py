"""`loaderdoc watch -- COMMAND [ARGS...]`: run a training command and measure its DataLoaders.

The launcher imports neither torch nor textual. The child runs with the user's stdin, stdout and
stderr, and with ``loaderdoc/watching/sitedir`` first on its PYTHONPATH: its sitecustomize installs
the hook (``loaderdoc.watching.hook``), and every process of the command that iterates a DataLoader
writes its records to ``records-<pid>.json`` in ``LOADERDOC_WATCH_DIR`` (a private temporary
directory); the report merges them all. A signal a supervisor sends the launcher (SIGINT,
SIGTERM, SIGHUP, SIGQUIT, SIGUSR2, SIGALRM) reaches the child once, then the report is written
(:mod:`loaderdoc.watching.forward`); Ctrl+C reaches it from the terminal (the whole foreground
group gets SIGINT) and is not forwarded a second time. SIGUSR1 to the launcher (``kill -USR1
<launcher pid>``) is not forwarded: the launcher reads the records written so far (the hook rewrites them every few seconds) and
prints the findings so far on stderr (with ``--report`` it writes the report so far too), and the
command runs on. The launcher exits with the child's code (128 + N for a child killed by signal N);
the summary goes to stderr so the child's stdout stays clean; ``--json`` prints the report on
stdout after the child's output.
"""

from __future__ import annotations

import argparse
import sys

WATCH_SCHEMA = "loaderdoc.watch/1"  # the report (loaderdoc.watching.build.WATCH_SCHEMA)
TRACE_STEPS = 10  # loaderdoc.watching.trace's DEFAULT_STEPS and DEFAULT_AFTER (not imported: --help stays cheap)
TRACE_AFTER = 10


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from loaderdoc.commands.common import positive_int

    parser.usage = ("loaderdoc watch [--report FILE] [--json] [--apply FILE] [--fixes FILE] [--trace DIR "
                    "[--trace-steps N]]\n                       -- COMMAND [ARGS...]\n"
                    "       loaderdoc watch --merge REPORT [REPORT ...] [--report FILE] [--json]")
    parser.epilog = (
        "exit code: the command's own (128+N when signal N killed it), so a job script acts on it as before;\n"
        "  3 (usage) before the command runs: no command, command not found, --report into a missing directory,\n"
        "    an --apply file that is missing, invalid or sets nothing --apply changes\n"
        "\n--apply FILE: try settings without a code change. Every DataLoader the command builds is built with\n"
        "  the settings of FILE (any format 'loaderdoc --export' writes, or a LightningCLI / Hydra / Hugging Face\n"
        "  config): a loader FILE names (train_dataloader, val/eval, test, predict) goes to the loader the framework\n"
        "  built for that role (Lightning's train_dataloader()..., the HF Trainer's get_train_dataloader()...), an\n"
        "  unnamed one ([dataloader], data.init_args) to every loader. Only num_workers, prefetch_factor,\n"
        "  persistent_workers, pin_memory, in_order, timeout and multiprocessing_context are applied; batch_size,\n"
        "  shuffle and drop_last change the training itself and are never applied (one line says so). A\n"
        "  [process] table's torch_threads (loaderdoc's own layout) sets OMP_NUM_THREADS in the command's\n"
        "  environment and torch.set_num_threads in each process. The report shows per loader what the script\n"
        "  asked and what ran.\n"
        "\nexamples:\n"
        "  loaderdoc watch -- python train.py --lr 3e-4\n"
        "  loaderdoc watch --report run.json -- python -m mypkg.train  (the report as JSON in run.json)\n"
        "  loaderdoc watch --apply fast.toml -- python train.py  (run with the settings 'loaderdoc --export fast.toml' chose)\n"
        "  loaderdoc watch --fixes next.toml -- python train.py  (the changes the findings propose, per loader)\n"
        "  loaderdoc watch --apply next.toml --fixes next2.toml -- python train.py  (try them; again until none)\n"
        "  loaderdoc watch --trace traces -- python train.py  (a profiler trace of 10 steady steps, for Perfetto)\n"
        "  kill -USR1 <pid of loaderdoc watch>  (findings so far on stderr, and in FILE with --report)\n"
        "  loaderdoc watch --merge node0.json node1.json --report job.json  (one report for a job's nodes)\n"
    )
    parser.add_argument("--report", metavar="FILE",
                        help=f"write the report (JSON, schema {WATCH_SCHEMA}) to FILE, replacing an earlier watch "
                             "report there ('-' = stdout, after the command's output, as --json)")
    parser.add_argument("--force", action="store_true",
                        help="let --report and --fixes replace a file loaderdoc did not write (never the command's "
                             "own files or the --apply input)")
    parser.add_argument("--json", action="store_true",
                        help=f"print the report (schema {WATCH_SCHEMA}) on stdout after the command's output")
    parser.add_argument("--apply", metavar="FILE",
                        help="build the command's DataLoaders with FILE's settings (num_workers, prefetch_factor, "
                             "persistent_workers, pin_memory, in_order, timeout, multiprocessing_context; never "
                             "batch_size, shuffle or drop_last), per loader where FILE names train/val/test, and "
                             "[process] torch_threads (OMP_NUM_THREADS, torch.set_num_threads); no code change")
    parser.add_argument("--fixes", metavar="FILE",
                        help="write the settings to try next as a file --apply reads (TOML, per loader: what --apply "
                             "set plus the changes the findings propose); not written when nothing is to change")
    parser.add_argument("--trace", metavar="DIR",
                        help="record a torch.profiler trace of a few steady steps of the loop (after "
                             f"{TRACE_AFTER} steady batches), the data waits marked, into DIR/trace-<pid>.json "
                             "(Chrome/Perfetto); profiling slows the traced steps, and the summary says by how much")
    parser.add_argument("--trace-steps", type=positive_int, metavar="N",
                        help=f"steps the trace records (default {TRACE_STEPS})")
    parser.add_argument("--merge", nargs="+", metavar="REPORT",
                        help="instead of running a command: merge the reports each node's watch wrote into one "
                             "(every rank in one table, stragglers across the job)")
    parser.add_argument("watched", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                        help="the command to run, e.g. python train.py --lr 3e-4; its exit code is watch's")


def command_of(args: argparse.Namespace) -> list[str]:
    from loaderdoc.commands.common import command_after_dashes

    return command_after_dashes(args.watched, "watch")


def so_far(run, target, guard) -> None:
    """SIGUSR1: the findings so far on stderr (and the report so far in --report's file)."""
    import json

    from loaderdoc.base.safe_write import write_text
    from loaderdoc.text.watch import render_summary

    if run.ended:
        return
    from loaderdoc.base.errors import UserError

    report = run.report(None)
    if target is not None:  # first: the text on stderr says the look is complete
        try:
            if guard is not None:
                guard(target, "watch report", "--report")
            write_text(target, json.dumps(report.to_json(), indent=2) + "\n", force=True)
        except UserError as err:
            print(f"loaderdoc: error: {err}", file=sys.stderr)
    sys.stderr.write(render_summary(report))
    sys.stderr.flush()


def run(args: argparse.Namespace) -> int:
    import os
    import shutil
    import tempfile
    from pathlib import Path

    from loaderdoc.base.errors import UserError
    from loaderdoc.base.own_files import check_replaceable, command_files
    from loaderdoc.base.preflight import check_startable, check_workplace
    from loaderdoc.base.safe_write import check_writable
    from loaderdoc.watching.forward import held
    from loaderdoc.watching.launcher import WatchedRun, on_sigusr1, run_child
    from loaderdoc.watching.records import child_env

    if args.merge:
        return merge(args)
    command = command_of(args)
    check_workplace("watch")
    check_startable("watch", command)  # a missing command or #! interpreter is said before anything runs
    as_json, target = report_destination(args)
    protected = command_files(command)
    if args.apply is not None:
        protected[Path(args.apply)] = "the --apply input"

    def guard(path, kind, option):  # before the command runs, and again as the file is written
        check_replaceable(path, kind=kind, option=option, force=args.force, protected=protected)

    if target is not None:
        check_writable(target, force=True)  # a missing directory is refused before the command runs
        guard(target, "watch report", "--report")
    fixes = Path(args.fixes) if args.fixes is not None else None
    if fixes is not None:
        if args.fixes in ("", "-"):
            raise UserError(f"watch: --fixes needs a file name ('{args.fixes}' given); it writes a TOML file "
                            "for --apply")
        check_writable(fixes, force=True)
        guard(fixes, "fixes file", "--fixes")
        if target is not None and target.exists() and fixes.exists() and os.path.samefile(target, fixes):
            raise UserError(f"watch: --report and --fixes name one file ({fixes}); give each its own")
    plan = None
    if args.apply is not None:  # read before the command runs: a bad file runs nothing
        from loaderdoc.watching.apply_file import plan_from_file

        plan = plan_from_file(args.apply)
        for line in (plan.not_applied_line(), plan.process_line(os.environ)):
            if line:
                print(f"loaderdoc watch: {line}", file=sys.stderr)
    trace = _trace_request(args)  # last: it may create the folder, and nothing after it refuses the run
    # held from before the records folder exists until the report is out: a supervisor's signal
    # reaches the command, and the launcher still writes the report and removes the folder
    with held() as forwarder:
        tmpdir = tempfile.mkdtemp(prefix="loaderdoc-watch-")
        watch = WatchedRun(command, Path(tmpdir), plan)
        with on_sigusr1(lambda: so_far(watch, target, guard)):
            try:
                env = child_env(tmpdir, apply=plan.env_value() if plan else None, trace=trace)
                env.update(plan.environment() if plan else {})  # [process] torch_threads: OMP_NUM_THREADS
                code = run_child(command, env, forwarder)
                watch.ended = True
                report = watch.report(code)
            finally:
                shutil.rmtree(tmpdir, ignore_errors=True)
            code = _finish(report, code, target, as_json=as_json, guard=guard)
            return _write_fixes(report, fixes, code, guard) if fixes is not None else code


def _trace_request(args: argparse.Namespace) -> tuple[str, int] | None:
    """--trace's folder (created if missing, checked writable) and steps, before the command runs."""
    from pathlib import Path

    from loaderdoc.base.errors import UserError
    from loaderdoc.base.safe_write import writable_folder

    if args.trace is None:
        if args.trace_steps is not None:
            raise UserError("watch: --trace-steps goes with --trace DIR (the folder the trace is written to)")
        return None
    if not args.trace:
        raise UserError("watch: --trace needs a folder to write the trace into, e.g. --trace traces")
    return str(writable_folder(Path(args.trace), "--trace")), args.trace_steps or TRACE_STEPS


def _write_fixes(report, target, code: int, guard=None) -> int:
    """--fixes: the next settings to try, or one line saying why there are none; the exit code."""
    from loaderdoc.base.errors import EXIT_USAGE, UserError
    from loaderdoc.base.safe_write import write_text
    from loaderdoc.watching.fixes import fix_tables, fixes_toml

    tables, notes = fix_tables(report)
    if not tables:
        why = "; ".join(notes) or "nothing to change"
        print(f"loaderdoc watch: --fixes {target} not written: {why}, and --apply set nothing", file=sys.stderr)
        return code
    try:
        if guard is not None:
            guard(target, "fixes file", "--fixes")
        write_text(target, fixes_toml(report, tables, notes), force=True)
    except UserError as err:  # the run happened: say so, keep a failing child's code
        print(f"loaderdoc: error: {err}", file=sys.stderr)
        return code or EXIT_USAGE
    proposed = any(e.proposed for e in report.loaders)
    print(f"loaderdoc watch: --fixes {target}: " + (
        "the settings to try next ('loaderdoc watch --apply' it)" if proposed else
        "no finding proposes a change (a fixed point): it holds the settings this run used"), file=sys.stderr)
    return code


def merge(args: argparse.Namespace) -> int:
    """``--merge``: one report from the reports of a job's nodes; 0 once it is written."""
    from pathlib import Path

    from loaderdoc.base.errors import UserError
    from loaderdoc.base.jsondoc import load_json
    from loaderdoc.base.safe_write import check_writable
    from loaderdoc.watching.merge import merge as merge_runs
    from loaderdoc.watching.report_file import HOW_TO_WRITE, WatchReportError, watch_report_from

    if [a for a in args.watched or [] if a != "--"]:
        raise UserError("watch: give a command to run or --merge REPORT ..., not both")
    if args.apply is not None or args.fixes is not None or args.trace is not None or args.trace_steps is not None:
        raise UserError("watch: --apply, --fixes and --trace go with a command to run, not with --merge")
    as_json, target = report_destination(args)
    if target is not None:
        check_writable(target, force=True)
        if any(Path(p).resolve() == target.resolve() for p in args.merge):
            raise UserError(f"watch: --report {target} is one of the reports to merge; write the merged "
                            "report to another file")
        from loaderdoc.base.own_files import check_replaceable

        check_replaceable(target, kind="watch report", option="--report", force=args.force)
    documents, reports = [], []
    for path in args.merge:
        data = load_json(Path(path), what="watch report", error=WatchReportError, how_to_write=HOW_TO_WRITE)
        reports.append(watch_report_from(data, path))  # checked as the app checks it: one line naming the bad key
        for earlier, earlier_data in zip(args.merge[:len(documents)], documents, strict=True):
            why = _same_run(Path(earlier), earlier_data, Path(path), data)
            if why:  # its batches would count twice
                raise UserError(f"watch --merge: {path} and {earlier} are the same run ({why}); give each "
                                "node's report once")
        documents.append(data)
    _finish(merge_runs(reports, list(args.merge)), 0, target, as_json=as_json)
    return 0


def report_destination(args: argparse.Namespace):
    """(print the report on stdout, the file to write it to): ``--report -`` is stdout, as
    ``--export -`` is, the same as ``--json``; never a file named '-'."""
    from pathlib import Path

    from loaderdoc.base.errors import UserError

    if args.report is None:
        return args.json, None
    if not args.report.strip():
        raise UserError("watch: --report needs a file name (or '-' for stdout), got an empty one")
    if args.report == "-":
        if args.json:
            raise UserError("watch: --report - and --json both print the report on stdout; give one of them")
        return True, None
    return args.json, Path(args.report)


def _same_run(a, a_data: dict, b, b_data: dict) -> str | None:
    """Why two reports to merge are one run, or None: the same file (a symlink, a hard link) or the
    same content (a copy). Not judged by host and pid: containers on two nodes share both (ranks
    that repeat are refused by the merge itself)."""
    import os

    try:
        if os.path.samefile(a, b):
            return "the same file"
    except OSError:
        pass
    return "the same content" if a_data == b_data else None


def _finish(report, code: int, target, *, as_json: bool, guard=None) -> int:
    """The summary on stderr, the report on stdout (--json) and in FILE (--report); the exit code."""
    import json

    from loaderdoc.base.errors import EXIT_USAGE, UserError
    from loaderdoc.base.safe_write import write_text
    from loaderdoc.text.watch import render_summary

    sys.stderr.write(render_summary(report))
    if not (as_json or target is not None):
        return code
    text = json.dumps(report.to_json(), indent=2) + "\n"
    if as_json:
        sys.stdout.write(text)
    if target is not None:
        try:
            if guard is not None:
                guard(target, "watch report", "--report")
            write_text(target, text, force=True)
        except UserError as err:  # the run happened: say so, keep a failing child's code
            print(f"loaderdoc: error: {err}", file=sys.stderr)
            return code or EXIT_USAGE
    return code
