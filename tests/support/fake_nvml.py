"""A fake ``pynvml`` for tests and recorded machines: the functions loaderdoc calls, fed with
recorded raw values, able to raise NVML errors at any call (as a GPU that falls off the bus does).

    >>> from loaderdoc.system.fake_nvml import FakeGpu, FakeNvml
    >>> nvml = FakeNvml([FakeGpu(name="NVIDIA H100 80GB HBM3", memory_total=81559 * 2**20)])
    >>> detect(nvml=nvml).gpu.count
    1

``FakeNvml.no_library()`` behaves like this CPU-only machine: ``nvmlInit`` raises
``NVMLError_LibraryNotFound``. Errors raised are this module's :class:`NVMLError` subclasses,
which carry pynvml's numeric ``value`` codes; real ``pynvml.NVMLError`` instances can be passed
in ``errors=`` too.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

NVML_SUCCESS = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1

_STRINGS = {
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "Insufficient Permissions",
    9: "Driver Not Loaded",
    12: "NVML Shared Library Not Found",
    13: "Function Not Found",
    15: "GPU is lost",
    999: "Unknown Error",
}


class NVMLError(Exception):
    value = 999

    def __init__(self, value: int | None = None) -> None:
        if value is not None:
            self.value = value
        super().__init__(self.value)

    def __str__(self) -> str:
        return _STRINGS.get(self.value, f"NVML error {self.value}")


class NVMLError_Uninitialized(NVMLError):  # noqa: N801 - pynvml's names
    value = 1


class NVMLError_NotSupported(NVMLError):  # noqa: N801
    value = 3


class NVMLError_NoPermission(NVMLError):  # noqa: N801
    value = 4


class NVMLError_DriverNotLoaded(NVMLError):  # noqa: N801
    value = 9


class NVMLError_LibraryNotFound(NVMLError):  # noqa: N801
    value = 12


class NVMLError_FunctionNotFound(NVMLError):  # noqa: N801
    value = 13


class NVMLError_GpuIsLost(NVMLError):  # noqa: N801
    value = 15


class NVMLError_Unknown(NVMLError):  # noqa: N801
    value = 999


@dataclass
class FakeGpu:
    """Raw values one GPU reports through NVML (bytes for memory, percent for utilisation)."""

    name: str = "NVIDIA Fake GPU"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    memory_total: int = 0
    memory_used: int = 0
    utilization: int = 0
    pcie_gen_current: int = 4
    pcie_gen_max: int = 4
    pcie_width_current: int = 16
    pcie_width_max: int = 16
    mig_mode: int | None = NVML_DEVICE_MIG_DISABLE  # None: the GPU does not support MIG
    # function name -> exception raised when that function is called for this GPU
    errors: dict[str, BaseException] = field(default_factory=dict)


@dataclass(frozen=True)
class _Handle:
    index: int


class FakeNvml:
    """Duck-types the pynvml module for the calls :mod:`loaderdoc.system.gpu` makes."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_GpuIsLost = NVMLError_GpuIsLost
    NVMLError_NoPermission = NVMLError_NoPermission
    NVMLError_Unknown = NVMLError_Unknown
    NVML_DEVICE_MIG_ENABLE = NVML_DEVICE_MIG_ENABLE
    NVML_DEVICE_MIG_DISABLE = NVML_DEVICE_MIG_DISABLE

    def __init__(
        self,
        gpus: list[FakeGpu] | None = None,
        driver_version: str | bytes = "580.95.05",
        cuda_driver_version: int = 13000,
        errors: dict[str, BaseException] | None = None,
    ) -> None:
        self.gpus = list(gpus or [])
        self.driver_version = driver_version
        self.cuda_driver_version = cuda_driver_version
        self.errors = dict(errors or {})  # function name -> exception, for system-level calls
        self.calls: list[str] = []
        self.initialized = False

    @classmethod
    def no_library(cls) -> FakeNvml:
        """NVML as on a machine without the NVIDIA driver."""
        return cls(errors={"nvmlInit": NVMLError_LibraryNotFound()})

    # -- plumbing -----------------------------------------------------------------------------
    def _enter(self, name: str, handle: Any = None) -> FakeGpu | None:
        self.calls.append(name)
        if name in self.errors:
            raise self.errors[name]
        if name not in ("nvmlInit", "nvmlShutdown") and not self.initialized:
            raise NVMLError_Uninitialized()
        if handle is None:
            return None
        if not isinstance(handle, _Handle) or not 0 <= handle.index < len(self.gpus):
            raise NVMLError(2)
        gpu = self.gpus[handle.index]
        if name in gpu.errors:
            raise gpu.errors[name]
        return gpu

    # -- system -------------------------------------------------------------------------------
    def nvmlInit(self) -> None:  # noqa: N802 - pynvml's names
        self._enter("nvmlInit")
        self.initialized = True

    def nvmlShutdown(self) -> None:  # noqa: N802
        self._enter("nvmlShutdown")
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str | bytes:  # noqa: N802
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlSystemGetCudaDriverVersion(self) -> int:  # noqa: N802
        self._enter("nvmlSystemGetCudaDriverVersion")
        return self.cuda_driver_version

    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:  # noqa: N802
        self._enter("nvmlSystemGetCudaDriverVersion_v2")
        return self.cuda_driver_version

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:  # noqa: N802
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.gpus):
            raise NVMLError(2)
        if "nvmlDeviceGetHandleByIndex" in self.gpus[index].errors:
            raise self.gpus[index].errors["nvmlDeviceGetHandleByIndex"]
        return _Handle(index)

    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> _Handle:  # noqa: N802
        self._enter("nvmlDeviceGetHandleByUUID")
        text = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, gpu in enumerate(self.gpus):
            if gpu.uuid == text:
                return _Handle(i)
        raise NVMLError(2)

    def nvmlDeviceGetIndex(self, handle: _Handle) -> int:  # noqa: N802
        self._enter("nvmlDeviceGetIndex", handle)
        return handle.index

    # -- per device ---------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: _Handle) -> str:  # noqa: N802
        return self._enter("nvmlDeviceGetName", handle).name  # type: ignore[union-attr]

    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:  # noqa: N802
        return self._enter("nvmlDeviceGetUUID", handle).uuid  # type: ignore[union-attr]

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle) -> SimpleNamespace:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMemoryInfo", handle)
        assert gpu is not None
        return SimpleNamespace(
            total=gpu.memory_total, used=gpu.memory_used, free=gpu.memory_total - gpu.memory_used
        )

    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetUtilizationRates", handle)
        assert gpu is not None
        return SimpleNamespace(gpu=gpu.utilization, memory=0)

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:  # noqa: N802
        return self._enter("nvmlDeviceGetCurrPcieLinkGeneration", handle).pcie_gen_current  # type: ignore[union-attr]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:  # noqa: N802
        return self._enter("nvmlDeviceGetMaxPcieLinkGeneration", handle).pcie_gen_max  # type: ignore[union-attr]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:  # noqa: N802
        return self._enter("nvmlDeviceGetCurrPcieLinkWidth", handle).pcie_width_current  # type: ignore[union-attr]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:  # noqa: N802
        return self._enter("nvmlDeviceGetMaxPcieLinkWidth", handle).pcie_width_max  # type: ignore[union-attr]

    def nvmlDeviceGetMigMode(self, handle: _Handle) -> list[int]:  # noqa: N802
        gpu = self._enter("nvmlDeviceGetMigMode", handle)
        assert gpu is not None
        if gpu.mig_mode is None:
            raise NVMLError_NotSupported()
        return [gpu.mig_mode, gpu.mig_mode]
