"""The shipped recorded machines: each yields the facts a person would expect, round-trips
through JSON, and is exactly what detect() builds from its raw recording."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from loaderdoc.system.facts import DOCKER_DEFAULT_SHM, GiB, MachineFacts, MiB
from loaderdoc.system.fixtures import MACHINES_DIR, load_all, load_machine, machine_names, machine_path

sys.path.insert(0, str(Path(__file__).parent))
import system_machine_specs as specs  # noqa: E402

REQUIRED = {"ci-2core", "laptop-rtx3050", "docker-64m-shm", "k8s-4cpu-quota", "h100x8-node"}


def test_the_required_machines_are_shipped_with_labels():
    assert set(machine_names()) >= REQUIRED
    for name, facts in load_all().items():
        assert facts.label, name
        assert facts.schema_version == 1


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_json_round_trip_is_lossless(name):
    text = (MACHINES_DIR / f"{name}.json").read_text()
    facts = MachineFacts.from_json(text)
    assert facts.to_json() + "\n" == text
    assert MachineFacts.from_json(facts.to_json()) == facts


@pytest.mark.parametrize("name", sorted(specs.SPECS))
def test_shipped_json_is_what_detect_builds_from_the_recording(name, tmp_path):
    built = specs.build(name, tmp_path)
    shipped = load_machine(name)
    assert built.to_dict() == shipped.to_dict(), (
        f"stale fixture: run python tests/system_machine_specs.py --write ({name})"
    )


def test_load_machine_by_name_path_and_bad_name(tmp_path):
    assert load_machine("k8s-4cpu-quota") == load_machine(MACHINES_DIR / "k8s-4cpu-quota.json")
    assert load_machine("k8s-4cpu-quota.json").label == load_machine("k8s-4cpu-quota").label
    copy = tmp_path / "mine.json"
    copy.write_text(load_machine("ci-2core").to_json())
    assert load_machine(copy) == load_machine("ci-2core")
    assert load_machine(str(copy)) == load_machine("ci-2core")
    with pytest.raises(FileNotFoundError, match="shipped machines: ci-2core"):
        machine_path("no-such-machine")


def test_every_reading_has_a_source_and_unknowns_have_reasons():
    for name, facts in load_all().items():
        stack = [facts.to_dict()]
        while stack:
            node = stack.pop()
            if isinstance(node, dict) and set(node) == {"value", "source", "unknown"}:
                assert node["source"], (name, node)
                if node["unknown"] is not None:
                    assert node["value"] is None and node["unknown"], (name, node)
                continue
            if isinstance(node, dict):
                stack.extend(node.values())
            elif isinstance(node, list):
                stack.extend(node)


# --- what a person would expect of each machine -------------------------------------------------


def test_ci_box():
    m = load_machine("ci-2core")
    assert m.cpu.logical.value == 2 and m.cpu.budget == 2.0 and m.cpus_per_rank == 2.0
    assert m.cpu.cgroup_version.value == 1 and m.cpu.cgroup_quota.value is None
    assert m.gpu.count == 0 and m.usable_gpus == 0
    assert not m.gpu.nvml.known and m.gpu.nvml.unknown.startswith("no NVIDIA driver")
    assert (
        m.torch.installed.value is True and m.torch.cuda_build.value is None and m.torch.cudnn.value is None
    )
    assert m.limits.sharing_strategy.value == "file_descriptor"
    assert m.platform.system.value == "Linux"


def test_laptop():
    m = load_machine("laptop-rtx3050")
    assert (m.cpu.logical.value, m.cpu.physical.value) == (8, 4)
    assert m.cpu.budget == 8.0 and m.cpu.cgroup_quota.value is None and m.cpu.cgroup_version.value == 2
    assert 15 * GiB < m.memory.total.value <= 16 * GiB
    assert m.memory.cgroup_limit.value is None
    assert m.container.kind.value is None
    assert m.gpu.count == 1 and m.usable_gpus == 1
    d = m.gpu.devices[0]
    assert d.name.value == "NVIDIA GeForce RTX 3050 Laptop GPU"
    assert d.memory_total.value == 4 * GiB
    assert (d.pcie_gen_max.value, d.pcie_width_max.value) == (3, 8)
    assert d.mig_mode.value is False
    assert m.gpu.cuda_driver_version.value == "12.4" and m.torch.cuda_build.value == "12.4"
    assert m.limits.nofile_soft.value == 1024
    assert not m.shm.looks_like_docker_default


def test_docker_container_with_the_default_shm():
    m = load_machine("docker-64m-shm")
    assert m.shm.total.value == DOCKER_DEFAULT_SHM and m.shm.looks_like_docker_default
    assert m.container.kind.value == "docker" and m.container.kind.source == "/.dockerenv"
    assert m.cpu.logical.value == 16 and m.cpu.budget == 16.0 and m.cpu.cgroup_quota.value is None
    assert m.usable_gpus == 1 and m.gpu.devices[0].memory_total.value == 24 * GiB


def test_k8s_pod_budget_comes_from_the_quota():
    m = load_machine("k8s-4cpu-quota")
    assert m.cpu.logical.value == 64 and len(m.cpu.affinity.value) == 64
    assert m.cpu.cgroup_quota.value == 4.0 and m.cpu.cgroup_version.value == 2
    assert m.cpu.budget == 4.0 and m.cpu.budget_source == "cgroup quota"
    assert m.cpus_per_rank == 4.0
    assert m.memory.cgroup_limit.value == 16 * GiB
    assert m.memory.budget == 16 * GiB - m.memory.cgroup_usage.value < m.memory.available.value
    assert m.shm.total.value == 64 * MiB and m.shm.looks_like_docker_default
    assert m.container.kind.value == "kubernetes"
    assert m.usable_gpus == 0


def test_h100_node():
    m = load_machine("h100x8-node")
    assert (m.cpu.logical.value, m.cpu.physical.value, m.cpu.budget) == (224, 112, 224.0)
    assert m.memory.total.value > 1.9 * 1024 * GiB
    assert m.gpu.count == 8 and m.usable_gpus == 8 and m.gpu.total_count.value == 8
    assert m.gpu.driver_version.value == "580.95.05" and m.gpu.cuda_driver_version.value == "13.0"
    for i, d in enumerate(m.gpu.devices):
        assert d.index == i
        assert d.name.value == "NVIDIA H100 80GB HBM3"
        assert d.memory_total.value == 81559 * MiB
        assert (d.pcie_gen_current.value, d.pcie_gen_max.value, d.pcie_width_max.value) == (5, 5, 16)
        assert d.mig_mode.value is False
    assert len({d.uuid.value for d in m.gpu.devices}) == 8
    assert m.torch.version.value.startswith("2.") and "+cu12" in m.torch.version.value
    assert m.torch.cudnn.value.startswith("9.")


def test_h100_node_under_torchrun_divides_the_budget():
    m = load_machine("h100x8-node")
    from loaderdoc.system.distributed import read_distributed

    m.distributed = read_distributed(
        {"WORLD_SIZE": "16", "LOCAL_WORLD_SIZE": "8", "RANK": "9", "LOCAL_RANK": "1"}
    )
    assert m.distributed.launcher.value == "torchrun"
    assert m.cpus_per_rank == 28.0


def test_h100_node_with_fewer_visible_gpus(tmp_path):
    spec = specs.SPECS["h100x8-node"]
    spec_env = dict(spec.env)
    try:
        spec.env = {"CUDA_VISIBLE_DEVICES": "4,5"}
        m = specs.build("h100x8-node", tmp_path)
    finally:
        spec.env = spec_env
    assert [d.index for d in m.gpu.devices] == [4, 5] and m.usable_gpus == 2
    assert m.gpu.total_count.value == 8


def test_gpu_facts_without_cuda_torch_are_not_usable():
    m = load_machine("laptop-rtx3050")
    data = m.to_dict()
    data["torch"]["cuda_build"] = {"value": None, "source": "torch/version.py: cuda", "unknown": None}
    cpu_torch = MachineFacts.from_dict(json.loads(json.dumps(data)))
    assert cpu_torch.gpu.count == 1 and cpu_torch.usable_gpus == 0


def test_every_recorded_machine_fits_the_schema_a_machine_file_is_checked_against():
    # the shipped machines and the facts inside recorded probe scenarios: what a user's file is held to
    from loaderdoc.system.detect import detect
    from loaderdoc.system.machine_schema import validate_machine

    recorded = Path(__file__).parent / "support" / "recorded"
    documents = [json.loads(p.read_text()) for p in sorted(MACHINES_DIR.glob("*.json"))]
    documents += [json.loads(p.read_text())["facts"] for p in sorted(recorded.glob("*.json"))]
    documents.append(json.loads(detect().to_json()))  # and this machine, as `facts --json` records it
    assert len(documents) >= 12
    for document in documents:
        validate_machine(document)


def test_the_schema_refuses_a_wrong_type_deep_in_a_gpu():
    from loaderdoc.system.machine_schema import MachineFileError, validate_machine

    data = json.loads(machine_path("h100x8-node").read_text())
    data["gpu"]["devices"][3]["memory_total"]["value"] = "80 GB"
    with pytest.raises(MachineFileError, match=r"gpu.devices\[3\].memory_total.value: expected a whole number"):
        validate_machine(data)


def test_the_measured_h100_is_the_gpu_acceptance_run_s_own_facts():
    """h100-vm.json is `loaderdoc facts --json` as recorded on a real H100 by
    benchmarks/gpu_acceptance.py (its folder, judged against nvidia-smi, is under
    tests/fixtures/gpu_acceptance/h100-2026-11-27); only the label differs."""
    run = Path(__file__).parent / "fixtures" / "gpu_acceptance" / "h100-2026-11-27"
    recorded = json.loads((run / "facts.json").read_text())
    shipped = load_machine("h100-vm").to_dict()
    assert shipped.pop("label").endswith("(recorded live)")
    recorded.pop("label")
    assert shipped == recorded
    gpu = load_machine("h100-vm").gpu
    assert [d.name.value for d in gpu.devices] == ["NVIDIA H100 80GB HBM3"]
    assert gpu.devices[0].memory_total.value == 81559 * MiB
