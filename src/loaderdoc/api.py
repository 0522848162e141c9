"""``loaderdoc.watch(loader)``: the same measurement as ``loaderdoc watch``, from one line of code.

    for batch in (watched := loaderdoc.watch(loader)):   # each ``for`` over it is an epoch
        step(batch)
    print(watched.summary())                              # or watched.report(): loaderdoc.watch/1

No torch import here: whatever ``iter(loader)`` returns is timed (a DataLoader's settings are read
off the object). Under ``loaderdoc watch`` the DataLoader is measured by the launcher's hook as
well; the two records are independent. The sampler (memory, workers, /dev/shm) runs while an
epoch runs and stops when it ends; no file is written.
"""

from __future__ import annotations

import sys
from typing import Any

from loaderdoc.watching.hook import Recorder, clock


class LoaderWatch:
    """An iterable over ``loader`` that records every epoch; ``report()`` / ``summary()`` any time."""

    def __init__(self, loader: Any) -> None:
        self.loader = loader
        self._recorder = Recorder(sample_per_epoch=True)
        self._facts = None  # the machine, detected once, at the first report

    def __iter__(self):
        started = clock()
        return self._recorder.wrap(self.loader, iter(self.loader), started)

    def __len__(self) -> int:
        return len(self.loader)

    def records(self) -> dict[str, Any]:
        """The raw records (schema ``loaderdoc.watch-records/2``) so far."""
        return self._recorder.to_dict()

    def report(self) -> dict[str, Any]:
        """The ``loaderdoc.watch/1`` report so far (``command`` and ``exit_code`` are None)."""
        return self._report().to_json()

    def _report(self):
        # imported here: the report loads the rule catalogue, which iterating alone never needs
        from loaderdoc.system.detect import detect
        from loaderdoc.watching.build import watch_report

        if self._facts is None:
            self._facts = detect()
        return watch_report(self.records(), command=None, exit_code=None, facts=self._facts)

    def summary(self) -> str:
        """The text ``loaderdoc watch`` prints: one line per loader, then the findings."""
        from loaderdoc.text.watch import render_summary

        return render_summary(self._report())

    def print_summary(self, file=None) -> None:
        (file or sys.stderr).write(self.summary())


def watch(loader: Any) -> LoaderWatch:
    """Wrap ``loader`` (a DataLoader or any re-iterable) so that iterating it is measured."""
    return LoaderWatch(loader)
