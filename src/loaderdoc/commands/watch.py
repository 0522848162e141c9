"""`loaderdoc watch -- COMMAND [ARGS...]`: run a training command and measure its DataLoaders.

The launcher imports neither torch nor textual. The child runs with the user's stdin, stdout and
stderr, and with ``loaderdoc/watching/sitedir`` first on its PYTHONPATH: its sitecustomize installs
the hook (``loaderdoc.watching.hook``), which writes each process's records into ``LOADERDOC_WATCH_DIR``.
Ctrl+C reaches the child from the terminal (the whole foreground group gets SIGINT; the launcher
swallows it while it waits), SIGTERM to the launcher is forwarded to the child. The launcher exits
with the child's code (128 + N for a child killed by signal N); the summary goes to stderr so the
child's stdout stays clean; ``--json`` prints the report on stdout after the child's output.
"""

from __future__ import annotations

import argparse
import sys

WATCH_SCHEMA = "loaderdoc.watch/1"  # the report (loaderdoc.watching.report.WATCH_SCHEMA)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.usage = "loaderdoc watch [--report FILE] [--json] -- COMMAND [ARGS...]"
    parser.epilog = (
        "exit code: the command's own (128+N when signal N killed it), so a job script acts on it as before;\n"
        "  3 (usage) before the command runs: no command, command not found, --report into a missing directory\n"
        "\nexamples:\n"
        "  loaderdoc watch -- python train.py --lr 3e-4\n"
        "  loaderdoc watch --report run.json -- python -m mypkg.train  (the report as JSON in run.json)\n"
    )
    parser.add_argument("--report", metavar="FILE",
                        help=f"write the report (JSON, schema {WATCH_SCHEMA}) to FILE, replacing it")
    parser.add_argument("--json", action="store_true",
                        help=f"print the report (schema {WATCH_SCHEMA}) on stdout after the command's output")
    parser.add_argument("watched", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS...]",
                        help="the command to run, e.g. python train.py --lr 3e-4; its exit code is watch's")


def command_of(args: argparse.Namespace) -> list[str]:
    from loaderdoc.errors import UserError

    command = list(args.watched or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command or not command[0]:
        raise UserError("watch: no command given; run it as: loaderdoc watch -- python train.py [ARGS...]")
    return command


def exit_code_of(returncode: int) -> int:
    """A shell's view of the child's status: its code, or 128 + N when signal N killed it."""
    return returncode if returncode >= 0 else 128 - returncode


def child_env(records_dir: str, environ: dict[str, str] | None = None) -> dict[str, str]:
    """The child's environment: the hook's directory first on PYTHONPATH, the user's after it."""
    import os
    from pathlib import Path

    from loaderdoc import watching
    from loaderdoc.watching.hook import ENV_DIR

    env = dict(os.environ if environ is None else environ)
    sitedir = str(Path(watching.__file__).resolve().parent / "sitedir")
    env["PYTHONPATH"] = sitedir + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env[ENV_DIR] = records_dir
    return env


def run_child(command: list[str], env: dict[str, str]) -> int:
    """Run ``command`` to its end; its exit code. Meanwhile SIGINT is swallowed (the terminal sent
    it to the child too) and SIGTERM is forwarded to the child.

    Both handlers are Python functions installed before the child starts, never SIG_IGN: exec
    resets caught signals to their default in the child (an ignored one would stay ignored), and
    a signal that arrives while the child is being started is not lost."""
    import signal
    import subprocess
    import threading

    from loaderdoc.errors import UserError

    started: list[subprocess.Popen] = []
    pending: list[int] = []

    def forward(signum, frame) -> None:
        if started:
            started[0].send_signal(signum)
        else:
            pending.append(signum)

    saved = {}
    if threading.current_thread() is threading.main_thread():
        saved[signal.SIGINT] = signal.signal(signal.SIGINT, lambda signum, frame: None)
        saved[signal.SIGTERM] = signal.signal(signal.SIGTERM, forward)
    try:
        try:
            proc = subprocess.Popen(command, env=env)
        except FileNotFoundError:
            raise UserError(f"watch: command not found: {command[0]}") from None
        except PermissionError:
            raise UserError(f"watch: cannot run {command[0]}: permission denied") from None
        except OSError as exc:
            raise UserError(f"watch: cannot run {command[0]}: {exc.strerror or exc}") from None
        started.append(proc)
        for signum in pending:
            proc.send_signal(signum)
        return exit_code_of(proc.wait())
    finally:
        for signum, handler in saved.items():
            signal.signal(signum, handler)


def read_records(directory) -> dict | None:
    """The records of the first process (by file name) that iterated a DataLoader, None when none
    did (no file) or they are unreadable. (Several processes: only the first is read for now.)"""
    for path in sorted(directory.glob("records-*.json")):
        return read_records_file(path)
    return None


def read_records_file(path) -> dict | None:
    import json

    from loaderdoc.watching.hook import RECORDS_SCHEMA

    try:
        records = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        print(f"loaderdoc watch: cannot read the child's records: {exc}", file=sys.stderr)
        return None
    if not isinstance(records, dict) or records.get("schema") != RECORDS_SCHEMA:
        print(f"loaderdoc watch: the child's records are not {RECORDS_SCHEMA}; ignored", file=sys.stderr)
        return None
    return records


def run(args: argparse.Namespace) -> int:
    import json
    import shutil
    import tempfile
    from pathlib import Path

    from loaderdoc.errors import EXIT_USAGE, UserError
    from loaderdoc.safe_write import check_writable, write_text
    from loaderdoc.watching.report import build_report, render_summary

    command = command_of(args)
    target = Path(args.report) if args.report else None
    if target is not None:
        check_writable(target, force=True)  # a missing directory is refused before the command runs
    tmpdir = tempfile.mkdtemp(prefix="loaderdoc-watch-")
    try:
        code = run_child(command, child_env(tmpdir))
        records = read_records(Path(tmpdir))
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    report = build_report(records, command=command, exit_code=code)
    sys.stderr.write(render_summary(report))
    if not (args.json or target is not None):
        return code
    text = json.dumps(report, indent=2) + "\n"
    if args.json:
        sys.stdout.write(text)
    if target is not None:
        try:
            write_text(target, text, force=True)
        except UserError as err:  # the run happened: say so, keep a failing child's code
            print(f"loaderdoc: error: {err}", file=sys.stderr)
            return code or EXIT_USAGE
    return code
