"""`check --distributed` for real: ranks that never join are named after --timeout (never a hang),
and two torchrun "nodes" on this machine, node 1 in a mount namespace with a 64 MiB /dev/shm and
pinned to one core, are told apart in rank 0's report. Each test leaves no process behind."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest
from faults_support import (
    assert_nothing_left,
    fault_env,
    in_small_shm,
    loaderdoc,
    namespaces_usable,
    one_line_error,
)

pytest.importorskip("torch.distributed")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_env(rank: int, world: int, port: int, **extra: str) -> tuple[dict, str]:
    return fault_env({"RANK": str(rank), "WORLD_SIZE": str(world), "MASTER_ADDR": "127.0.0.1",
                      "MASTER_PORT": str(port), **extra})


def test_a_rank_without_rank_0_says_no_store_answered():
    env, _ = rank_env(1, 2, free_port())
    proc = loaderdoc("check", "--distributed", "--timeout", "1", env=env, timeout=60)
    one_line_error(proc, 3, "rank 1: no store answered at 127.0.0.1:", "is rank 0 running")


def _start(cmd: list[str], env: dict) -> subprocess.Popen:
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _finish(procs: list[subprocess.Popen], tag: str) -> list[tuple[int, str, str]]:
    try:
        out = [(p, *p.communicate(timeout=90)) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        assert_nothing_left(tag)
    return [(p.returncode, o, e) for p, o, e in out]


def test_ranks_and_a_node_that_never_join_are_named_after_the_timeout():
    # srun's variables: 3 tasks on 2 nodes; ranks 0 and 1 (node 0) start, rank 2 (node 1) never does
    env0, tag = fault_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "3", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
                           "SLURM_LOCALID": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port())})
    env1 = {**env0, "SLURM_PROCID": "1", "SLURM_LOCALID": "1"}
    cmd = [sys.executable, "-m", "loaderdoc", "check", "--distributed", "--timeout", "3"]
    (code0, out0, err0), (code1, out1, err1) = _finish([_start(cmd, env0), _start(cmd, env1)], tag)
    proc0 = subprocess.CompletedProcess(cmd, code0, out0, err0)
    line = one_line_error(proc0, 3, "1 of 3 ranks did not join within 3 s: rank 2", "no rank of node 1 joined")
    assert out0 == "", line
    assert (code1, out1, err1) == (3, "", "")  # rank 0 says why; the others stop quietly


def test_two_srun_tasks_on_two_nodes_gather_into_one_json_job_report():
    env0, tag = fault_env({"SLURM_PROCID": "0", "SLURM_NTASKS": "2", "SLURM_NNODES": "2", "SLURM_NODEID": "0",
                           "SLURM_LOCALID": "0", "SLURM_TASKS_PER_NODE": "1(x2)", "MASTER_ADDR": "127.0.0.1",
                           "MASTER_PORT": str(free_port())})
    env1 = {**env0, "SLURM_PROCID": "1", "SLURM_NODEID": "1"}
    cmd = [sys.executable, "-m", "loaderdoc", "check", "--distributed", "--json", "--timeout", "30"]
    (code0, out0, err0), (code1, out1, err1) = _finish([_start(cmd, env0), _start(cmd, env1)], tag)
    assert code1 == 0 and out1 == "", err1
    job = json.loads(out0)
    assert job["schema"] == "loaderdoc.job/1" and code0 == job["exit_code"], err0
    assert job["launcher"] == "slurm"
    assert [(n["node"], n["ranks"], n["node_source"]) for n in job["nodes"]] == [
        (0, [0], "SLURM_NODEID"), (1, [1], "SLURM_NODEID")]
    assert [r["rank"] for r in job["ranks"]] == [0, 1]
    assert all(r["machine"]["cpu"]["logical"]["value"] == os.cpu_count() for r in job["ranks"])


def test_two_torchrun_nodes_name_the_one_with_a_small_shm_and_one_core():
    why = namespaces_usable()
    if why:
        pytest.skip(why)
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs: node 1 is pinned to one, node 0 must have more")
    env, tag = fault_env()
    port = free_port()

    def torchrun(node: int) -> list[str]:
        return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--node-rank", str(node), "--master-addr", "127.0.0.1", "--master-port", str(port),
                "-m", "loaderdoc", "check", "--distributed", "--timeout", "30"]

    node1 = in_small_shm("64m") + ["taskset", "-c", "0"] + torchrun(1)
    (code0, out0, err0), (code1, out1, _) = _finish([_start(torchrun(0), env), _start(node1, env)], tag)
    assert "node 0" in out0 and "node 1" in out0, err0[-3000:]
    assert "node 1: /dev/shm 64 MiB where node 0 has" in out0
    assert "node 1: 1 CPU per rank where node 0 has" in out0
    assert "status: warning (exit 1)" in out0
    assert code0 != 0  # torchrun exits 1 when rank 0 reports findings (it does not pass the code on)
    assert out1 == "" and code1 == 0
