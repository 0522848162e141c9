#!/usr/bin/env python
"""The CUDA side of ``benchmarks/gpu_acceptance.py``: each step runs in a process of its own
(started by the driver with a time limit), measures, and writes its figures as JSON.

    python benchmarks/gpu_steps.py consumer OUT.json     the probe's CUDA consumer, timed and watched by NVML
    python benchmarks/gpu_steps.py h2d OUT.json          pinned vs pageable copies at two batch sizes
    python benchmarks/gpu_steps.py loop MODE OUT.json    a training loop for `loaderdoc watch` (starved | fed)
    python benchmarks/gpu_steps.py train [--max-s S]     a small CUDA training job for `loaderdoc tune`
    python benchmarks/gpu_steps.py jpeg-step OUT.json    a ResNet-50 step alone on the GPU (for the probe's --step-ms)
    python benchmarks/gpu_steps.py jpeg-train SETTINGS.toml OUT.json
                                                         the real job over JPEGs with the probe's exported settings

Needs a CUDA torch; nothing here runs in CI (``benchmarks/gpu_checks.py`` judges the figures).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "src"), str(REPO)]  # the checkout's loaderdoc (as the driver's children import it), benchmarks

import torch  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from loaderdoc.probing.consumer import CudaConsumer, make_consumer  # noqa: E402

CONSUMER_STEPS_MS = (5.0, 20.0, 50.0)
STEP_RUN_S = 2.0  # each asked step runs this long
DUTY_RUN_S, NVML_SETTLE_S, NVML_PERIOD_S = 4.0, 1.0, 0.1  # NVML averages over up to 1 s: skip the first
H2D_SHAPES = ((32, 3, 224, 224), (512, 3, 224, 224))  # an image batch (4.6 MiB) and a large one (74 MiB)
H2D_REPEATS = 5

# the watched loops: batches of 8 small images, each sample sleeping in a worker (storage), a
# calibrated GPU step. starved: 2 workers give a batch every 16 ms to an 8 ms step, never synced
# (the GPU's idle is less than the host's wait); fed: 4 workers give one every 0.5 ms, synced each step
LOOPS = {
    "starved": {"workers": 2, "sample_ms": 4.0, "step_ms": 8.0, "sync_every": 0, "steps": 200},
    "fed": {"workers": 4, "sample_ms": 0.25, "step_ms": 8.0, "sync_every": 1, "steps": 200},
}
LOOP_BATCH = 8

# the tuned job: 2 ms of CPU a sample, 32 a batch (64 ms at num_workers=0) for a step of a few ms
TRAIN_SAMPLE_CPU_MS, TRAIN_BATCH, TRAIN_SAMPLES = 2.0, 32, 2048


def write_figures(path: str, figures: dict) -> None:
    from loaderdoc.base.safe_write import write_text

    write_text(Path(path), json.dumps(figures, indent=1) + "\n", force=False)


def nvml_device():
    """(pynvml, handle) of the GPU torch calls cuda:0, or (None, why not)."""
    from loaderdoc.system.gpu import read_gpus

    facts = read_gpus(os.environ)
    if not facts.devices:
        return None, f"NVML lists no visible GPU ({facts.nvml.unknown or 'no device'})"
    import pynvml

    pynvml.nvmlInit()
    return pynvml, pynvml.nvmlDeviceGetHandleByIndex(facts.devices[0].index)


class Sampler:
    """Calls ``read()`` every ``period`` seconds on a thread; keeps (seconds since start, value)."""

    def __init__(self, read, period: float = NVML_PERIOD_S) -> None:
        self.read, self.period = read, period
        self.samples: list[tuple[float, object]] = []
        self.error: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(self.period):
            try:
                self.samples.append((time.monotonic() - started, self.read()))
            except Exception as exc:  # NVML's "not supported" (a MIG instance), a driver error
                self.error = f"{type(exc).__name__}: {exc}"
                return

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


def cuda_consumer(step_ms: float) -> CudaConsumer:
    consumer = make_consumer(step_ms, "cuda")
    if not isinstance(consumer, CudaConsumer):  # make_consumer falls back to sleeping when CUDA won't start
        raise SystemExit(f"gpu_steps: the probe's consumer fell back to {consumer.kind}: CUDA did not start")
    return consumer


def duty_run(consumer: CudaConsumer, batch, duty: float, nvml, handle) -> dict:
    """Steps for DUTY_RUN_S, each followed by a pause making the GPU busy ``duty`` of the time;
    NVML's utilisation sampled meanwhile (after NVML_SETTLE_S)."""
    if nvml is None:
        return {"duty": duty, "util_pct": [], "error": handle}
    pause = consumer.step_ms / 1000 * (1 / duty - 1)
    with Sampler(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu) as sampler:
        end = time.monotonic() + DUTY_RUN_S
        while time.monotonic() < end:
            consumer.step(batch)
            if pause:
                time.sleep(pause)
    return {"duty": duty, "util_pct": [v for t, v in sampler.samples if t >= NVML_SETTLE_S], "error": sampler.error}


