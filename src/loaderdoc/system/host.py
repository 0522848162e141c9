"""The seam for facts that a filesystem root cannot redirect.

``os.cpu_count()``, ``os.sched_getaffinity(0)``, ``os.statvfs('/dev/shm')``,
``resource.getrlimit(RLIMIT_NOFILE)``, ``os.uname()`` and the torch installation belong to the
running process, not to a directory tree. :func:`loaderdoc.system.detect.detect` asks a
:class:`Host` for them:

* :class:`LiveHost` (``root == "/"``) makes the real calls.
* :class:`TreeHost` (any other root) reads the files those calls stand for inside the recorded
  tree (``/sys/devices/system/cpu/online``, ``Cpus_allowed_list`` in ``/proc/self/status``,
  ``/proc/meminfo``, ``/proc/self/limits``, ``/proc/sys/kernel/*``) and takes what no file holds
  (``statvfs`` of ``/dev/shm``, the python version, the torch build) from
  ``<root>/loaderdoc-host.json``. Values given to ``TreeHost(overrides=...)`` or in that JSON
  win over the files. A value neither recorded nor in a file is an unknown reading with the
  reason, never a live value leaking into a test.

Every method returns :class:`~loaderdoc.system.facts.Reading` objects and never raises; a fake
host for a test is a subclass overriding the methods it cares about, or a ``TreeHost`` with
``overrides``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from typing import Any

from loaderdoc.system import procfs
from loaderdoc.system._files import Tree, parse_cpu_list
from loaderdoc.system.facts import Reading, TorchFacts

HOST_FILE = "loaderdoc-host.json"
RECORDED = " [recorded]"

# keys of loaderdoc-host.json / TreeHost(overrides=...) and the live source each stands for
OVERRIDE_SOURCES = {
    "cpu_count": "os.cpu_count()",
    "physical_cores": "psutil.cpu_count(logical=False)",
    "affinity": "os.sched_getaffinity(0)",
    "mem_total": "/proc/meminfo: MemTotal",
    "mem_available": "/proc/meminfo: MemAvailable",
    "swap_total": "/proc/meminfo: SwapTotal",
    "swap_free": "/proc/meminfo: SwapFree",
    "shm_total": "os.statvfs('/dev/shm')",
    "shm_free": "os.statvfs('/dev/shm')",
    "nofile_soft": "resource.getrlimit(RLIMIT_NOFILE)",
    "nofile_hard": "resource.getrlimit(RLIMIT_NOFILE)",
    "system": "os.uname().sysname",
    "kernel": "os.uname().release",
    "python": "sys.version_info",
    "hostname": "os.uname().nodename",
    "torch": "torch/version.py",
}


class Host:
    """Interface; see :class:`LiveHost` and :class:`TreeHost`."""

    def cpu_count(self) -> Reading:
        raise NotImplementedError

    def physical_cores(self) -> Reading:
        raise NotImplementedError

    def affinity(self) -> Reading:
        raise NotImplementedError

    def memory(self) -> dict[str, Reading]:
        """Keys: total, available, swap_total, swap_free (bytes)."""
        raise NotImplementedError

    def shm_usage(self, path: str) -> tuple[Reading, Reading]:
        """(total, free) bytes of the filesystem at ``path``."""
        raise NotImplementedError

    def nofile(self) -> tuple[Reading, Reading]:
        """(soft, hard) open-file limit; a value of None means unlimited."""
        raise NotImplementedError

    def platform(self) -> dict[str, Reading]:
        """Keys: system, kernel, python, hostname."""
        raise NotImplementedError

    def torch(self) -> TorchFacts:
        raise NotImplementedError


class LiveHost(Host):
    """This process on this machine."""

    def __init__(self, tree: Tree | None = None) -> None:
        self.tree = tree or Tree("/")
        self.linux = sys.platform.startswith("linux")

    def cpu_count(self) -> Reading:
        n = os.cpu_count()
        if n is None:
            return Reading.missing("os.cpu_count() returned None", "os.cpu_count()")
        return Reading.of(n, "os.cpu_count()")

    def physical_cores(self) -> Reading:
        if self.linux:  # the files psutil reads, without psutil's ~45 ms import
            reading = procfs.physical_cores(self.tree)
            if reading.known:
                return reading
        return _psutil_call("psutil.cpu_count(logical=False)", lambda ps: ps.cpu_count(logical=False))

    def affinity(self) -> Reading:
        source = "os.sched_getaffinity(0)"
        getter = getattr(os, "sched_getaffinity", None)
        if getter is None:
            return Reading.missing("os.sched_getaffinity is not available on this OS", source)
        try:
            return Reading.of(sorted(getter(0)), source)
        except OSError as exc:
            return Reading.missing(f"{source}: {exc}", source)

    def memory(self) -> dict[str, Reading]:
        if self.linux:
            info = procfs.meminfo(self.tree)
            if info["total"].known:
                return info
        vm = _psutil_call("psutil.virtual_memory()", lambda ps: ps.virtual_memory())
        sw = _psutil_call("psutil.swap_memory()", lambda ps: ps.swap_memory())
        out = {}
        for key, reading, attr in (
            ("total", vm, "total"),
            ("available", vm, "available"),
            ("swap_total", sw, "total"),
            ("swap_free", sw, "free"),
        ):
            out[key] = (
                Reading.of(int(getattr(reading.value, attr)), reading.source) if reading.known else reading
            )
        return out

    def shm_usage(self, path: str) -> tuple[Reading, Reading]:
        source = f"os.statvfs({path!r})"
        try:
            st = os.statvfs(self.tree.path(path))
        except (OSError, AttributeError, ValueError) as exc:
            reason = f"{source}: {getattr(exc, 'strerror', None) or exc}"
            if isinstance(exc, FileNotFoundError):
                reason = f"{path} does not exist on this machine"
            bad = Reading.missing(reason, source)
            return bad, bad
        frsize = st.f_frsize or st.f_bsize
        return Reading.of(st.f_blocks * frsize, source), Reading.of(st.f_bavail * frsize, source)

    def nofile(self) -> tuple[Reading, Reading]:
        source = "resource.getrlimit(RLIMIT_NOFILE)"
        try:
            import resource
        except ImportError:
            bad = Reading.missing("the resource module is not available on this OS", source)
            return bad, bad
        try:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        except (OSError, ValueError) as exc:
            bad = Reading.missing(f"{source}: {exc}", source)
            return bad, bad

        def norm(v: int) -> int | None:
            return None if v == resource.RLIM_INFINITY or v < 0 else int(v)

        return Reading.of(norm(soft), source), Reading.of(norm(hard), source)

    def platform(self) -> dict[str, Reading]:
        py = Reading.of(".".join(str(n) for n in sys.version_info[:3]), "sys.version_info")
        try:
            u = os.uname()
        except AttributeError:  # Windows
            import platform as _platform

            return {
                "system": Reading.of(_platform.system(), "platform.system()"),
                "kernel": Reading.of(_platform.release(), "platform.release()"),
                "python": py,
                "hostname": Reading.of(_platform.node(), "platform.node()"),
            }
        return {
            "system": Reading.of(u.sysname, "os.uname().sysname"),
            "kernel": Reading.of(u.release, "os.uname().release"),
            "python": py,
            "hostname": Reading.of(u.nodename, "os.uname().nodename"),
        }

    def torch(self) -> TorchFacts:
        from loaderdoc.system.torchenv import read_torch

        return read_torch()


class TreeHost(Host):
    """A recorded machine: the tree's files plus recorded values (``loaderdoc-host.json``)."""

    def __init__(self, tree: Tree, overrides: Mapping[str, Any] | None = None) -> None:
        self.tree = tree
        self.overrides: dict[str, Any] = {}
        self.override_error: str | None = None
        t = tree.read("/" + HOST_FILE)
        if t.ok:
            try:
                data = json.loads(t.text or "")
                if not isinstance(data, dict):
                    raise ValueError("not a JSON object")
                self.overrides.update(data)
            except ValueError as exc:
                self.override_error = f"{HOST_FILE}: {exc}"
        elif not t.missing:
            self.override_error = t.error
        if overrides:
            self.overrides.update(overrides)

    def _recorded(self, key: str) -> Reading | None:
        if key not in self.overrides:
            return None
        return Reading.of(self.overrides[key], OVERRIDE_SOURCES.get(key, key) + RECORDED)

    def _not_recorded(self, key: str) -> Reading:
        why = f"not recorded in this tree ({HOST_FILE} has no {key!r})"
        if self.override_error:
            why += f"; {self.override_error}"
        return Reading.missing(why, OVERRIDE_SOURCES.get(key, key))

    def cpu_count(self) -> Reading:
        return self._recorded("cpu_count") or procfs.online_cpus(self.tree)

    def physical_cores(self) -> Reading:
        return self._recorded("physical_cores") or procfs.physical_cores(self.tree)

    def affinity(self) -> Reading:
        rec = self._recorded("affinity")
        if rec is None:
            return procfs.allowed_cpus(self.tree)
        value = rec.value
        try:
            cpus = parse_cpu_list(value) if isinstance(value, str) else sorted(int(c) for c in value)
        except (TypeError, ValueError) as exc:
            return Reading.missing(f"{HOST_FILE}: bad affinity {value!r} ({exc})", rec.source)
        return Reading.of(cpus, rec.source)

    def memory(self) -> dict[str, Reading]:
        info = procfs.meminfo(self.tree)
        for key in ("total", "available", "swap_total", "swap_free"):
            rec = self._recorded("mem_" + key if not key.startswith("swap") else key)
            if rec is not None:
                info[key] = rec
        return info

    def shm_usage(self, path: str) -> tuple[Reading, Reading]:
        total, free = self._recorded("shm_total"), self._recorded("shm_free")
        return total or self._not_recorded("shm_total"), free or self._not_recorded("shm_free")

    def nofile(self) -> tuple[Reading, Reading]:
        soft, hard = procfs.open_file_limits(self.tree)
        return self._recorded("nofile_soft") or soft, self._recorded("nofile_hard") or hard

    def platform(self) -> dict[str, Reading]:
        files = procfs.kernel_files(self.tree)
        out = {}
        for key in ("system", "kernel", "hostname"):
            out[key] = self._recorded(key) or files[key]
        out["python"] = self._recorded("python") or self._not_recorded("python")
        return out

    def torch(self) -> TorchFacts:
        rec = self.overrides.get("torch")
        if not isinstance(rec, Mapping):
            missing = self._not_recorded("torch")
            return TorchFacts(installed=missing, version=missing, cuda_build=missing, cudnn=missing)
        src = "torch/version.py" + RECORDED
        if not rec.get("installed", True):
            gone = "importlib.util.find_spec('torch')" + RECORDED
            return TorchFacts(
                installed=Reading.of(False, gone),
                version=Reading.of(None, gone + ": torch is not installed"),
                cuda_build=Reading.of(None, gone + ": torch is not installed"),
                cudnn=Reading.of(None, gone + ": torch is not installed"),
            )
        cuda = rec.get("cuda")
        cudnn = rec.get("cudnn")
        if cuda is None:
            cudnn_reading = Reading.of(None, src + ": cuda = None (CPU build ships no cuDNN)")
        elif cudnn is None:
            cudnn_reading = Reading.missing("not recorded", "nvidia-cudnn-cu* distributions" + RECORDED)
        else:
            wheel = f"nvidia-cudnn-cu{str(cuda).split('.')[0]}"
            cudnn_reading = Reading.of(cudnn, f"{wheel} distribution" + RECORDED)
        return TorchFacts(
            installed=Reading.of(True, "importlib.util.find_spec('torch')" + RECORDED),
            version=Reading.of(rec.get("version"), src + ": __version__")
            if rec.get("version")
            else Reading.missing("not recorded", src),
            cuda_build=Reading.of(None if cuda is None else str(cuda), src + ": cuda"),
            cudnn=cudnn_reading,
        )


def _psutil_call(source: str, fn: Any) -> Reading:
    try:
        import psutil
    except ImportError:
        return Reading.missing("psutil is not installed", source)
    try:
        value = fn(psutil)
    except Exception as exc:  # psutil raises its own error types on odd platforms
        return Reading.missing(f"{source}: {type(exc).__name__}: {exc}", source)
    if value is None:
        return Reading.missing(f"{source} returned None", source)
    return Reading.of(value, source)
