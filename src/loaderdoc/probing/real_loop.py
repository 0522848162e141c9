"""The probe's rate beside a real training loop's (issue 48).

The probe's step is a stand-in: a sleep, or a GPU kernel that pays none of the model's launches,
the optimizer or the training process's threads. Where the same job's real loop was measured (a
watched run, or a tune trial), the two rates at the same worker count, pinning and batch size say how far
the stand-in is from the job: on an H200 a ResNet-50 job ran at 0.67x the probe's rate at the same settings.
The app says that ratio beside the probe's recommendation. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass

from loaderdoc.probing.result import ProbeReport


@dataclass(frozen=True)
class RealLoop:
    """One measured rate of the real training loop, at the settings it ran."""

    steps_per_s: float
    num_workers: int
    batch_size: int | None  # None: not known (then compared at any batch size)
    pin_memory: bool | None  # None: not known (then the probe's runs pinned or not)
    source: str  # where it was measured, as the app says it: "tune trial 3", "the watched run run.json"


@dataclass(frozen=True)
class VersusRealLoop:
    """The real loop's rate against the probe's measured rate at the same worker count."""

    real: RealLoop
    probe_per_s: float | None  # the probe's measured rate at the real loop's settings; None: not measured
    probe_batch_size: int

    @property
    def ratio(self) -> float | None:
        return self.real.steps_per_s / self.probe_per_s if self.probe_per_s else None

    def lines(self) -> list[str]:
        real = self.real
        head = f"the real loop ({real.source}): {real.steps_per_s:.1f} steps/s at num_workers={real.num_workers}"
        if self.ratio is None:
            return [head, f"  the probe measured no configuration at num_workers={real.num_workers}: no ratio"]
        return [head, f"  the probe measured {self.probe_per_s:.1f} there: the job runs at {self.ratio:.2f}x "
                      "the probe's rate (its step is a stand-in)"]


def versus_real_loop(report: ProbeReport, loops: list[RealLoop]) -> VersusRealLoop | None:
    """The first of ``loops`` (the caller's order: the likeliest match first) at the probe's batch
    size whose worker count (and pinning, where known) the probe measured, against the mean of
    those runs; else the first at that batch size, with no probe rate. None where no loop ran at
    the probe's batch size (the rates would not compare)."""
    batch = report.workload.batch_size
    comparable = [loop for loop in loops if loop.batch_size in (None, batch)]
    for loop in comparable:
        rates = [r.batches_per_s for r in report.results
                 if r.ok and r.batches_per_s and r.settings.num_workers == loop.num_workers
                 and loop.pin_memory in (None, r.settings.pin_memory)]
        if rates:
            return VersusRealLoop(loop, sum(rates) / len(rates), batch)
    return VersusRealLoop(comparable[0], None, batch) if comparable else None
