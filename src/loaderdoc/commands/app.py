"""``loaderdoc`` with no command: the interactive app, or ``check`` where there is no terminal.

Textual is imported here, not at load, and only when the app opens.
"""

from __future__ import annotations

import argparse
import sys

from loaderdoc.base.errors import EXIT_INTERNAL, EXIT_OK, UserError
from loaderdoc.commands.common import sample_bytes

NO_TERMINAL = "loaderdoc: no terminal; running 'loaderdoc check' (open the app from a terminal)"
NO_TERMINAL_REPORT = "loaderdoc: no terminal; printing the watched run's summary (open the app from a terminal)"
NO_TERMINAL_JOB = "loaderdoc: no terminal; printing the job report's table (open the app from a terminal)"
NO_TERMINAL_TUNE = "loaderdoc: no terminal; printing the tune report's trials (open the app from a terminal)"
APP_CRASHED = ("loaderdoc: internal error: the app stopped on an unexpected exception (traceback above); "
               "please report it")


def workload_from_args(args: argparse.Namespace):
    """The app's starting workload from the command line's workload options."""
    from loaderdoc.session import ProbeRequest

    batch = getattr(args, "batch_size", None) or 32
    w = ProbeRequest(
        preset=getattr(args, "preset", None),
        dataset=getattr(args, "dataset", None),
        batch_size=batch,
        batch_size_given=getattr(args, "batch_size", None) is not None,
        sample_bytes=sample_bytes(getattr(args, "sample_shape", None), getattr(args, "dtype", None) or "uint8"),
    )
    if getattr(args, "step_ms", None) is not None:
        w.step_ms = float(args.step_ms)
        w.step_ms_given = True
    if getattr(args, "budget", None) is not None:
        w.budget_s = float(args.budget)
    if getattr(args, "preset", None) and not w.dataset:
        w.choose_preset(args.preset)  # the preset's batch size and step where none was given, as `probe` does
    return w


def has_terminal() -> bool:
    """Whether the app can run here: stdin, stdout and stderr are all a terminal.

    Textual reads the keys from stdin (``/dev/null`` in a job script: the app would wait for ever)
    and draws on stderr (a pipe or a log file would get its escape codes); and a redirected
    stdout (``loaderdoc | less``, ``loaderdoc > report.txt``) asks for text, not an app.
    """
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            if stream is None or not stream.isatty():
                return False
        except (AttributeError, ValueError, OSError):  # closed, or not a real file
            return False
    return True


def run_check_instead(args: argparse.Namespace) -> int:
    """``loaderdoc check`` with the same options, said in one line on stderr: its exit code."""
    from loaderdoc.commands import check

    print(NO_TERMINAL, file=sys.stderr, flush=True)
    check_args = argparse.Namespace(**vars(args))
    for name, default in (("config", None), ("json", False), ("machine", None)):
        if not hasattr(check_args, name):  # options only `check` has
            setattr(check_args, name, default)
    return check.run(check_args)


def print_run(run) -> int:
    """A watched run's report as text, where the app cannot open: its header, then its findings."""
    from loaderdoc.text.watch import render_opened

    print(NO_TERMINAL_REPORT, file=sys.stderr, flush=True)
    sys.stdout.write(render_opened(run))
    return EXIT_OK


def print_job(job) -> int:
    """A job report as `check --distributed` prints it, where the app cannot open."""
    from loaderdoc.text.job import render_text

    print(NO_TERMINAL_JOB, file=sys.stderr, flush=True)
    sys.stdout.write(render_text(job, with_store=False))
    return EXIT_OK


def print_tune(tune) -> int:
    """A tune report as `loaderdoc tune` prints it, where the app cannot open."""
    from loaderdoc.text.tune import render

    print(NO_TERMINAL_TUNE, file=sys.stderr, flush=True)
    sys.stdout.write(render(tune.report))
    return EXIT_OK


