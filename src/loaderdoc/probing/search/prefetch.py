"""``prefetch_factor``: whether a deeper queue than torch's default is worth a run.

A function of a :class:`~loaderdoc.probing.search.Search` (as :mod:`.in_order` is): the search
calls :func:`measure` once the worker count is narrowed down. Pure logic.

A deeper queue smooths bursts: it lets workers that are ahead keep working while a slow batch
holds the line. It cannot raise the average rate the workers produce at. So it is measured only
where the waits at the pick are bursty, and not where the step is starved on average while the
batches load evenly (:func:`loaderdoc.policy.queue_runs_dry`): there the bursts are workers
finishing together. Beside a busy process the CPU's scheduling makes single batches late too,
so a deeper queue may win or lose a few percent there; in the benchmark's grids, on such data
(CPU-bound decode, large samples, I/O-bound; quiet and beside a busy core), prefetch 4 measured
0.5-1.13x the default's rate: about even for the decode and the I/O-bound data (faster in both
of its runs at some sizes, by up to 10 %, slower at as many), slower for large samples from 6
workers. One window of each cannot tell that apart; once, a lucky one made the pick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from loaderdoc import policy
from loaderdoc.probing.result import ConfigResult

if TYPE_CHECKING:
    from loaderdoc.probing.search.core import Search


def measure(search: Search, base0: ConfigResult | None) -> None:
    """``prefetch_factor=4`` at the pick's worker count, where it may pay (see the module docstring);
    ``base0``: the 0-worker run the search kept (a cold first read is replaced)."""
    candidate = search.cheapest_near_best()
    if candidate is None or candidate[0] == 0 or search.halted():
        return
    last = search.measured(*candidate)[-1]
    key = policy.key_text(policy.stream_key(last.settings))
    starved = (last.starvation_pct or 0) >= policy.NOT_STARVED_PCT
    p50, p95 = last.wait.p50_ms or 0.0, last.wait.p95_ms or 0.0
    if not policy.bursty(p50, p95, last.step_ms_achieved):
        if starved:
            search.notes.append(f"{key}: waits are steady (p95 {p95:.0f} ms, p50 {p50:.0f} ms), so a deeper prefetch "
                              "queue would not feed the step faster; not tried")
        return
    if base0 is not None and base0.ok and policy.queue_runs_dry(last.starvation_pct, base0.wait.p50_ms, base0.wait.p95_ms):
        search.notes.append(
            f"{key}: waits are bursty (p95 {p95:.0f} ms vs p50 {p50:.0f} ms), but the step waited "
            f"{last.starvation_pct:.0f} % on average and batches loaded evenly with 0 workers (p95 "
            f"{base0.wait.p95_ms:.0f} ms vs p50 {base0.wait.p50_ms:.0f} ms): the workers finish batches together, "
            "below the step's rate, so a deeper prefetch queue would mostly run dry too; not tried")
        return
    if candidate[0] > search.shm_cap_workers(last.batch_bytes, prefetch=4):
        search.notes.append("prefetch_factor=4 would not fit in /dev/shm; not tried")
        return
    why = f"bursty waits: p95 {p95:.0f} ms vs p50 {p50:.0f} ms"
    search.try_config(search.settings_for(candidate[0], 4), f"prefetch: deeper queue ({why})")
