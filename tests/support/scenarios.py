"""Recorded scenarios: a machine, a config, probe measurements and training context, and the rules
that must fire for them (an empty set for a healthy scenario).

The same list drives the scenario tests (``tests/test_advice_scenarios.py``) and the rule x
scenario matrix in ``docs/diagnoses.md`` (``python scripts/diagnoses_docs.py``), so the published
matrix is what the tests assert. Machines are the recorded fixtures shipped in
``loaderdoc/system/machines``; a scenario may override a few facts (``machine_overrides``, dotted
paths to readings, e.g. ``{"distributed.local_world_size": 8}``), which the matrix lists.
Probe measurements are written out here as the probe would record them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderdoc.advice.findings import Finding
from loaderdoc.advice.rules import TrainingContext, evaluate
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import MiB
from loaderdoc.probing.result import ConfigResult, ProbeReport, WaitStats, WorkloadInfo
from loaderdoc.system.facts import MachineFacts, Reading
from loaderdoc.system.fixtures import load_machine
from loaderdoc.watching import rules as watch_rules  # noqa: F401  (the catalogue as watch runs it)
from loaderdoc.watching.stragglers import RankRun
from loaderdoc.watching.watched import LoaderReport, WatchedEpoch

# real probe runs recorded on this project's CI box (facts + probe report as JSON); present in a
# source checkout, absent from an installed wheel, where those scenarios are simply left out
# real probe runs, shipped as package data so an installed loaderdoc can rebuild the docs
RECORDED_DIR = Path(__file__).with_name("recorded")

IMAGE_U8 = 3 * 224 * 224  # one 224x224 RGB sample, uint8
IMAGE_F32 = IMAGE_U8 * 4
CIFAR_U8 = 3 * 32 * 32
MNIST_F32 = 28 * 28 * 4


@dataclass
class Scenario:
    name: str
    description: str
    machine: str  # a recorded machine fixture
    settings: LoaderSettings | None = None
    batch_bytes: int | None = None
    probe: ProbeReport | None = None
    context: TrainingContext | None = None
    machine_overrides: dict[str, Any] = field(default_factory=dict)
    expect: frozenset[str] = frozenset()  # exactly the rules that must fire; empty = healthy
    recorded: str | None = None  # a file in RECORDED_DIR holding the real machine and probe report
    watch: LoaderReport | None = None  # one loader of a real run, as `loaderdoc watch` measured it

    def __post_init__(self) -> None:
        if self.recorded is not None:
            data = json.loads((RECORDED_DIR / self.recorded).read_text(encoding="utf-8"))
            self._recorded_facts = data["facts"]
            self.probe = ProbeReport.from_dict(data["probe"])
            if self.batch_bytes is None:
                self.batch_bytes = self.probe.workload.batch_bytes

    @property
    def healthy(self) -> bool:
        return not self.expect

    def facts(self) -> MachineFacts:
        facts = MachineFacts.from_dict(self._recorded_facts) if self.recorded else load_machine(self.machine)
        for path, value in self.machine_overrides.items():
            *parents, leaf = path.split(".")
            obj: Any = facts
            for p in parents:
                obj = getattr(obj, p)
            setattr(obj, leaf, Reading.of(value, "scenario override"))
        return facts

    def run(self) -> list[Finding]:
        return evaluate(self.facts(), self.settings, batch_bytes=self.batch_bytes, probe=self.probe,
                        context=self.context, watch=self.watch, with_ok=self.watch is not None)

    def inputs_summary(self) -> str:
        """One line saying what the rules were given, for the matrix legend."""
        parts = []
        if self.settings is None:
            parts.append("no config")
        else:
            kw = self.settings.as_kwargs()
            keys = ("batch_size", "num_workers", "prefetch_factor", "pin_memory", "persistent_workers",
                    "drop_last", "shuffle", "in_order")  # in_order only when False (as_kwargs leaves True out)
            parts.append(", ".join(f"{k}={kw[k]}" for k in keys if k in kw))
        if self.batch_bytes:
            parts.append(f"batch {self.batch_bytes / MiB:.1f} MiB")
        if self.probe is not None:
            parts.append(f"probe ({len(self.probe.results)} configs, {self.probe.device})")
        if self.context is not None:
            set_fields = {k: v for k, v in self.context.to_dict().items() if v is not None}
            parts.append("context " + ", ".join(f"{k}={v}" for k, v in set_fields.items()))
        if self.watch is not None:
            w = self.watch
            parts.append(f"watched run ({len(w.epochs)} epochs, {w.waits} steady batches)")
        if self.machine_overrides:
            parts.append("machine " + ", ".join(f"{k}={v}" for k, v in self.machine_overrides.items()))
        return "; ".join(parts)


def measured(num_workers: int, *, bps: float | None = None, starved: float | None = None,
             prefetch: int | None = None, pin: bool = False, persistent: bool | None = None,
             p50: float | None = None, p95: float | None = None, pss_mib: float | None = None,
             uss_mib: float | None = None, first_batch_s: float | None = None,
             restart_s: float | None = None, cpu_pct: float | None = None,
             h2d: tuple[float, float] | None = None, status: str = "ok", error: str | None = None,
             traceback: str | None = None, batch_size: int = 64, loaderdocs: bool = False) -> ConfigResult:
    """A probe measurement as the runner would record it (unmeasured fields stay None);
    ``loaderdocs``: a failure of loaderdoc's own measuring process (probing.blame)."""
    if persistent is None:
        persistent = num_workers > 0
    settings = LoaderSettings(batch_size=batch_size, num_workers=num_workers, pin_memory=pin,
                              prefetch_factor=prefetch if num_workers else None,
                              persistent_workers=persistent if num_workers else False)
    return ConfigResult(
        settings=settings, status=status, error=error, traceback=traceback,
        batches=200 if status == "ok" else 0, batches_per_s=bps,
        samples_per_s=bps * batch_size if bps else None,
        wait=WaitStats(p50_ms=p50, p95_ms=p95), starvation_pct=starved,
        first_batch_s=first_batch_s, epoch_restart_s=restart_s,
        worker_pss_bytes=int(pss_mib * MiB) if pss_mib is not None else None,
        worker_uss_bytes=int(uss_mib * MiB) if uss_mib is not None else None,
        cpu_util_pct=cpu_pct,
        h2d_pageable_ms=h2d[0] if h2d else None, h2d_pinned_ms=h2d[1] if h2d else None,
        loaderdoc_error=loaderdocs,
    )


