"""``persistent_workers``: what restarting the workers costs each epoch, from the start-up or timed.

Functions of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.outcome` is): the search asks
:func:`measure` at its end, the outcome words the choice with :func:`clear` and
:func:`loaderdoc.policy.restart_saving` (what the saving is, for the probe and the rules alike).
Pure logic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc import policy

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search


def clear(search: Search, key: tuple[int, int]) -> bool | None:
    """persistent_workers decided by the workers' start-up alone, before timing a restart.

    The saving :func:`loaderdoc.policy.startup_saving` estimates is weighed against the user's epoch; only
    when it lies within :data:`~loaderdoc.policy.PERSISTENT_CLEAR_BAND` of
    :data:`~loaderdoc.policy.PERSISTENT_PAYS_SHARE` either way would a timed restart (a run of
    its own, forking the workers twice) be likely to change the answer. None: measure it."""
    steps = search.limits.epoch_steps
    saving = policy.startup_saving(search.results, key)
    rate = policy.throughputs(search.measured(*key)).get(key)
    if not steps or saving is None or not rate:
        return None
    share = policy.restart_share(saving.saving_s, steps / rate)
    if share < policy.PERSISTENT_PAYS_SHARE / policy.PERSISTENT_CLEAR_BAND:
        return False
    if share >= policy.PERSISTENT_PAYS_SHARE * policy.PERSISTENT_CLEAR_BAND:
        return True
    return None


def measure(search: Search) -> None:
    """Time the epoch restart at the pick when the start-up cannot decide; pin_memory with CUDA."""
    candidate = search.cheapest_near_best()
    if candidate is None or candidate[0] == 0:
        return
    workers, prefetch = candidate
    settings = search.settings_for(workers, prefetch)
    done = [r for r in search.results if r.ok and r.settings == settings and r.epoch_restart_s is not None]
    # an IterableDataset's epoch ends when its stream does, not when the probe asks: no restart to time
    if (not done and not search.limits.iterable and clear(search, candidate) is None
            and search.try_config(settings, "epoch restart, persistent_workers off and on", restart=True) is None):
        return
    if search.limits.cuda:
        search.try_config(search.settings_for(workers, prefetch, pin_memory=True), "pin_memory on (CUDA)")
