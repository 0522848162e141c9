"""NVIDIA GPUs through NVML (``pynvml`` from nvidia-ml-py), honouring ``CUDA_VISIBLE_DEVICES``.

Every NVML query goes through :func:`nvml_call`, which returns an unknown
:class:`~loaderdoc.system.facts.Reading` with the reason instead of raising (nvitop's habit), so a
field one GPU or driver does not support never hides the others. No NVML library means "no NVIDIA
driver": a fact reported in ``GpuFacts.nvml.unknown``, not an error.

``CUDA_VISIBLE_DEVICES`` is parsed the way torch and the CUDA runtime do: unset means all GPUs;
``""`` or a leading ``-1`` means none; parsing stops at the first invalid or out-of-range entry; a
repeated entry makes the set empty; ``GPU-<uuid>`` entries match NVML UUIDs by unique prefix;
``MIG-<uuid>`` resolves one MIG instance (a CUDA process sees at most one).
``GpuFacts.devices`` lists the visible GPUs in CUDA ordinal order (``cuda:0`` first); each
``GpuDevice.index`` is the NVML index (the number ``nvidia-smi`` shows).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from loaderdoc.system.facts import GpuDevice, GpuFacts, Reading

NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_DEVICE_MIG_ENABLE = 1
INIT_SOURCE = "pynvml.nvmlInit()"


def _decode(value: Any) -> Any:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _error_code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def describe_error(exc: BaseException) -> str:
    """A short human reason for an NVML (or any) exception."""
    text = str(exc).strip()
    name = type(exc).__name__
    if not text:
        return name
    return text if name.startswith("NVMLError") else f"{name}: {text}"


def not_supported(exc: BaseException | None) -> bool:
    if exc is None:
        return False
    return (
        _error_code(exc) == NVML_ERROR_NOT_SUPPORTED
        or "NotSupported" in type(exc).__name__
        or str(exc).strip().lower() == "not supported"
    )


def nvml_call(nvml: Any, name: str, *args: Any, label: str | None = None) -> Reading:
    """Call ``nvml.<name>(*args)``; an unknown reading with the reason instead of an exception.

    The exception (if any) is kept on the reading as ``reading.error`` for callers that need to
    tell "not supported" from other failures; it is not serialised.
    """
    source = label or name
    fn = getattr(nvml, name, None)
    if fn is None:
        return Reading.missing(f"{name} is not available in this pynvml", source)
    try:
        value = fn(*args)
    except Exception as exc:  # NVMLError subclasses, ctypes errors, anything a fake raises
        reading = Reading.missing(f"{name}: {describe_error(exc)}", source)
        reading.error = exc  # type: ignore[attr-defined]
        return reading
    return Reading.of(_decode(value), source)


def format_cuda_version(value: int) -> str:
    """NVML's CUDA driver version integer (13000, 12080) -> "13.0", "12.8"."""
    return f"{value // 1000}.{(value % 1000) // 10}"


def _strtoul(text: str) -> int:
    """Leading integer of ``text`` like C's strtoul (what CUDA uses); -1 when there is none."""
    digits = ""
    for i, ch in enumerate(text):
        if ch.isdigit() or (i == 0 and ch in "+-"):
            digits += ch
        else:
            break
    try:
        return int(digits)
    except ValueError:
        return -1


def parse_visible_devices(raw: str | None) -> tuple[list[int] | list[str] | None, str]:
    """CUDA_VISIBLE_DEVICES -> (None = all | list of ordinals | list of UUID strings, note)."""
    if raw is None:
        return None, "unset: all GPUs are visible"
    for prefix in ("GPU-", "MIG-"):
        if raw.startswith(prefix):
            ids: list[str] = []
            note = ""
            for elem in raw.split(","):
                elem = elem.strip()
                if elem in ids:
                    return [], f"{elem} is repeated: no GPU is visible"
                if not elem.startswith(prefix):
                    note = f"stops at {elem!r}"
                    break
                ids.append(elem)
            return ids, note
    ordinals: list[int] = []
    note = ""
    for elem in raw.split(","):
        x = _strtoul(elem.strip())
        if x in ordinals:
            return [], f"{x} is repeated: no GPU is visible"
        if x < 0:
            e = elem.strip()
            if ordinals:
                note = f"stops at {e!r}"
            elif not e:
                note = "empty: no GPU is visible"
            else:
                note = f"{e!r}: no GPU is visible"
            break
        ordinals.append(x)
    return ordinals, note