def report(results: list[ConfigResult], *, batch_size: int = 64, batch_bytes: int | None = None,
           step_ms: float = 50.0, device: str = "cpu", dataset_len: int | None = 10_000,
           name: str = "scenario", iterable: bool = False) -> ProbeReport:
    return ProbeReport(
        workload=WorkloadInfo(name=name, batch_size=batch_size, batch_bytes=batch_bytes, step_ms=step_ms,
                              dataset_len=dataset_len, iterable=iterable,
                              consumer="cuda-kernel" if device.startswith("cuda") else "cpu-sleep"),
        results=results, device=device,
    )


def watched(workers: int, *, epochs: int = 1, batches: int = 200, wait_ms: float = 1.0, step_ms: float = 50.0,
            first_s: float = 0.5, later_first_s: float | None = None, persistent: bool | None = None,
            pss_mib: list[float] | None = None, shm: tuple[float, float] | None = None,
            cpu: dict[str, float] | None = None, io: dict[str, float] | None = None) -> LoaderReport:
    """One loader of a real run as `loaderdoc watch` measures it: ``batches`` per epoch waiting
    ``wait_ms`` and stepping ``step_ms`` each; ``pss_mib`` the workers' peak per epoch; ``shm``
    (peak used, size) of /dev/shm in MiB. ``cpu``: the CPU accounting, per batch in ms:
    ``wait_cpu`` (the loop's CPU while waiting), ``step_cpu``, ``load_cpu`` (the workers'),
    ``queued`` (the workers' run-queue wait), and ``others`` (CPUs other processes took). ``io``: the
    reads per batch: ``rchar`` and ``device`` in KiB, ``calls``; ``cached_after`` (an epoch from which
    the device served nothing: the page cache kept the data)."""
    if persistent is None:
        persistent = workers > 0
    eps = []
    for n in range(epochs):
        first = first_s if n == 0 or later_first_s is None else later_first_s
        waits = batches - 1
        wall = first + (waits * wait_ms + batches * step_ms) / 1000
        eps.append(WatchedEpoch(
            index=n, steps=batches, waits=waits, wait_s=waits * wait_ms / 1000, step_s=batches * step_ms / 1000,
            steps_timed=batches, first_batch_s=first, wall_s=wall,
            finished=True, workers_pss_max_bytes=int(pss_mib[n] * MiB) if pss_mib else None,
            wait_p50_s=wait_ms / 1000, wait_p95_s=2 * wait_ms / 1000, number=n))
        if cpu is not None:
            e = eps[-1]
            e.cpu_wait_s = waits * cpu["wait_cpu"] / 1000
            e.cpu_step_s = batches * cpu["step_cpu"] / 1000
            e.cpu_wait_wall_s, e.cpu_step_wall_s = e.wait_s, e.step_s  # every batch CPU-timed
            e.proc_cpu_s = e.cpu_wait_s + e.cpu_step_s
            if workers:
                e.workers_cpu_s = batches * cpu["load_cpu"] / 1000
                e.workers_runq_s = batches * cpu.get("queued", 0.0) / 1000
            e.others_cpu_s = cpu.get("others", 0.0) * wall
        if io is not None:
            e = eps[-1]
            cached = n >= io.get("cached_after", epochs)
            reads = [int(batches * io["rchar"] * 1024), int(batches * io["calls"]),
                     0 if cached else int(batches * io["device"] * 1024)]
            e.io_main = [0, 0, 0] if workers else reads
            e.io_workers = reads if workers else None
            e.io_first = [v // batches for v in reads]  # one batch's by the first batch
    # named "loader 1 (DataLoader, num_workers=..., batch_size=64[, persistent_workers=...])"
    settings = {"num_workers": workers, "batch_size": 64, "persistent_workers": persistent if workers else False}
    return LoaderReport(number=1, cls="DataLoader", settings=settings, epochs=eps,
                        shm_peak_used_bytes=int(shm[0] * MiB) if shm else None,
                        shm_total_bytes=int(shm[1] * MiB) if shm else None)


TORCHRUN_8 = {"distributed.launcher": "torchrun", "distributed.world_size": 8, "distributed.local_world_size": 8}
GOOD_DDP = TrainingContext(device="cuda", uses_batchnorm=True, distributed=True, uses_distributed_sampler=True,
                           calls_set_epoch=True, fixed_input_size=True, uses_convolutions=True,
                           cudnn_benchmark=True, dataset_len=1_281_167, tensors_per_batch=2)
H100_BATCH = 256 * IMAGE_U8  # 36.8 MiB per rank-batch of uint8 224px images


def _scenarios() -> list[Scenario]:
    s: list[Scenario] = []

    # ---- healthy: nothing may fire ------------------------------------------------------------
    s.append(Scenario(
        "healthy-h100-ddp",
        "8x H100 under torchrun: 8 workers per rank, pinned, persistent, drop_last with BatchNorm, "
        "DistributedSampler; the probe shows the GPU fed",
        "h100x8-node",
        LoaderSettings(batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True,
                       prefetch_factor=2, drop_last=True),
        batch_bytes=H100_BATCH,
        probe=report([
            measured(4, bps=9.1, starved=27, prefetch=2, pin=True, p50=9.0, p95=31, pss_mib=410, cpu_pct=9,
                     h2d=(14.2, 3.1), batch_size=256),
            measured(8, bps=12.4, starved=1.5, prefetch=2, pin=True, p50=0.1, p95=1.2, pss_mib=820, cpu_pct=17,
                     h2d=(14.0, 3.0), first_batch_s=2.1, batch_size=256),
            measured(12, bps=12.5, starved=0.9, prefetch=2, pin=True, p50=0.1, p95=0.9, pss_mib=1230,
                     cpu_pct=24, h2d=(14.1, 3.0), batch_size=256),
        ], batch_size=256, batch_bytes=H100_BATCH, step_ms=80, device="cuda:0", dataset_len=1_281_167),
        context=GOOD_DDP,
        machine_overrides=TORCHRUN_8,
    ))
    s.append(Scenario(
        "healthy-ci-one-worker",
        "2-core CI box: 1 worker, no pin_memory, CIFAR-sized batches",
        "ci-2core",
        LoaderSettings(batch_size=128, num_workers=1),
        batch_bytes=128 * CIFAR_U8,
    ))
    s.append(Scenario(
        "healthy-ci-no-config",
        "2-core CI box, machine-level check only",
        "ci-2core",
    ))
    s.append(Scenario(
        "healthy-laptop",
        "RTX 3050 laptop: 4 workers on 4 physical cores, pinned, float32 224px batches of 32; probe fed",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True),
        batch_bytes=32 * IMAGE_F32,
        probe=report([
            measured(2, bps=14.0, starved=31, pin=True, p50=8, p95=20, pss_mib=300, batch_size=32),
            measured(4, bps=19.6, starved=2, pin=True, p50=0.2, p95=3, pss_mib=600, first_batch_s=0.9,
                     restart_s=0.9, h2d=(6.0, 2.5), batch_size=32),
        ], batch_size=32, batch_bytes=32 * IMAGE_F32, step_ms=50, device="cuda:0", dataset_len=50_000),
        context=TrainingContext(device="cuda", fixed_input_size=True, uses_convolutions=True, cudnn_benchmark=True),
    ))
    s.append(Scenario(
        "healthy-docker-small-batches",
        "Docker's 64 MiB /dev/shm is enough for MNIST-sized batches: 4 workers x 2 x 196 KiB",
        "docker-64m-shm",
        LoaderSettings(batch_size=64, num_workers=4),
        batch_bytes=64 * MNIST_F32,
    ))
    s.append(Scenario(
        "healthy-ci-in-order-off",
        "in_order=False with torch 2.13 on the CI box: a ready batch may overtake a slow one; torch takes it",
        "ci-2core",
        LoaderSettings(batch_size=128, num_workers=1, in_order=False),
        batch_bytes=128 * CIFAR_U8,
    ))
    s.append(Scenario(
        "healthy-k8s-within-quota",
        "4-CPU pod: 3 workers, small batches that fit its 64 MiB /dev/shm",
        "k8s-4cpu-quota",
        LoaderSettings(batch_size=64, num_workers=3),
        batch_bytes=64 * CIFAR_U8,
    ))

    # ---- one scenario (at least) per rule --------------------------------------------------
    s.append(Scenario(
        "rejected-worker-settings",
        "prefetch_factor and persistent_workers with num_workers=0 (a settings object built in code)",
        "ci-2core",
        LoaderSettings(batch_size=32, num_workers=0, prefetch_factor=2, persistent_workers=True),
        expect=frozenset({"settings-rejected"}),
    ))
    s.append(Scenario(
        "iterable-stream-with-shuffle",
        "shuffle=True for an IterableDataset the probe measured (a stream has no indices to shuffle)",
        "ci-2core",
        LoaderSettings(batch_size=64, shuffle=True, num_workers=1, prefetch_factor=2, persistent_workers=True),
        batch_bytes=64 * CIFAR_U8,
        probe=report([measured(0, bps=14.0, starved=30.0), measured(1, bps=19.6, starved=2.0)],
                     batch_bytes=64 * CIFAR_U8, dataset_len=None, name="mypkg.data:make_stream", iterable=True),
        expect=frozenset({"settings-rejected"}),
    ))
    s.append(Scenario(
        "in-order-off-on-torch-2.5",
        "in_order=False (an argument since torch 2.6) on the laptop, whose torch is 2.5.1: DataLoader(...) "
        "raises TypeError",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True, in_order=False),
        batch_bytes=32 * IMAGE_F32,
        expect=frozenset({"settings-rejected"}),
    ))
    unsplit = report([measured(0, bps=14.0, starved=30.0), measured(2, bps=19.6, starved=2.0)],
                     batch_bytes=64 * CIFAR_U8, dataset_len=None, name="mypkg.data:make_stream", iterable=True)
    unsplit.results[1].workers_repeat = True  # the probe's check: both workers delivered A, A, B, B
    s.append(Scenario(
        "iterable-stream-every-worker-replays",
        "an IterableDataset that ignores get_worker_info(): the probe's 2 workers yielded the same batches",
        "ci-2core",
        LoaderSettings(batch_size=64, num_workers=2, prefetch_factor=2, persistent_workers=True),
        batch_bytes=64 * CIFAR_U8,
        probe=unsplit,
        expect=frozenset({"iterable-workers-repeat"}),
    ))
    s.append(Scenario(
        "pod-8-workers-on-4-cpus",
        "8 workers in a pod whose cgroup quota is 4 CPUs (os.cpu_count() says 64)",
        "k8s-4cpu-quota",
        LoaderSettings(batch_size=64, num_workers=8),
        batch_bytes=64 * CIFAR_U8,
        expect=frozenset({"cpu-oversubscribed"}),
    ))
    s.append(Scenario(
        "torchrun-32-workers-per-rank",
        "H100 node, 8 ranks: 32 workers each is 256 processes on 224 CPUs",
        "h100x8-node",
        LoaderSettings(batch_size=256, num_workers=32, pin_memory=True, persistent_workers=True),
        batch_bytes=H100_BATCH,
        machine_overrides=TORCHRUN_8,
        expect=frozenset({"cpu-oversubscribed"}),
    ))
    s.append(Scenario(
        "pod-no-config",
        "the 4-CPU pod, machine-level check only: quota hidden from os.cpu_count(), 64 MiB /dev/shm",
        "k8s-4cpu-quota",
        expect=frozenset({"cpu-quota-hidden", "shm-too-small"}),
    ))
    s.append(Scenario(
        "pod-torch-default-threads",
        "the 4-CPU pod, machine-level: torch's default pool is one thread per physical core, 32, on a quota of 4",
        "k8s-4cpu-quota",
        machine_overrides={"torch.intra_op_threads": 32},
        expect=frozenset({"cpu-quota-hidden", "threads-oversubscribed", "shm-too-small"}),
    ))
    s.append(Scenario(
        "torchrun-8-ranks-one-thread-each",
        "H100 node, 8 ranks with OMP_NUM_THREADS=1 (torchrun's own default): 8 workers + 1 thread per rank fit 28 CPUs",
        "h100x8-node",
        LoaderSettings(batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True),
        batch_bytes=H100_BATCH,
        machine_overrides={**TORCHRUN_8, "torch.intra_op_threads": 1},
    ))
    s.append(Scenario(
        "srun-8-ranks-default-threads",
        "H100 node, 8 Slurm tasks started by srun (which leaves OMP_NUM_THREADS unset): 112 threads per rank on 28 CPUs",
        "h100x8-node",
        LoaderSettings(batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True),
        batch_bytes=H100_BATCH,
        machine_overrides={"distributed.launcher": "slurm", "distributed.world_size": 8,
                           "distributed.local_world_size": 8, "torch.intra_op_threads": 112},
        expect=frozenset({"threads-oversubscribed"}),
    ))
    s.append(Scenario(
        "docker-shm-456m-in-64m",
        "6 workers x prefetch 4 x 19 MiB batches in Docker's 64 MiB /dev/shm",
        "docker-64m-shm",
        LoaderSettings(batch_size=64, num_workers=6, prefetch_factor=4),
        batch_bytes=19 * MiB,
        expect=frozenset({"shm-too-small"}),
    ))
    s.append(Scenario(
        "docker-probe-bus-error",
        "the probe's 4-worker run died: 'unable to allocate shared memory ... No space left on device'",
        "docker-64m-shm",
        LoaderSettings(batch_size=64, num_workers=4),
        probe=report([
            measured(0, bps=3.1, starved=58),
            measured(4, status="failed",
                     error="RuntimeError: unable to allocate shared memory(shm) for file </torch_812_3390_0>: "
                           "No space left on device (28)"),
        ], batch_bytes=64 * IMAGE_F32, name="image"),
        expect=frozenset({"shm-too-small"}),
    ))
    s.append(Scenario(
        "ci-pin-memory",
        "pin_memory=True on the CPU-only CI box",
        "ci-2core",
        LoaderSettings(batch_size=128, num_workers=1, pin_memory=True),
        batch_bytes=128 * CIFAR_U8,
        expect=frozenset({"pin-memory-without-gpu"}),
    ))
    s.append(Scenario(
        "h100-cpu-only-torch",
        "8 H100s visible, but a CPU-only torch wheel is installed",
        "h100x8-node",
        machine_overrides={"torch.cuda_build": None, "torch.version": "2.8.0+cpu"},
        expect=frozenset({"gpu-without-cuda-torch"}),
    ))
    s.append(Scenario(
        "cuda-training-on-ci",
        "the training script says device='cuda' on the CI box without an NVIDIA driver",
        "ci-2core",
        LoaderSettings(batch_size=128, num_workers=1),
        context=TrainingContext(device="cuda"),
        expect=frozenset({"cuda-torch-without-driver"}),
    ))
    s.append(Scenario(
        "laptop-pageable-copies",
        "pin_memory=False on the laptop; the probe measured pageable copies 3x slower than pinned",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, persistent_workers=True),
        batch_bytes=32 * IMAGE_F32,
        probe=report([
            measured(4, bps=17.0, starved=4, p50=0.3, p95=4, h2d=(12.4, 4.1), batch_size=32),
            measured(4, bps=19.1, starved=3, pin=True, p50=0.3, p95=4, h2d=(12.5, 4.0), batch_size=32),
        ], batch_size=32, batch_bytes=32 * IMAGE_F32, step_ms=40, device="cuda:0"),
        expect=frozenset({"pin-memory-off-slow-copy"}),
    ))
    s.append(Scenario(
        "h100-two-workers-starving",
        "2 workers per GPU on the H100 node: the GPU waits 62% of the time; 8 workers feed it",
        "h100x8-node",
        LoaderSettings(batch_size=256, num_workers=2, pin_memory=True, persistent_workers=True),
        batch_bytes=H100_BATCH,
        probe=report([
            measured(2, bps=4.8, starved=62, pin=True, p50=120, p95=150, batch_size=256),
            measured(4, bps=9.1, starved=27, pin=True, p50=9.0, p95=31, batch_size=256),
            measured(8, bps=12.4, starved=1.5, pin=True, p50=0.1, p95=1.2, batch_size=256),
        ], batch_size=256, batch_bytes=H100_BATCH, step_ms=80, device="cuda:0"),
        expect=frozenset({"data-starved"}),
    ))
    s.append(Scenario(
        "ci-cpu-step-starved",
        "CPU training on the CI box with num_workers=0: the step waits 45% of the time; 1 worker feeds it",
        "ci-2core",
        LoaderSettings(batch_size=128, num_workers=0),
        batch_bytes=128 * CIFAR_U8,
        probe=report([
            measured(0, bps=11.0, starved=45, p50=40, p95=48, batch_size=128),
            measured(1, bps=18.2, starved=9, p50=0.5, p95=9, batch_size=128),
        ], batch_size=128, batch_bytes=128 * CIFAR_U8, step_ms=50),
        expect=frozenset({"data-starved"}),
    ))
    s.append(Scenario(
        "laptop-transform-bound",
        "heavy CPU augmentations on the laptop: 4 workers is the best and the GPU still waits 40%",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True),
        batch_bytes=32 * IMAGE_F32,
        probe=report([
            measured(2, bps=7.5, starved=62, pin=True, p50=75, p95=90, cpu_pct=30, batch_size=32),
            measured(4, bps=12.0, starved=40, pin=True, p50=32, p95=45, cpu_pct=91, batch_size=32),
            measured(6, bps=11.8, starved=41, pin=True, p50=33, p95=47, cpu_pct=96, batch_size=32),
        ], batch_size=32, batch_bytes=32 * IMAGE_F32, step_ms=50, device="cuda:0"),
        expect=frozenset({"transform-bound"}),
    ))
    s.append(Scenario(
        "laptop-slow-disk",
        "many small files on a slow disk: 6 workers are no faster than 4 and the CPUs stay mostly idle",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True),
        batch_bytes=32 * IMAGE_F32,
        probe=report([
            measured(2, bps=6.1, starved=70, pin=True, p50=110, p95=180, cpu_pct=9, batch_size=32),
            measured(4, bps=10.2, starved=49, pin=True, p50=45, p95=85, cpu_pct=14, batch_size=32),
            measured(6, bps=10.0, starved=50, pin=True, p50=47, p95=88, cpu_pct=15, batch_size=32),
        ], batch_size=32, batch_bytes=32 * IMAGE_F32, step_ms=50, device="cuda:0"),
        expect=frozenset({"transform-bound"}),
    ))
    s.append(Scenario(
        "h100-network-stalls",
        "data read over the network: most batches are ready, 1 in 20 waits ~120 ms",
        "h100x8-node",
        LoaderSettings(batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True),
        batch_bytes=H100_BATCH,
        probe=report([
            measured(8, bps=11.1, starved=9, pin=True, p50=0.4, p95=118, batch_size=256),
        ], batch_size=256, batch_bytes=H100_BATCH, step_ms=80, device="cuda:0"),
        expect=frozenset({"spiky-batches"}),
    ))
    s.append(Scenario(
        "laptop-short-epochs-restart",
        "a 2,000-sample dataset: each 2.5 s epoch starts with 1.2 s of worker start-up",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True),
        batch_bytes=32 * IMAGE_F32,
        probe=report([
            measured(4, bps=25.0, starved=3, pin=True, persistent=False, p50=0.2, p95=3, first_batch_s=1.2,
                     restart_s=1.2, batch_size=32),
        ], batch_size=32, batch_bytes=32 * IMAGE_F32, step_ms=35, device="cuda:0", dataset_len=2_000),
        expect=frozenset({"persistent-workers-off"}),
    ))
    s.append(Scenario(
        "ci-in-memory-tensors",
        "a TensorDataset already in RAM: the main process alone is faster than a worker",
        "ci-2core",
        LoaderSettings(batch_size=256, num_workers=1, persistent_workers=True),
        batch_bytes=256 * 64 * 4,
        probe=report([
            measured(0, bps=480.0, starved=1.0, p50=0.0, p95=0.1, batch_size=256),
            measured(1, bps=410.0, starved=15.0, pss_mib=95, p50=0.3, p95=0.6, batch_size=256),
        ], batch_size=256, batch_bytes=256 * 64 * 4, step_ms=2),
        expect=frozenset({"workers-only-add-ipc"}),
    ))
    s.append(Scenario(
        "pod-workers-copy-dataset",
        "a dataset of Python objects: each worker's memory grows to ~4.5 GiB in a 16 GiB pod",
        "k8s-4cpu-quota",
        LoaderSettings(batch_size=64, num_workers=3, persistent_workers=True),
        batch_bytes=64 * CIFAR_U8,
        probe=report([
            measured(1, bps=20, starved=30, pss_mib=4600, uss_mib=4300, batch_size=64),
            measured(2, bps=36, starved=5, pss_mib=9200, uss_mib=8600, batch_size=64),
        ], batch_bytes=64 * CIFAR_U8, step_ms=25),
        expect=frozenset({"ram-pressure"}),
    ))
    s.append(Scenario(
        "laptop-detection-fd-limit",
        "detection targets as one tensor per image: 8 workers x 4 batches x 65 tensors vs ulimit -n 1024",
        "laptop-rtx3050",
        LoaderSettings(batch_size=64, num_workers=8, prefetch_factor=4, pin_memory=True, persistent_workers=True),
        batch_bytes=64 * IMAGE_U8,
        context=TrainingContext(tensors_per_batch=65),
        machine_overrides={"limits.nofile_soft": 1024},  # the common Linux default, stated explicitly
        expect=frozenset({"open-files-low"}),
    ))
    s.append(Scenario(
        "laptop-worker-keyerror",
        "the dataset raises KeyError in a worker during the probe",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True),
        probe=report([
            measured(4, status="failed", pin=True, batch_size=32,
                     error="KeyError: Caught KeyError in DataLoader worker process 2.",
                     traceback="Traceback (most recent call last):\n  File \"data.py\", line 41, in __getitem__\n"
                               "    label = self.labels[name]\nKeyError: 'n01440764_10026'\n"),
        ], batch_size=32, device="cuda:0"),
        expect=frozenset({"worker-crashed"}),
    ))
    s.append(Scenario(
        "h200-probe-cuda-refused-in-fork",
        "issue 48: the user's factory had started CUDA in the probe's process, and torch refused it in the forked "
        "measuring process of every pinned configuration (before loaderdoc started those fresh)",
        "h100x8-node",
        LoaderSettings(batch_size=128, num_workers=15, pin_memory=True, persistent_workers=True),
        probe=report([
            measured(15, bps=22.0, starved=10, batch_size=128),
            measured(15, status="failed", pin=True, batch_size=128, loaderdocs=True,
                     error="loaderdoc's measuring process failed: RuntimeError: Cannot re-initialize CUDA in forked "
                           "subprocess. To use CUDA with multiprocessing, you must use the 'spawn' start method",
                     traceback="Traceback (most recent call last):\n  File \"/opt/venv/lib/python3.12/site-packages/"
                               "torch/utils/data/dataloader.py\", line 1195, in __init__\nRuntimeError: Cannot "
                               "re-initialize CUDA in forked subprocess.\n"),
        ], batch_size=128, device="cuda:0"),
        expect=frozenset({"probe-failed-itself"}),
    ))
    s.append(Scenario(
        "ci-worker-hangs",
        "a dataset opens a client in __init__ that blocks after fork: the 2-worker run hits the 5 s timeout",
        "ci-2core",
        LoaderSettings(batch_size=32, num_workers=2, persistent_workers=True, timeout=5.0),
        probe=report([
            measured(0, bps=8.0, starved=60, p50=70, p95=80, batch_size=32),
            measured(2, status="timeout", batch_size=32,
                     error="DataLoader timed out after 5 seconds (no batch from the workers)"),
        ], batch_size=32, step_ms=50),
        expect=frozenset({"worker-hung"}),
    ))
    s.append(Scenario(
        "docker-probe-oom-kill",
        "the probe's 16-worker run was killed by SIGKILL (the OOM killer) before it reported",
        "docker-64m-shm",
        LoaderSettings(batch_size=64, num_workers=16, persistent_workers=True),
        batch_bytes=64 * MNIST_F32,
        probe=report([
            measured(4, bps=40.0, starved=2, p50=0.1, p95=1, pss_mib=2900),
            measured(16, status="failed",
                     error="the measuring process died (killed by signal SIGKILL) before reporting"),
        ], batch_bytes=64 * MNIST_F32, step_ms=20),
        expect=frozenset({"worker-crashed"}),
    ))
    s.append(Scenario(
        "pod-workstation-config",
        "a workstation config copied into the 4-CPU pod: 16 workers, prefetch 4, pinned, float32 224px batches",
        "k8s-4cpu-quota",
        LoaderSettings(batch_size=64, num_workers=16, prefetch_factor=4, pin_memory=True, persistent_workers=True),
        batch_bytes=64 * IMAGE_F32,
        expect=frozenset({"shm-too-small", "cpu-oversubscribed", "pin-memory-without-gpu"}),
    ))
    s.append(Scenario(
        "ddp-batchnorm-ragged-last-batch",
        "ResNet with BatchNorm under DDP: 49,704 samples over 8 ranks leave a 5-sample last batch per rank",
        "h100x8-node",
        LoaderSettings(batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True),
        batch_bytes=64 * IMAGE_U8,
        context=TrainingContext(device="cuda", uses_batchnorm=True, distributed=True, uses_distributed_sampler=True,
                                calls_set_epoch=True, dataset_len=49_704),
        machine_overrides=TORCHRUN_8,
        expect=frozenset({"drop-last-batchnorm"}),
    ))
    s.append(Scenario(
        "ddp-without-sampler",
        "DDP on 8 GPUs with shuffle=True and no DistributedSampler",
        "h100x8-node",
        LoaderSettings(batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True, shuffle=True),
        batch_bytes=64 * IMAGE_U8,
        context=TrainingContext(device="cuda", distributed=True, uses_distributed_sampler=False),
        machine_overrides=TORCHRUN_8,
        expect=frozenset({"distributed-sampler-missing"}),
    ))
    s.append(Scenario(
        "ddp-sampler-and-shuffle",
        "a DistributedSampler and shuffle=True on the DataLoader",
        "h100x8-node",
        LoaderSettings(batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True, shuffle=True),
        batch_bytes=64 * IMAGE_U8,
        context=TrainingContext(device="cuda", distributed=True, uses_distributed_sampler=True, calls_set_epoch=True),
        machine_overrides=TORCHRUN_8,
        expect=frozenset({"shuffle-with-sampler"}),
    ))
    s.append(Scenario(
        "ddp-no-set-epoch",
        "a DistributedSampler whose set_epoch() is never called",
        "h100x8-node",
        LoaderSettings(batch_size=64, num_workers=8, pin_memory=True, persistent_workers=True),
        batch_bytes=64 * IMAGE_U8,
        context=TrainingContext(device="cuda", distributed=True, uses_distributed_sampler=True, calls_set_epoch=False),
        machine_overrides=TORCHRUN_8,
        expect=frozenset({"set-epoch-missing"}),
    ))
    s.append(Scenario(
        "laptop-cnn-without-benchmark",
        "a CNN on fixed 224x224 inputs with cudnn.benchmark left off",
        "laptop-rtx3050",
        LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True),
        batch_bytes=32 * IMAGE_F32,
        context=TrainingContext(device="cuda", fixed_input_size=True, uses_convolutions=True, cudnn_benchmark=False),
        expect=frozenset({"cudnn-benchmark"}),
    ))
    return s


