"""CPU facts: counts, affinity, the cgroup CPU quota, and (when asked) model and flags.

The quota is what torch does not see: ``os.sched_getaffinity`` honours cpusets and ``taskset``
but not the CFS bandwidth limit, so a pod limited to 4 CPUs on a 64-core node is told 64.

* cgroup v2: ``cpu.max`` holds ``"<quota> <period>"`` or ``"max <period>"``.
* cgroup v1: ``cpu.cfs_quota_us`` (``-1`` = no quota) and ``cpu.cfs_period_us``.

Both are read in the process's cgroup and every ancestor up to the mount; the tightest applies.
A quota file that exists but cannot be read or parsed makes the reading unknown (a looser level
could hide a tighter one), never an exception.
"""

from __future__ import annotations

from loaderdoc.system import procfs
from loaderdoc.system._files import Tree, parse_int
from loaderdoc.system.cgroup import CGROUP_FILE, MOUNTINFO, Location, locate
from loaderdoc.system.facts import CpuFacts, Reading
from loaderdoc.system.host import Host

NOT_ASKED = "not asked (detect(cpu_info=True) reads it through py-cpuinfo, ~1 s)"


def _v2_level(tree: Tree, directory: str) -> tuple[float | None, str, str | None]:
    """(cpus or None, source, error) for one v2 cgroup directory."""
    path = f"{directory.rstrip('/')}/cpu.max"
    t = tree.read(path)
    if t.missing:
        return None, "", None
    if not t.ok:
        return None, path, t.error
    fields = (t.text or "").split()
    if not fields or len(fields) > 2:
        return None, path, f"{path}: malformed ({(t.text or '').strip()!r})"
    if fields[0] == "max":
        return None, path, None
    try:
        quota = int(fields[0])
        period = int(fields[1]) if len(fields) == 2 else 100_000
    except ValueError:
        return None, path, f"{path}: malformed ({(t.text or '').strip()!r})"
    if quota <= 0 or period <= 0:
        return None, path, f"{path}: malformed ({(t.text or '').strip()!r})"
    return quota / period, f"{path}: {quota} {period}", None


def _v1_level(tree: Tree, directory: str) -> tuple[float | None, str, str | None]:
    base = directory.rstrip("/")
    qpath, ppath = f"{base}/cpu.cfs_quota_us", f"{base}/cpu.cfs_period_us"
    q = tree.read(qpath)
    if q.missing:
        return None, "", None
    if not q.ok:
        return None, qpath, q.error
    try:
        quota = parse_int(q.text or "")
    except ValueError:
        return None, qpath, f"{qpath}: malformed ({(q.text or '').strip()!r})"
    if quota < 0:  # -1: no quota at this level
        return None, qpath, None
    if quota == 0:
        return None, qpath, f"{qpath}: malformed (0)"
    p = tree.read(ppath)
    if not p.ok:
        return None, ppath, p.error or f"{ppath} unreadable"
    try:
        period = parse_int(p.text or "")
    except ValueError:
        return None, ppath, f"{ppath}: malformed ({(p.text or '').strip()!r})"
    if period <= 0:
        return None, ppath, f"{ppath}: malformed ({period})"
    return quota / period, f"{qpath} / cpu.cfs_period_us: {quota} / {period}", None


def quota_from(tree: Tree, loc: Location) -> Reading:
    """CPUs the CFS quota allows (tightest over the cgroup and its ancestors); None = no quota."""
    if loc.error:
        return Reading.missing(loc.error, CGROUP_FILE)
    if loc.version is None or not loc.directory:
        return Reading.of(None, loc.note or f"{CGROUP_FILE}: no cpu cgroup")
    reader = _v2_level if loc.version == 2 else _v1_level
    leaf_file = "cpu.max" if loc.version == 2 else "cpu.cfs_quota_us"
    best: tuple[float, str] | None = None
    seen = []
    for level in loc.levels:
        cpus, source, error = reader(tree, level)
        if error:
            return Reading.missing(error, source)
        if source:
            seen.append(source)
        if cpus is not None and (best is None or cpus < best[0]):
            best = (cpus, source)
    if best is not None:
        return Reading.of(round(best[0], 4), best[1])
    where = f"{loc.directory.rstrip('/')}/{leaf_file}"
    if seen:
        return Reading.of(None, f"{where}: no quota (checked {len(seen)} level(s) up to {loc.mountpoint})")
    return Reading.of(None, f"{where}: no quota file (CPU bandwidth control not enabled here)")


def cgroup_cpu(tree: Tree) -> tuple[Reading, Reading]:
    """(quota, version) readings for this process's cpu controller."""
    try:
        loc = locate(tree, "cpu")
    except Exception as exc:  # pragma: no cover - belt and braces: readers never raise
        bad = Reading.missing(f"locating the cpu cgroup failed: {type(exc).__name__}: {exc}", CGROUP_FILE)
        return bad, bad
    if loc.error:
        return Reading.missing(loc.error, CGROUP_FILE), Reading.missing(loc.error, CGROUP_FILE)
    if loc.version is None:
        source = loc.note or CGROUP_FILE
        return Reading.of(None, source), Reading.of(None, source)
    label = "v1 cpu controller" if loc.version == 1 else "v2 unified hierarchy"
    version = Reading.of(loc.version, f"{CGROUP_FILE} + {MOUNTINFO}: {label} at {loc.mountpoint}")
    return quota_from(tree, loc), version


def read_cpu(tree: Tree, host: Host, cpu_info: bool = False) -> CpuFacts:
    facts = CpuFacts()
    facts.logical = host.cpu_count()
    facts.physical = host.physical_cores()
    facts.affinity = host.affinity()
    facts.cgroup_quota, facts.cgroup_version = cgroup_cpu(tree)
    if cpu_info:
        facts.model, facts.flags = _py_cpuinfo()
    else:
        facts.model = procfs.cpu_model(tree)
        facts.flags = Reading.missing(NOT_ASKED, "cpuinfo.get_cpu_info()")
        if not facts.model.known:
            facts.model = Reading.missing(f"{NOT_ASKED}; {facts.model.unknown}", facts.model.source)
    return facts


def _py_cpuinfo() -> tuple[Reading, Reading]:
    source = "cpuinfo.get_cpu_info()"
    try:
        import cpuinfo  # py-cpuinfo; slow (~1 s), so only when asked
    except ImportError:
        bad = Reading.missing("py-cpuinfo is not installed", source)
        return bad, bad
    try:
        info = cpuinfo.get_cpu_info() or {}
    except Exception as exc:  # py-cpuinfo probes many OS-specific sources
        bad = Reading.missing(f"{source}: {type(exc).__name__}: {exc}", source)
        return bad, bad
    brand = info.get("brand_raw") or info.get("brand")
    flags = info.get("flags")
    model = (
        Reading.of(brand, f"{source}['brand_raw']")
        if brand
        else Reading.missing("py-cpuinfo found no brand", source)
    )
    flag_reading = (
        Reading.of(sorted(str(f) for f in flags), f"{source}['flags']")
        if isinstance(flags, list)
        else Reading.missing("py-cpuinfo found no flags", source)
    )
    return model, flag_reading
