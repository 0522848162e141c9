"""The training context: BatchNorm, DDP samplers, cuDNN autotuning; an IterableDataset each
worker replays."""

from __future__ import annotations

import math

from loaderdoc.advice.findings import CRITICAL, WARNING, Finding
from loaderdoc.advice.rules.registry import (
    BN_SMALL_BATCH,
    Inputs,
    found,
    rule,
)


@rule("drop-last-batchnorm", WARNING, "drop_last=False with BatchNorm and a tiny last batch", "context",
      f"the model uses BatchNorm and the dataset length (per rank under DDP, as DistributedSampler splits "
      f"it) leaves a last batch of 1 to {BN_SMALL_BATCH - 1} samples: BatchNorm's batch statistics degrade "
      "sharply below 8 samples (Wu & He, Group Normalization, 2018), and a single sample is what "
      "BatchNorm1d rejects in training")
def _drop_last_batchnorm(i: Inputs) -> Finding | None:
    s, c = i.settings, i.context
    if s is None or s.drop_last or c.uses_batchnorm is not True or not s.batch_size:
        return None
    n = c.dataset_len or (i.probe.workload.dataset_len if i.probe else None)
    if not n:
        return None
    evidence = [f"dataset: {n} samples, batch_size {s.batch_size}"]
    per_rank = n
    ws = i.world_size if c.distributed else None
    ddp = bool(ws and ws > 1)
    if ddp:
        per_rank = math.ceil(n / ws)
        evidence.append(f"DDP: {ws} ranks, DistributedSampler gives each ceil({n} / {ws}) = {per_rank} samples")
    last = per_rank % s.batch_size
    if last == 0 or last >= BN_SMALL_BATCH:
        return None
    plural = "s" if last != 1 else ""
    evidence.append(f"last batch of every epoch{' on each rank' if ddp else ''}: {last} sample{plural}")
    if last == 1:
        symptom = ("Every epoch ends with a 1-sample batch: BatchNorm1d raises 'Expected more than 1 value per "
                   "channel when training', other BatchNorm layers normalise that sample by itself")
    else:
        symptom = (f"Every epoch ends with a {last}-sample batch: BatchNorm's statistics from it are noisy and "
                   "leak into the running averages")
    return found(
        WARNING, symptom, evidence,
        "In training, BatchNorm normalises with the mean and variance of the current batch"
        + (" on each rank" if ddp else "") + f"; {last} sample{plural} give a poor estimate.",
        f"Set drop_last=True (skips {last} sample{plural} per epoch" + (" per rank" if ddp else "")
        + ", a different subset each epoch when shuffling).",
        {"drop_last": True},
    )


@rule("distributed-sampler-missing", WARNING, "Multi-GPU training without a DistributedSampler", "context",
      "context.distributed is set (or WORLD_SIZE > 1) and the loader has no DistributedSampler")
def _distributed_sampler(i: Inputs) -> Finding | None:
    c = i.context
    if c.uses_distributed_sampler is not False:
        return None
    if i.probe is not None and i.probe.workload.iterable:
        # DataLoader takes no sampler for an IterableDataset, so "no sampler" is not evidence: whether
        # the stream is split by rank in __iter__ is unknown here, and the fix below would not apply
        return None
    ws = i.world_size
    if not (c.distributed or (ws and ws > 1)):
        return None
    evidence = ["no DistributedSampler passed to the DataLoader"]
    if ws:
        evidence.append(f"WORLD_SIZE = {ws}")
    return found(
        WARNING,
        f"Every rank iterates the whole dataset{f' ({ws} copies per epoch)' if ws else ''}",
        evidence,
        "Without a DistributedSampler each process reads all samples: an epoch does the work "
        "world_size times and ranks can see the same batches.",
        "Pass sampler=DistributedSampler(dataset, shuffle=True) (and shuffle=False to the DataLoader); "
        "call sampler.set_epoch(epoch) at the start of each epoch.",
        {"shuffle": False},
    )


@rule("iterable-workers-repeat", CRITICAL, "Every DataLoader worker yields the same samples (IterableDataset)",
      "probe", "the probe's check of 2 workers over an IterableDataset: in two rounds both delivered identical "
      "batches (every tensor hashed) while the stream moved on between the rounds")
