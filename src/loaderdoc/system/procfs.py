"""Linux facts read from ``/proc`` and ``/sys`` files (the same files psutil reads).

These work under any :class:`~loaderdoc.system._files.Tree`, which is what lets a recorded tree
stand in for the live syscalls: ``/sys/devices/system/cpu/online`` is what ``os.cpu_count()``
counts, ``Cpus_allowed_list`` in ``/proc/self/status`` is ``os.sched_getaffinity(0)``,
``/proc/self/limits`` is ``resource.getrlimit`` and ``/proc/meminfo`` is
``psutil.virtual_memory()``. Every function returns :class:`Reading` objects and never raises.
"""

from __future__ import annotations

import re

from loaderdoc.system._files import Tree, key_values, parse_cpu_list
from loaderdoc.system.facts import Reading

CPU_ONLINE = "/sys/devices/system/cpu/online"
CPU_DIR = "/sys/devices/system/cpu"
STATUS = "/proc/self/status"
LIMITS = "/proc/self/limits"
MEMINFO = "/proc/meminfo"
CPUINFO = "/proc/cpuinfo"

_CPU_NAME = re.compile(r"^cpu[0-9]+$")


def online_cpus(tree: Tree) -> Reading:
    """Number of online CPUs (what ``os.cpu_count()`` reports on Linux)."""
    t = tree.read(CPU_ONLINE)
    if not t.ok:
        return Reading.missing(t.error or "unreadable", CPU_ONLINE)
    try:
        cpus = parse_cpu_list(t.text or "")
    except ValueError as exc:
        return Reading.missing(f"{CPU_ONLINE}: malformed ({exc})", CPU_ONLINE)
    if not cpus:
        return Reading.missing(f"{CPU_ONLINE} is empty", CPU_ONLINE)
    return Reading.of(len(cpus), CPU_ONLINE)


def allowed_cpus(tree: Tree) -> Reading:
    """The CPUs this process may run on (``Cpus_allowed_list``), as a sorted list."""
    source = f"{STATUS}: Cpus_allowed_list"
    t = tree.read(STATUS)
    if not t.ok:
        return Reading.missing(t.error or "unreadable", source)
    value = key_values(t.text or "").get("Cpus_allowed_list")
    if value is None:
        return Reading.missing(f"{STATUS} has no Cpus_allowed_list line", source)
    try:
        cpus = parse_cpu_list(value)
    except ValueError as exc:
        return Reading.missing(f"{source}: malformed ({exc})", source)
    if not cpus:
        return Reading.missing(f"{source} is empty", source)
    return Reading.of(cpus, source)


def physical_cores(tree: Tree) -> Reading:
    """Physical cores: distinct ``core_cpus_list`` sets in sysfs, else /proc/cpuinfo core ids."""
    cpus = [name for name in tree.listdir(CPU_DIR) if _CPU_NAME.match(name)]
    for leaf in ("core_cpus_list", "thread_siblings_list"):
        sets: set[str] = set()
        unreadable = 0
        for name in cpus:
            t = tree.read(f"{CPU_DIR}/{name}/topology/{leaf}")
            if t.ok and (t.text or "").strip():
                sets.add((t.text or "").strip())
            elif not t.missing:
                unreadable += 1
        if sets and not unreadable:
            return Reading.of(len(sets), f"{CPU_DIR}/cpu*/topology/{leaf}")
    t = tree.read(CPUINFO)
    if not t.ok:
        return Reading.missing(f"no CPU topology in sysfs and {t.error}", CPUINFO)
    cores: set[tuple[str, str]] = set()
    package = core = None
    for line in (t.text or "").splitlines() + [""]:
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "physical id":
            package = value.strip()
        elif key == "core id":
            core = value.strip()
        elif not line.strip():
            if core is not None:
                cores.add((package or "0", core))
            package = core = None
    if not cores:
        return Reading.missing("no CPU topology in sysfs or /proc/cpuinfo", CPUINFO)
    return Reading.of(len(cores), f"{CPUINFO}: distinct (physical id, core id)")


def cpu_model(tree: Tree) -> Reading:
    """The first ``model name`` in /proc/cpuinfo (cheap; py-cpuinfo gives the same brand)."""
    source = f"{CPUINFO}: model name"
    t = tree.read(CPUINFO, limit=1 << 16)
    if not t.ok:
        return Reading.missing(t.error or "unreadable", source)
    for line in (t.text or "").splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("model name", "Model", "cpu model") and value.strip():
            return Reading.of(" ".join(value.split()), source)
    return Reading.missing(f"{CPUINFO} has no model name line", source)


def meminfo(tree: Tree) -> dict[str, Reading]:
    """total, available, swap_total, swap_free in bytes from /proc/meminfo."""
    t = tree.read(MEMINFO)
    keys = {
        "total": "MemTotal",
        "available": "MemAvailable",
        "swap_total": "SwapTotal",
        "swap_free": "SwapFree",
    }
    if not t.ok:
        return {k: Reading.missing(t.error or "unreadable", MEMINFO) for k in keys}
    values: dict[str, int] = {}
    for key, raw in key_values(t.text or "").items():
        parts = raw.split()
        if parts and parts[0].isdigit():
            scale = 1024 if len(parts) > 1 and parts[1].lower() == "kb" else 1
            values[key] = int(parts[0]) * scale
    out: dict[str, Reading] = {}
    for name, key in keys.items():
        if key in values:
            out[name] = Reading.of(values[key], f"{MEMINFO}: {key}")
        else:
            out[name] = Reading.missing(f"{MEMINFO} has no {key} line", MEMINFO)
    if not out["available"].known and all(k in values for k in ("MemFree", "Buffers", "Cached")):
        # kernels before 3.14 have no MemAvailable: the classic estimate
        est = values["MemFree"] + values["Buffers"] + values["Cached"]
        out["available"] = Reading.of(est, f"{MEMINFO}: MemFree+Buffers+Cached (no MemAvailable)")
    return out


def open_file_limits(tree: Tree) -> tuple[Reading, Reading]:
    """(soft, hard) ``Max open files`` from /proc/self/limits; None means unlimited."""
    source = f"{LIMITS}: Max open files"
    t = tree.read(LIMITS)
    if not t.ok:
        missing = Reading.missing(t.error or "unreadable", source)
        return missing, missing
    for line in (t.text or "").splitlines():
        if line.startswith("Max open files"):
            parts = line[len("Max open files") :].split()
            if len(parts) >= 2:
                try:
                    soft, hard = (None if p == "unlimited" else int(p) for p in parts[:2])
                except ValueError:
                    break
                return Reading.of(soft, source), Reading.of(hard, source)
            break
    bad = Reading.missing(f"{LIMITS}: no parsable 'Max open files' line", source)
    return bad, bad


def kernel_files(tree: Tree) -> dict[str, Reading]:
    """system, kernel and hostname from /proc/sys/kernel/{ostype,osrelease,hostname}."""
    out: dict[str, Reading] = {}
    for name, leaf in (("system", "ostype"), ("kernel", "osrelease"), ("hostname", "hostname")):
        path = f"/proc/sys/kernel/{leaf}"
        t = tree.read(path)
        value = (t.text or "").strip() if t.ok else ""
        out[name] = Reading.of(value, path) if value else Reading.missing(t.error or f"{path} is empty", path)
    return out
