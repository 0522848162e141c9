"""A real 2-rank torchrun job under `loaderdoc watch`: one rank's dataset is slower, and the report
names that rank as the straggler (issue 16's must-show). gloo on the CPU: no GPU needed."""

from __future__ import annotations

import json
import os
import sys
import textwrap

import psutil
import pytest
from test_watch import env_with_src, split_output, watch

pytest.importorskip("torch.distributed")

TRAIN = textwrap.dedent('''
    import json, os, time
    import torch
    import torch.distributed as dist

    SLEEP_S = {{{slow_rank}: 0.008}}  # per sample; the other rank's samples cost nothing


    class Data(torch.utils.data.Dataset):
        def __init__(self, rank):
            self.delay = SLEEP_S.get(rank, 0.0)

        def __len__(self):
            return 120

        def __getitem__(self, i):
            if self.delay:
                time.sleep(self.delay)
            return torch.full((8,), float(i)), torch.tensor(float(i % 2))


    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = torch.utils.data.DataLoader(Data(rank), batch_size=4, num_workers=0)
    for _ in range(2):
        for x, y in loader:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x).squeeze(1), y).backward()  # all-reduce: ranks meet here
            opt.step()
    # one write(2) of a short line: both ranks share the pipe, and print() may split line and newline
    os.write(1, (json.dumps({{"rank": rank, "batches": 2 * len(loader)}}) + "\\n").encode())
    dist.destroy_process_group()
''')


def test_a_torchrun_job_names_the_rank_whose_data_is_slower(tmp_path):
    """Rank 1 is the slow one, with the same CPUs as rank 0: nothing but its data tells them apart.
    (Rank 0 slow and pinned to one CPU, named by its CPUs: the two-node test below.)"""
    slow_rank = 1
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(slow_rank=slow_rank), encoding="utf-8")
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    proc = watch("--json", "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
                 "--nproc-per-node", "2", str(script), env=env_with_src(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines, report = split_output(proc.stdout)
    assert sorted(line for line in lines if line.startswith('{"rank"')) == [
        '{"rank": 0, "batches": 60}', '{"rank": 1, "batches": 60}']
    # one records file per rank (the torchrun launcher iterates no DataLoader, so writes none)
    assert sorted(p["rank"] for p in report["processes"]) == [0, 1]
    ranks = {r["rank"]: r for r in report["ranks"]}
    assert sorted(ranks) == [0, 1] and all(r["steps"] == 60 for r in ranks.values())
    fast = 1 - slow_rank
    assert ranks[slow_rank]["wait_share"] > ranks[fast]["wait_share"], ranks
    found = [f for f in report["findings"] if f["rule_id"] == "watch-straggler-rank"]
    assert len(found) == 1, (ranks, proc.stderr[-3000:])
    (straggler,) = found
    assert straggler["symptom"].startswith(f"rank {slow_rank} on node ")
    assert "its CPUs, /dev/shm and workers match the others'" in straggler["symptom"]
    assert f"watch-straggler-rank: rank {slow_rank}" in proc.stderr  # the summary names it too
    assert {p.pid for p in psutil.Process().children(recursive=True)} <= before  # nothing left running


def test_two_watched_torchrun_nodes_merge_into_one_job_with_the_slow_pinned_rank_named(tmp_path):
    """Two torchrun "nodes" on this machine, each under its own `loaderdoc watch`; node 0 runs on one
    core and its rank reads slower data. `watch --merge` puts both ranks in one table and names
    rank 0 on node 0 with its one CPU (rank 0 slow: the test above has rank 1 slow)."""
    import shutil
    import socket
    import subprocess

    if len(os.sched_getaffinity(0)) < 2 or shutil.which("taskset") is None:
        pytest.skip("needs taskset and two CPUs: node 0 is pinned to one, node 1 must have more")
    script = tmp_path / "train.py"
    script.write_text(TRAIN.format(slow_rank=0), encoding="utf-8")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]

    def node(n: int) -> list[str]:
        pin = ["taskset", "-c", str(min(os.sched_getaffinity(0)))] if n == 0 else []
        return [*pin, sys.executable, "-m", "loaderdoc", "watch", "--report", str(tmp_path / f"node{n}.json"),
                "--", sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                "--node-rank", str(n), "--master-addr", "127.0.0.1", "--master-port", str(port),
                "--rdzv-conf", "timeout=60", str(script)]

    procs = [subprocess.Popen(node(n), cwd=tmp_path, env=env_with_src(), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for n in (0, 1)]
    outs = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err[-2000:] for _, err in outs]
    merged = subprocess.run([sys.executable, "-m", "loaderdoc", "watch", "--json", "--merge",
                             str(tmp_path / "node0.json"), str(tmp_path / "node1.json")],
                            capture_output=True, text=True, env=env_with_src(), timeout=60)
    assert merged.returncode == 0, merged.stderr
    report = json.loads(merged.stdout)
    assert [(r["rank"], r["node"]) for r in report["ranks"]] == [(0, "0"), (1, "1")]
    (straggler,) = [f for f in report["findings"] if f["rule_id"] == "watch-straggler-rank"]
    assert straggler["symptom"].startswith("rank 0 on node 0 "), straggler
    assert "its process may use 1 CPU where the others have" in straggler["symptom"], report["ranks"]
    assert report["ranks"][0]["cpus"] == 1