def _iterable_workers_repeat(i: Inputs) -> Finding | None:
    if i.probe is None or not any(r.workers_repeat for r in i.probe.results):
        return None
    workers = i.settings.num_workers if i.settings is not None else None
    if workers is not None and workers < 2:
        return None  # one worker (or none) yields the stream once
    name = i.probe.workload.name
    evidence = [f"{name}: with num_workers=2 the first 4 batches were A, A, B, B (from workers 0, 1, 0, 1): "
                "worker 1 delivered the same 2 batches as worker 0"]
    if workers is not None:
        evidence.append(f"num_workers={workers}: each sample arrives {workers} times per epoch, and the "
                        "throughput measured with workers counts every copy")
    return found(
        CRITICAL,
        "Every worker yields the whole stream: training sees each sample once per worker",
        evidence,
        "DataLoader gives every worker its own copy of an IterableDataset and iterates each; unless "
        "__iter__ consults torch.utils.data.get_worker_info(), they all yield the same samples.",
        "Split the stream by worker in __iter__: info = get_worker_info(); with info set, yield only "
        "itertools.islice(stream, info.id, None, info.num_workers), or give each worker its own shards. "
        "Then probe again: the measured throughput with workers included the repeats.",
        {},
    )


@rule("shuffle-with-sampler", CRITICAL, "shuffle=True together with a sampler", "context",
      "torch's DataLoader raises ValueError ('sampler option is mutually exclusive with shuffle')")
def _shuffle_with_sampler(i: Inputs) -> Finding | None:
    if i.settings is None or not i.settings.shuffle or i.context.uses_distributed_sampler is not True:
        return None
    return found(
        CRITICAL,
        "DataLoader(...) will raise: shuffle=True cannot be combined with a sampler",
        ["shuffle = True", "a DistributedSampler is passed as sampler"],
        "The sampler decides the order; torch refuses a second shuffling instruction.",
        "Set shuffle=False on the DataLoader and DistributedSampler(dataset, shuffle=True).",
        {"shuffle": False},
    )


@rule("set-epoch-missing", WARNING, "DistributedSampler without set_epoch", "context",
      "DistributedSampler seeds its shuffle with the epoch; without set_epoch() it is always epoch 0")
def _set_epoch(i: Inputs) -> Finding | None:
    c = i.context
    if c.uses_distributed_sampler is not True or c.calls_set_epoch is not False:
        return None
    return found(
        WARNING,
        "Every epoch visits the samples in the same order",
        ["DistributedSampler in use", "sampler.set_epoch(epoch) is not called"],
        "DistributedSampler shuffles with seed + epoch; the epoch stays 0 unless set_epoch is called.",
        "Call loader.sampler.set_epoch(epoch) at the start of every epoch.",
        {},
    )


@rule("cudnn-benchmark", WARNING, "cudnn.benchmark doesn't match the input shapes", "context",
      "fixed input sizes with convolutions on a usable GPU and benchmark off (cuDNN can pick its fastest "
      "algorithm once per shape); or benchmark on with varying sizes (it re-tunes for every new shape)")
def _cudnn_benchmark(i: Inputs) -> Finding | None:
    c = i.context
    if c.cudnn_benchmark is None or c.fixed_input_size is None or c.uses_convolutions is False:
        return None
    if i.facts.usable_gpus == 0:
        return None
    if c.fixed_input_size and not c.cudnn_benchmark:
        if c.uses_convolutions is not True:
            return None
        return found(
            WARNING,
            "Convolutions run with cuDNN's default algorithm choice although every batch has the same shape",
            ["input size: fixed", "torch.backends.cudnn.benchmark = False", f"usable GPUs: {i.facts.usable_gpus}"],
            "With benchmark on, cuDNN times the available convolution algorithms for each input shape once "
            "and keeps the fastest; with one shape that cost is paid once.",
            "Set torch.backends.cudnn.benchmark = True before training (not when you need bit-exact "
            "reproducibility: then keep it off with cudnn.deterministic = True).",
            {},
        )
    if not c.fixed_input_size and c.cudnn_benchmark:
        return found(
            WARNING,
            "cudnn.benchmark is on but input shapes vary: cuDNN re-tunes for every new shape",
            ["input size: varies", "torch.backends.cudnn.benchmark = True"],
            "Each unseen shape triggers a new round of algorithm timing, which can cost more than it saves.",
            "Set torch.backends.cudnn.benchmark = False, or pad/bucket inputs to a few fixed sizes.",
            {},
        )
    return None