def _recorded() -> list[Scenario]:
    """Scenarios whose machine and probe report were recorded from real runs (see RECORDED_DIR)."""
    if not RECORDED_DIR.is_dir():
        return []
    return [
        Scenario(
            "recorded-shm-16m",
            "real run: 16 MiB /dev/shm (mount namespace), 36.8 MiB float32 batches; the 1-worker run died "
            "with 'unable to allocate shared memory'",
            "recorded: real-shm-16m.json", LoaderSettings(batch_size=64, num_workers=1),
            recorded="real-shm-16m.json", expect=frozenset({"shm-too-small"}),
        ),
        Scenario(
            "recorded-shm-16m-no-workers",
            "same recording, judged for num_workers=0: it works, but workers are out of reach",
            "recorded: real-shm-16m.json", LoaderSettings(batch_size=64, num_workers=0),
            recorded="real-shm-16m.json", expect=frozenset({"shm-too-small"}),
        ),
        Scenario(
            "recorded-tensors-one-worker",
            "real run: float32 tensors already in RAM; 1 worker measured slower than none",
            "recorded: real-in-memory-tensors.json", LoaderSettings(batch_size=128, num_workers=1),
            recorded="real-in-memory-tensors.json", expect=frozenset({"workers-only-add-ipc"}),
        ),
        Scenario(
            "recorded-tensors-no-workers",
            "same recording, judged for num_workers=0 (the probe's choice): healthy",
            "recorded: real-in-memory-tensors.json", LoaderSettings(batch_size=128, num_workers=0),
            recorded="real-in-memory-tensors.json",
        ),
        Scenario(
            "recorded-io-bound-24-workers",
            "real run: I/O-bound samples on 2 CPUs; 11 -> 19 workers still +36%, so 24 workers (the probe's "
            "choice) is not oversubscription: healthy",
            "recorded: real-io-bound.json",
            LoaderSettings(batch_size=32, num_workers=24, prefetch_factor=2, persistent_workers=True),
            recorded="real-io-bound.json",
        ),
        Scenario(
            "recorded-io-bound-11-workers",
            "same recording, judged for 11 workers: the step waits 35%; 19 workers measured at 12%",
            "recorded: real-io-bound.json",
            LoaderSettings(batch_size=32, num_workers=11, prefetch_factor=2, persistent_workers=True),
            recorded="real-io-bound.json", expect=frozenset({"data-starved"}),
        ),
        Scenario(
            "recorded-nofile-128",
            "real run: `ulimit -n 128`, 40 tensors per sample; the 1-worker run timed out (the worker hit "
            "'Too many open files')",
            "recorded: real-nofile-128.json", LoaderSettings(batch_size=8, num_workers=1),
            recorded="real-nofile-128.json", expect=frozenset({"open-files-low"}),
        ),
        Scenario(
            "recorded-quota-1cpu-8-workers",
            "real run in a cgroup with a 1-CPU quota: 2, 4 and 8 workers all ~6 batches/s; judged for 8 workers",
            "recorded: real-cpu-quota-1.json",
            LoaderSettings(batch_size=32, num_workers=8, persistent_workers=True),
            recorded="real-cpu-quota-1.json", expect=frozenset({"cpu-oversubscribed", "transform-bound"}),
        ),
        Scenario(
            "recorded-large-heap-growth",
            "real run: 8 MiB slices, batch 4, glibc's malloc at its defaults: at the pick (3 workers) the "
            "workers' memory rose 329 -> 497 MiB in 0.6 s while malloc's arenas in them grew 184 MiB, 249 MiB of "
            "them free at the last sample; judged for the probe's pick",
            "recorded: real-large-heap-growth.json",
            LoaderSettings(batch_size=4, shuffle=True, num_workers=3, prefetch_factor=2),
            recorded="real-large-heap-growth.json", expect=frozenset({"worker-memory-growing", "transform-bound"}),
        ),
        Scenario(
            "recorded-large-mmap-threshold",
            "the same workload probed with GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072: the workers' "
            "memory stayed flat (125-133 -> 153-165 MiB at the pick, 2 workers), malloc's arenas did not grow; "
            "still transform-bound (2 CPUs)",
            "recorded: real-large-mmap-threshold.json",
            LoaderSettings(batch_size=4, shuffle=True, num_workers=2, prefetch_factor=2),
            recorded="real-large-mmap-threshold.json", expect=frozenset({"transform-bound"}),
        ),
        Scenario(
            "recorded-keyerror",
            "real run: a dataset whose sample 407 has no label (KeyError with and without workers)",
            "recorded: real-keyerror.json", None,
            recorded="real-keyerror.json", expect=frozenset({"worker-crashed"}),
        ),
    ]


