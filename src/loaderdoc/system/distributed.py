"""Distributed launch context from the environment: torchrun or Slurm.

torchrun (and anything following torch.distributed's ``env://`` convention) sets ``WORLD_SIZE``,
``RANK``, ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` in every rank it starts; those win when present
(``srun torchrun ...`` runs torchrun inside a Slurm task). Otherwise Slurm's per-task variables
are read: ``SLURM_NTASKS`` (world), ``SLURM_PROCID`` (rank), ``SLURM_LOCALID`` (local rank) and
tasks on this node from ``SLURM_NTASKS_PER_NODE`` or ``SLURM_TASKS_PER_NODE`` (``"4(x2),2"``
indexed by ``SLURM_NODEID``).

``SLURM_CPUS_PER_TASK`` is kept as :attr:`DistributedFacts.cpus_per_task`: it caps the CPUs of the
task and, when Slurm itself started the ranks, it is already the per-rank share (the affinity of
a task usually shows the same CPUs), so :attr:`MachineFacts.cpus_per_rank` does not divide it
again. Note that inside an ``sbatch`` script outside ``srun`` the Slurm variables describe the
allocation, not this process.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from loaderdoc.system.facts import DistributedFacts, Reading

_TORCHRUN_MARKERS = ("TORCHELASTIC_RUN_ID", "LOCAL_WORLD_SIZE", "WORLD_SIZE")
_SLURM_MARKERS = ("SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS")


def _int(env: Mapping[str, str], name: str, minimum: int = 0) -> Reading:
    raw = env.get(name)
    if raw is None:
        return Reading.of(None, f"{name} is not set")
    try:
        value = int(raw.strip())
    except ValueError:
        return Reading.missing(f"{name}={raw!r} is not a whole number", name)
    if value < minimum:
        return Reading.missing(f"{name}={value} is below {minimum}", name)
    return Reading.of(value, name)


def expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed list "2(x3),1" -> [2, 2, 2, 1]; raises ValueError when malformed."""
    out: list[int] = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d+)\s*(?:\(x(\d+)\))?\s*", part)
        if not m:
            raise ValueError(f"bad element {part!r}")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def _slurm_local_world(env: Mapping[str, str]) -> Reading:
    per_node = _int(env, "SLURM_NTASKS_PER_NODE", 1)
    if per_node.get() is not None or not per_node.known:
        return per_node
    for name in ("SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"):
        raw = env.get(name)
        if raw is None:
            continue
        try:
            counts = expand_tasks_per_node(raw)
        except ValueError as exc:
            return Reading.missing(f"{name}={raw!r}: {exc}", name)
        node = _int(env, "SLURM_NODEID").get(0) or 0
        if node >= len(counts):
            return Reading.missing(f"{name}={raw!r} has no entry for SLURM_NODEID={node}", name)
        return Reading.of(counts[node], f"{name}[SLURM_NODEID={node}]")
    return Reading.missing("Slurm sets no tasks-per-node variable here", "SLURM_TASKS_PER_NODE")


def read_distributed(env: Mapping[str, str]) -> DistributedFacts:
    facts = DistributedFacts(cpus_per_task=_int(env, "SLURM_CPUS_PER_TASK", 1))
    if any(env.get(k) is not None for k in _TORCHRUN_MARKERS):
        marker = next(k for k in _TORCHRUN_MARKERS if env.get(k) is not None)
        facts.launcher = Reading.of("torchrun", marker)
        facts.world_size = _int(env, "WORLD_SIZE", 1)
        facts.rank = _int(env, "RANK")
        facts.local_rank = _int(env, "LOCAL_RANK")
        facts.local_world_size = _int(env, "LOCAL_WORLD_SIZE", 1)
        if facts.local_world_size.known and facts.local_world_size.value is None:
            facts.local_world_size = Reading.missing(
                "WORLD_SIZE is set but LOCAL_WORLD_SIZE is not: ranks on this node unknown",
                "LOCAL_WORLD_SIZE",
            )
        return facts
    if any(env.get(k) is not None for k in _SLURM_MARKERS):
        marker = next(k for k in _SLURM_MARKERS if env.get(k) is not None)
        facts.launcher = Reading.of("slurm", marker)
        world = _int(env, "SLURM_NTASKS", 1)
        if world.known and world.value is None:
            world = _int(env, "SLURM_STEP_NUM_TASKS", 1)
        facts.world_size = world
        facts.rank = _int(env, "SLURM_PROCID")
        facts.local_rank = _int(env, "SLURM_LOCALID")
        facts.local_world_size = _slurm_local_world(env)
        return facts
    not_set = "no launcher variables (WORLD_SIZE, LOCAL_WORLD_SIZE, SLURM_PROCID, ...)"
    facts.launcher = Reading.of(None, not_set)
    facts.world_size = Reading.of(None, "WORLD_SIZE is not set")
    facts.local_world_size = Reading.of(None, "LOCAL_WORLD_SIZE is not set")
    facts.rank = Reading.of(None, "RANK is not set")
    facts.local_rank = Reading.of(None, "LOCAL_RANK is not set")
    return facts
