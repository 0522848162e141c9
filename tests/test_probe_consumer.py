"""The simulated training step: batch walking, sleep consumer, and the CUDA spin calibration
arithmetic (tested with a fake kernel: there is no GPU here)."""

from __future__ import annotations

import time

import pytest
import torch

from loaderdoc.base.batches import batch_digest, batch_nbytes, iter_tensors, repeated_streams
from loaderdoc.probing.consumer import (
    SleepConsumer,
    calibrate_spin,
    fit_cycles_per_ms,
    make_consumer,
    move_to,
    retarget_cycles,
)


def test_batches_of_any_structure_are_walked():
    batch = {"x": torch.zeros(4, 3, dtype=torch.uint8), "y": [torch.zeros(4, dtype=torch.int64), "name"], "n": 4}
    assert len(list(iter_tensors(batch))) == 2
    assert batch_nbytes(batch) == 12 + 32
    moved = move_to((torch.ones(2), [torch.ones(1)]), "cpu")
    assert isinstance(moved, tuple) and isinstance(moved[1], list)


def test_sleep_consumer_takes_its_step_and_reports_no_copy_times():
    consumer = make_consumer(15.0, "cpu")
    assert isinstance(consumer, SleepConsumer) and consumer.kind == "cpu-sleep"
    started = time.perf_counter()
    consumer.step(torch.zeros(1))
    assert time.perf_counter() - started >= 0.014
    assert consumer.h2d_times_ms(torch.zeros(1)) == (None, None)


def test_spin_calibration_recovers_the_clock_of_a_fake_gpu():
    # a fake 1.4 GHz GPU: 1.4e6 cycles per ms, plus 0.01 ms launch overhead and some jitter
    calls = []

    def fake_kernel_ms(cycles: int) -> float:
        calls.append(cycles)
        jitter = 1.0 + 0.01 * ((len(calls) % 3) - 1)
        return cycles / 1.4e6 * jitter + 0.01

    rate = calibrate_spin(fake_kernel_ms, start_cycles=1_000_000, rounds=4, ramp_ms=100.0)
    assert rate == pytest.approx(1.4e6, rel=0.03)
    # a warm-up launch, one run that sizes the ~100 ms ramp, the ramp, then doubling lengths
    assert calls[:2] == [1_000_000, 1_000_000] and calls[2] == pytest.approx(140_000_000, rel=0.03)
    assert calls[3:] == [1_000_000, 2_000_000, 4_000_000, 8_000_000]
    # a step of 35 ms then spins for ~49 M cycles
    assert int(rate * 35) == pytest.approx(49_000_000, rel=0.03)


class RampingGpu:
    """A fake GPU that idles at 1.3 GHz and reaches 1.98 GHz after 40 ms of spinning (an H200 ran
    a 2000 ms step in 1314 ms when calibrated by short spins alone: the clock rose afterwards)."""

    def __init__(self) -> None:
        self.spun_ms = 0.0

    def kernel_ms(self, cycles: int) -> float:
        ghz = 1.98 if self.spun_ms >= 40.0 else 1.3
        ms = cycles / (ghz * 1e6)
        self.spun_ms += ms
        return ms


def test_calibration_spins_the_clock_up_first_so_a_long_step_lasts_what_was_asked():
    gpu = RampingGpu()
    rate = calibrate_spin(gpu.kernel_ms)
    assert rate == pytest.approx(1.98e6, rel=0.01)
    assert gpu.kernel_ms(int(rate * 2000)) == pytest.approx(2000, rel=0.01)
    # without the ramp the fit is of the idle clock and the step comes a third short
    cold = calibrate_spin(RampingGpu().kernel_ms, ramp_ms=0)
    assert cold == pytest.approx(1.3e6, rel=0.01)


def test_a_step_off_its_target_is_rescaled_and_one_on_it_is_left_alone():
    assert retarget_cycles(1_000_000, 20.1, 20.0) == 1_000_000  # within 1 %
    assert retarget_cycles(1_000_000, 13.14, 20.0) == pytest.approx(1_522_070, rel=1e-4)  # the clock rose
    assert retarget_cycles(1_000_000, 25.0, 20.0) == 800_000  # the clock fell
    assert retarget_cycles(1_000_000, 1.0, 20.0) == 2_000_000  # at most 2x a step: one odd timing is not trusted
    assert retarget_cycles(1_000_000, 100.0, 20.0) == 500_000
    assert retarget_cycles(0, 5.0, 20.0) == 0 and retarget_cycles(1_000, 0.0, 20.0) == 1_000


def test_calibration_rejects_useless_samples():
    with pytest.raises(ValueError):
        fit_cycles_per_ms([(0, 1.0), (100, 0.0)])


def test_batch_digests_tell_batches_apart_by_content_shape_and_dtype():
    a = {"x": torch.arange(8).reshape(2, 4), "y": [torch.tensor([1, 2])]}
    same = {"x": torch.arange(8).reshape(2, 4), "y": [torch.tensor([1, 2])]}
    assert batch_digest(a) == batch_digest(same)
    assert batch_digest(a) != batch_digest({"x": torch.arange(8).reshape(4, 2), "y": [torch.tensor([1, 2])]})
    assert batch_digest(a) != batch_digest({"x": torch.arange(8).reshape(2, 4).float(), "y": [torch.tensor([1, 2])]})
    assert batch_digest(a) != batch_digest({"x": torch.arange(8).reshape(2, 4), "y": [torch.tensor([1, 3])]})
    assert batch_digest(torch.arange(6)[::2]) == batch_digest(torch.tensor([0, 2, 4]))  # a strided view
    assert batch_digest(["no", "tensors"]) is None


def test_repeated_streams_needs_two_rounds_of_the_same_batches_from_every_worker():
    # batch k comes from worker k % workers
    assert repeated_streams(["a", "a", "b", "b"], 2) is True  # both workers replay one stream
    assert repeated_streams(["a", "a", "a", "b", "b", "b"], 3) is True
    assert repeated_streams(["a", "b", "c", "d"], 2) is False  # split between the workers
    assert repeated_streams(["a", "a", "b", "c"], 2) is False  # the second round differs
    assert repeated_streams(["a", "a", "a", "a"], 2) is None  # a constant stream: cannot tell
    assert repeated_streams(["a", "a", "b"], 2) is None  # too few batches
    assert repeated_streams(["a", "a", None, "b"], 2) is None  # a batch without tensors
    assert repeated_streams(["a", "a"], 1) is None


def _cuda_starts() -> bool:
    import torch

    return torch.backends.cuda.is_built() and torch.cuda.is_available()


@pytest.mark.skipif("_cuda_starts()", reason="CUDA starts here: the GPU step does not fail")
def test_a_gpu_step_that_cannot_start_cuda_fails_loudly_instead_of_sleeping():
    """Issue 48: a measuring process whose CUDA would not start ran a sleep in place of the GPU step,
    and its rows were reported as the GPU step's. Now it raises, and the configuration fails as
    loaderdoc's own (probing/blame)."""
    from loaderdoc.probing.blame import loaderdoc_failure

    with pytest.raises(RuntimeError, match="could not start CUDA in the measuring process") as raised:
        make_consumer(15.0, "cuda")  # this machine has no CUDA (a CPU build of torch, or no GPU)
    import traceback

    text = "".join(traceback.format_exception(raised.value))
    assert loaderdoc_failure(str(raised.value), text, in_worker=False)
