"""What a running configuration holds: ``/dev/shm`` use and the workers' memory, sampled by a
thread of the measuring process while it measures.

Besides the peaks (what the fit checks need), the workers' memory is kept as a series, so a
reading that was still climbing at the end of the steady window is told from one that had
settled: with glibc, 3 workers that free large sample buffers (8 MiB slices, batch 4) grew
their malloc heaps by about 270 MiB/s together on this project's 2-core machine, to 3.3 GiB in
11 s; a 2 s window read a quarter of that (``benchmarks/worker_heap.py``). :class:`~loaderdoc.probing.result.MemoryGrowth`
carries what the window saw, and how much malloc heap the workers grew (the ``[heap]`` mappings,
from ``/proc/<pid>/maps``, or better, where glibc has it, malloc's own count of every arena,
``mallinfo2()`` read in each worker by :mod:`.instrument` and taken at the same samples: a
thread's arena is not ``[heap]``, and a probe started from a thread, as the app's is, allocates
in one).

Used inside the measuring process only.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import NamedTuple

from loaderdoc.probing.result import MemoryGrowth
from loaderdoc.system.procmem import heap_bytes
from loaderdoc.system.shm import shm_used_bytes


class MemorySample(NamedTuple):
    t: float  # perf_counter
    pss: int  # the workers' summed PSS
    heap: int | None  # malloc's arenas in the workers (mallinfo2), else the heap they grew; None: unread
    free: int | None  # ... of which free (mallinfo2 only)
    grown: int | None  # malloc heap ([heap]) the workers grew (see Monitor.sample_memory); None: unread


class Monitor(threading.Thread):
    """Samples /dev/shm use and the workers' memory while a configuration runs."""

    def __init__(self, shm_baseline: int | None, interval_s: float = 0.05, memory_every: int = 5,
                 malloc: Callable[[], tuple[int, int] | None] | None = None) -> None:
        super().__init__(daemon=True, name="loaderdoc-monitor")
        self.shm_baseline = shm_baseline
        self.interval_s = interval_s
        self.memory_every = memory_every
        self.shm_peak: int | None = None
        self.pss: int | None = None
        self.uss: int | None = None
        self.rss: int | None = None
        # the workers' malloc arenas and free bytes, as they last read them (mallinfo2): None without
        self.malloc = malloc
        self.pss_series: list[MemorySample] = []
        self._heap_first: dict[int, int] = {}  # each worker's malloc heap when first sampled
        self._halt = threading.Event()
        self._lock = threading.Lock()  # the series is read while the thread may still append

    def run(self) -> None:
        tick = 0
        while not self._halt.is_set():
            self.sample_shm()
            if tick % self.memory_every == 0:
                self.sample_memory()
            tick += 1
            self._halt.wait(self.interval_s)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=2.0)
        self.sample_shm()
        self.sample_memory()

    def sample_shm(self) -> None:
        used = shm_used_bytes()
        if used is None or self.shm_baseline is None:
            return
        above = max(0, used - self.shm_baseline)
        self.shm_peak = above if self.shm_peak is None else max(self.shm_peak, above)

    def sample_memory(self) -> None:
        import psutil

        own = heap_bytes()
        pss = uss = rss = grown = 0
        complete, heaps_read = True, own is not None
        for child in psutil.Process().children(recursive=True):
            try:
                info = child.memory_full_info()
            except (psutil.NoSuchProcess, psutil.ZombieProcess):
                continue
            except psutil.AccessDenied:
                complete = False
                continue
            pss += getattr(info, "pss", 0)
            uss += info.uss
            rss += info.rss
            # the heap it grew: beyond the smaller of this process's (a forked worker starts with a
            # copy of it) and its own when first sampled (a spawned or forkserver one starts afresh)
            heap = heap_bytes(child.pid)
            if heap is None or own is None:
                heaps_read = False
            else:
                grown += max(0, heap - min(own, self._heap_first.setdefault(child.pid, heap)))
        if not complete:
            return
        grown_read = grown if heaps_read else None
        held = self.malloc() if self.malloc is not None else None
        arena, free = held if held is not None else (grown_read, None)
        with self._lock:
            self.pss_series.append(MemorySample(time.perf_counter(), pss, arena, free, grown_read))
        # the peak of the sums: workers hold the most while their prefetch queues are full
        self.pss = pss if self.pss is None else max(self.pss, pss)
        self.uss = uss if self.uss is None else max(self.uss, uss)
        self.rss = rss if self.rss is None else max(self.rss, rss)

    def growth(self, started: float, ended: float) -> MemoryGrowth | None:
        """The workers' memory over the steady window ``started``..``ended`` (perf_counter), with
        how much their malloc heaps grew between the same two samples and in all (as of the last);
        None with fewer than two samples in it, or samples spanning less than half of it (too short
        to tell a trend)."""
        with self._lock:
            inside = [row for row in self.pss_series if started <= row.t <= ended and row.pss > 0]
        if len(inside) < 2 or inside[-1].t - inside[0].t < 0.5 * (ended - started):
            return None
        first, last = inside[0], inside[-1]
        by_malloc = first.free is not None and last.free is not None
        return MemoryGrowth(first_bytes=first.pss, last_bytes=last.pss, seconds=round(last.t - first.t, 3),
                            heap_rise_bytes=None if first.heap is None or last.heap is None else last.heap - first.heap,
                            malloc_arena_bytes=last.heap if by_malloc else None,
                            malloc_free_bytes=last.free if by_malloc else None,
                            heap_grown_bytes=last.grown)
