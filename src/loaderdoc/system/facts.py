"""Facts about a machine as a DataLoader sees it.

Every value is a :class:`Reading`: the value, where it was read from, and, when it could not be
read, why. Readers never raise; a missing cgroup file or NVML library is a fact, not an error.
The whole tree converts to and from JSON (``MachineFacts.to_json``/``from_json``) so real
machines can be recorded as test fixtures.

This module imports neither torch nor textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderdoc.base._serde import Recorded
from loaderdoc.base.units import MiB  # noqa: F401  (re-exported: tests import it from here)

SCHEMA_VERSION = 1
GiB = 1024**3
DOCKER_DEFAULT_SHM = 64 * MiB
NOT_RECORDED = "not recorded (the machine was recorded before loaderdoc read it)"
NOT_RECORDED_SOURCE = "torch.intra_op_threads in the machine file"


@dataclass
class Reading:
    """One value and where it came from.

    ``unknown`` holds the reason when the value could not be read. A known reading may still
    have ``value is None``: that means "not set" (e.g. no cgroup CPU quota), which is a fact.
    """

    value: Any = None
    source: str = ""
    unknown: str | None = None

    @property
    def known(self) -> bool:
        return self.unknown is None

    @classmethod
    def of(cls, value: Any, source: str) -> Reading:
        return cls(value=value, source=source)

    @classmethod
    def missing(cls, reason: str, source: str = "") -> Reading:
        return cls(value=None, source=source, unknown=reason)

    def get(self, default: Any = None) -> Any:
        """The value if known and set, else ``default``."""
        return self.value if (self.known and self.value is not None) else default


@dataclass
class CpuFacts:
    logical: Reading = field(default_factory=Reading)  # os.cpu_count(): what torch's docs count
    physical: Reading = field(default_factory=Reading)  # psutil.cpu_count(logical=False)
    affinity: Reading = field(default_factory=Reading)  # list[int] from os.sched_getaffinity
    # CPUs the cgroup CFS quota allows (quota / period), None when there is no quota
    cgroup_quota: Reading = field(default_factory=Reading)
    cgroup_version: Reading = field(default_factory=Reading)  # 1, 2 or None
    model: Reading = field(default_factory=Reading)  # /proc/cpuinfo "model name"; py-cpuinfo brand when asked
    flags: Reading = field(default_factory=Reading)  # list[str], only when asked

    @property
    def budget(self) -> float:
        """The effective CPU budget: the least of logical count, affinity and cgroup quota."""
        limits = self._limits()
        return min(c for c, _ in limits) if limits else 1.0

    @property
    def budget_source(self) -> str:
        """Which limit set :attr:`budget` ("logical", "affinity" or "cgroup quota")."""
        limits = self._limits()
        if not limits:
            return "unknown"
        # on a tie name the plainest limit: a restriction is only news when it is tighter
        return min(limits, key=lambda item: item[0])[1]

    @property
    def known(self) -> bool:
        """At least one CPU count (logical, affinity or quota) was read."""
        return bool(self._limits())

    def _limits(self) -> list[tuple[float, str]]:
        out: list[tuple[float, str]] = []
        if self.logical.get() is not None:
            out.append((float(self.logical.value), "logical"))
        if self.affinity.get() is not None:
            out.append((float(len(self.affinity.value)), "affinity"))
        if self.cgroup_quota.get() is not None:
            out.append((float(self.cgroup_quota.value), "cgroup quota"))
        return out


@dataclass
class MemoryFacts:
    total: Reading = field(default_factory=Reading)  # bytes of physical RAM
    available: Reading = field(default_factory=Reading)  # bytes available without swapping
    cgroup_limit: Reading = field(default_factory=Reading)  # bytes, None when unlimited
    cgroup_usage: Reading = field(default_factory=Reading)  # bytes charged to the cgroup
    swap_total: Reading = field(default_factory=Reading)
    swap_free: Reading = field(default_factory=Reading)

    @property
    def budget(self) -> int | None:
        """Bytes this process tree may really use: RAM available, capped by the cgroup."""
        avail = self.available.get()
        limit = self.cgroup_limit.get()
        if limit is not None:
            headroom = limit - (self.cgroup_usage.get() or 0)
            avail = headroom if avail is None else min(avail, headroom)
        return None if avail is None else max(0, int(avail))


@dataclass
class ShmFacts:
    path: str = "/dev/shm"
    total: Reading = field(default_factory=Reading)  # bytes
    free: Reading = field(default_factory=Reading)  # bytes

    @property
    def looks_like_docker_default(self) -> bool:
        return self.total.get() == DOCKER_DEFAULT_SHM


@dataclass
class ContainerFacts:
    kind: Reading = field(default_factory=Reading)  # "docker" | "podman" | "kubernetes" | ...


@dataclass
class LimitsFacts:
    nofile_soft: Reading = field(default_factory=Reading)  # None means unlimited
    nofile_hard: Reading = field(default_factory=Reading)
    # torch.multiprocessing's default: "file_descriptor" on Linux, "file_system" on macOS
    sharing_strategy: Reading = field(default_factory=Reading)


@dataclass
class GpuDevice:
    index: int = 0
    name: Reading = field(default_factory=Reading)
    uuid: Reading = field(default_factory=Reading)
    memory_total: Reading = field(default_factory=Reading)  # bytes
    memory_used: Reading = field(default_factory=Reading)  # bytes
    utilization: Reading = field(default_factory=Reading)  # percent, GPU busy
    pcie_gen_current: Reading = field(default_factory=Reading)
    pcie_gen_max: Reading = field(default_factory=Reading)
    pcie_width_current: Reading = field(default_factory=Reading)
    pcie_width_max: Reading = field(default_factory=Reading)
    mig_mode: Reading = field(default_factory=Reading)  # True / False


@dataclass
class GpuFacts:
    nvml: Reading = field(default_factory=Reading)  # True when NVML answered; else why not
    driver_version: Reading = field(default_factory=Reading)
    cuda_driver_version: Reading = field(default_factory=Reading)  # e.g. "13.0"
    visible_devices: Reading = field(default_factory=Reading)  # CUDA_VISIBLE_DEVICES as set
    devices: list[GpuDevice] = field(default_factory=list)  # only the visible ones
    total_count: Reading = field(default_factory=Reading)  # GPUs NVML sees, before CUDA_VISIBLE_DEVICES

    @property
    def count(self) -> int:
        return len(self.devices)


@dataclass
class TorchFacts:
    installed: Reading = field(default_factory=Reading)  # bool
    version: Reading = field(default_factory=Reading)  # "2.13.0+cpu"
    cuda_build: Reading = field(default_factory=Reading)  # "12.8", None for a CPU build
    cudnn: Reading = field(default_factory=Reading)  # cuDNN wheel version, None if none
    # the training process's intra-op threads as torch will size them (system/threads.py); a
    # machine recorded before this reading existed says nothing about them
    intra_op_threads: Reading = field(default_factory=lambda: Reading.missing(NOT_RECORDED, NOT_RECORDED_SOURCE))


@dataclass
class DistributedFacts:
    launcher: Reading = field(default_factory=Reading)  # "torchrun" | "slurm" | None
    world_size: Reading = field(default_factory=Reading)
    local_world_size: Reading = field(default_factory=Reading)
    rank: Reading = field(default_factory=Reading)
    local_rank: Reading = field(default_factory=Reading)
    # SLURM_CPUS_PER_TASK: CPUs Slurm gave each task (None when not set)
    cpus_per_task: Reading = field(default_factory=Reading)

    @property
    def ranks_on_this_node(self) -> int:
        return int(self.local_world_size.get(1) or 1)

    @property
    def ranks_sharing_budget(self) -> int:
        """How many local ranks split this process's CPU budget.

        Ranks started by torchrun share the affinity of the torchrun process, so the budget is
        divided among them. Ranks that are Slurm tasks with ``--cpus-per-task`` each own their
        CPUs already (that number is the per-rank share), so nothing is divided.
        """
        if self.launcher.get() == "slurm" and self.cpus_per_task.get():
            return 1
        return self.ranks_on_this_node


@dataclass
class PlatformFacts:
    system: Reading = field(default_factory=Reading)  # "Linux"
    kernel: Reading = field(default_factory=Reading)
    python: Reading = field(default_factory=Reading)
    hostname: Reading = field(default_factory=Reading)


@dataclass
class MachineFacts(Recorded):
    schema_version: int = SCHEMA_VERSION
    label: str = ""  # a human name for recorded fixtures, e.g. "8x H100 80GB node"
    platform: PlatformFacts = field(default_factory=PlatformFacts)
    cpu: CpuFacts = field(default_factory=CpuFacts)
    memory: MemoryFacts = field(default_factory=MemoryFacts)
    shm: ShmFacts = field(default_factory=ShmFacts)
    container: ContainerFacts = field(default_factory=ContainerFacts)
    limits: LimitsFacts = field(default_factory=LimitsFacts)
    gpu: GpuFacts = field(default_factory=GpuFacts)
    torch: TorchFacts = field(default_factory=TorchFacts)
    distributed: DistributedFacts = field(default_factory=DistributedFacts)

    def to_dict(self) -> dict:
        """The recorded form; a reading the machine was recorded without is left out again, so an
        older recording reads back and writes out unchanged."""
        data = super().to_dict()
        if self.torch.intra_op_threads.unknown == NOT_RECORDED:
            data["torch"].pop("intra_op_threads", None)
        return data

    @property
    def cpus_per_rank(self) -> float | None:
        """The CPU budget each local rank (process feeding one GPU) can give its workers, None
        when no CPU count could be read (every caller says so rather than assume one CPU).

        The effective CPU budget, capped by ``SLURM_CPUS_PER_TASK`` when set, divided by the
        local ranks that share it (see :attr:`DistributedFacts.ranks_sharing_budget`).
        """
        if not self.cpu.known:
            return None
        budget = self.cpu.budget
        per_task = self.distributed.cpus_per_task.get()
        if per_task:
            budget = min(budget, float(per_task))
        return budget / max(1, self.distributed.ranks_sharing_budget)

    @property
    def usable_gpus(self) -> int:
        """GPUs this process can train on: NVML sees them and torch was built for CUDA."""
        if self.torch.installed.get() is False:
            return 0
        if self.torch.installed.known and self.torch.cuda_build.known and not self.torch.cuda_build.value:
            return 0
        return self.gpu.count