def _watched() -> list[Scenario]:
    """Real runs measured by `loaderdoc watch`: the watch rules, and the machine rules beside them."""
    return [
        Scenario(
            "watch-starved-no-workers",
            "a watched run loading in the training process: 20 ms of loading per 10 ms step",
            "ci-2core", LoaderSettings(batch_size=64, num_workers=0),
            watch=watched(0, batches=100, wait_ms=20.0, step_ms=10.0),
            expect=frozenset({"watch-data-starved"}),
        ),
        # issue 34's loaders over 200 files of 64 KiB on this VM's disk, the page cache dropped for them
        Scenario(
            "watch-waits-on-small-files",
            "a watched run loading 4 files of 64 KiB a batch in the training process, the page cache dropped: "
            "every byte from the disk, 32 KiB a read call, 2.8 ms waits (0.6 ms of CPU) per 1.5 ms step",
            "ci-2core", LoaderSettings(batch_size=4, num_workers=0),
            watch=watched(0, batches=100, wait_ms=2.8, step_ms=1.5, cpu={"wait_cpu": 0.6, "step_cpu": 0.04},
                          io={"rchar": 256, "device": 256, "calls": 8}),
            expect=frozenset({"watch-data-starved", "watch-waits-on-disk"}),
        ),
        Scenario(
            "watch-rereads-every-epoch",
            "the same files through 2 workers over 3 epochs, each epoch fetching them from the disk again",
            "ci-2core", LoaderSettings(batch_size=4, num_workers=2, persistent_workers=True),
            watch=watched(2, epochs=3, batches=100, wait_ms=3.0, step_ms=2.2,
                          cpu={"wait_cpu": 0.5, "step_cpu": 0.06, "load_cpu": 1.8},
                          io={"rchar": 256, "device": 256, "calls": 8}),
            expect=frozenset({"watch-data-starved", "watch-waits-on-disk", "watch-rereads-from-disk"}),
        ),
        Scenario(
            "watch-first-epoch-from-disk",
            "the same 2 workers over 3 epochs; only the first read from the disk, the page cache served the "
            "rest: no epoch is re-read, and the wait is the disk's only while it lasts",
            "ci-2core", LoaderSettings(batch_size=4, num_workers=2, persistent_workers=True),
            watch=watched(2, epochs=3, batches=100, wait_ms=3.0, step_ms=2.2,
                          cpu={"wait_cpu": 0.5, "step_cpu": 0.06, "load_cpu": 1.8},
                          io={"rchar": 256, "device": 256, "calls": 8, "cached_after": 1}),
            expect=frozenset({"watch-data-starved", "watch-waits-on-disk"}),
        ),
        # issue 28's CPU-trained model: ImageFolder JPEGs, batch 64, a small CNN stepping 41 ms on
        # torch's 2 threads; its measured rates: 0 workers 4.8/s, 2 workers 5.4-5.9/s, 4 workers 5.6-6.1/s
        Scenario(
            "watch-cpu-trained-no-workers",
            "a watched CPU-trained model loading JPEGs in the training process (167 ms wait, 160 ms of it "
            "CPU; a 41 ms step on 2 threads)",
            "ci-2core", LoaderSettings(batch_size=64, num_workers=0),
            watch=watched(0, batches=100, wait_ms=167.0, step_ms=41.0,
                          cpu={"wait_cpu": 160.0, "step_cpu": 80.0}),
            expect=frozenset({"watch-data-starved", "watch-cpu-shared"}),
        ),
        Scenario(
            "watch-cpu-trained-four-workers",
            "the same model with 4 workers: 3 ms waits, the step stretched to 174 ms by the workers' "
            "decoding, every CPU busy",
            "ci-2core", LoaderSettings(batch_size=64, num_workers=4, persistent_workers=True),
            watch=watched(4, batches=100, wait_ms=3.0, step_ms=174.0,
                          cpu={"wait_cpu": 1.0, "step_cpu": 150.0, "load_cpu": 185.0, "queued": 120.0}),
            expect=frozenset({"cpu-oversubscribed", "watch-cpu-shared", "watch-loader-healthy"}),
        ),
        Scenario(
            "watch-io-bound-many-workers",
            "issue 28's I/O-bound loop: 8 workers sleeping 8 ms a sample, batch 8, a 16 ms sleeping step; "
            "1 ms of the 1.1 ms wait is the hand-over of a ready batch",
            "ci-2core", LoaderSettings(batch_size=8, num_workers=8, persistent_workers=True),
            watch=watched(8, batches=300, wait_ms=1.1, step_ms=16.0,
                          cpu={"wait_cpu": 1.0, "step_cpu": 0.2, "load_cpu": 2.0}),
            expect=frozenset({"watch-loader-healthy"}),
        ),
        Scenario(
            "watch-io-workers-beside-a-busy-neighbour",
            "8 workers reading 64 ms batches (8 ms of CPU each) that keep an 8 ms step fed while another "
            "process keeps one of the 2 CPUs busy: the CPUs are full, but not with this job's work",
            "ci-2core", LoaderSettings(batch_size=8, num_workers=8, persistent_workers=True),
            watch=watched(8, batches=300, wait_ms=1.1, step_ms=8.0,
                          cpu={"wait_cpu": 0.9, "step_cpu": 0.4, "load_cpu": 8.0, "queued": 2.0, "others": 1.0}),
            expect=frozenset({"watch-loader-healthy"}),
        ),
        Scenario(
            "watch-keeps-up",
            "a watched run whose 4 persistent workers keep a 50 ms step fed (1 ms waits), /dev/shm 5 % used",
            "h100x8-node", LoaderSettings(batch_size=64, num_workers=4, persistent_workers=True),
            watch=watched(4, epochs=3, pss_mib=[800, 820, 815], shm=(1200, 24_000)),
            expect=frozenset({"watch-loader-healthy"}),
        ),
        Scenario(
            "watch-restart-every-epoch",
            "a watched run of short epochs whose 4 workers start again each one (2.5 s to the first batch, "
            "10 s epochs)",
            "h100x8-node", LoaderSettings(batch_size=64, num_workers=4, persistent_workers=False),
            watch=watched(4, epochs=4, first_s=2.5, later_first_s=2.5, persistent=False),
            expect=frozenset({"watch-slow-epoch-start", "watch-loader-healthy"}),
        ),
        Scenario(
            "watch-copy-on-read",
            "a watched run whose workers' PSS grows every epoch (a list of Python objects as the index)",
            "laptop-rtx3050", LoaderSettings(batch_size=64, num_workers=4, persistent_workers=True),
            watch=watched(4, epochs=4, pss_mib=[600, 760, 910, 1050]),
            expect=frozenset({"watch-worker-memory-growing", "watch-loader-healthy"}),
        ),
        Scenario(
            "watch-shm-nearly-full",
            "a watched run in Docker's 64 MiB /dev/shm that peaked at 59 MiB",
            "docker-64m-shm", LoaderSettings(batch_size=64, num_workers=2),
            watch=watched(2, shm=(59, 64)),
            expect=frozenset({"watch-shm-nearly-full", "watch-loader-healthy"}),
        ),
        Scenario(
            "watch-straggler-rank",
            "rank 3 of a watched 4-rank job on a node whose ranks get 16 CPUs each, pinned to 4 CPUs: "
            "it waits 30 ms a batch where the others wait 2 ms",
            "h100x8-node", LoaderSettings(batch_size=64, num_workers=8, persistent_workers=True),
            machine_overrides={"distributed.launcher": "torchrun", "distributed.world_size": 4,
                               "distributed.local_world_size": 4},
            watch=_straggler(),
            expect=frozenset({"watch-straggler-rank", "watch-data-starved"}),
        ),
        Scenario(
            "watch-stream-replayed",
            "an IterableDataset that ignores get_worker_info(), watched with 2 workers: each replayed the "
            "stream (its data wait, of data counted twice, is not judged)",
            "ci-2core", LoaderSettings(batch_size=64, num_workers=2),
            watch=_replayed(),
            expect=frozenset({"watch-stream-replayed", "watch-slow-epoch-start"}),
        ),
        Scenario(
            "watch-loader-did-not-start",
            "a DataLoader whose iter() raised: spawn could not pickle the dataset's lambda",
            "ci-2core", LoaderSettings(batch_size=64, num_workers=2),
            watch=_did_not_start(),
            expect=frozenset({"watch-loader-did-not-start"}),
        ),
        Scenario(
            "watch-loader-refused",
            "a DataLoader torch refused at construction: persistent_workers=True with num_workers=0 (timm at "
            "--workers 0)",
            "ci-2core", LoaderSettings(batch_size=64, num_workers=0, persistent_workers=True),
            watch=_refused(),
            expect=frozenset({"watch-loader-refused"}),
        ),
    ]


