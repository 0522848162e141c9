"""The memory monitor: the workers' memory through the steady window, and the malloc heap they grew."""

from __future__ import annotations

import os

import pytest
from support.heap import child_with_growing_heap

from loaderdoc.base.units import MiB
from loaderdoc.probing import measure
from loaderdoc.probing.instrument import malloc_state, malloc_sums
from loaderdoc.probing.monitor import MemorySample, Monitor, heap_bytes
from loaderdoc.probing.result import MemoryGrowth

linux_proc = pytest.mark.skipif(not os.path.exists("/proc/self/maps"), reason="needs /proc/<pid>/maps")


def _monitor(series):
    m = Monitor(shm_baseline=None)
    m.pss_series = [MemorySample(t, int(v * MiB), int(v * MiB) // 2, None, 300 * MiB) for t, v in series]
    return m


def test_growth_reads_the_first_and_last_samples_inside_the_window():
    # before the window (warm-up) and after it (the final sample at stop) are left out
    m = _monitor([(9.0, 100), (10.1, 200), (10.6, 260), (11.0, 320), (11.9, 400), (12.5, 900)])
    g = m.growth(10.0, 12.0)
    assert (g.first_bytes, g.last_bytes, g.seconds) == (200 * MiB, 400 * MiB, 1.8)
    assert g.heap_rise_bytes == 100 * MiB and g.heap_grown_bytes == 300 * MiB
    assert g.per_s == pytest.approx(200 * MiB / 1.8)


@pytest.mark.parametrize("series", [
    [(10.5, 200)],  # one sample: no trend
    [(10.1, 200), (10.6, 300)],  # 0.5 s of samples in a 2 s window: too little of it to tell
    [(10.1, 0), (11.9, 300)],  # a sample that read no worker (they had not started)
])
def test_growth_needs_two_samples_spanning_half_the_window(series):
    assert _monitor(series).growth(10.0, 12.0) is None


@linux_proc
def test_heap_bytes_reads_this_process_heap():
    assert heap_bytes() > 0
    assert heap_bytes(2**31) is None  # no such process


@linux_proc
def test_heap_grown_counts_what_a_forked_child_added_to_its_heap_since_first_sampled():
    monitor = Monitor(shm_baseline=None)
    with child_with_growing_heap() as (pid, grow):
        monitor.sample_memory()  # first sight of the child: its heap before it grew
        assert pid in monitor._heap_first
        grown_by_child = grow()
        monitor.sample_memory()
        grown = monitor.pss_series[-1].grown
    assert grown_by_child >= 128 * MiB
    assert grown >= grown_by_child - 16 * MiB


def test_a_measurement_with_workers_carries_the_windows_growth(monkeypatch):
    # the wiring: whatever the monitor saw over the steady window lands on the result
    seen = []

    def growth(self, started, ended):
        seen.append((started, ended))
        return MemoryGrowth(first_bytes=1, last_bytes=2, seconds=1.0, heap_rise_bytes=0, heap_grown_bytes=0)

    monkeypatch.setattr(Monitor, "growth", growth)
    from loaderdoc.base.settings import LoaderSettings
    from loaderdoc.probing.probe import build_workload

    dataset, collate, *_ = build_workload(preset="tensor")
    job = measure.LoadJob(dataset=dataset, collate_fn=collate, step_ms=1.0)
    plan = measure.RunPlan(window_s=0.2, measure_restart=False)
    with_workers = measure.measure_in_process(job, LoaderSettings(batch_size=32, num_workers=1, prefetch_factor=2), plan)
    without = measure.measure_in_process(job, LoaderSettings(batch_size=32), plan)
    assert with_workers.worker_memory_growth == MemoryGrowth(first_bytes=1, last_bytes=2, seconds=1.0,
                                                             heap_rise_bytes=0, heap_grown_bytes=0)
    assert without.worker_memory_growth is None and len(seen) == 1
    started, ended = seen[0]
    assert ended > started


def test_malloc_sums_add_the_workers_readings_and_need_one_from_each():
    def rows(*pairs):
        return [{"malloc_arena": 0.0, "malloc_free": 0.0}] + [{"malloc_arena": a * MiB, "malloc_free": f * MiB}
                                                              for a, f in pairs]

    assert malloc_sums(rows((300, 200), (260, 150)), range(1, 3)) == (560 * MiB, 350 * MiB)
    assert malloc_sums(rows((0, 0), (120, 20)), range(1, 3)) is None  # a worker had no reading yet


def test_growth_takes_malloc_and_memory_from_the_same_samples():
    # mallinfo2 sums read at each memory sample: the rise and the free bytes are the window's own
    m = Monitor(shm_baseline=None)
    m.pss_series = [MemorySample(9.0, 100 * MiB, 50 * MiB, 5 * MiB, None),
                    MemorySample(10.2, 200 * MiB, 80 * MiB, 20 * MiB, None),
                    MemorySample(11.8, 400 * MiB, 260 * MiB, 190 * MiB, None),
                    MemorySample(12.5, 900 * MiB, 900 * MiB, 800 * MiB, None)]
    g = m.growth(10.0, 12.0)
    assert (g.first_bytes, g.last_bytes, g.heap_rise_bytes) == (200 * MiB, 400 * MiB, 180 * MiB)
    assert (g.malloc_arena_bytes, g.malloc_free_bytes) == (260 * MiB, 190 * MiB)


def test_malloc_state_is_this_process_arenas_where_glibc_has_mallinfo2():
    state = malloc_state()
    if state is None:
        pytest.skip("no glibc mallinfo2 here")
    arena, free = state
    keep = [bytearray(64 * 1024) for _ in range(64)]  # 4 MiB from an arena (below the mmap threshold)
    arena_after, free_after = malloc_state()
    assert (arena_after - free_after) - (arena - free) >= 3 * MiB  # in use: the arenas less what is free
    del keep


def test_a_worker_reads_mallocs_state_into_its_row_and_the_training_process_does_not():
    if malloc_state() is None:
        pytest.skip("no glibc mallinfo2 here")
    from loaderdoc.probing.instrument import Tally, wrap_collate

    tally = Tally(workers=1)
    collate = wrap_collate(lambda samples: samples, tally)
    collate([1, 2])  # in this process: row 0, the training process (0 workers) reads nothing
    assert tally.snapshot()[0]["malloc_arena"] == 0
    tally.row = lambda: 1  # as worker 0 would see it
    collate([1, 2])
    row = tally.snapshot()[1]
    assert row["malloc_arena"] > 0 and 0 <= row["malloc_free"] <= row["malloc_arena"]
