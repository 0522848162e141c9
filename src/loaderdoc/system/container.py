"""Is this process in a container, and which kind?

Hints, strongest first: ``KUBERNETES_SERVICE_HOST`` in the environment (set in every pod,
whatever the runtime), ``/run/.containerenv`` (Podman), ``/.dockerenv`` (Docker), the
``container`` environment variable (systemd's convention: podman, lxc, systemd-nspawn, ...),
and the cgroup path of PID 1 (``kubepods``, ``docker``, ``libpod``, ``lxc``, ``containerd``).
No hint is a known ``None``: "not in a container, as far as these hints tell".
"""

from __future__ import annotations

from collections.abc import Mapping

from loaderdoc.system._files import Tree
from loaderdoc.system.facts import ContainerFacts, Reading

_CGROUP_HINTS = (
    ("kubepods", "kubernetes"),
    ("libpod", "podman"),
    ("docker", "docker"),
    ("lxc", "lxc"),
    ("containerd", "containerd"),
)


def read_container(tree: Tree, env: Mapping[str, str]) -> ContainerFacts:
    if env.get("KUBERNETES_SERVICE_HOST"):
        return ContainerFacts(kind=Reading.of("kubernetes", "KUBERNETES_SERVICE_HOST"))
    if tree.exists("/run/.containerenv"):
        return ContainerFacts(kind=Reading.of("podman", "/run/.containerenv"))
    if tree.exists("/.dockerenv"):
        return ContainerFacts(kind=Reading.of("docker", "/.dockerenv"))
    declared = env.get("container", "").strip()
    if declared:
        return ContainerFacts(kind=Reading.of(declared, "$container"))
    for path in ("/proc/1/cgroup", "/proc/self/cgroup"):
        t = tree.read(path)
        if t.ok:
            text = (t.text or "").lower()
            for needle, kind in _CGROUP_HINTS:
                if needle in text:
                    return ContainerFacts(kind=Reading.of(kind, f"{path} mentions {needle!r}"))
    return ContainerFacts(
        kind=Reading.of(
            None,
            "no container hints (KUBERNETES_SERVICE_HOST, /run/.containerenv, /.dockerenv, "
            "$container, /proc/1/cgroup)",
        )
    )
