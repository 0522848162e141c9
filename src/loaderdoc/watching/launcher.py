"""The watch launcher's core: run the command to its end with the signals a supervisor sends passed
on, answer SIGUSR1 while it runs, and build the run's report from its records (at the end or
mid-run). ``loaderdoc watch`` (commands/watch.py) parses, prints and writes the files.
"""

from __future__ import annotations

import contextlib
import sys


def run_child(command: list[str], env: dict[str, str], forwarder) -> int:
    """Run ``command`` to its end; its exit code. ``forwarder`` (from :func:`loaderdoc.watching.forward.held`)
    passes on the signals a supervisor sends the launcher meanwhile."""
    from loaderdoc.base.preflight import cannot_start
    from loaderdoc.watching.records import exit_code_of

    try:
        forwarder.start(command, env)
    except OSError as exc:
        raise cannot_start("watch", command[0], exc) from None
    return exit_code_of(forwarder.wait())


@contextlib.contextmanager
def on_sigusr1(fn):
    """While in the block, SIGUSR1 runs ``fn()`` in the launcher. Installed before the child starts
    (exec resets a caught signal to its default in the child, so the child never inherits it) and
    kept until the final report is out (a late SIGUSR1's default action would end the launcher)."""
    import signal
    import threading

    if not hasattr(signal, "SIGUSR1") or threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = signal.signal(signal.SIGUSR1, once_at_a_time(fn))
    try:
        yield
    finally:
        signal.signal(signal.SIGUSR1, saved)


def once_at_a_time(fn):
    """A signal handler running ``fn()``, never nested: a signal arriving while it runs makes it run
    once more when it is done (several such signals, once), so a request is never lost to one still
    being answered. It runs in the launcher's main thread between the waits for the child (PEP 475
    resumes them)."""
    state = {"busy": False, "again": False}

    def handler(signum, frame) -> None:
        if state["busy"]:
            state["again"] = True  # asked while answering: the answer may predate what was asked about
            return
        state["busy"] = True
        try:
            while True:
                state["again"] = False
                try:
                    fn()
                except Exception as exc:  # a mid-run look must never end the watch
                    print(f"loaderdoc watch: could not report so far: {exc}", file=sys.stderr)
                if not state["again"]:
                    break
        finally:
            state["busy"] = False

    return handler


class WatchedRun:
    """One watched run: where its records go, and the report built from them (at the end or mid-run)."""

    def __init__(self, command: list[str], records_dir, plan=None) -> None:
        from loaderdoc.watching.records import RecordsReader

        self.command = command
        self.plan = plan  # --apply's ApplyPlan, or None
        self.reader = RecordsReader(records_dir)
        self.ended = False  # the child has exited: the final report follows, no look mid-run
        self._facts = None

    def facts(self):
        """The machine facts, detected once (fast path, no torch) when a report first needs them."""
        if self._facts is None:
            from loaderdoc.system.detect import detect

            self._facts = detect()
        return self._facts

    def report(self, exit_code: int | None):
        """The run's typed report (a WatchReport) from the records written so far."""
        from loaderdoc.watching.build import watch_report

        records = self.reader.read()
        facts = self.facts() if any(r.get("loaders") for r in records) else None
        report = watch_report(records, command=self.command, exit_code=exit_code, facts=facts)
        if self.plan is not None:
            report.apply = self.plan.outcome(report.loaders)
        return report