def run_consumer(out: str) -> None:
    batch = torch.zeros((32, 3, 64, 64), dtype=torch.uint8).pin_memory()
    steps = []
    consumer = None
    for asked in CONSUMER_STEPS_MS:
        consumer = cuda_consumer(asked)
        for _ in range(3):
            consumer.step(batch)
        host = []
        for _ in range(max(10, int(STEP_RUN_S * 1000 / asked))):
            started = time.perf_counter()
            consumer.step(batch)  # as measure.py times it: the copy, the kernel, the sync
            host.append(time.perf_counter() - started)
        kernel = [consumer._time_kernel_ms(consumer.cycles) for _ in range(10)]
        steps.append({"asked_ms": asked, "host_ms": statistics.fmean(host) * 1000, "kernel_ms": statistics.fmean(kernel),
                      "steps": len(host), "cycles_per_ms": consumer.cycles_per_ms})
    busy_consumer = cuda_consumer(20.0)
    nvml, handle = nvml_device()
    write_figures(out, {"kind": consumer.kind if consumer else None, "steps": steps,
                        "busy": duty_run(busy_consumer, batch, 1.0, nvml, handle),
                        "half": duty_run(busy_consumer, batch, 0.5, nvml, handle)})


def run_h2d(out: str) -> None:
    consumer = cuda_consumer(1.0)
    nvml, handle = nvml_device()

    def link():
        return (nvml.nvmlDeviceGetCurrPcieLinkGeneration(handle), nvml.nvmlDeviceGetCurrPcieLinkWidth(handle))

    sizes = []
    with Sampler(link if nvml is not None else (lambda: None), period=0.02) as sampler:
        for shape in H2D_SHAPES:
            batch = torch.randint(0, 255, shape, dtype=torch.uint8)
            pinned, pageable = [], []
            for _ in range(H2D_REPEATS):
                p, q = consumer.h2d_times_ms(batch)  # the probe's own timing: warm-up, pinned, pageable
                pinned.append(p)
                pageable.append(q)
            sizes.append({"shape": list(shape), "bytes": batch.nbytes, "pinned_ms": pinned, "pageable_ms": pageable})
    seen = [v for _, v in sampler.samples if v]
    # the link trains down when idle: its fastest state seen during the copies is the one they used
    gen, width = max(seen) if seen else (None, None)
    source = "NVML current, fastest during the copies"
    if gen is None and nvml is not None:
        gen, width = nvml.nvmlDeviceGetMaxPcieLinkGeneration(handle), nvml.nvmlDeviceGetMaxPcieLinkWidth(handle)
        source = "NVML max (no reading during the copies)"
    write_figures(out, {"link": {"gen": gen, "width": width, "source": source,
                                 "error": sampler.error or (handle if nvml is None else None)}, "sizes": sizes})


class SleepySamples(Dataset):
    """Small images whose read waits ``sample_ms`` (storage), no CPU work."""

    def __init__(self, n: int, sample_ms: float) -> None:
        self.n, self.sample_s = n, sample_ms / 1000

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        time.sleep(self.sample_s)
        return torch.full((3, 64, 64), i % 251, dtype=torch.uint8)


def run_loop(mode: str, out: str) -> None:
    """A training loop as a user writes it, plus its own CUDA events: around each step's copy and
    kernel (the GPU's idle from the end of the first step to the end of the last is that span less
    the steps' work: every idle, the loop's own launching between steps included), and around each
    ``next()`` after the first (the idle inside the data waits, what watch's events should add up
    to; the loop's pair is recorded outside watch's, so it holds watch's own bookkeeping too)."""
    loop = LOOPS[mode]
    consumer = cuda_consumer(loop["step_ms"])  # CUDA is up before the loader is iterated, as watch needs
    dataset = SleepySamples(loop["steps"] * LOOP_BATCH, loop["sample_ms"])
    loader = DataLoader(dataset, batch_size=LOOP_BATCH, num_workers=loop["workers"], pin_memory=True)
    device = torch.device("cuda")
    events, waits = [], []
    host_wait = 0.0
    iterator = iter(loader)
    while True:
        if events:  # watch leaves the first wait (start-up) untimed; so does this
            wait_start, wait_end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            wait_start.record()
        asked = time.perf_counter()
        try:
            batch = next(iterator)
        except StopIteration:
            break
        host_wait += time.perf_counter() - asked
        if events:
            wait_end.record()
            waits.append((wait_start, wait_end))
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        batch.to(device, non_blocking=True)
        torch.cuda._sleep(consumer.cycles)
        end.record()
        events.append((start, end))
        if loop["sync_every"] and len(events) % loop["sync_every"] == 0:
            torch.cuda.current_stream().synchronize()
    torch.cuda.synchronize()
    busy = sum(s.elapsed_time(e) for s, e in events[1:])
    span = events[0][1].elapsed_time(events[-1][1]) if events else 0.0
    wait_idle = sum(s.elapsed_time(e) for s, e in waits)
    write_figures(out, {"mode": mode, **loop, "batch_size": LOOP_BATCH, "steps": len(events), "span_ms": span,
                        "busy_ms": busy, "idle_ms": span - busy, "waits": len(waits), "wait_idle_ms": wait_idle,
                        "host_wait_s": host_wait})


