"""Plain explanations of each DataLoader knob: what it does, what it buys, what it costs, and
when to change it. The TUI shows these next to the trade-off tables; ``docs/tradeoffs.md`` prints
them. General knowledge only: the numbers for *this* machine come from ``tradeoffs.py``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Knob:
    name: str
    default: str  # torch's default
    what: str
    pros: tuple[str, ...]
    cons: tuple[str, ...]
    when_to_change: str

    def to_dict(self) -> dict:
        return asdict(self)


KNOBS: dict[str, Knob] = {
    k.name: k
    for k in (
        Knob(
            "num_workers", "0",
            "How many separate processes prepare batches. With 0 the training loop itself reads, decodes and "
            "transforms each batch, and the step waits meanwhile; with N > 0, N processes work ahead in "
            "parallel while the step runs.",
            ("overlaps data preparation with the training step",
             "spreads decoding and augmentation over several CPUs"),
            ("each worker is a process with its own memory (a copy of whatever dataset state it touches)",
             "more processes than CPUs just take turns and slow each other down",
             "every batch crosses a process boundary through /dev/shm, which costs time for cheap data",
             "start-up time at the beginning of each epoch unless persistent_workers is on"),
            "Raise it while the step waits for data and CPUs are idle; stop when throughput stops improving or "
            "you reach the CPUs one training process may use. Lower it when memory or /dev/shm runs out, or "
            "when the data is already in RAM and cheap to fetch (then 0 can be fastest).",
        ),
        Knob(
            "prefetch_factor", "2, only with num_workers > 0",
            "How many batches each worker prepares ahead. The batches waiting at any moment are "
            "num_workers x prefetch_factor, and each of them sits in shared memory.",
            ("a buffer that absorbs occasional slow batches (a slow read, an expensive sample)",),
            ("memory and /dev/shm grow linearly: workers x prefetch x batch bytes",
             "does not raise sustained throughput: if workers are too slow on average, the buffer just empties"),
            "Raise it when batch times are uneven (the median wait is small but some batches take much "
            "longer) and there is room in /dev/shm and RAM. Lower it when /dev/shm or memory is tight.",
        ),
        Knob(
            "pin_memory", "False",
            "Puts each batch in page-locked host memory before handing it over, so the copy to the GPU can "
            "use DMA and run asynchronously (with .to(device, non_blocking=True)).",
            ("faster host-to-device copies, which can overlap with compute",),
            ("page-locked memory can't be swapped and costs an extra copy on the CPU side",
             "does nothing without a GPU (torch only prints a warning)"),
            "Turn it on when training on an NVIDIA GPU; leave it off on CPU-only machines, or when host RAM is "
            "so tight that locking pages hurts other processes.",
        ),
        Knob(
            "persistent_workers", "False, only with num_workers > 0",
            "Keeps the worker processes alive between epochs instead of shutting them down and starting new "
            "ones for every pass over the data.",
            ("no worker start-up at each epoch: no re-import, no re-opening of files, no dataset re-copy",),
            ("the workers and their memory stay allocated between epochs, e.g. while a validation loader runs",
             "state a worker builds up (caches, open handles) lives on across epochs"),
            "Turn it on whenever there are workers and training runs more than one epoch; it matters most "
            "for short epochs (small datasets) or slow worker start-up.",
        ),
        Knob(
            "batch_size", "1",
            "Samples per batch: what the training step consumes at once.",
            ("fewer, larger transfers and steps; better GPU utilisation up to a point",),
            ("every batch in flight is larger: /dev/shm and RAM use grow with it",
             "GPU memory for activations grows with it; it also changes the optimisation (learning rate, "
             "BatchNorm statistics)"),
            "Usually set by the model and GPU memory rather than by the loader; when you change it, re-check "
            "that workers x prefetch x batch bytes still fits /dev/shm.",
        ),
        Knob(
            "drop_last", "False",
            "Skips the last batch of an epoch when it has fewer than batch_size samples.",
            ("every batch has the same size: stable BatchNorm statistics, no odd-shaped last step",),
            ("up to batch_size - 1 samples are not seen in that epoch (a different subset each epoch when "
             "shuffling)",),
            "Turn it on for training with BatchNorm when the last batch would be tiny; keep it off for "
            "evaluation, where every sample must count.",
        ),
        Knob(
            "shuffle", "False",
            "Visits the samples in a new random order every epoch.",
            ("batches are not correlated with the file order, which SGD needs",),
            ("random access: slower on spinning disks and on formats meant to be read sequentially",
             "must be False when a sampler (e.g. DistributedSampler) is given",
             "must be left off for an IterableDataset, which yields samples in its own order"),
            "On for training, off for evaluation; under DDP let DistributedSampler(shuffle=True) do it; an "
            "IterableDataset shuffles inside its stream (e.g. a shuffle buffer) instead.",
        ),
        Knob(
            "timeout", "0: wait forever",
            "Seconds to wait for a batch from a worker before raising an error.",
            ("turns a silent hang (a stuck worker, a dead network mount) into an error",),
            ("too short a value aborts a run on one legitimately slow batch",),
            "Set it to several times the slowest batch you expect when a hang would be costly.",
        ),
        Knob(
            "multiprocessing_context", "fork on Linux up to Python 3.13 (forkserver from 3.14), spawn on macOS and Windows",
            "How worker processes are started: 'fork' copies the parent process; 'spawn' and 'forkserver' "
            "start fresh interpreters that import your code and receive a pickled dataset.",
            ("'fork' starts fast and shares the parent's memory copy-on-write",
             "'spawn' avoids inheriting threads, CUDA state and locks from the parent"),
            ("'fork' after CUDA or threads are initialised can deadlock or crash",
             "'spawn' starts slowly and needs the dataset to be picklable"),
            "Leave the default unless workers hang or crash after CUDA is initialised (then 'spawn' or "
            "'forkserver').",
        ),
        Knob(
            "in_order", "True (an argument since torch 2.6; older versions always keep the order)",
            "Whether batches are handed to the training loop in the order they were requested. With False "
            "(and workers), a batch one worker has finished may overtake one a slower worker is still "
            "preparing, so one slow sample no longer holds back the batches behind it.",
            ("a slow sample (a large file, a network read, an expensive augmentation) stops stalling the "
             "batches queued behind it",),
            ("the order of batches varies from run to run, even with a fixed seed",
             "with imbalanced data the training can see a skewed mix for a while (torch's own warning)",
             "torch before 2.6 refuses the argument (TypeError); without workers it does nothing"),
            "Consider False when batch times are uneven (a few slow samples) and nothing depends on the "
            "batch order; keep True for bit-exact reproducibility and for evaluation code that matches "
            "outputs to the order of the dataset.",
        ),
    )
}


def explain(name: str) -> Knob:
    """The explanation for one knob; KeyError names the known ones."""
    try:
        return KNOBS[name]
    except KeyError:
        raise KeyError(f"no explanation for {name!r}; known: {', '.join(KNOBS)}") from None
