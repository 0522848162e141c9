"""The sizing policy's memory side: what one node offers the loaders (free ``/dev/shm``, the
memory budget, the ranks sharing both), what a configuration needs of it, and whether it fits.
Part of :mod:`loaderdoc.policy` (its thresholds are named there); import it from there.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loaderdoc.base.units import fmt_bytes
from loaderdoc.policy.core import RAM_SAFE_SHARE, SHM_SAFE_SHARE, Key, stream_key, workers_text

if TYPE_CHECKING:
    from loaderdoc.policy.measurement import Measurement
    from loaderdoc.system.facts import MachineFacts


@dataclass
class Room:
    """What one node offers the loaders: free /dev/shm, the memory budget, the ranks sharing both."""

    shm_free: int | None = None
    memory_budget: int | None = None
    ranks: int = 1

    @classmethod
    def of(cls, facts: MachineFacts) -> Room:
        shm = facts.shm
        return cls(shm_free=shm.free.get(shm.total.get()), memory_budget=facts.memory.budget,
                   ranks=max(1, facts.distributed.ranks_on_this_node))

    @property
    def shm_room(self) -> float | None:
        return None if self.shm_free is None else SHM_SAFE_SHARE * self.shm_free

    @property
    def ram_room(self) -> float | None:
        return None if self.memory_budget is None else RAM_SAFE_SHARE * self.memory_budget


def in_flight_bytes(workers: int, prefetch: int, batch_bytes: int | None, ranks: int = 1) -> int | None:
    """Bytes of the batches alive at once on the node: workers x prefetch x batch (x ranks)."""
    if not batch_bytes:
        return None
    return workers * prefetch * batch_bytes * max(1, ranks)


def shm_level(need: float | None, free: float | None) -> str | None:
    """"fits", "tight" (over the safe share of free /dev/shm) or "over" (more than is free)."""
    if need is None or free is None:
        return None
    if need > free:
        return "over"
    return "tight" if need > SHM_SAFE_SHARE * free else "fits"


def ram_level(need: float | None, budget: float | None) -> str | None:
    """"fits", "tight" (at or over the safe share of the budget) or "over" (the whole budget)."""
    if need is None or budget is None:
        return None
    if need >= budget:
        return "over"
    return "tight" if need >= RAM_SAFE_SHARE * budget else "fits"


def fit_in_flight(workers: int, prefetch: int, batch_bytes: int | None, room: Room) -> tuple[int, int, str, str]:
    """Shrink prefetch, then workers, until the batches in flight fit the safe share of /dev/shm
    and of the memory budget.

    Returns (workers, prefetch, the setting the limit changed or "", why)."""
    if not batch_bytes or workers == 0:
        return workers, prefetch, "", ""
    limits = []
    if room.shm_room is not None:
        limits.append((room.shm_room, f"{SHM_SAFE_SHARE:.0%} of /dev/shm's {fmt_bytes(room.shm_free)} free"))
    if room.ram_room is not None:
        limits.append((room.ram_room, f"{RAM_SAFE_SHARE:.0%} of the {fmt_bytes(room.memory_budget)} memory budget"))
    if not limits:
        return workers, prefetch, "", ""
    cap, cap_name = min(limits)
    per_batch = batch_bytes * room.ranks
    max_batches = int(cap // per_batch)
    if workers * prefetch <= max_batches:
        return workers, prefetch, "", ""
    ranks = f" x {room.ranks} ranks" if room.ranks > 1 else ""
    held = f"{fmt_bytes(batch_bytes)} batches{ranks} must fit {cap_name} ({fmt_bytes(cap)})"
    if workers <= max_batches:
        new_prefetch = max(1, max_batches // workers)
        return workers, new_prefetch, "prefetch_factor", f"{new_prefetch}: {workers} workers x {new_prefetch} x {held}"
    if max_batches >= 1:
        return max_batches, 1, "num_workers", f"{max_batches} workers (memory-bound): {max_batches} x 1 x {held}"
    return 0, prefetch, "num_workers", (
        f"0 workers (memory-bound): not even one {held}; enlarge /dev/shm (docker run --shm-size=8g "
        "or --ipc=host) or shrink the batch"
    )


def _pss_points(results: Iterable[Measurement]) -> dict[int, int]:
    """Worker count -> the largest summed worker PSS measured with it."""
    points: dict[int, int] = {}
    for r in results:
        if r.settings.num_workers > 0 and r.worker_pss_bytes:
            n = r.settings.num_workers
            points[n] = max(points.get(n, 0), r.worker_pss_bytes)
    return points


def per_worker_pss(results: Iterable[Measurement]) -> float | None:
    """Bytes of PSS one more worker costs: the slope over measured worker counts, else the mean."""
    points = _pss_points(results)
    if not points:
        return None
    xs = sorted(points)
    if len(xs) >= 2:
        mx = statistics.fmean(xs)
        my = statistics.fmean(points[x] for x in xs)
        sxx = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (points[x] - my) for x in xs) / sxx
        if slope > 0:
            return slope
    return statistics.fmean(points[x] / x for x in xs)


def workers_pss_at(results: Sequence[Measurement], n: int) -> tuple[float, str] | None:
    """Summed worker PSS for ``n`` workers and how it was obtained: measured, or a straight line
    through the measured worker counts, never below 0. None when no worker memory was measured."""
    points = _pss_points(results)
    if not points:
        return None
    if n in points:
        return float(points[n]), "measured"
    slope = per_worker_pss(results) or 0.0
    xs = sorted(points)
    if len(xs) >= 2:
        mx = statistics.fmean(xs)
        my = statistics.fmean(points[x] for x in xs)
        return max(0.0, my + slope * (n - mx)), f"extrapolated in a straight line from {', '.join(map(str, xs))} workers, measured"
    return slope * n, f"{fmt_bytes(slope)} per worker measured with {workers_text(xs[0])}"


def memory_need(results: Sequence[Measurement], key: Key, batch_bytes: int | None, ranks: int) -> float | None:
    """Workers' PSS (measured or extrapolated) plus the batches in flight, for all ranks on the node."""
    pss = workers_pss_at(results, key[0]) if key[0] else (0.0, "")
    if pss is None:
        return None
    return pss[0] * ranks + (in_flight_bytes(key[0], key[1], batch_bytes, ranks) or 0)


def misfit(results: Sequence[Measurement], key: Key, room: Room, batch_bytes: int | None) -> str | None:
    """Why a configuration does not fit this node's /dev/shm or memory budget, if it doesn't.

    /dev/shm is judged on the batches in flight at ``batch_bytes`` (the user's batch size); when
    that is unknown, on the high-water mark the probe measured."""
    if key[0] == 0:
        return None
    rows = [r for r in results if r.ok and stream_key(r.settings) == key]
    need = in_flight_bytes(key[0], key[1], batch_bytes, room.ranks)
    if need is None:
        peaks = [r.shm_peak_bytes for r in rows if r.shm_peak_bytes]
        need = max(peaks) * room.ranks if peaks else None
    if shm_level(need, room.shm_free) in ("tight", "over"):
        return (f"its batches in flight need {fmt_bytes(need)} of /dev/shm, over {SHM_SAFE_SHARE:.0%} of the "
                f"{fmt_bytes(room.shm_free)} free")
    ram = memory_need(results, key, batch_bytes, room.ranks)
    if ram_level(ram, room.memory_budget) in ("tight", "over"):
        return (f"its workers and batches in flight use {fmt_bytes(ram)}, over {RAM_SAFE_SHARE:.0%} of the "
                f"{fmt_bytes(room.memory_budget)} memory budget")
    return None