def _resolve(nvml: Any, raw: str | None, count: int) -> tuple[list[Any], str]:
    """Visible devices as NVML indices (int) or MIG handles (("mig", handle, uuid)), plus a note."""
    parsed, note = parse_visible_devices(raw)
    if parsed is None:
        return list(range(count)), note
    if not parsed:
        return [], note
    if isinstance(parsed[0], int):
        out = []
        for i in parsed:
            assert isinstance(i, int)
            if i >= count:
                note = f"stops at {i}: NVML sees {count} GPU(s)"
                break
            out.append(i)
        return out, note
    if str(parsed[0]).startswith("MIG-"):
        for uuid in parsed:
            handle = nvml_call(nvml, "nvmlDeviceGetHandleByUUID", uuid)
            if handle.known:
                extra = " (CUDA uses only the first MIG instance)" if len(parsed) > 1 else ""
                return [("mig", handle.value, uuid)], note + extra
            return [], f"{uuid}: {handle.unknown}"
        return [], note
    uuids: list[str | None] = []
    for i in range(count):
        h = nvml_call(nvml, "nvmlDeviceGetHandleByIndex", i)
        u = nvml_call(nvml, "nvmlDeviceGetUUID", h.value) if h.known else h
        uuids.append(str(u.value) if u.known else None)
    out_idx: list[int] = []
    for candidate in parsed:
        matches = [i for i, u in enumerate(uuids) if u is not None and u.startswith(str(candidate))]
        if len(matches) != 1:
            note = f"stops at {candidate}: {'ambiguous' if matches else 'no such GPU'}"
            break
        if matches[0] in out_idx:
            return [], f"{candidate} is repeated: no GPU is visible"
        out_idx.append(matches[0])
    return out_idx, note


def _device(nvml: Any, index: int, handle: Any, label: str) -> GpuDevice:
    dev = GpuDevice(index=index)

    def q(fn: str) -> Reading:
        return nvml_call(nvml, fn, handle, label=f"{fn}({label})")

    dev.name = q("nvmlDeviceGetName")
    dev.uuid = q("nvmlDeviceGetUUID")
    mem = q("nvmlDeviceGetMemoryInfo")
    for attr in ("total", "used"):
        target = f"memory_{attr}"
        value = getattr(mem.value, attr, None) if mem.known else None
        if mem.known and value is not None:
            setattr(dev, target, Reading.of(int(value), f"{mem.source}.{attr}"))
        else:
            setattr(dev, target, Reading.missing(mem.unknown or f"no .{attr} in the answer", mem.source))
    util = q("nvmlDeviceGetUtilizationRates")
    gpu_util = getattr(util.value, "gpu", None) if util.known else None
    dev.utilization = (
        Reading.of(int(gpu_util), f"{util.source}.gpu")
        if gpu_util is not None
        else Reading.missing(util.unknown or "no .gpu in the answer", util.source)
    )
    dev.pcie_gen_current = q("nvmlDeviceGetCurrPcieLinkGeneration")
    dev.pcie_gen_max = q("nvmlDeviceGetMaxPcieLinkGeneration")
    dev.pcie_width_current = q("nvmlDeviceGetCurrPcieLinkWidth")
    dev.pcie_width_max = q("nvmlDeviceGetMaxPcieLinkWidth")
    mig = q("nvmlDeviceGetMigMode")
    if mig.known:
        current = mig.value[0] if isinstance(mig.value, (list, tuple)) and mig.value else mig.value
        dev.mig_mode = Reading.of(current == NVML_DEVICE_MIG_ENABLE, f"{mig.source}[current]")
    elif not_supported(getattr(mig, "error", None)):
        dev.mig_mode = Reading.of(False, f"{mig.source}: not supported by this GPU (no MIG)")
    else:
        dev.mig_mode = Reading.missing(mig.unknown or "unknown", mig.source)
    return dev