def _refused() -> LoaderReport:
    w = watched(0, epochs=0)
    w.settings["persistent_workers"] = True
    w.init_error = "ValueError: persistent_workers option needs num_workers > 0"
    w.init_site = "timm/data/loader.py:390 < train.py:760"
    return w


def _replayed() -> LoaderReport:
    w = watched(2, epochs=2, persistent=False)
    w.replays = True
    return w


def _did_not_start() -> LoaderReport:
    w = watched(2, epochs=0)
    w.settings["multiprocessing_context"] = "spawn"
    w.iter_error = "AttributeError: Can't pickle local object 'Squares.__init__.<locals>.<lambda>'"
    return w


def _straggler() -> LoaderReport:
    w = watched(8, batches=200, wait_ms=30.0, step_ms=50.0)
    w.rank = 3
    w.job = [RankRun(rank=r, node="0", wait_share=0.04, wait_per_batch_s=0.002, steps=200, cpus=16,
                     num_workers=8) for r in range(3)]
    w.job.append(RankRun(rank=3, node="0", wait_share=w.wait_share, wait_per_batch_s=w.wait_per_batch_s,
                         steps=200, cpus=4, num_workers=8))
    return w


SCENARIOS: list[Scenario] = _scenarios() + _recorded() + _watched()


def get_scenario(name: str) -> Scenario:
    for sc in SCENARIOS:
        if sc.name == name:
            return sc
    raise KeyError(f"no scenario {name!r}")
