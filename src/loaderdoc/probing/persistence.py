"""``persistent_workers``: what restarting the workers costs each epoch, from the start-up or timed.

Functions of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.outcome` is): the search asks
:func:`measure` at its end, the outcome words the choice with :func:`startup_saving` and
:func:`clear`. Pure logic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc import policy

if TYPE_CHECKING:
    from loaderdoc.probing.search import Search


def startup_saving(self: Search, key: tuple[int, int]) -> tuple[float, float, float] | None:
    """What persistent workers would save each epoch, from the start-up alone: (saving, time to
    the first batch, one batch's loading), in seconds. A new epoch without persistent workers
    forks them again and waits for a first batch; with them it still waits for that batch
    (the workers load it then), so the saving is the start-up minus one batch's loading."""
    rows = self.measured(*key)
    first = [r.first_batch_s for r in rows if r.first_batch_s is not None]
    rate = policy.throughputs(rows).get(key)
    if not first or not rate:
        return None
    zero = policy.zero_load_ms(self.results)  # without stage timings: the batch as the 0-worker run loaded it
    fallback = zero[1] / 1000 if zero else 1.0 / rate
    load_s = max(((r.stages.load_ms or 0.0) / 1000 for r in rows if r.stages is not None), default=fallback)
    return max(0.0, min(first) - load_s), min(first), load_s


def clear(self: Search, key: tuple[int, int]) -> bool | None:
    """persistent_workers decided by the workers' start-up alone, before timing a restart.

    The saving :func:`startup_saving` estimates is weighed against the user's epoch; only
    when it lies within :data:`~loaderdoc.policy.PERSISTENT_CLEAR_BAND` of
    :data:`~loaderdoc.policy.PERSISTENT_PAYS_SHARE` either way would a timed restart (a run of
    its own, forking the workers twice) be likely to change the answer. None: measure it."""
    steps = self.limits.epoch_steps
    saving = startup_saving(self, key)
    rate = policy.throughputs(self.measured(*key)).get(key)
    if not steps or saving is None or not rate:
        return None
    share = policy.restart_share(saving[0], steps / rate)
    if share < policy.PERSISTENT_PAYS_SHARE / policy.PERSISTENT_CLEAR_BAND:
        return False
    if share >= policy.PERSISTENT_PAYS_SHARE * policy.PERSISTENT_CLEAR_BAND:
        return True
    return None


def measure(self: Search) -> None:
    """Time the epoch restart at the pick when the start-up cannot decide; pin_memory with CUDA."""
    candidate = self.cheapest_near_best()
    if candidate is None or candidate[0] == 0:
        return
    workers, prefetch = candidate
    settings = self.settings_for(workers, prefetch)
    done = [r for r in self.results if r.ok and r.settings == settings and r.epoch_restart_s is not None]
    # an IterableDataset's epoch ends when its stream does, not when the probe asks: no restart to time
    if (not done and not self.limits.iterable and clear(self, candidate) is None
            and self.try_config(settings, "epoch restart, persistent_workers off and on", restart=True) is None):
        return
    if self.limits.cuda:
        self.try_config(self.settings_for(workers, prefetch, pin_memory=True), "pin_memory on (CUDA)")
