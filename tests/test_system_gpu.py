"""GPU facts through NVML: a fake pynvml with recorded raw values, errors at any call."""

from __future__ import annotations

import pytest
from support.fake_nvml import (
    FakeGpu,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_GpuIsLost,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
)

from loaderdoc.system.facts import MiB
from loaderdoc.system.gpu import format_cuda_version, nvml_call, parse_visible_devices, read_gpus

UUIDS = [
    "GPU-4d18a5ff-37f1-44af-87c8-37fa76c44ef4",
    "GPU-6024b7db-a45a-4d62-b635-40df796225a6",
    "GPU-7a572c27-d013-4f6d-8141-fded29088d6c",
    "GPU-75f6ca08-4f41-4114-85d3-238d3ac28efc",
]


def h100s(n: int = 4, **changes) -> FakeNvml:
    gpus = [
        FakeGpu(
            name="NVIDIA H100 80GB HBM3",
            uuid=UUIDS[i],
            memory_total=81559 * MiB,
            memory_used=1 * MiB,
            pcie_gen_current=5,
            pcie_gen_max=5,
            pcie_width_current=16,
            pcie_width_max=16,
            mig_mode=0,
        )
        for i in range(n)
    ]
    return FakeNvml(gpus, **changes)


def test_h100_raw_values_become_gpu_facts():
    nvml = h100s(4)
    facts = read_gpus({}, nvml)
    assert facts.nvml.value is True
    assert facts.driver_version.value == "580.95.05"
    assert facts.cuda_driver_version.value == "13.0"
    assert facts.total_count.value == 4 and facts.count == 4
    d = facts.devices[0]
    assert d.name.value == "NVIDIA H100 80GB HBM3"
    assert d.memory_total.value == 85520809984  # 81559 MiB, what nvidia-smi shows
    assert d.memory_used.value == 1 * MiB
    assert (d.pcie_gen_current.value, d.pcie_gen_max.value) == (5, 5)
    assert (d.pcie_width_current.value, d.pcie_width_max.value) == (16, 16)
    assert d.mig_mode.value is False and d.uuid.value == UUIDS[0]
    assert d.memory_total.source == "nvmlDeviceGetMemoryInfo(0).total"
    # NVML was shut down again
    assert nvml.calls[-1] == "nvmlShutdown" and not nvml.initialized


def test_mig_enabled_and_not_supported():
    nvml = h100s(2)
    nvml.gpus[1].mig_mode = 1
    facts = read_gpus({}, nvml)
    assert [d.mig_mode.value for d in facts.devices] == [False, True]
    laptop = FakeNvml(
        [FakeGpu(name="NVIDIA GeForce RTX 3050 Laptop GPU", mig_mode=None)], cuda_driver_version=12040
    )
    mig = read_gpus({}, laptop).devices[0].mig_mode
    assert mig.known and mig.value is False and "not supported" in mig.source


def test_no_library_is_the_fact_no_driver():
    facts = read_gpus({}, FakeNvml.no_library())
    assert not facts.nvml.known
    assert facts.nvml.unknown.startswith("no NVIDIA driver")
    assert facts.count == 0 and not facts.driver_version.known


def test_driver_not_loaded_and_other_init_failures():
    facts = read_gpus({}, FakeNvml(errors={"nvmlInit": NVMLError_DriverNotLoaded()}))
    assert "no NVIDIA driver loaded" in facts.nvml.unknown
    facts = read_gpus({}, FakeNvml(errors={"nvmlInit": NVMLError_NoPermission()}))
    assert facts.nvml.unknown == "NVML did not start: Insufficient Permissions"
    facts = read_gpus({}, FakeNvml(errors={"nvmlInit": OSError("libnvidia-ml.so.1: cannot open")}))
    assert "OSError" in facts.nvml.unknown


def test_real_pynvml_errors_are_understood():
    pynvml = pytest.importorskip("pynvml")
    facts = read_gpus({}, FakeNvml(errors={"nvmlInit": pynvml.NVMLError_LibraryNotFound()}))
    assert facts.nvml.unknown.startswith("no NVIDIA driver: NVML library not found")
    nvml = h100s(1)
    nvml.gpus[0].errors["nvmlDeviceGetMigMode"] = pynvml.NVMLError_NotSupported()
    assert read_gpus({}, nvml).devices[0].mig_mode.value is False


def test_error_mid_query_leaves_the_rest_known():
    nvml = h100s(3)
    nvml.gpus[1].errors["nvmlDeviceGetCurrPcieLinkGeneration"] = NVMLError_GpuIsLost()
    nvml.gpus[1].errors["nvmlDeviceGetMemoryInfo"] = NVMLError_GpuIsLost()
    nvml.gpus[2].errors["nvmlDeviceGetUtilizationRates"] = NVMLError_NotSupported()
    facts = read_gpus({}, nvml)
    assert facts.count == 3
    lost = facts.devices[1]
    assert (
        not lost.pcie_gen_current.known
        and lost.pcie_gen_current.unknown == "nvmlDeviceGetCurrPcieLinkGeneration: GPU is lost"
    )
    assert not lost.memory_total.known and not lost.memory_used.known
    assert lost.name.value == "NVIDIA H100 80GB HBM3" and lost.pcie_gen_max.value == 5
    assert not facts.devices[2].utilization.known and "Not Supported" in facts.devices[2].utilization.unknown
    assert facts.devices[0].pcie_gen_current.value == 5
    assert nvml.calls[-1] == "nvmlShutdown"


