"""The sizing policy's epoch-restart side: what keeping the workers alive between epochs
(``persistent_workers``) saves, from a timed restart or from the workers' start-up. The probe's
choice and the ``persistent-workers-off`` rule both read it here, so a report never recommends
one setting and warns about it in the same breath. Part of :mod:`loaderdoc.policy`; import it
from there.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loaderdoc.policy.core import PERSISTENT_PAYS_SHARE, Key, stream_key, throughputs
from loaderdoc.policy.scaling import zero_load_ms

if TYPE_CHECKING:
    from loaderdoc.policy.measurement import Measurement


@dataclass
class RestartSaving:
    """What persistent workers save at each epoch's start, in seconds.

    Timed: the gap between two epochs without persistent workers (``off_s``) minus the gap with
    them (``on_s``). Otherwise estimated from the start-up: the time to a fresh loader's first
    batch (``off_s``) minus one batch's loading (``load_s``), because persistent workers still
    load the next epoch's first batch; only the fork and the workers' set-up are saved."""

    saving_s: float
    off_s: float
    on_s: float | None = None  # timed with persistent workers; None: estimated from the start-up
    load_s: float | None = None  # the estimate's batch loading

    @property
    def timed(self) -> bool:
        return self.on_s is not None

    def text(self) -> str:
        if self.timed:
            return f"the gap between epochs was {self.off_s:.2f} s without and {self.on_s:.2f} s with"
        return (f"starting the workers took {self.off_s:.2f} s to the first batch, {self.load_s:.2f} s of it loading "
                f"that batch (persistent workers load it too): restarting them costs about {self.saving_s:.2f} s")


def restart_saving(results: Iterable[Measurement], key: Key) -> RestartSaving | None:
    """What persistent workers save for the configuration ``key`` (workers, prefetch): a timed
    restart with and without them if the probe ran one, else the start-up estimate. None where
    neither was measured (or for 0 workers, which have nothing to restart)."""
    if key[0] == 0:
        return None
    results = list(results)
    rows = [r for r in results if r.ok and stream_key(r.settings) == key]
    timed = [r for r in rows if r.epoch_restart_s is not None]
    on = [r.epoch_restart_s for r in timed if r.settings.persistent_workers]
    on += [r.epoch_restart_persistent_s for r in timed if r.epoch_restart_persistent_s is not None]
    off = [r.epoch_restart_s for r in timed if not r.settings.persistent_workers]
    if on and off:
        return RestartSaving(max(0.0, min(off) - min(on)), min(off), on_s=min(on))
    return startup_saving(results, key)


def startup_saving(results: Iterable[Measurement], key: Key) -> RestartSaving | None:
    """The start-up estimate alone (see :class:`RestartSaving`): from the steady runs of ``key``.
    The batch's loading is the slowest the workers' stage timings show, else the 0-worker run's,
    else one batch at the measured rate."""
    results = list(results)
    rows = [r for r in results if r.ok and r.batches_per_s and r.settings.in_order and stream_key(r.settings) == key]
    first = [r.first_batch_s for r in rows if r.first_batch_s is not None]
    rate = throughputs(rows).get(key)
    if not first or not rate:
        return None
    zero = zero_load_ms(results)
    fallback = zero[1] / 1000 if zero else 1.0 / rate
    load_s = max(((r.stages.load_ms or 0.0) / 1000 for r in rows if r.stages is not None), default=fallback)
    return RestartSaving(max(0.0, min(first) - load_s), min(first), load_s=load_s)


# a watched run's saving counts one steady batch's load out of each epoch's first batch, an upper
# bound of what it still costs: the saving is a lower bound, so twice the probe's line is asked
WATCHED_RESTART_PAYS_SHARE = 2 * PERSISTENT_PAYS_SHARE


def restart_cost_s(iter_s: float | None, first_s: float, stop_before_s: float | None, load_s: float,
                   setup_cpu_s: float | None = None) -> float:
    """Seconds one epoch start of non-persistent workers costs that persistent ones would not: the
    shutdown of the previous epoch's workers (the call that raised StopIteration: torch joins each),
    ``iter(loader)`` itself (a fork per worker, from a process that may hold gigabytes), and what
    its first batch took beyond one batch's load once they had started (their set-up: imports,
    ``worker_init_fn``, opening files); persistent workers still load that batch. ``watch`` and
    ``tune`` both price a restart here, so one run gives one share whichever reports it.

    ``load_s`` is estimated from the steady waits, which short epochs hold too few of: where the
    workers' CPU time before the first batch is known, beyond what their first batches took
    (``setup_cpu_s``), the set-up counts at most that (measured on 2 CPUs, 16 workers sleeping
    0.5 s a sample in 23-batch epochs from a 3 GiB process: iter 0.82 s and shutdown 0.29 s an
    epoch, the real saving 1.05 s; without the cap 0.36 s more of "set-up" was counted)."""
    started = iter_s or 0.0
    setup = max(0.0, first_s - started - load_s)
    if setup_cpu_s is not None:
        setup = min(setup, max(0.0, setup_cpu_s))
    return (stop_before_s or 0.0) + started + setup


@dataclass
class WatchedRestarts:
    """What persistent workers would have saved over a run's later epochs (:func:`restart_cost_s`
    each), against those epochs' time with their restarts."""

    saving_s: float
    wall_s: float  # those epochs' time, the shutdowns before them included

    @property
    def share(self) -> float:
        return self.saving_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def pays(self) -> bool:
        return self.share >= WATCHED_RESTART_PAYS_SHARE

    @property
    def expected_gain(self) -> float:
        return restart_gain(self.share)


def restart_gain(share: float) -> float:
    """The pace persistent workers give where restarts took ``share`` of the loop's time."""
    return 1 / (1 - share) if share < 1 else float("inf")


def watched_restarts(epochs: Iterable[tuple[float | None, float, float | None, float, float | None]],
                     load_s: float) -> WatchedRestarts | None:
    """From (iter s, first batch s, the previous epoch's stop s, wall s, set-up CPU s or None) of
    each epoch after the first; None without any."""
    epochs = list(epochs)
    if not epochs:
        return None
    saving = sum(restart_cost_s(it, first, stop, load_s, setup) for it, first, stop, _, setup in epochs)
    return WatchedRestarts(saving, sum(wall + (stop or 0.0) for _, _, stop, wall, _ in epochs))


def workers_setup_cpu_s(workers_cpu_first_s: float | None, workers: int, workers_cpu_s: float | None,
                        steps: int) -> float | None:
    """The workers' CPU time before an epoch's first batch beyond their first batches' loading (at
    most one each, at the run's CPU per batch, ``workers_cpu_s`` over ``steps``): their set-up;
    None where either is unknown."""
    if workers_cpu_first_s is None or workers_cpu_s is None or steps <= 0:
        return None
    return max(0.0, workers_cpu_first_s - workers * workers_cpu_s / steps)
