"""Memory facts: RAM and swap (``/proc/meminfo`` or psutil) and the cgroup memory limit.

* cgroup v2: ``memory.max`` (``max`` = unlimited) and ``memory.current``.
* cgroup v1: ``memory.limit_in_bytes`` (a huge page-aligned number such as
  9223372036854771712 means unlimited) and ``memory.usage_in_bytes``.

Every level from the process's cgroup up to the mount is read; the level with the least headroom
(limit - usage) binds, and its limit and usage are reported so that ``MemoryFacts.budget`` is the
real headroom. The OOM killer acts on the limit, not on what ``free`` shows.
"""

from __future__ import annotations

from loaderdoc.system._files import Tree, parse_int
from loaderdoc.system.cgroup import CGROUP_FILE, locate
from loaderdoc.system.facts import MemoryFacts, Reading
from loaderdoc.system.host import Host

# v1 reports "no limit" as PAGE_COUNTER_MAX pages (2**63 - page size on 64-bit); anything this
# large is unlimited.
UNLIMITED_THRESHOLD = 1 << 62


def _read_bytes(tree: Tree, path: str, allow_max: bool) -> tuple[int | None, bool, str | None]:
    """(value, present, error). value None + present = unlimited."""
    t = tree.read(path)
    if t.missing:
        return None, False, None
    if not t.ok:
        return None, True, t.error
    text = (t.text or "").strip()
    if allow_max and text == "max":
        return None, True, None
    try:
        value = parse_int(text)
    except ValueError:
        return None, True, f"{path}: malformed ({text[:40]!r})"
    if value < 0:
        return None, True, f"{path}: malformed ({value})"
    if value >= UNLIMITED_THRESHOLD:
        return None, True, None
    return value, True, None


def cgroup_memory(tree: Tree) -> tuple[Reading, Reading]:
    """(limit, usage) readings; a limit of None means unlimited."""
    try:
        loc = locate(tree, "memory")
    except Exception as exc:  # pragma: no cover - belt and braces
        bad = Reading.missing(f"locating the memory cgroup failed: {type(exc).__name__}: {exc}", CGROUP_FILE)
        return bad, bad
    if loc.error:
        return Reading.missing(loc.error, CGROUP_FILE), Reading.missing(loc.error, CGROUP_FILE)
    if loc.version is None or not loc.directory:
        note = loc.note or f"{CGROUP_FILE}: no memory cgroup"
        return Reading.of(None, note), Reading.of(None, note)
    if loc.version == 2:
        limit_leaf, usage_leaf, allow_max = "memory.max", "memory.current", True
    else:
        limit_leaf, usage_leaf, allow_max = "memory.limit_in_bytes", "memory.usage_in_bytes", False

    binding: tuple[int, int, str, Reading] | None = None  # (headroom, limit, limit source, usage)
    leaf_usage: Reading | None = None
    for level in loc.levels:
        base = level.rstrip("/")
        limit_path, usage_path = f"{base}/{limit_leaf}", f"{base}/{usage_leaf}"
        limit, present, error = _read_bytes(tree, limit_path, allow_max)
        if error:
            return Reading.missing(error, limit_path), Reading.missing(error, limit_path)
        usage_value, usage_present, usage_error = _read_bytes(tree, usage_path, False)
        if usage_error or not usage_present or usage_value is None:
            usage = Reading.missing(usage_error or f"{usage_path} does not exist", usage_path)
        else:
            usage = Reading.of(usage_value, usage_path)
        if leaf_usage is None and (usage.known or level == loc.directory):
            leaf_usage = usage
        if present and limit is not None:
            headroom = limit - (usage.get() or 0)
            if binding is None or headroom < binding[0]:
                binding = (headroom, limit, limit_path, usage)
    if binding is not None:
        _, limit, source, usage = binding
        return Reading.of(limit, source), usage
    where = f"{loc.directory.rstrip('/')}/{limit_leaf}"
    return Reading.of(None, f"{where}: unlimited (up to {loc.mountpoint})"), (
        leaf_usage or Reading.missing(f"no {usage_leaf}", where)
    )


def read_memory(tree: Tree, host: Host) -> MemoryFacts:
    info = host.memory()
    facts = MemoryFacts(
        total=info.get("total", Reading.missing("not reported")),
        available=info.get("available", Reading.missing("not reported")),
        swap_total=info.get("swap_total", Reading.missing("not reported")),
        swap_free=info.get("swap_free", Reading.missing("not reported")),
    )
    facts.cgroup_limit, facts.cgroup_usage = cgroup_memory(tree)
    return facts