def test_handle_failure_marks_that_device_unknown():
    nvml = h100s(2)
    nvml.gpus[0].errors["nvmlDeviceGetHandleByIndex"] = NVMLError_GpuIsLost()
    facts = read_gpus({}, nvml)
    assert facts.count == 2 and not facts.devices[0].name.known and facts.devices[1].name.known


def test_system_queries_failing_and_missing_functions():
    nvml = h100s(
        1,
        errors={
            "nvmlSystemGetDriverVersion": NVMLError_NoPermission(),
            "nvmlSystemGetCudaDriverVersion_v2": AttributeError("x"),
        },
    )
    facts = read_gpus({}, nvml)
    assert not facts.driver_version.known
    assert facts.cuda_driver_version.value == "13.0"  # fell back to the non-_v2 call
    assert facts.count == 1

    class OldPynvml(FakeNvml):
        nvmlDeviceGetMigMode = None  # an old pynvml without the function

    old = OldPynvml([FakeGpu()])
    old.nvmlDeviceGetMigMode = None
    facts = read_gpus({}, old)
    assert not facts.devices[0].mig_mode.known and "not available" in facts.devices[0].mig_mode.unknown


def test_count_failure_is_unknown_not_zero_gpus():
    facts = read_gpus({}, h100s(2, errors={"nvmlDeviceGetCount": NVMLError_GpuIsLost()}))
    assert not facts.nvml.known and "nvmlDeviceGetCount" in facts.nvml.unknown


def test_bytes_from_old_pynvml_are_decoded():
    nvml = FakeNvml(
        [FakeGpu(name=b"Tesla V100-SXM2-16GB")], driver_version=b"470.57.02", cuda_driver_version=11040
    )  # type: ignore[arg-type]
    facts = read_gpus({}, nvml)
    assert facts.driver_version.value == "470.57.02" and facts.cuda_driver_version.value == "11.4"
    assert facts.devices[0].name.value == "Tesla V100-SXM2-16GB"


@pytest.mark.parametrize(
    "raw, expected",
    [
        (None, [0, 1, 2, 3]),
        ("", []),
        ("-1", []),
        ("2", [2]),
        ("3,1", [3, 1]),
        (" 1 , 0 ", [1, 0]),
        ("0,0", []),  # a repeated id empties the set
        ("1,-1,2", [1]),  # a negative value ends the list
        ("0,7,1", [0]),  # an out-of-range ordinal ends the list
        ("1gpu2,2ampere", [1, 2]),  # strtoul semantics, as CUDA
        ("nvidia0", []),
        ("GPU-6024b7db", [1]),  # unique UUID prefix
        ("GPU-7a572c27-d013-4f6d-8141-fded29088d6c,GPU-4d18", [2, 0]),
        ("GPU-7", []),  # ambiguous prefix (two UUIDs start with GPU-7)
        ("GPU-6024b7db,1", [1]),  # the list stops at the first non-UUID
        ("GPU-ffffffff", []),
        ("GPU-4d18,GPU-4d18", []),
    ],
)
def test_cuda_visible_devices(raw, expected):
    env = {} if raw is None else {"CUDA_VISIBLE_DEVICES": raw}
    facts = read_gpus(env, h100s(4))
    assert [d.index for d in facts.devices] == expected
    assert facts.visible_devices.value == raw
    assert facts.total_count.value == 4
    if raw is not None and len(expected) < 4:
        assert facts.visible_devices.source.startswith("CUDA_VISIBLE_DEVICES")


def test_visible_devices_note_explains_what_was_dropped():
    facts = read_gpus({"CUDA_VISIBLE_DEVICES": "0,7,1"}, h100s(4))
    assert "stops at 7" in facts.visible_devices.source
    assert parse_visible_devices("")[1] == "empty: no GPU is visible"
    assert parse_visible_devices(None) == (None, "unset: all GPUs are visible")


def test_mig_uuid_resolves_one_instance():
    nvml = h100s(2)
    nvml.gpus[1].uuid = "MIG-0f6a1a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b"

    def parent(handle):
        return handle

    nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle = parent  # type: ignore[attr-defined]
    facts = read_gpus({"CUDA_VISIBLE_DEVICES": "MIG-0f6a1a2b-3c4d-5e6f-7a8b-9c0d1e2f3a4b"}, nvml)
    assert [d.index for d in facts.devices] == [1]
    facts = read_gpus({"CUDA_VISIBLE_DEVICES": "MIG-nope"}, nvml)
    assert facts.devices == [] and "MIG-nope" in facts.visible_devices.source


def test_nvml_call_never_raises():
    class Boom:
        def nvmlDeviceGetName(self, handle):  # noqa: N802
            raise RuntimeError("segfault avoided")

    reading = nvml_call(Boom(), "nvmlDeviceGetName", object())
    assert not reading.known and reading.unknown == "nvmlDeviceGetName: RuntimeError: segfault avoided"
    assert not nvml_call(Boom(), "nvmlNothing").known


def test_format_cuda_version():
    assert [format_cuda_version(v) for v in (13000, 12080, 12040, 11080)] == ["13.0", "12.8", "12.4", "11.8"]


def test_missing_pynvml_module(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    facts = read_gpus({})
    assert not facts.nvml.known and "pynvml (nvidia-ml-py) is not importable" in facts.nvml.unknown
