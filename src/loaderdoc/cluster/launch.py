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

from collections.abc import Mapping
from dataclasses import dataclass

from loaderdoc.errors import UserError

DEFAULT_PORT = 29500  # torchrun's default --master-port
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


def _whole(env: Mapping[str, str], name: str, minimum: int = 0) -> int | None:
    raw = env.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw.strip())
    except ValueError:
        raise UserError(f"--distributed: {name}={raw!r} is not a whole number") from None
    if value < minimum:
        raise UserError(f"--distributed: {name}={value} is below {minimum}")
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
        restart=_whole(env, "TORCHELASTIC_RESTART_COUNT") or 0,
    )
