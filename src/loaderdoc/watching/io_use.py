"""Read accounting of a watched loader: how much it read, and from where.

``loaderdoc watch`` reads ``/proc/<pid>/io`` of the training process (its own threads) and of
its workers per epoch (:mod:`loaderdoc.watching.ioacct`): ``rchar`` (bytes passed to ``read()``,
whatever served them), read calls, and ``read_bytes`` (bytes fetched from a block device). Over
the steady batches (each epoch less what it had read by its first batch: the workers' start-up
and the batches in flight) this module says where the reads came from:

- ``disk``: a block device served at least :data:`DISK_SHARE` of the bytes read, and at least a
  page per batch;
- ``page-cache``: at least :data:`READ_MIN_PER_BATCH` read per batch, the rest served from memory
  (or from a network file system, which has no block device to count);
- ``little``: neither: pipes from the workers and a few files. A loop that waits while its
  loading reads little and is not CPU work waits on something else: the network, a lock, a sleep.

With the CPU accounting (:mod:`cpu_use`) and the data wait, :meth:`IoUse.verdict` says what a
waiting loop waits on. No torch, no textual; plain numbers in.
"""

from __future__ import annotations

from dataclasses import dataclass

from loaderdoc.base.units import fmt_bytes

DISK = "disk"
PAGE_CACHE = "page-cache"
LITTLE = "little"
DISK_SHARE = 0.25  # a device served >= 25 % of the bytes read: the reads go to the disk
DEVICE_MIN_PER_BATCH = 4096  # ... and at least one page per batch (a stray metadata read is not a disk-bound loader)
READ_MIN_PER_BATCH = 64 * 1024  # below 64 KiB a batch, the reads are the workers' pipes and a few small files
SMALL_READ = 256 * 1024  # bytes per read call below which a disk pays a seek (or a request) for little data
REREAD_SHARE = 0.5  # a later epoch fetched >= half the first's bytes from the device again
REREAD_MIN_BYTES = 1024 * 1024  # ... and the first fetched >= 1 MiB


@dataclass(frozen=True)
class IoUse:
    """One loader's reads: steady totals (its waited batches and their wall time), whole-run
    totals per process, and the device bytes of each finished epoch."""

    rchar: int  # steady: bytes read (every source)
    calls: int  # steady: read calls
    device: int  # steady: bytes fetched from a block device
    batches: int  # the steady batches they served
    seconds: float  # the steady wall time
    main: tuple[int, int, int]  # the whole run: the training process's own (rchar, calls, device)
    workers: tuple[int, int, int] | None  # ... its workers' (None: no workers)
    epoch_device: tuple[int, ...] = ()  # each finished epoch's device bytes, whole epoch

    @property
    def rchar_per_batch(self) -> float:
        return self.rchar / self.batches if self.batches else 0.0

    @property
    def device_per_batch(self) -> float:
        return self.device / self.batches if self.batches else 0.0

    @property
    def calls_per_batch(self) -> float:
        return self.calls / self.batches if self.batches else 0.0

    @property
    def rchar_per_s(self) -> float | None:
        return self.rchar / self.seconds if self.seconds > 0 else None

    @property
    def device_per_s(self) -> float | None:
        return self.device / self.seconds if self.seconds > 0 else None

    @property
    def device_share(self) -> float | None:
        return min(1.0, self.device / self.rchar) if self.rchar else None

    @property
    def bytes_per_call(self) -> float | None:
        return self.rchar / self.calls if self.calls else None

    @property
    def reads_from(self) -> str:
        if self.device_per_batch >= DEVICE_MIN_PER_BATCH and self.device >= DISK_SHARE * self.rchar:
            return DISK
        if self.rchar_per_batch >= READ_MIN_PER_BATCH:
            return PAGE_CACHE
        return LITTLE

    @property
    def small_reads(self) -> bool:
        """The reads come a little at a time (many small files, or small reads of big ones)."""
        per_call = self.bytes_per_call
        return per_call is not None and per_call < SMALL_READ

    @property
    def rereads(self) -> bool:
        """Every later finished epoch fetched the data from the device again (the page cache did
        not keep it between epochs)."""
        first, *later = self.epoch_device or (0,)
        return bool(later) and first >= REREAD_MIN_BYTES and all(d >= REREAD_SHARE * first for d in later)

    def verdict(self, waiting: bool, load_is_cpu: bool | None) -> str:
        """What the reads say, in words: for a loop that waits on loading that is not CPU work
        (``load_is_cpu`` False or unknown), what it waits on."""
        source = self.reads_from
        idle = waiting and not load_is_cpu
        if source == DISK:
            return "waiting on the disk" if idle else "reads from the disk"
        if source == PAGE_CACHE:
            return "served from the page cache (or a network file system)"
        return "waiting on something other than reads: the network, a lock, a sleep" if idle else "reads little"

    def line(self) -> str:
        """One line of figures: per batch and per second, how much came from the device."""
        text = f"{fmt_bytes(self.rchar_per_batch)}/batch in {self.calls_per_batch:.1f} read calls"
        if self.rchar_per_s is not None:
            text += f" ({fmt_bytes(self.rchar_per_s)}/s)"
        share = self.device_share
        text += f", {fmt_bytes(self.device_per_batch)}/batch from the disk"
        if share is not None and self.device:
            text += f" ({share:.0%}"
            text += f", {fmt_bytes(self.device_per_s)}/s)" if self.device_per_s is not None else ")"
        return text


def loading(epoch) -> list[int]:
    """The reads that loaded an epoch's batches: its workers' where it had workers (the training
    process then takes batches through pipes and pages in its own code and model: not loading),
    else the training process's own (hook's ``ioacct.loading``)."""
    return epoch.io_workers if epoch.io_workers is not None else epoch.io_main


def io_use(epochs, waits: int) -> IoUse | None:
    """The loader's reads from its epochs (objects with ``io_main``, ``io_workers``, ``io_first``
    (rchar, calls, device) lists, ``io_traced`` (--trace's steps: left out), ``wall_s``,
    ``first_batch_s``, ``finished``); None where no epoch's reads were recorded."""
    known = [e for e in epochs if e.io_main is not None]
    if not known:
        return None
    main, workers, steady = [0, 0, 0], None, [0, 0, 0]
    seconds = 0.0
    batches = waits
    for e in known:
        main = [a + b for a, b in zip(main, e.io_main, strict=True)]
        if e.io_workers is not None:
            workers = [a + b for a, b in zip(workers or [0, 0, 0], e.io_workers, strict=True)]
        total = loading(e)
        first = e.io_first or [0, 0, 0]
        steady = [a + max(0, b - c) for a, b, c in zip(steady, total, first, strict=True)]
        if e.wall_s:
            seconds += max(0.0, e.wall_s - (e.first_batch_s or 0.0))
        traced = e.io_traced
        if isinstance(traced, dict):  # --trace's steps: the profiler reads its own files meanwhile
            steady = [max(0, a - b) for a, b in zip(steady, traced.get("reads") or [0, 0, 0], strict=True)]
            batches -= traced.get("batches") or 0
            seconds -= traced.get("seconds") or 0.0
    device = tuple(int(loading(e)[2]) for e in known if e.finished)
    return IoUse(rchar=steady[0], calls=steady[1], device=steady[2], batches=max(0, batches), seconds=max(0.0, seconds),
                 main=tuple(main), workers=tuple(workers) if workers is not None else None, epoch_device=device)
