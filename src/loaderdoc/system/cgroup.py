"""Find this process's cgroup directories (v1 and v2) under a filesystem root.

``/proc/self/cgroup`` names the process's cgroup path per hierarchy; ``/proc/self/mountinfo``
says where each hierarchy is mounted and which part of it the mount shows (its *root*). Inside a
container with a cgroup namespace both usually say ``/``; without one, ``/proc/self/cgroup``
names the host path (``/docker/<id>``) and the mount's root is that same path. The directory is
``mountpoint + (path - mount root)``; when that directory does not exist (mismatched views), the
mountpoint itself is the best guess for "this container's cgroup".

Limits are hierarchical: a quota on an ancestor binds every descendant, so callers walk
:attr:`Location.levels` (the cgroup and each ancestor up to the mountpoint) and take the tightest.

On hybrid hosts (v1 controllers plus an empty v2 ``unified`` mount) a controller is read from the
v1 hierarchy it is attached to; only when no v1 hierarchy carries it is v2 used.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field

from loaderdoc.system._files import Tree

CGROUP_FILE = "/proc/self/cgroup"
MOUNTINFO = "/proc/self/mountinfo"
DEFAULT_V2_MOUNT = "/sys/fs/cgroup"

_OCTAL = re.compile(r"\\([0-7]{3})")


@dataclass
class Mount:
    root: str
    mountpoint: str
    fstype: str
    source: str = ""
    super_options: list[str] = field(default_factory=list)
    options: list[str] = field(default_factory=list)


@dataclass
class Membership:
    hierarchy: str
    controllers: list[str]
    path: str


@dataclass
class Location:
    """Where one controller's files for this process live, or why that is not known."""

    controller: str
    version: int | None = None  # 1 or 2; None when the process is in no cgroup for it
    directory: str | None = None  # machine path of the process's cgroup directory
    mountpoint: str | None = None
    error: str | None = None  # why it could not be located (unknown, not "no cgroup")
    note: str = ""  # how it was located, for the reading's source

    @property
    def levels(self) -> list[str]:
        """The cgroup directory and each ancestor up to (and including) the mountpoint."""
        if not self.directory or not self.mountpoint:
            return []
        out = [self.directory]
        cur = self.directory
        top = self.mountpoint.rstrip("/") or "/"
        while cur.rstrip("/") != top and cur not in ("/", ""):
            parent = posixpath.dirname(cur.rstrip("/"))
            if len(parent) < len(top) or parent == cur:
                break
            out.append(parent)
            cur = parent
        return out


def _unescape(text: str) -> str:
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), text)


def parse_mountinfo(text: str) -> list[Mount]:
    """Parse ``/proc/self/mountinfo``; malformed lines are skipped."""
    mounts: list[Mount] = []
    for line in text.splitlines():
        fields = line.split()
        if "-" not in fields:
            continue
        sep = fields.index("-")
        if sep < 6 or len(fields) < sep + 3:
            continue
        mounts.append(
            Mount(
                root=_unescape(fields[3]),
                mountpoint=_unescape(fields[4]),
                options=fields[5].split(","),
                fstype=fields[sep + 1],
                source=_unescape(fields[sep + 2]),
                super_options=fields[sep + 3].split(",") if len(fields) > sep + 3 else [],
            )
        )
    return mounts


def parse_proc_cgroup(text: str) -> list[Membership]:
    """Parse ``/proc/self/cgroup`` ("4:memory:/docker/abc", "0::/"); bad lines are skipped."""
    out: list[Membership] = []
    for line in text.splitlines():
        parts = line.strip().split(":", 2)
        if len(parts) != 3 or not parts[0].isdigit() or not parts[2].startswith("/"):
            continue
        controllers = [c for c in parts[1].split(",") if c]
        out.append(Membership(parts[0], controllers, parts[2]))
    return out


def _map(tree: Tree, cg_path: str, mount: Mount) -> tuple[str, str]:
    """Directory of cgroup ``cg_path`` inside ``mount``, and how it was found."""
    root = mount.root.rstrip("/") or "/"
    mp = mount.mountpoint.rstrip("/") or "/"
    rel: str | None
    if root == "/":
        rel = cg_path
    elif cg_path == root:
        rel = "/"
    elif cg_path.startswith(root + "/"):
        rel = cg_path[len(root) :]
    else:
        rel = None
    if rel is not None and "/.." not in rel:
        directory = posixpath.normpath(posixpath.join(mp, rel.lstrip("/")))
        if tree.isdir(directory):
            return directory, ""
    # The process's path is outside what this mount shows (a container view): the mount's top
    # is this container's cgroup.
    return mp, f"{cg_path} is not visible under {mp}; using the mount's top"


def locate(tree: Tree, controller: str) -> Location:
    """Find the cgroup directory holding ``controller``'s files for this process."""
    cg = tree.read(CGROUP_FILE)
    if cg.missing:
        return Location(controller, note=f"{CGROUP_FILE} does not exist: no cgroups here")
    if not cg.ok:
        return Location(controller, error=cg.error)
    members = parse_proc_cgroup(cg.text or "")
    if not members:
        return Location(controller, error=f"{CGROUP_FILE}: no parsable lines")

    mi = tree.read(MOUNTINFO)
    mounts = parse_mountinfo(mi.text or "") if mi.ok else []
    cgroup_mounts = [m for m in mounts if m.fstype in ("cgroup", "cgroup2")]

    # cgroup v1: a hierarchy with this controller attached
    for member in members:
        if controller not in member.controllers:
            continue
        mount = next(
            (m for m in cgroup_mounts if m.fstype == "cgroup" and controller in m.super_options),
            None,
        )
        if mount is None:
            if mi.ok:
                return Location(
                    controller,
                    error=f"{CGROUP_FILE} lists the v1 {controller} controller but {MOUNTINFO} "
                    "shows no mount of it",
                )
            guess = Mount(
                root="/", mountpoint=f"/sys/fs/cgroup/{','.join(member.controllers)}", fstype="cgroup"
            )
            if not tree.isdir(guess.mountpoint):
                guess.mountpoint = f"/sys/fs/cgroup/{controller}"
            if not tree.isdir(guess.mountpoint):
                return Location(controller, error=mi.error or f"{MOUNTINFO} unreadable")
            mount = guess
        directory, how = _map(tree, member.path, mount)
        return Location(controller, 1, directory, mount.mountpoint, note=how)

    # cgroup v2: the unified hierarchy (hierarchy id 0, no controllers listed)
    unified = next((m for m in members if m.hierarchy == "0" and not m.controllers), None)
    if unified is None:
        return Location(
            controller,
            note=f"{CGROUP_FILE} has no {controller} controller and no cgroup v2 line",
        )
    mount = next((m for m in cgroup_mounts if m.fstype == "cgroup2"), None)
    if mount is None:
        if mi.ok:
            return Location(controller, error=f"{MOUNTINFO} shows no cgroup2 mount")
        if not tree.isdir(DEFAULT_V2_MOUNT):
            return Location(controller, error=mi.error or f"{MOUNTINFO} unreadable")
        mount = Mount(root="/", mountpoint=DEFAULT_V2_MOUNT, fstype="cgroup2")
    directory, how = _map(tree, unified.path, mount)
    return Location(controller, 2, directory, mount.mountpoint, note=how)
