"""Where this rank sits in a job, read from the launcher's environment: torchrun or srun.

torchrun sets ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``GROUP_RANK`` (the node rank) and
``GROUP_WORLD_SIZE`` (nodes), plus ``MASTER_ADDR``/``MASTER_PORT``; those win when present
(``srun torchrun ...``). Under a bare ``srun``, Slurm's ``SLURM_PROCID``, ``SLURM_NTASKS``,
``SLURM_LOCALID``, ``SLURM_NODEID`` and ``SLURM_NNODES`` stand in, and ``MASTER_ADDR`` must come
from the user's batch script (Slurm sets no rendezvous address). Nodes are told apart by these
node ranks, not by hostname: containers on different nodes often share one name.

No torch, no textual.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from loaderdoc.base.errors import UserError

DEFAULT_PORT = 29500  # torchrun's default --master-port
MAX_WORLD_SIZE = 1_000_000  # past the largest jobs run; rank 0 lists every rank, so a typo must not fill its memory
SRUN_ADDR_HINT = ("export MASTER_ADDR=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) "
                  "in the batch script before srun")


@dataclass
class Place:
    launcher: str  # "torchrun" | "slurm" | "env" (RANK/WORLD_SIZE set by hand)
    rank: int
    world_size: int
    local_rank: int | None
    node: int | None  # the node rank; None when the launcher gives none (then the hostname is used)
    node_source: str  # "GROUP_RANK" | "SLURM_NODEID" | "hostname"
    nodes: int | None  # nodes the launcher expects, when it says
    master_addr: str
    master_port: int
    agent_store: bool  # torchrun's agent on node 0 already serves the store at MASTER_ADDR:PORT
    restart: int = 0  # torchrun's restart count: keys of an earlier attempt are not this one's
    job: dict[str, str] = field(default_factory=dict)  # what tells this job from another on the same store


def job_identity(env: Mapping[str, str], launcher: str, world_size: int) -> dict[str, str]:
    """What the launcher says about which job this is: Slurm's job and step, torchrun's run id (its
    --rdzv-id), the launcher and the world size. Two jobs given one MASTER_PORT differ in at least one
    of these where the launcher sets them; a field one rank lacks is not compared (see :func:`job_conflict`)."""
    job = {"launcher": launcher, "world_size": str(world_size)}
    for name, key in (("SLURM_JOB_ID", "slurm_job"), ("SLURM_STEP_ID", "slurm_step"),
                      ("TORCHELASTIC_RUN_ID", "torchrun_run")):
        value = (env.get(name) or "").strip()
        if value:
            job[key] = value[:200]
    return job


JOB_WORDS = {"slurm_job": "SLURM job {}", "slurm_step": "Slurm step {}", "torchrun_run": "torchrun run id {!r}",
             "launcher": "launcher {}", "world_size": "a world size of {}"}


def job_conflict(mine: dict[str, str], theirs: dict[str, str]) -> str | None:
    """None when both could be one job; else what differs, in words: "SLURM job 123; this rank's: 456"."""
    differ = [k for k in JOB_WORDS if k in mine and k in theirs and mine[k] != theirs[k]]
    if not differ:
        return None
    key = differ[0]  # the job id first: it names the other job best
    mine_text = repr(mine[key]) if key == "torchrun_run" else mine[key]
    return f"{JOB_WORDS[key].format(theirs[key])}; this rank's: {mine_text}"


def _whole(env: Mapping[str, str], name: str, minimum: int = 0, maximum: int = MAX_WORLD_SIZE) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    # digits only: int() would also take '1_000' and other scripts' digits, which no launcher writes
    if not re.fullmatch(r"[+-]?[0-9]+", raw.strip()):
        raise UserError(f"--distributed: {name}={raw[:40]!r} is not a whole number")
    if len(raw.strip()) > 12:  # no int() of thousands of digits
        raise UserError(f"--distributed: {name}={raw.strip()[:20]}... is absurd; use a value up to {maximum:,}")
    value = int(raw.strip())
    if value < minimum:
        raise UserError(f"--distributed: {name}={value} is below {minimum}")
    if value > maximum:
        raise UserError(f"--distributed: {name}={value} is absurd; use a value up to {maximum:,}")
    return value


def read_place(env: Mapping[str, str]) -> Place:
    """This rank's place in the job; a one-line UserError when the environment is not a job's."""
    if env.get("RANK") is not None or env.get("WORLD_SIZE") is not None:
        launcher = "torchrun" if env.get("TORCHELASTIC_RUN_ID") or env.get("GROUP_RANK") else "env"
        rank, world = _whole(env, "RANK"), _whole(env, "WORLD_SIZE", 1)
        if rank is None or world is None:
            raise UserError("--distributed: RANK and WORLD_SIZE must both be set (torchrun sets them)")
        local, node, nodes = _whole(env, "LOCAL_RANK"), _whole(env, "GROUP_RANK"), _whole(env, "GROUP_WORLD_SIZE", 1)
        node_source = "GROUP_RANK" if node is not None else "hostname"
        hint = "torchrun sets them; a hand-made launch must export both"
    elif env.get("SLURM_PROCID") is not None:
        launcher = "slurm"
        rank = _whole(env, "SLURM_PROCID")
        world = _whole(env, "SLURM_NTASKS", 1) or _whole(env, "SLURM_STEP_NUM_TASKS", 1)
        if rank is None or world is None:
            raise UserError("--distributed: SLURM_PROCID is set but SLURM_NTASKS is not: run it with srun")
        local, node = _whole(env, "SLURM_LOCALID"), _whole(env, "SLURM_NODEID")
        nodes = _whole(env, "SLURM_STEP_NUM_NODES", 1) or _whole(env, "SLURM_NNODES", 1)
        node_source = "SLURM_NODEID" if node is not None else "hostname"
        hint = SRUN_ADDR_HINT
    else:
        raise UserError("--distributed runs inside a job: start it with torchrun (RANK, WORLD_SIZE) or srun "
                        "(SLURM_PROCID); neither is set here")
    if rank >= world:
        raise UserError(f"--distributed: rank {rank} is not below the world size {world}")
    if nodes is not None and nodes > world:
        raise UserError(f"--distributed: {nodes} nodes for {world} ranks; each node runs at least one rank")
    if node is not None and nodes is not None and node >= nodes:
        raise UserError(f"--distributed: node rank {node} is not below the number of nodes {nodes}")
    addr = (env.get("MASTER_ADDR") or "").strip()
    if not addr:
        raise UserError(f"--distributed: MASTER_ADDR is not set (the address of rank 0's node); {hint}")
    port = _whole(env, "MASTER_PORT", 1)
    if port is not None and port > 65535:
        raise UserError(f"--distributed: MASTER_PORT={port} is not a port (1-65535)")
    return Place(
        launcher=launcher, rank=rank, world_size=world, local_rank=local, node=node, node_source=node_source,
        nodes=nodes, master_addr=addr, master_port=port or DEFAULT_PORT,
        agent_store=env.get("TORCHELASTIC_USE_AGENT_STORE") == "True",
        restart=_whole(env, "TORCHELASTIC_RESTART_COUNT") or 0, job=job_identity(env, launcher, world),
    )
