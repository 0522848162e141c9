"""Measuring close contenders again, in turns, where the machine's noise could decide the pick.

A function of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.outcome` is). Pure logic.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc import policy

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search

MAX_ROUNDS = 4  # contenders are measured at most this many times each


def repeat_contenders(search: Search) -> None:
    """Measure the close contenders again, in turns, until the pick stops changing, where the
    machine's noise could have decided it.

    Contenders: the best, the pick, the next cheaper size if within 10 % of the best, and any size past
    the CPUs that measured faster but is not allowed on one run. A size far slower than the best
    needs no second run to lose, and a pick with no contender, or one already as fast as the
    step allows, has nothing to be compared with: those settle at once. On a quiet machine (no
    run saw other processes keep half a CPU busy), or for loading that waits rather than computes,
    one window per size is trusted (:func:`~loaderdoc.policy.single_windows_trusted`), and only
    the sizes past the CPUs that need repeats as evidence are repeated. Each round measures each
    contender once more; two rounds in a row with the same pick settle it."""
    previous = search.cheapest_near_best()
    zero = next(iter(search.measured(0)), None)
    trusted = policy.single_windows_trusted(search.busy_cpus(), zero.fetch_cpu_pct if zero else None)
    for round_ in range(2, MAX_ROUNDS + 1):
        table = search.fitting_throughputs()
        choice = search.choice()
        if len(table) < 2 or choice is None or search.halted():
            return
        best, pick = choice.best_key, choice.key
        contenders = {best, pick}
        # the next cheaper size, if close: a second run may bring it within tolerance (the sizes
        # between the pick and the best cost more than the pick whatever their repeats say)
        cheaper = [k for k, v in table.items() if v >= table[best] * 0.9 and k[0] < pick[0]]
        if cheaper:
            contenders.add(max(cheaper))
        # faster, but past the CPUs without evidence yet: repeats in turns are that evidence, or not
        unproven = {k for k, v in table.items() if k in choice.excluded and v > choice.best_rate * (1 + choice.tolerance)}
        contenders |= unproven
        if len(contenders) == 1:
            # the pick is the fastest measured: a slower, larger size cannot take its place
            search.settled_why = search.settled_why or ("the pick is the fastest measured and no size with fewer "
                                                    "workers came within 10 % of it")
            return
        if at_step_ceiling(search, choice.rate, choice.tolerance):
            search.settled_why = "the pick runs as fast as the step allows"
            return
        if trusted and not unproven:
            busy = search.busy_cpus()
            search.settled_why = search.settled_why or (
                f"one window per size on a quiet machine (other processes kept at most {busy:.1f} CPUs busy in any "
                "run; on a busy one the close contenders are measured again in turns)"
                if busy < policy.CONTENDED_CPUS else
                f"one window per size: other processes kept up to {busy:.1f} CPUs busy, but the loading waits "
                f"({zero.fetch_cpu_pct:.0f} % CPU time with 0 workers), so what they take of the CPUs barely moves "
                "its rate")
            return
        for key in sorted(contenders):
            if len(search.measured(*key)) >= round_:
                continue
            if search.try_config(search.settings_for(key[0], key[1] or None),
                               "repeat: contenders measured in turns") is None:
                return
        search.refine()  # a repeat can move the best, and with it the fewest workers that fast
        now = search.cheapest_near_best()
        if now == previous and all(len(search.measured(*k)) >= 2 for k in contenders if k in search.throughputs()):
            search.settled_why = "the pick held across repeated runs in turns"
            return
        previous = now


def at_step_ceiling(search: Search, rate: float, tolerance: float) -> bool:
    """The pick already runs within tolerance of what the training step allows: no loader
    configuration can be faster, so repeating the contenders cannot change the answer."""
    if search.model is None or search.model.step_ms <= 0:
        return False
    ceiling = search.model.step_per_s()
    if rate < ceiling * (1 - tolerance):
        return False
    search.notes.append(f"the pick runs at {rate:.1f} steps/s, within {tolerance:.0%} of the {ceiling:.1f} the "
                      f"{search.model.step_ms:.0f} ms step allows: no configuration can be faster, no repeats needed")
    return True
