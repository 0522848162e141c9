"""One ``loaderdoc tune``: the machine, the trials as they run (:mod:`.trial`), the search that
chose each (:mod:`.search`), the checks a trial's epochs must pass, and the report (:mod:`.result`).
What happens is told to a :class:`Progress` (the command prints it); no torch, no textual."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Protocol

MIN_TRIAL_S = 30.0  # a trial's time limit, at the least, however small the budget


class Progress(Protocol):
    """What a tune tells as it runs: the command prints it (``commands/tune.py``)."""

    def starting(self, max_trials: int) -> None: ...

    def trial_started(self, number: int, settings: Any, purpose: str) -> None: ...

    def trial_ended(self, trial: Any, predicted: float | None, log_tail: list[str]) -> None: ...


@dataclass(frozen=True)
class TuneOptions:
    """The command line's limits: steps a trial's window needs, its first batch's time limit, the
    whole budget and the most trials."""

    steps: int
    first_batch_s: float
    budget_s: float
    trials: int


class Tuner:
    """One ``loaderdoc tune``: the machine, the trials as they run, the report."""

    def __init__(self, command: list[str], options: TuneOptions, progress: Progress) -> None:
        from loaderdoc import policy
        from loaderdoc.system.detect import detect
        from loaderdoc.tuning.result import TuneReport
        from loaderdoc.tuning.search import TuneSearch
        from loaderdoc.tuning.trial import TrialLimits

        self.command = command
        self.progress = progress
        self.facts = detect()
        self.per_rank = self.facts.cpus_per_rank
        # the budget is shared: no trial may take more than a third of it (MIN_TRIAL_S at least), so that
        # a slow or busy first trial still leaves two to compare it with
        self.limits = TrialLimits(steps=options.steps, first_batch_s=options.first_batch_s,
                                  max_s=min(options.budget_s, max(options.budget_s / 3, MIN_TRIAL_S),
                                            max(60.0, options.first_batch_s + 120.0)))
        self.started = time.monotonic()
        self.deadline = self.started + options.budget_s
        self.key: str | None = None
        self.report = TuneReport(command=command, cpu_budget=self.per_rank, steps_asked=options.steps,
                                 budget_s=options.budget_s)
        self.search_state = TuneSearch(run=self._trial, per_rank=self.per_rank, room=policy.Room.of(self.facts),
                                       max_trials=options.trials, deadline=self.deadline)
        self.running = None  # the trial under way: listed as interrupted should a signal stop tune in it
        self.epoch_batches: int | None = None  # a finished epoch of the script's own settings, in batches

    def search(self) -> None:
        self.progress.starting(self.search_state.max_trials)
        try:
            self.search_state.search()
        finally:
            self.report.trials = list(self.search_state.trials)

    def _trial(self, settings, purpose: str, predicted):
        from loaderdoc.tuning.search import window_cpu_use
        from loaderdoc.tuning.trial import run_trial
        from loaderdoc.watching.gpuidle import CUDA_EVENTS

        number = len(self.search_state.trials) + 1
        self.progress.trial_started(number, settings, purpose)
        search = self.search_state

        def evidence(trial, windows, records) -> None:
            slowest = min(windows, key=lambda w: w.rate)
            on_gpu = any((r.get("gpu") or {}).get("timing") == CUDA_EVENTS for r in records)
            ranks = max(1, len(windows))
            budget = self.per_rank / ranks if self.per_rank is not None else None
            search.note_use(trial, window_cpu_use(slowest, trial.settings.num_workers, budget, ranks=ranks,
                                                  on_gpu=on_gpu))

        deadline = self.deadline if number > 1 else None  # your own settings are always measured
        from loaderdoc.tuning.result import STOPPED, Trial, TrialSettings

        self.running = Trial(number=number, settings=settings or TrialSettings(), purpose=purpose, status=STOPPED,
                             reason="interrupted: tune was stopped during this trial", predicted_per_s=predicted,
                             settings_seen=settings is not None)
        run = run_trial(self.command, number, settings, self.key, self.limits, evidence=evidence, deadline=deadline)
        self.running = None
        trial = run.trial
        if number == 1 and len(run.windows) > 1 and self.per_rank is not None:
            # ranks of one job on this node (torchrun): each rank's share of the CPUs and /dev/shm
            search.per_rank = self.per_rank / len(run.windows)
            search.room.ranks = len(run.windows)
            self.report.cpu_budget = search.per_rank
        if number == 1 and run.key is not None:
            from loaderdoc.tuning.window import epoch_batches, settings_of

            self.key = run.key
            self.report.loader = {"key": run.key, **(settings_of(run.records, run.key) or {})}
            self.epoch_batches = epoch_batches(run.records, run.key)
        elif trial.ok and self.key is not None:
            from loaderdoc.tuning.result import FAILED
            from loaderdoc.tuning.window import epoch_batches, repeated_stream, replayed

            repeated = repeated_stream(self.epoch_batches, epoch_batches(run.records, self.key),
                                       trial.settings.num_workers, replayed(run.records, self.key))
            if repeated is not None:
                trial.status, trial.reason = FAILED, repeated
        self.progress.trial_ended(trial, predicted, run.log_tail)
        return trial

    def finish(self):
        report = self.report
        report.trials = list(self.search_state.trials) + ([self.running] if self.running is not None else [])
        report.stopped = report.stopped or self.search_state.stopped
        # a pick claims a comparison: none from an interrupted search or from your settings alone
        compared = sum(t.ok for t in report.trials) >= 2 and report.trials[0].ok
        report.pick = self.search_state.pick() if compared and report.stopped != "interrupted" else None
        from loaderdoc.tuning import verify

        search = self.search_state
        for t, quiet in verify.set_aside(search):
            report.notes.append(f"trial {t.number} ran beside other processes' {t.others_cpus:.1f} CPUs: the quieter "
                                f"run{'s' if len(quiet) > 1 else ''} of the same settings (trial "
                                f"{', '.join(map(str, quiet))}) {'are' if len(quiet) > 1 else 'is'} compared instead")
        if report.pick is not None:
            measured = verify.neighbours_text(search)
            if report.stopped == "settled":
                why = search.settled_reason()
                said = f"; {why}" if why else ""
                report.notes.append(f"no further trial: {measured or 'nothing near the pick was left to measure'}{said}")
            else:
                missing = [s.text() for s, _, _ in verify.unmeasured_neighbours(search)]
                if missing:
                    report.notes.append(f"not compared ({report.stopped_text}): {'; '.join(missing)}, the pick's "
                                        "nearest alternatives, were not measured")
        report.elapsed_s = time.monotonic() - self.started
        if report.pick is not None:  # the pick's "fastest trial" is the fastest measured: say what was not
            for t in report.trials[1:]:
                if not t.ok:
                    code = f", exit code {t.exit_code}" if t.exit_code is not None else ""
                    report.notes.append(f"trial {t.number} ({t.settings.text()}) {t.status}{code}: not measured, "
                                        "so not among the pick's candidates")
        if report.loader.get("key", "").startswith("loader:"):
            report.notes.append("the training loader has neither a role nor a known line: every DataLoader of the "
                                "script got the trial's settings")
        return report
