"""Time the stages of loading inside the process that loads: the dataset and the collate function,
wrapped, write their wall time, CPU time and finished batches into counters every worker shares.

The counters live in an anonymous shared mapping made before the DataLoader forks its workers (no
file in ``/dev/shm``, which may be full or tiny), one row per loading process: row 0 is the training
process (``num_workers=0``), row ``k + 1`` worker ``k``. Each process writes only its own row, so no
lock is needed; the measuring process snapshots the rows at the start and end of its steady window.

Used inside the measuring process only (imports torch lazily, when a wrapper is built).
"""

from __future__ import annotations

import mmap
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FIELDS = ("samples", "dataset_wall", "dataset_cpu", "dataset_queued", "dataset_read", "batches", "collate_wall",
          "collate_cpu", "last_done", "malloc_arena", "malloc_free")
_INDEX = {name: i for i, name in enumerate(FIELDS)}
_SIZE = struct.calcsize("d")


def _schedstat() -> tuple[float, float] | None:
    """(seconds on a CPU, seconds runnable but waiting for one) of this thread, from Linux
    schedstat; None where the kernel does not provide it."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as fh:
            ran_ns, waited_ns, _ = fh.read().split()
        return int(ran_ns) / 1e9, int(waited_ns) / 1e9
    except (OSError, ValueError):
        return None


_MALLINFO2: Any = None  # glibc's mallinfo2, bound on first use; False where there is none
MALLOC_READ_EVERY_S = 0.05  # a worker reads it after a batch at most this often (and after its first)


def malloc_state() -> tuple[int, int] | None:
    """(bytes glibc's malloc holds from the system in its arenas, of which free: kept for reuse)
    in this process, every arena (the main one and threads'), from ``mallinfo2()`` (glibc >= 2.33);
    None elsewhere. Chunks malloc mapped on their own are not in it: free() gives those back. It
    walks every free chunk (under a microsecond on a tidy heap, milliseconds on a fragmented one),
    so callers read it now and then, not per sample."""
    global _MALLINFO2
    if _MALLINFO2 is None:
        _MALLINFO2 = False
        try:
            import ctypes

            class _Info(ctypes.Structure):
                _fields_ = [(name, ctypes.c_size_t) for name in (
                    "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                    "keepcost")]

            fn = ctypes.CDLL(None).mallinfo2
            fn.restype = _Info
            _MALLINFO2 = fn
        except Exception:  # no glibc (musl, macOS: no mallinfo2), no ctypes: no reading, never an error
            pass
    if not _MALLINFO2:
        return None
    info = _MALLINFO2()
    return int(info.arena), int(info.fordblks)


def queued_seconds() -> float:
    """Time this thread spent runnable but waiting for a CPU, 0 without schedstat."""
    stat = _schedstat()
    return stat[1] if stat else 0.0


def storage_read_bytes() -> int:
    """Bytes this thread has had read from storage (page-cache misses: ``read_bytes`` in
    /proc/thread-self/io); 0 where the kernel does not say. A read served from the page cache
    counts nothing, so it tells a cold read (the disk, or a network filesystem's cache misses where
    the filesystem accounts them) from a warm one."""
    try:
        with open("/proc/thread-self/io", "rb") as fh:
            for line in fh:
                if line.startswith(b"read_bytes:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def busy_seconds() -> float:
    """CPU time this thread used *or waited on a run queue for*.

    Loading that is CPU work stays "busy" even when other processes take the CPU away; only
    sleeping on I/O is not. Without schedstat, the thread's CPU time.
    """
    stat = _schedstat()
    return stat[0] + stat[1] if stat else time.thread_time()


class Tally:
    """Shared per-process counters (see the module docstring)."""

    def __init__(self, workers: int) -> None:
        self.rows = workers + 1
        self._map = mmap.mmap(-1, self.rows * len(FIELDS) * _SIZE)  # MAP_SHARED | MAP_ANONYMOUS
        self._values = memoryview(self._map).cast("d")

    def row(self) -> int:
        from torch.utils.data import get_worker_info

        info = get_worker_info()
        return 0 if info is None else 1 + info.id

    def add(self, row: int, **amounts: float) -> None:
        base = row * len(FIELDS)
        for name, amount in amounts.items():
            self._values[base + _INDEX[name]] += amount

    def set(self, row: int, name: str, value: float) -> None:
        self._values[row * len(FIELDS) + _INDEX[name]] = value

    def snapshot(self) -> list[dict[str, float]]:
        width = len(FIELDS)
        return [dict(zip(FIELDS, self._values[r * width:(r + 1) * width].tolist(), strict=True))
                for r in range(self.rows)]


def wrap_dataset(dataset: Any, tally: Tally) -> Any:
    """``dataset`` behind a wrapper that times its samples, one batch at a time where it can."""
    from torch.utils.data import Dataset, IterableDataset

    clock = time.perf_counter

    class TimedIterable(IterableDataset):
        def __iter__(self):
            row = tally.row()
            stream = iter(dataset)
            while True:
                wall, cpu = clock(), time.thread_time()
                try:
                    sample = next(stream)
                except StopIteration:
                    return
                tally.add(row, samples=1, dataset_wall=clock() - wall, dataset_cpu=time.thread_time() - cpu)
                yield sample

    class TimedDataset(Dataset):
        def __len__(self) -> int:
            return len(dataset)

        def __getitem__(self, index: Any) -> Any:
            return self.__getitems__([index])[0]

        def __getitems__(self, indices: list[Any]) -> list[Any]:
            # torch's fetcher hands a batch's indices at once to a dataset that has this method: one
            # timing per batch keeps the cost of timing negligible even for microsecond samples
            row = tally.row()
            wall, cpu, queued, read = clock(), time.thread_time(), queued_seconds(), storage_read_bytes()
            batched = getattr(dataset, "__getitems__", None)
            samples = batched(indices) if batched else [dataset[i] for i in indices]
            tally.add(row, samples=len(indices), dataset_wall=clock() - wall,
                      dataset_cpu=time.thread_time() - cpu, dataset_queued=queued_seconds() - queued,
                      dataset_read=storage_read_bytes() - read)
            return samples

    return TimedIterable() if isinstance(dataset, IterableDataset) else TimedDataset()


def wrap_collate(collate_fn: Callable[..., Any] | None, tally: Tally) -> Callable[..., Any]:
    """``collate_fn`` (torch's default when None) timed, and each finished batch stamped."""
    from torch.utils.data import default_collate

    collate = collate_fn or default_collate
    clock = time.perf_counter
    read_at = [-1.0]  # when this process last read malloc's state (each worker has its own copy)

    def timed_collate(samples: Any) -> Any:
        row = tally.row()
        wall, cpu = clock(), time.thread_time()
        batch = collate(samples)
        done = clock()
        tally.add(row, batches=1, collate_wall=done - wall, collate_cpu=time.thread_time() - cpu)
        tally.set(row, "last_done", done)
        if row and done - read_at[0] >= MALLOC_READ_EVERY_S:  # workers only, now and then
            read_at[0] = done
            state = malloc_state()
            if state is not None:
                tally.set(row, "malloc_arena", state[0])
                tally.set(row, "malloc_free", state[1])
        return batch

    return timed_collate


def malloc_sums(snapshot: list[dict[str, float]], rows: range) -> tuple[int, int] | None:
    """(malloc's arenas in ``rows`` summed, of which free) as each process last read them; None
    while a process has no reading yet (no mallinfo2, or no batch finished)."""
    if any(snapshot[r]["malloc_arena"] <= 0 for r in rows):
        return None
    return int(sum(snapshot[r]["malloc_arena"] for r in rows)), int(sum(snapshot[r]["malloc_free"] for r in rows))


@dataclass
class Window:
    """What the loading processes did between two snapshots."""

    batches: int
    samples: int
    dataset_s: float
    dataset_cpu_s: float
    dataset_queued_s: float
    dataset_read_bytes: float
    collate_s: float
    collate_cpu_s: float
    produced_per_s: float | None  # None: a worker finished no batch in the window (too short to tell)


def window(before: list[dict[str, float]], after: list[dict[str, float]], rows: range,
           started: float | None = None) -> Window:
    """Totals over ``rows``, and the production rate: each worker's batches in the window over the
    time since its last batch before the window finished (whole batch intervals, so a batch
    half-done at either edge does not bias the rate).

    A worker that sat idle before the window (the prefetch limit held it: the buffer was full)
    finished its last batch long before the window ``started``; its span then starts no earlier
    than one batch's busy time before the window, so that idle time is not counted as work."""
    def total(name: str) -> float:
        return sum(after[r][name] - before[r][name] for r in rows)

    rate: float | None = 0.0
    for r in rows:
        done = after[r]["batches"] - before[r]["batches"]
        since = before[r]["last_done"]
        if done < 1 or since == 0:
            rate = None
            break
        busy = (after[r]["dataset_wall"] - before[r]["dataset_wall"]
                + after[r]["collate_wall"] - before[r]["collate_wall"]) / done
        if started is not None:
            since = max(since, started - busy)
        span = after[r]["last_done"] - since
        if span <= 0:
            rate = None
            break
        rate += done / span
    return Window(batches=int(total("batches")), samples=int(total("samples")), dataset_s=total("dataset_wall"),
                  dataset_cpu_s=total("dataset_cpu"), dataset_queued_s=total("dataset_queued"),
                  dataset_read_bytes=total("dataset_read"),
                  collate_s=total("collate_wall"), collate_cpu_s=total("collate_cpu"), produced_per_s=rate)
