"""Which measured configuration to recommend: :func:`choose`, the one pick every front end and
the probe's search share. Part of :mod:`loaderdoc.policy`; import it from there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from loaderdoc.base.units import cpus_text
from loaderdoc.policy.core import (
    BEYOND_CPUS_PAYS,
    Key,
    cpu_limit,
    oversubscribed,
    throughputs,
    tolerance,
    workers_text,
)
from loaderdoc.policy.memory import Room, misfit
from loaderdoc.policy.scaling import BeyondCpus, beyond_cpus_evidence

if TYPE_CHECKING:
    from loaderdoc.policy.measurement import Measurement


@dataclass
class Choice:
    """The configuration to recommend among those measured, and the numbers behind it."""

    key: Key
    rate: float  # its mean steps/s
    best_key: Key  # the fastest configuration allowed
    best_rate: float
    tolerance: float
    excluded: dict[Key, str] = field(default_factory=dict)  # measured but not allowed, and why
    beyond_cpus: BeyondCpus | None = None  # the proof that more workers than CPUs pay, if measured
    per_rank: float | None = None

    @property
    def workers(self) -> int:
        return self.key[0]

    @property
    def oversubscribed(self) -> bool:
        return oversubscribed(self.key[0], self.per_rank)


def choose(
    results: Sequence[Measurement],
    *,
    per_rank: float | None,
    room: Room | None = None,
    batch_bytes: int | None = None,
) -> Choice | None:
    """The cheapest measured configuration within the noise tolerance of the fastest one allowed.

    Allowed means: it fits /dev/shm and the memory budget (:func:`misfit`), and it has no more
    workers than CPUs unless a measurement shows more pay (:func:`beyond_cpus_evidence`).
    Cheapest means the fewest workers, then the shallowest prefetch: with as many workers, a
    deeper queue holds more batches, so its memory can only be larger. Not the measured memory:
    a worker-memory reading is the peak of samples in one run, and readings of one configuration
    differed by up to 55 % (large samples, 279 vs 432 MiB), so between prefetch depths it
    picked the slower, deeper queue on noise.
    None when nothing allowed was measured.
    """
    room = room or Room()
    table = throughputs(results)
    if not table:
        return None
    excluded: dict[Key, str] = {}
    for key in table:
        why = misfit(results, key, room, batch_bytes)
        if why:
            excluded[key] = why
    beyond = beyond_cpus_evidence(results, per_rank)
    if beyond is None and per_rank is not None:
        for key in table:
            if key not in excluded and oversubscribed(key[0], per_rank):
                excluded[key] = (f"{workers_text(key[0])} on {cpus_text(per_rank)} per rank, and no measurement "
                                 f"showed more workers than CPUs faster than {workers_text(cpu_limit(per_rank))} "
                                 f"({BEYOND_CPUS_PAYS - 1:.0%} in one run, or in every repeated run)")
    allowed = {k: v for k, v in table.items() if k not in excluded}
    if not allowed:
        return None
    tol = tolerance(results)
    best_key = max(allowed, key=allowed.get)
    near = [k for k, v in allowed.items() if v >= allowed[best_key] * (1 - tol)]
    key = min(near)  # (workers, prefetch)
    return Choice(key=key, rate=allowed[key], best_key=best_key, best_rate=allowed[best_key], tolerance=tol,
                  excluded=excluded, beyond_cpus=beyond, per_rank=per_rank)
