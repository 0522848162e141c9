"""The schema of a recorded machine (``loaderdoc facts --json``), checked before it is believed.

A machine file decides every finding ``check --machine FILE`` prints, so a file that is not one
(``[]``, ``{"cpu": "lots"}``, a hand edit gone wrong) must be refused with the path of the bad
value, never read as a machine with nothing wrong ("Findings: none"). Keys this build does not know
are ignored, so a newer loaderdoc's recording still loads. No torch, no textual.
"""

from __future__ import annotations

import math
from typing import Any

from loaderdoc.system.facts import SCHEMA_VERSION


class MachineFileError(ValueError):
    """The JSON is not a recorded machine; the message names the key path and what was expected."""


def _whole(minimum: int):
    def check(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= minimum
    check.expected = f"a whole number >= {minimum}"  # type: ignore[attr-defined]
    return check


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0


def _text(v: Any) -> bool:
    return isinstance(v, str)


def _flag(v: Any) -> bool:
    return isinstance(v, bool)


def _cpu_list(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(_whole(0)(c) for c in v)


def _text_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(c, str) for c in v)


def _cgroup_version(v: Any) -> bool:
    return v in (1, 2) and not isinstance(v, bool)


_number.expected = "a positive finite number"  # type: ignore[attr-defined]
_text.expected = "a string"  # type: ignore[attr-defined]
_flag.expected = "true or false"  # type: ignore[attr-defined]
_cpu_list.expected = "a non-empty list of CPU numbers"  # type: ignore[attr-defined]
_text_list.expected = "a list of strings"  # type: ignore[attr-defined]
_cgroup_version.expected = "1 or 2"  # type: ignore[attr-defined]

COUNT, POSITIVE = _whole(0), _whole(1)

# section -> reading -> what its value must be (when it is known and set)
READINGS: dict[str, dict[str, Any]] = {
    "platform": {"system": _text, "kernel": _text, "python": _text, "hostname": _text},
    "cpu": {"logical": POSITIVE, "physical": POSITIVE, "affinity": _cpu_list, "cgroup_quota": _number,
            "cgroup_version": _cgroup_version, "model": _text, "flags": _text_list},
    "memory": {"total": COUNT, "available": COUNT, "cgroup_limit": COUNT, "cgroup_usage": COUNT,
               "swap_total": COUNT, "swap_free": COUNT},
    "shm": {"total": COUNT, "free": COUNT},
    "container": {"kind": _text},
    "limits": {"nofile_soft": COUNT, "nofile_hard": COUNT, "sharing_strategy": _text},
    "gpu": {"nvml": _flag, "driver_version": _text, "cuda_driver_version": _text, "visible_devices": _text,
            "total_count": COUNT},
    "torch": {"installed": _flag, "version": _text, "cuda_build": _text, "cudnn": _text,
              "intra_op_threads": POSITIVE},
    "distributed": {"launcher": _text, "world_size": POSITIVE, "local_world_size": POSITIVE, "rank": COUNT,
                    "local_rank": COUNT, "cpus_per_task": POSITIVE},
}
GPU_DEVICE = {"name": _text, "uuid": _text, "memory_total": COUNT, "memory_used": COUNT, "utilization": COUNT,
              "pcie_gen_current": COUNT, "pcie_gen_max": COUNT, "pcie_width_current": COUNT,
              "pcie_width_max": COUNT, "mig_mode": _flag}
# without these a file says nothing a DataLoader check can use
REQUIRED = ("schema_version", "cpu", "memory", "shm")


def validate_machine(data: Any) -> None:
    """Raise MachineFileError naming the first value that does not fit the schema."""
    if not isinstance(data, dict):
        raise MachineFileError(f"expected a JSON object of machine facts, got {_kind(data)}")
    missing = [key for key in REQUIRED if key not in data]
    if missing:
        raise MachineFileError(f"no {', '.join(missing)}: not a machine recorded by 'loaderdoc facts --json'")
    version = data["schema_version"]
    if not _whole(1)(version) or version > SCHEMA_VERSION:
        raise MachineFileError(f"schema_version: expected 1..{SCHEMA_VERSION}, got {version!r}")
    if not isinstance(data.get("label", ""), str):
        raise MachineFileError(f"label: expected a string, got {_kind(data['label'])}")
    for section, readings in READINGS.items():
        if section in data:
            _section(data[section], section, readings)
    shm_path = data["shm"].get("path", "/dev/shm")
    if not isinstance(shm_path, str):
        raise MachineFileError(f"shm.path: expected a string, got {_kind(shm_path)}")
    devices = data.get("gpu", {}).get("devices", [])
    if not isinstance(devices, list):
        raise MachineFileError(f"gpu.devices: expected a list, got {_kind(devices)}")
    for i, device in enumerate(devices):
        _section(device, f"gpu.devices[{i}]", GPU_DEVICE)
        if not COUNT(device.get("index", 0)):
            raise MachineFileError(f"gpu.devices[{i}].index: expected a whole number >= 0")


def _section(table: Any, where: str, readings: dict[str, Any]) -> None:
    if not isinstance(table, dict):
        raise MachineFileError(f"{where}: expected an object of readings, got {_kind(table)}")
    for name, check in readings.items():
        if name in table:
            _reading(table[name], f"{where}.{name}", check)


def _reading(reading: Any, where: str, check: Any) -> None:
    if not isinstance(reading, dict):
        raise MachineFileError(f"{where}: expected a reading {{\"value\", \"source\", \"unknown\"}}, got {_kind(reading)}")
    unknown, source = reading.get("unknown"), reading.get("source", "")
    if unknown is not None and not isinstance(unknown, str):
        raise MachineFileError(f"{where}.unknown: expected a reason (a string) or null, got {_kind(unknown)}")
    if not isinstance(source, str):
        raise MachineFileError(f"{where}.source: expected a string, got {_kind(source)}")
    value = reading.get("value")
    if unknown is None and value is not None and not check(value):
        raise MachineFileError(f"{where}.value: expected {check.expected}, got {value!r}"[:200])


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), type(value).__name__)
