"""The GPU's idle time during data waits, timed with CUDA events (hook side).

At the start of a wait (entering ``next()``) event A is recorded on the current stream, when
``next()`` returns event B. A completes when the GPU finished the work queued before the wait, B
right after it, so ``A.elapsed_time(B)`` is how long the GPU sat idle in that wait (about 0 when
it was busy throughout). Events are resolved later with ``query()`` (never blocking, never
synchronising the user's stream), pooled for reuse and summed into the epoch's ``gpu_idle_s``.

Only when the user's program already initialised CUDA: torch is never imported here and CUDA never
initialised. Standard library only (loaded by path beside ``hook.py``). Everything runs on the
training loop's thread; the sampler thread never touches CUDA.
"""

from __future__ import annotations

import sys

RESOLVE_EVERY = 32  # waits between two non-blocking resolution passes
PENDING_CAP = 1024  # pairs outstanding at most: beyond it waits go untimed (a GPU far behind)
CUDA_EVENTS = "cuda-events"
UNAVAILABLE = "unavailable"


class GpuIdle:
    """Times waits with events from ``new_event()`` recorded on ``current_stream()`` (injectable:
    the tests use a fake event class with ``record``, ``query`` and ``elapsed_time``)."""

    def __init__(self, new_event, current_stream) -> None:
        self._new_event = new_event
        self._stream = current_stream
        self._pool: list = []
        self._pending: list[tuple] = []  # (A, B, epoch), oldest first
        self._waits = 0  # waits since the last resolution pass
        self.created = 0  # events made (the rest came from the pool)

    def _event(self):
        if self._pool:
            return self._pool.pop()
        self.created += 1
        return self._new_event()

    def timed(self, next_, epoch):
        """``next_`` wrapped to time each wait of ``epoch`` after its first batch (the first is
        start-up, reported apart as first_batch_s, as in wait_s)."""
        if epoch.gpu_idle_s is None:
            epoch.gpu_idle_s = 0.0
        pending = self._pending

        def timed_next():
            if epoch.steps == 0:
                return next_()
            self._waits += 1
            if self._waits >= RESOLVE_EVERY:
                self.resolve()
            if len(pending) >= PENDING_CAP:
                return next_()
            try:
                a = self._event()
                a.record(self._stream())
            except Exception:  # a CUDA error is not the training loop's: this wait goes untimed
                return next_()
            try:
                batch = next_()
            except BaseException:  # StopIteration included: no wait to time, A goes back
                self._pool.append(a)
                raise
            try:
                b = self._event()
                b.record(self._stream())
            except Exception:
                self._pool.append(a)
                return batch
            pending.append((a, b, epoch))
            epoch.gpu_pending += 1
            return batch

        return timed_next

    def resolve(self) -> int:
        """Sum every pair whose B completed (``query()``, non-blocking); the others stay pending.
        Returns how many are still pending."""
        pending = self._pending
        keep = []
        for a, b, epoch in pending:
            try:
                done = b.query()
                idle_ms = a.elapsed_time(b) if done else None
            except Exception:  # an event in error: drop the pair, untimed
                epoch.gpu_pending -= 1
                continue
            if idle_ms is None:
                keep.append((a, b, epoch))
                continue
            epoch.gpu_idle_s += max(0.0, idle_ms) / 1000.0
            epoch.gpu_waits_timed += 1
            epoch.gpu_pending -= 1
            self._pool.append(a)
            self._pool.append(b)
        pending[:] = keep  # in place: the wrapped next() functions hold this list
        self._waits = 0
        return len(keep)


def from_torch() -> tuple[GpuIdle | None, str | None]:
    """A GpuIdle on torch's CUDA events when the program already initialised CUDA, else
    (None, why not)."""
    torch = sys.modules.get("torch")
    if torch is None:
        return None, "torch is not imported"
    try:
        cuda = torch.cuda
        if not cuda.is_initialized():
            return None, "CUDA was not initialised by the program (the hook never initialises it)"
        event = cuda.Event
        return GpuIdle(lambda: event(enable_timing=True), cuda.current_stream), None
    except Exception as exc:  # a broken or partial torch build: no GPU timing, no failure
        return None, f"torch.cuda is unusable: {exc}"
