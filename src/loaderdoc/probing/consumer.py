"""The simulated training step that consumes batches.

With CUDA each batch goes ``.to(device, non_blocking=True)`` and a GPU spin kernel of calibrated
length runs, so the time the training loop waits for data is real GPU idle time. Without CUDA
the step is a sleep. Either way the step time actually achieved is measured and reported.

The CUDA path cannot be exercised on a CPU-only machine; its calibration arithmetic is a pure
function (:func:`fit_cycles_per_ms`) tested with a fake kernel.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from loaderdoc.base.batches import iter_tensors


def move_to(batch: Any, device: Any, non_blocking: bool = True) -> Any:
    """Send every tensor of ``batch`` to ``device``, keeping the structure."""
    if hasattr(batch, "to") and hasattr(batch, "shape"):
        return batch.to(device, non_blocking=non_blocking)
    if isinstance(batch, dict):
        return {k: move_to(v, device, non_blocking) for k, v in batch.items()}
    if isinstance(batch, (list, tuple)):
        moved = [move_to(v, device, non_blocking) for v in batch]
        return type(batch)(moved) if isinstance(batch, list) else tuple(moved)
    return batch


class SleepConsumer:
    """CPU stand-in for a training step: sleeps ``step_ms`` (the GPU would be busy meanwhile)."""

    kind = "cpu-sleep"

    def __init__(self, step_ms: float) -> None:
        self.step_s = step_ms / 1000.0

    def step(self, batch: Any) -> None:
        if self.step_s > 0:
            time.sleep(self.step_s)

    def h2d_times_ms(self, batch: Any) -> tuple[float | None, float | None]:
        return None, None  # no device: nothing to copy to, never invented

    def pin_ms(self, batch: Any) -> float | None:
        return None  # no device: torch pins nothing (it warns and ignores pin_memory)


def fit_cycles_per_ms(samples: list[tuple[int, float]]) -> float:
    """Least-squares slope through the origin of (cycles, elapsed ms) spin-kernel timings.

    ``torch.cuda._sleep(cycles)`` spins for a number of GPU clock cycles; the clock differs per
    GPU and boost state, so the probe times a few lengths and fits cycles per millisecond.
    """
    usable = [(c, ms) for c, ms in samples if c > 0 and ms > 0]
    if not usable:
        raise ValueError("no usable calibration samples")
    num = sum(c * ms for c, ms in usable)
    den = sum(ms * ms for _, ms in usable)
    return num / den


RAMP_MS = 100.0  # spin this long before calibrating: an idle GPU runs at a low clock until loaded
RETARGET_TOLERANCE = 0.01  # a step's kernel off its target by more than this gets its cycles rescaled


def calibrate_spin(run_kernel_ms: Callable[[int], float], start_cycles: int = 1_000_000, rounds: int = 4,
                   ramp_ms: float = RAMP_MS) -> float:
    """Cycles per millisecond of a spin kernel; ``run_kernel_ms(cycles)`` times one run in ms.

    An idle GPU sits at a low clock and raises it only once loaded (an H200 ran a 2000 ms step in
    1314 ms calibrated without this), so a spin of about ``ramp_ms`` runs first, sized by one
    short run, and the fitted lengths come after it."""
    run_kernel_ms(start_cycles)  # warm-up: first launch pays module loading
    if ramp_ms > 0:
        first_ms = run_kernel_ms(start_cycles)
        if first_ms > 0:
            run_kernel_ms(int(start_cycles * ramp_ms / first_ms))
    samples = []
    cycles = start_cycles
    for _ in range(rounds):
        samples.append((cycles, run_kernel_ms(cycles)))
        cycles *= 2
    return fit_cycles_per_ms(samples)


def retarget_cycles(cycles: int, kernel_ms: float, target_ms: float) -> int:
    """The spin length for the next step after one of ``cycles`` took ``kernel_ms``: unchanged within
    RETARGET_TOLERANCE of ``target_ms``, else rescaled (at most 2x either way a step), so a clock
    that changes mid-run (boost, power or thermal limits) leaves the simulated step as long as asked."""
    if cycles <= 0 or kernel_ms <= 0 or target_ms <= 0:
        return cycles
    ratio = target_ms / kernel_ms
    if abs(ratio - 1.0) <= RETARGET_TOLERANCE:
        return cycles
    return max(1, int(cycles * min(2.0, max(0.5, ratio))))


class CudaConsumer:  # pragma: no cover - needs a GPU; not available in CI
    """Copies each batch to the GPU and runs a spin kernel of ``step_ms``; syncs every step."""

    kind = "cuda-kernel"

    def __init__(self, step_ms: float, device: str = "cuda") -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        torch.cuda.init()
        self.step_ms = step_ms
        self.cycles_per_ms = calibrate_spin(self._time_kernel_ms)
        self.cycles = int(self.cycles_per_ms * step_ms)

    def _time_kernel_ms(self, cycles: int) -> float:
        torch = self.torch
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(cycles)
        end.record()
        end.synchronize()
        return float(start.elapsed_time(end))

    def step(self, batch: Any) -> None:
        torch = self.torch
        move_to(batch, self.device, non_blocking=True)
        timed = None
        if self.cycles > 0:
            timed = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            timed[0].record()
            torch.cuda._sleep(self.cycles)
            timed[1].record()
        # a real loop syncs at least once per step (loss.item(), optimizer bookkeeping)
        torch.cuda.current_stream(self.device).synchronize()
        if timed is not None:
            self.cycles = retarget_cycles(self.cycles, float(timed[0].elapsed_time(timed[1])), self.step_ms)

    def h2d_times_ms(self, batch: Any) -> tuple[float | None, float | None]:
        """Copy time of this batch from pinned and from pageable host memory."""
        torch = self.torch
        tensors = [t for t in iter_tensors(batch) if hasattr(t, "pin_memory")]
        if not tensors:
            return None, None
        pageable = [t.clone() for t in tensors]
        pinned = [t.pin_memory() for t in tensors]

        def timed(group: list[Any]) -> float:
            torch.cuda.synchronize(self.device)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for t in group:
                t.to(self.device, non_blocking=True)
            end.record()
            end.synchronize()
            return float(start.elapsed_time(end))

        timed(pinned)  # warm-up
        return timed(pinned), timed(pageable)

    def pin_ms(self, batch: Any) -> float | None:
        """Pinning this batch as the pin-memory thread does (a copy into page-locked memory, host
        CPU time in the training process): the lowest of three, after one to warm the allocator."""
        import time

        tensors = [t for t in iter_tensors(batch) if hasattr(t, "pin_memory")]
        if not tensors:
            return None
        times = []
        for _ in range(4):
            start = time.perf_counter()
            for t in tensors:
                t.pin_memory()
            times.append((time.perf_counter() - start) * 1000.0)
        return min(times[1:])


def make_consumer(step_ms: float, device: str) -> SleepConsumer | CudaConsumer:
    """The consumer for ``device`` ("cuda" or "cpu"). Where CUDA will not start, the configuration
    fails as loaderdoc's own (a sleep in its place would be reported as a GPU step it never ran)."""
    if device.startswith("cuda"):
        try:
            return CudaConsumer(step_ms, device)
        except Exception as exc:
            raise RuntimeError(f"the simulated GPU step could not start CUDA in the measuring process: "
                               f"{type(exc).__name__}: {exc}") from exc
    return SleepConsumer(step_ms)