def run_app(args: argparse.Namespace) -> int:
    watch_run = job_run = tune_run = None
    if getattr(args, "open_report", None) is not None:  # a bad file is refused before anything opens
        from loaderdoc.cluster.job_report import JobReport
        from loaderdoc.reports import open_report
        from loaderdoc.watching.report import WatchReport

        opened = open_report(args.open_report)
        if isinstance(opened, WatchReport):
            watch_run = opened
        elif isinstance(opened, JobReport):
            job_run = opened
        else:
            tune_run = opened
    config = config_choice(args.config) if getattr(args, "config", None) else None  # bad input: exit 3 first
    if getattr(args, "preset", None):
        from loaderdoc.probing.workloads import get_preset

        get_preset(args.preset)  # an unknown name exits with the CLI's usage error, like `probe`
    if not has_terminal():
        if job_run is not None:
            return print_job(job_run)
        if tune_run is not None:
            return print_tune(tune_run)
        return print_run(watch_run) if watch_run is not None else run_check_instead(args)
    # read the fast machine facts while textual imports: the machine view paints sooner
    from concurrent.futures import ThreadPoolExecutor

    from loaderdoc.system.detect import detect

    if getattr(args, "machine", None):  # a recorded machine, as `check --machine` reads it
        from loaderdoc.commands.check import load_facts

        sources = {"facts": load_facts(args.machine)}
    else:
        pool = ThreadPoolExecutor(1, thread_name_prefix="loaderdoc-facts")
        sources = {"early_facts": pool.submit(detect, cpu_info=False)}
        pool.shutdown(wait=False)

    from loaderdoc.tui.app import make_app

    app = make_app(workload=workload_from_args(args), watch_run=watch_run, job_run=job_run,
                   tune_run=tune_run, config=config, **sources)
    _cancel_probe_on_sigterm(app)
    return run_to_exit_code(app)


def config_choice(path: str):
    """The training loader of the user's config (else its first) as the app's chosen settings, each
    field with its source; None, said on stderr, for a file with no DataLoader settings."""
    from loaderdoc.config import read_config
    from loaderdoc.config.meaning import SCOPE_WORDS
    from loaderdoc.config.report import default_text, describe_loader, where_text
    from loaderdoc.session import ConfigChoice

    config = read_config(path)
    if not config.loaders:
        print(f"loaderdoc: {config.no_settings_line()}", file=sys.stderr, flush=True)
        return None
    loader = next((lo for lo in config.loaders if lo.name == "train"), config.loaders[0])
    sources = {}
    described = describe_loader(config, loader)
    for setting, entry in described["settings"].items():
        if entry["set_by"] is not None and "unreadable" not in entry:
            scope = described["batch_scope"] if setting == "batch_size" else None
            sources[setting] = f"from {where_text(entry, path, with_file=False)}" + (
                f"; {SCOPE_WORDS[scope]}" if scope in ("per_gpu", "total") else "")
        elif "unreadable" in entry:
            sources[setting] = f"not read: {entry['unreadable']} ({entry['why']}); torch's default shown"
        elif entry.get("default") == "framework":
            sources[setting] = f"not set; {entry['default_source']}: {entry['value']!r}"
        else:
            sources[setting] = f"not set ({default_text(setting, entry)})"
    return ConfigChoice(path=str(path), loader=loader.name, settings=config.settings(loader, strict=False),
                        sources=sources, read=config.read)


def run_to_exit_code(app, **run_options) -> int:
    """Run ``app`` (``run_options`` go to ``App.run``) to its end: the exit code it chose, or
    EXIT_INTERNAL when it stopped on an unexpected exception.

    Textual catches an exception raised in the app (a message handler, an action), restores the
    terminal, prints the traceback and returns from ``run()`` as if the app had ended normally;
    only its ``return_code`` (1) says it crashed. That was exit 0, which a script takes for done.
    """
    try:
        result = app.run(**run_options)
    except KeyboardInterrupt:  # SIGTERM (the CLI turns it into KeyboardInterrupt) ends the app's loop
        _stop_probe(app)
        raise
    except UserError:
        raise
    except Exception:  # textual failed outside the app's message loop (starting the terminal ...)
        import traceback

        traceback.print_exc()
        print(APP_CRASHED, file=sys.stderr)
        return EXIT_INTERNAL
    if app.return_code:
        print(APP_CRASHED, file=sys.stderr)
        return EXIT_INTERNAL
    return EXIT_OK if result is None else int(result)


def _cancel_probe_on_sigterm(app) -> None:
    """On SIGTERM, cancel a running probe at once (its workers die within ~0.1 s, not after the
    app's teardown), then stop as the CLI does (KeyboardInterrupt -> exit 130)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        return
    previous = signal.getsignal(signal.SIGTERM)

    def on_sigterm(signum, frame) -> None:
        app.session.stop_probe()
        if callable(previous):
            previous(signum, frame)
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)


def _stop_probe(app, wait_s: float = 10.0) -> None:
    """Cancel a probe still running in the app's thread and wait for it: it kills its measuring
    process group within about 0.1 s. Otherwise the thread would go on probing, forking workers
    for the rest of the budget, before the interpreter could exit."""
    import threading
    import time

    app.session.stop_probe()
    deadline = time.monotonic() + wait_s
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join(max(0.0, deadline - time.monotonic()))
