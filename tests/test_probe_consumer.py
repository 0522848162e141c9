"""The simulated training step: batch walking, sleep consumer, and the CUDA spin calibration
arithmetic (tested with a fake kernel: there is no GPU here)."""

from __future__ import annotations

import time

import pytest
import torch

from loaderdoc.probing.consumer import (
    SleepConsumer,
    batch_digest,
    batch_nbytes,
    calibrate_spin,
    fit_cycles_per_ms,
    iter_tensors,
    make_consumer,
    move_to,
    repeated_streams,
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

    rate = calibrate_spin(fake_kernel_ms, start_cycles=1_000_000, rounds=4)
    assert rate == pytest.approx(1.4e6, rel=0.03)
    assert calls[0] == calls[1]  # one warm-up launch, then doubling lengths
    assert calls[1:] == [1_000_000, 2_000_000, 4_000_000, 8_000_000]
    # a step of 35 ms then spins for ~49 M cycles
    assert int(rate * 35) == pytest.approx(49_000_000, rel=0.03)


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