class CpuSamples(Dataset):
    """Images that cost TRAIN_SAMPLE_CPU_MS of CPU each (decode and augment stand-in)."""

    def __len__(self) -> int:
        return TRAIN_SAMPLES

    def __getitem__(self, i: int):
        x = torch.full((3, 64, 64), float(i % 7))
        started = time.thread_time()
        while time.thread_time() - started < TRAIN_SAMPLE_CPU_MS / 1000:
            x = x * 1.0001
        return x, i % 10


def run_train(max_s: float) -> None:
    """A small CNN trained on the GPU, num_workers=0 as written; runs until stopped (or max_s)."""
    from torch import nn

    torch.manual_seed(0)
    device = torch.device("cuda")
    model = nn.Sequential(nn.Conv2d(3, 32, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1),
                          nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loader = DataLoader(CpuSamples(), batch_size=TRAIN_BATCH, shuffle=True, num_workers=0, pin_memory=True)
    deadline = time.monotonic() + max_s
    while time.monotonic() < deadline:
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            opt.zero_grad()
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            loss.item()  # a real loop syncs once a step (logging)
            if time.monotonic() > deadline:
                return


# the real job of issue 48: ResNet-50, bf16 autocast, channels_last, SGD, batch 64, over JPEGs that
# torchvision decodes and augments on the CPU (benchmarks.torchvision_pipeline.make_job_dataset)
JOB_BATCH, JOB_WARM_STEPS, JOB_STEPS = 64, 10, 60


def _job_model():
    from benchmarks.torchvision_pipeline import import_torchvision

    tv = import_torchvision()
    torch.manual_seed(0)
    model = tv.models.resnet50(num_classes=10).to("cuda", memory_format=torch.channels_last)
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def _job_step(model, opt, x, y) -> None:
    x = x.to("cuda", non_blocking=True).to(memory_format=torch.channels_last)
    y = y.to("cuda", non_blocking=True)
    opt.zero_grad(set_to_none=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    loss.item()  # a real loop syncs once a step (logging)


def run_jpeg_step(out: str) -> None:
    """The job's step alone: one batch kept on the host, copied and stepped again and again."""
    model, opt = _job_model()
    x = torch.randn(JOB_BATCH, 3, 224, 224).pin_memory()
    y = torch.randint(0, 10, (JOB_BATCH,)).pin_memory()
    for _ in range(JOB_WARM_STEPS):
        _job_step(model, opt, x, y)
    started = time.perf_counter()
    for _ in range(JOB_STEPS // 2):
        _job_step(model, opt, x, y)
    step_ms = (time.perf_counter() - started) * 1000 / (JOB_STEPS // 2)
    write_figures(out, {"model": "resnet50", "batch_size": JOB_BATCH, "step_ms": step_ms})


def run_jpeg_train(settings_path: str, out: str) -> None:
    """The real job with the DataLoader settings the probe exported (as a user would paste them)."""
    import tomllib

    from benchmarks.torchvision_pipeline import make_job_dataset

    with open(settings_path, "rb") as fh:
        settings = tomllib.load(fh)["dataloader"]
    model, opt = _job_model()
    loader = DataLoader(make_job_dataset(), **settings)
    steps, started, seen = 0, None, []
    while steps < JOB_WARM_STEPS + JOB_STEPS:
        for x, y in loader:
            if steps == JOB_WARM_STEPS:
                started = time.perf_counter()
            before = time.perf_counter()
            _job_step(model, opt, x, y)
            seen.append((time.perf_counter() - before) * 1000)
            steps += 1
            if steps >= JOB_WARM_STEPS + JOB_STEPS:
                break
    seconds = time.perf_counter() - started
    write_figures(out, {"settings": settings, "steps": JOB_STEPS, "steps_per_s": JOB_STEPS / seconds,
                        "step_ms_median": statistics.median(seen[JOB_WARM_STEPS:])})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="step", required=True)
    for name in ("consumer", "h2d"):
        sub.add_parser(name).add_argument("out")
    loop = sub.add_parser("loop")
    loop.add_argument("mode", choices=sorted(LOOPS))
    loop.add_argument("out")
    train = sub.add_parser("train")
    train.add_argument("--max-s", type=float, default=600.0, help="stop after this long (tune stops it first)")
    sub.add_parser("jpeg-step").add_argument("out")
    job = sub.add_parser("jpeg-train")
    job.add_argument("settings")
    job.add_argument("out")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_steps: no CUDA device: nothing measured", file=sys.stderr)
        return 4
    if args.step == "consumer":
        run_consumer(args.out)
    elif args.step == "h2d":
        run_h2d(args.out)
    elif args.step == "loop":
        run_loop(args.mode, args.out)
    elif args.step == "jpeg-step":
        run_jpeg_step(args.out)
    elif args.step == "jpeg-train":
        run_jpeg_train(args.settings, args.out)
    else:
        run_train(args.max_s)
    return 0


if __name__ == "__main__":
    sys.exit(main())