def _init_failure(exc: BaseException | None, reading: Reading) -> str:
    code = _error_code(exc) if exc is not None else None
    name = type(exc).__name__ if exc is not None else ""
    text = describe_error(exc) if exc is not None else (reading.unknown or "")
    if code == NVML_ERROR_LIBRARY_NOT_FOUND or "LibraryNotFound" in name:
        return f"no NVIDIA driver: NVML library not found ({text})"
    if code == NVML_ERROR_DRIVER_NOT_LOADED or "DriverNotLoaded" in name:
        return f"no NVIDIA driver loaded ({text})"
    return f"NVML did not start: {text}"


def read_gpus(env: Mapping[str, str], nvml: Any = None) -> GpuFacts:
    raw = env.get("CUDA_VISIBLE_DEVICES")
    facts = GpuFacts(visible_devices=Reading.of(raw, "CUDA_VISIBLE_DEVICES"))
    if nvml is None:
        try:
            import pynvml as nvml  # nvidia-ml-py
        except Exception as exc:  # ImportError, or a broken install
            reason = f"pynvml (nvidia-ml-py) is not importable: {describe_error(exc)}"
            facts.nvml = Reading.missing(reason, "import pynvml")
            facts.driver_version = facts.cuda_driver_version = Reading.missing(reason, "import pynvml")
            facts.total_count = Reading.missing(reason, "import pynvml")
            return facts

    init = nvml_call(nvml, "nvmlInit", label=INIT_SOURCE)
    if not init.known:
        reason = _init_failure(getattr(init, "error", None), init)
        facts.nvml = Reading.missing(reason, INIT_SOURCE)
        facts.driver_version = Reading.missing(reason, "nvmlSystemGetDriverVersion")
        facts.cuda_driver_version = Reading.missing(reason, "nvmlSystemGetCudaDriverVersion")
        facts.total_count = Reading.missing(reason, "nvmlDeviceGetCount")
        return facts
    try:
        facts.driver_version = nvml_call(nvml, "nvmlSystemGetDriverVersion")
        cuda = nvml_call(nvml, "nvmlSystemGetCudaDriverVersion_v2")
        if not cuda.known:
            cuda = nvml_call(nvml, "nvmlSystemGetCudaDriverVersion")
        if cuda.known and isinstance(cuda.value, int):
            facts.cuda_driver_version = Reading.of(format_cuda_version(cuda.value), cuda.source)
        else:
            facts.cuda_driver_version = (
                cuda if not cuda.known else Reading.missing(f"odd value {cuda.value!r}", cuda.source)
            )
        count = nvml_call(nvml, "nvmlDeviceGetCount")
        if not count.known or not isinstance(count.value, int):
            facts.nvml = Reading.missing(count.unknown or f"odd device count {count.value!r}", count.source)
            facts.total_count = count
            return facts
        facts.total_count = count
        facts.nvml = Reading.of(True, INIT_SOURCE)
        visible, note = _resolve(nvml, raw, count.value)
        if note:
            facts.visible_devices = Reading.of(raw, f"CUDA_VISIBLE_DEVICES ({note})")
        for entry in visible:
            if isinstance(entry, tuple):  # a MIG instance
                _, handle, uuid = entry
                parent = nvml_call(nvml, "nvmlDeviceGetDeviceHandleFromMigDeviceHandle", handle)
                idx = nvml_call(nvml, "nvmlDeviceGetIndex", parent.value) if parent.known else parent
                facts.devices.append(_device(nvml, int(idx.get(0) or 0), handle, uuid))
                continue
            handle = nvml_call(
                nvml, "nvmlDeviceGetHandleByIndex", entry, label=f"nvmlDeviceGetHandleByIndex({entry})"
            )
            if handle.known:
                facts.devices.append(_device(nvml, entry, handle.value, str(entry)))
            else:
                dev = GpuDevice(index=entry)
                for name in (
                    "name", "uuid", "memory_total", "memory_used", "utilization", "pcie_gen_current",
                    "pcie_gen_max", "pcie_width_current", "pcie_width_max", "mig_mode",
                ):  # fmt: skip
                    setattr(dev, name, Reading.missing(handle.unknown or "no handle", handle.source))
                facts.devices.append(dev)
        return facts
    finally:
        nvml_call(nvml, "nvmlShutdown")
