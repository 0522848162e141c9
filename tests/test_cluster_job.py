"""The job report from hand-built facts of several nodes: grouping by node rank, the odd node out,
each node's own findings once, the exit status, the JSON and the 80-column table. No torch."""

from __future__ import annotations

import json

import pytest

from loaderdoc.advice.findings import Finding
from loaderdoc.base._serde import to_dict
from loaderdoc.base.errors import UserError
from loaderdoc.cluster.job import RankEntry, build_job_report
from loaderdoc.cluster.job_file import job_report_from
from loaderdoc.cluster.job_report import JOB_SCHEMA
from loaderdoc.cluster.launch import read_place
from loaderdoc.system.facts import GiB, GpuDevice, MachineFacts, MiB, Reading
from loaderdoc.text.job import render_text


def machine(*, cpus=8, ranks_here=1, shm=16 * GiB, shm_free=None, nofile=65536, driver="550.54",
            gpu="NVIDIA H100 80GB HBM3", torch="2.5.1+cu124", cuda="12.4", ram=512 * GiB, width=16) -> MachineFacts:
    f = MachineFacts()
    r = Reading.of
    f.cpu.logical, f.cpu.affinity, f.cpu.cgroup_quota = r(64, "t"), r(list(range(cpus)), "t"), r(None, "t")
    f.memory.total, f.memory.available, f.memory.cgroup_limit = r(ram, "t"), r(ram // 2, "t"), r(None, "t")
    f.shm.total, f.shm.free = r(shm, "t"), r(shm if shm_free is None else shm_free, "t")
    f.limits.nofile_soft = r(nofile, "t")
    f.gpu.nvml, f.gpu.driver_version = r(True, "t"), r(driver, "t")
    f.gpu.devices = [GpuDevice(index=0, name=r(gpu, "t"), pcie_gen_current=r(4, "t"), pcie_width_current=r(width, "t"))]
    f.torch.installed, f.torch.version, f.torch.cuda_build = r(True, "t"), r(torch, "t"), r(cuda, "t")
    f.distributed.launcher, f.distributed.local_world_size = r("torchrun", "t"), r(ranks_here, "t")
    return f


def entry(rank, node, facts, findings=(), host="container"):
    check = {"status": "ok", "findings": [to_dict(f) for f in findings], "machine": facts.to_dict()}
    return RankEntry(rank, node, "GROUP_RANK", 0, host, check)


def built(*machines, **kw):
    """One rank per node, node i gets machines[i]."""
    return build_job_report([entry(i, i, m) for i, m in enumerate(machines)], launcher="torchrun", **kw)


def job(*machines, **kw):
    """The same job's JSON document, as `check --distributed --json` prints it."""
    return built(*machines, **kw).to_json()


def table(doc):
    """The job table of a JSON document, read back as the app reads a report."""
    return job_report_from(doc, "job.json").table


def symptoms(report):
    return [f["symptom"] for f in report["findings"]]


def test_identical_nodes_have_no_findings_and_exit_0():
    report = job(machine(), machine(), machine(), machine())
    assert report["schema"] == JOB_SCHEMA
    assert [n["node"] for n in report["nodes"]] == [0, 1, 2, 3]
    assert report["findings"] == [] and (report["status"], report["exit_code"]) == ("ok", 0)


def test_the_node_with_dockers_shm_is_named_once_with_the_fix():
    report = job(machine(), machine(), machine(shm=64 * MiB), machine())
    assert symptoms(report) == ["node 2: /dev/shm 64 MiB where the others have 16 GiB"]
    (f,) = report["findings"]
    assert f["rule_id"] == "job-shm_size" and "--shm-size" in f["fix"]
    assert "node 2 (rank 2): 64 MiB" in f["evidence"]
    assert [n["status"] for n in report["nodes"]] == ["ok", "ok", "warning", "ok"]
    assert report["exit_code"] == 1


def test_fewer_cpus_per_rank_names_the_node_and_both_counts():
    report = job(machine(cpus=8), machine(cpus=2), machine(cpus=8))
    assert symptoms(report) == ["node 1: 2 CPUs per rank where the others have 8 CPUs"]
    two = job(machine(cpus=2), machine(cpus=1))
    assert symptoms(two) == ["node 1: 1 CPU per rank where node 0 has 2 CPUs"]


def test_free_memory_noise_and_small_size_differences_are_not_findings():
    report = job(machine(shm_free=15 * GiB), machine(shm_free=11 * GiB), machine(ram=503 * GiB), machine())
    assert report["findings"] == []


def test_a_full_shm_on_a_node_of_the_same_size_is_named():
    report = job(machine(), machine(shm_free=1 * GiB), machine())
    assert symptoms(report) == ["node 1: 1 GiB free in /dev/shm where the others have 16 GiB"]


def test_a_different_build_is_named_against_the_majority_and_a_tie_lists_every_node():
    report = job(machine(), machine(), machine(driver="535.104", torch="2.4.0+cu121", cuda="12.1"))
    assert symptoms(report) == [
        "node 2: driver 535.104 where the others have 550.54",
        "node 2: torch 2.4.0+cu121 where the others have 2.5.1+cu124",
        "node 2: torch build CUDA 12.1 where the others have CUDA 12.4",
    ]
    tie = job(machine(gpu="NVIDIA A100-SXM4-80GB"), machine())
    assert symptoms(tie) == ["no two nodes agree: node 0: GPUs 1x A100-SXM4-80GB; node 1: GPUs 1x H100 80GB HBM3"]
    # the fields each node is odd on, for the app's marks; in a tie every node is
    assert [n["odd"] for n in report["nodes"]] == [[], [], ["driver", "torch", "cuda_build"]]
    assert [n["odd"] for n in tie["nodes"]] == [["gpus"], ["gpus"]]
    for doc in (report, tie):  # a report written before "odd" reads the same marks from its findings
        marks = table(doc).odd
        for node in doc["nodes"]:
            del node["odd"]
        assert table(doc).odd == marks
    assert table(report).odd == {("driver", 2), ("torch", 2), ("cuda_build", 2)}


def test_lower_open_file_limit_and_narrower_pcie_link():
    report = job(machine(nofile=None), machine(nofile=1024), machine(nofile=None), machine(width=8))
    assert symptoms(report) == [
        "node 1: an open-file limit of 1024 where the others have unlimited",
        "node 3: an open-file limit of 65536 where the others have unlimited",
        "node 3: PCIe link x8 where the others have x16",
    ]


def test_nodes_are_told_apart_by_node_rank_not_hostname_and_the_worst_rank_counts():
    # four ranks, two per node, every container called "container"; rank 3 is pinned to fewer CPUs
    entries = [entry(0, 0, machine()), entry(1, 0, machine()), entry(2, 1, machine()), entry(3, 1, machine(cpus=2))]
    report = build_job_report(entries, launcher="torchrun").to_json()
    assert [(n["node"], n["ranks"], n["hostnames"]) for n in report["nodes"]] == [
        (0, [0, 1], ["container"]), (1, [2, 3], ["container"])]
    assert report["nodes"][1]["cells"]["cpus_per_rank"] == "2"
    assert symptoms(report) == ["node 1: 2 CPUs per rank where node 0 has 8 CPUs"]
    by_host = build_job_report([entry(0, None, machine(), host="a"), entry(1, None, machine(), host="b")]).to_json()
    assert [n["node"] for n in by_host["nodes"]] == ["a", "b"]


def test_each_ranks_own_findings_appear_once_naming_the_nodes_and_set_the_exit_code():
    everywhere = Finding("pin-memory-no-gpu", "warning", "pin_memory=True without a GPU")
    crash = Finding("shm-too-small", "critical", "/dev/shm is only 64 MiB")
    entries = [entry(0, 0, machine(), [everywhere]), entry(1, 0, machine(), [everywhere]),
               entry(2, 1, machine(), [everywhere, crash]), entry(3, 1, machine(), [everywhere, crash])]
    report = build_job_report(entries).to_json()
    assert symptoms(report) == ["all nodes: pin_memory=True without a GPU", "node 1: /dev/shm is only 64 MiB"]
    assert (report["status"], report["exit_code"]) == ("critical", 2)
    assert [n["status"] for n in report["nodes"]] == ["warning", "critical"]


def test_the_json_is_plain_json_with_every_rank():
    report = job(machine(nofile=None), machine(nofile=1024))
    text = json.dumps(report, allow_nan=False)  # no Infinity for "unlimited"
    back = json.loads(text)
    assert [r["rank"] for r in back["ranks"]] == [0, 1]
    assert MachineFacts.from_dict(back["ranks"][1]["machine"]).limits.nofile_soft.value == 1024


def test_the_report_read_back_is_the_report_built():
    everywhere = Finding("pin-memory-no-gpu", "warning", "pin_memory=True without a GPU")
    store = {"address": "10.0.0.1:29500", "served_by": "rank 0", "listens_on": "10.0.0.1", "note": ""}
    report = build_job_report([entry(0, 0, machine(), [everywhere]), entry(1, 1, machine(shm=64 * MiB))],
                              launcher="torchrun", store=store)
    doc = report.to_json()
    back = job_report_from(json.loads(json.dumps(doc)), "job.json")
    assert back.to_json() == doc and list(doc)[-1] == "store"
    assert (back.status, back.exit_code, back.table, back.findings) == (
        report.status, report.exit_code, report.table, report.findings)
    assert (doc["status"], doc["exit_code"]) == ("warning", 1)


def test_the_text_table_fits_80_columns_with_one_column_per_node(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")
    report = built(*[machine() for _ in range(7)], machine(shm=64 * MiB))
    text = render_text(report)
    table = text[:text.index("Findings:")].splitlines()
    assert max(len(line) for line in table) <= 80
    assert "One column per node" in text
    for n in range(8):
        assert f"node {n}" in text
    assert "node 7: /dev/shm 64 MiB where the others have 16 GiB" in text
    assert "status: warning (exit 1)" in text


TORCHRUN = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2",
            "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400", "TORCHELASTIC_RUN_ID": "x",
            "TORCHELASTIC_USE_AGENT_STORE": "True"}
SRUN = {"SLURM_PROCID": "5", "SLURM_NTASKS": "8", "SLURM_LOCALID": "1", "SLURM_NODEID": "2", "SLURM_NNODES": "4",
        "MASTER_ADDR": "node001"}


def test_place_from_torchrun_and_srun():
    p = read_place(TORCHRUN)
    assert (p.launcher, p.rank, p.world_size, p.node, p.node_source, p.nodes, p.agent_store) == (
        "torchrun", 3, 4, 1, "GROUP_RANK", 2, True)
    s = read_place(SRUN)
    assert (s.launcher, s.rank, s.world_size, s.node, s.node_source, s.nodes, s.master_port) == (
        "slurm", 5, 8, 2, "SLURM_NODEID", 4, 29500)


@pytest.mark.parametrize("env, needle", [
    ({}, "start it with torchrun"),
    ({k: v for k, v in SRUN.items() if k != "MASTER_ADDR"}, "MASTER_ADDR is not set"),
    ({**TORCHRUN, "RANK": "4"}, "rank 4 is not below the world size 4"),
    ({**TORCHRUN, "MASTER_PORT": "http"}, "MASTER_PORT='http'"),
])
def test_place_errors_are_one_line(env, needle):
    with pytest.raises(UserError, match=needle) as err:
        read_place(env)
    assert "\n" not in str(err.value)
