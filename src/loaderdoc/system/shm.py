"""``/dev/shm``: where DataLoader workers put batches on Linux (torch's ``file_descriptor``
strategy backs shared tensors with shm files). Docker gives containers 64 MiB unless run with
``--shm-size``/``--ipc=host``; one batch of 64 x 3 x 224 x 224 float32 is already 37 MiB.

Total and free space come from ``os.statvfs`` (through the :class:`~loaderdoc.system.host.Host`
seam). When that is unavailable (a recorded tree without a recorded value) the total falls back
to the ``size=`` option of the ``/dev/shm`` tmpfs mount in ``/proc/self/mountinfo``.
"""

from __future__ import annotations

from loaderdoc.system._files import Tree
from loaderdoc.system.cgroup import MOUNTINFO, parse_mountinfo
from loaderdoc.system.facts import Reading, ShmFacts
from loaderdoc.system.host import Host

SHM_PATH = "/dev/shm"
_SUFFIX = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3, "t": 1024**4}


def mount_size(tree: Tree, path: str = SHM_PATH) -> Reading:
    """The ``size=`` of the topmost tmpfs mounted at ``path``, from mountinfo."""
    source = f"{MOUNTINFO}: {path} size="
    t = tree.read(MOUNTINFO)
    if not t.ok:
        return Reading.missing(t.error or "unreadable", MOUNTINFO)
    mounts = [m for m in parse_mountinfo(t.text or "") if m.mountpoint == path]
    if not mounts:
        return Reading.missing(f"{MOUNTINFO} shows no mount at {path}", MOUNTINFO)
    mount = mounts[-1]  # later lines are mounted on top
    for opt in mount.super_options + mount.options:
        if opt.startswith("size="):
            raw = opt[5:].strip().lower()
            unit = raw[-1] if raw and raw[-1] in "kmgt" else ""
            number = raw[: len(raw) - len(unit)]
            if number.isdigit():
                return Reading.of(int(number) * _SUFFIX[unit], f"{source}{opt[5:]}")
            return Reading.missing(f"{MOUNTINFO}: unsupported size option {opt!r}", source)
    return Reading.missing(f"the {mount.fstype} at {path} has no size= option", source)


def read_shm(tree: Tree, host: Host, path: str = SHM_PATH) -> ShmFacts:
    total, free = host.shm_usage(path)
    if not total.known:
        fallback = mount_size(tree, path)
        if fallback.known:
            total = fallback
    return ShmFacts(path=path, total=total, free=free)


def shm_used_bytes(path: str = SHM_PATH) -> int | None:
    """Bytes in use on the /dev/shm file system right now (the probe samples it while measuring)."""
    from loaderdoc.system.procmem import shm_usage

    return shm_usage(path)[0]
