"""cgroup v1/v2 readers on recorded trees (tests/fixtures/cgroup), including broken ones."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.fake_nvml import FakeNvml

from loaderdoc.system._files import Tree
from loaderdoc.system.cgroup import locate, parse_mountinfo, parse_proc_cgroup
from loaderdoc.system.cpu import cgroup_cpu
from loaderdoc.system.detect import detect
from loaderdoc.system.facts import GiB, MiB
from loaderdoc.system.memory import cgroup_memory
from loaderdoc.system.shm import mount_size

TREES = Path(__file__).parent / "fixtures" / "cgroup"
K8S_POD = "kubepods-burstable-pod1b2c3d4e_5f6a_4b7c_8d9e_0f1a2b3c4d5e.slice"


def tree(name: str) -> Tree:
    return Tree(TREES / name)


@pytest.fixture
def copy_tree(tmp_path):
    """A writable copy of a recorded tree, to break on purpose."""

    def make(name: str) -> Path:
        dest = tmp_path / name
        shutil.copytree(TREES / name, dest)
        return dest

    return make


# --- the recorded trees -------------------------------------------------------------------------


def test_v1_ci_box_recorded_live_has_no_quota_and_no_limit():
    quota, version = cgroup_cpu(tree("v1-ci-box"))
    assert version.value == 1 and "v1 cpu controller at /sys/fs/cgroup/cpu" in version.source
    assert quota.known and quota.value is None
    assert "cpu.cfs_quota_us" in quota.source
    limit, usage = cgroup_memory(tree("v1-ci-box"))
    # 9223372036854771712 is v1's "unlimited"
    assert limit.known and limit.value is None and "unlimited" in limit.source
    assert usage.get() > 0 and "process_api" in usage.source


def test_v1_docker_quota_without_cgroup_namespace():
    t = tree("v1-docker-quota")
    loc = locate(t, "cpu")
    # /proc/self/cgroup says /docker/<id>, the mount's root is that path: the mount top is it
    assert loc.version == 1 and loc.directory == "/sys/fs/cgroup/cpu,cpuacct"
    quota, version = cgroup_cpu(t)
    assert quota.value == 1.5 and version.value == 1
    assert quota.source == "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us / cpu.cfs_period_us: 150000 / 100000"
    limit, usage = cgroup_memory(t)
    assert limit.value == 2 * GiB and usage.value == 100 * MiB


def test_v2_k8s_pod_quota_comes_from_an_ancestor_and_memory_from_the_leaf():
    t = tree("v2-k8s-pod")
    loc = locate(t, "cpu")
    assert loc.version == 2 and loc.directory.endswith(".scope")
    assert len(loc.levels) == 5 and loc.levels[-1] == "/sys/fs/cgroup"
    quota, version = cgroup_cpu(t)
    assert quota.value == 4.0 and version.value == 2
    assert K8S_POD in quota.source and quota.source.endswith("cpu.max: 400000 100000")
    limit, usage = cgroup_memory(t)
    # the container's 8 GiB leaves less headroom than the pod's 16 GiB
    assert limit.value == 8 * GiB and limit.source.endswith(".scope/memory.max")
    assert usage.value == 1288490188


def test_v2_docker_with_cgroup_namespace():
    t = tree("v2-docker-cgroupns")
    quota, version = cgroup_cpu(t)
    assert (quota.value, version.value) == (2.5, 2)
    limit, usage = cgroup_memory(t)
    assert limit.known and limit.value is None and usage.value == 50 * MiB
    assert mount_size(t).value == 64 * MiB


@pytest.mark.parametrize(
    "name, logical_quota, limit",
    [
        ("v1-ci-box", None, None),
        ("v1-docker-quota", 1.5, 2 * GiB),
        ("v2-k8s-pod", 4.0, 8 * GiB),
        ("v2-docker-cgroupns", 2.5, None),
    ],
)
def test_detect_on_each_tree_never_raises(name, logical_quota, limit):
    facts = detect(TREES / name, env={}, nvml=FakeNvml.no_library())
    assert facts.cpu.cgroup_quota.value == logical_quota
    assert facts.memory.cgroup_limit.value == limit
    assert facts.container.kind.value in ("docker", "kubernetes")


def test_detect_on_the_recorded_ci_box_matches_the_machine():
    facts = detect(TREES / "v1-ci-box", env={}, nvml=FakeNvml.no_library())
    assert facts.cpu.logical.value == 2 and facts.cpu.physical.value == 2
    assert facts.cpu.affinity.value == [0, 1]
    assert facts.cpu.budget == 2.0
    assert facts.cpu.cgroup_version.value == 1
    assert facts.container.kind.value == "docker"
    assert facts.limits.nofile_soft.value == 20000
    assert facts.memory.total.get() > GiB
    assert facts.shm.total.get() > 64 * MiB and not facts.shm.looks_like_docker_default
    assert facts.torch.installed.value is True and facts.torch.cuda_build.value is None
    assert facts.gpu.count == 0 and "no NVIDIA driver" in facts.gpu.nvml.unknown


# --- broken trees: unknown with a reason, never an exception ------------------------------------


@pytest.mark.parametrize(
    "content", ["lots of cpus\n", "\n", "400000 100000 7\n", "-5 100000\n", "400000 0\n", "max max max\n"]
)
def test_malformed_cpu_max_is_unknown_with_the_file_named(copy_tree, content):
    root = copy_tree("v2-docker-cgroupns")
    (root / "sys/fs/cgroup/cpu.max").write_text(content)
    quota, version = cgroup_cpu(Tree(root))
    assert not quota.known and "cpu.max" in quota.unknown and "malformed" in quota.unknown
    assert version.value == 2
    facts = detect(root, env={}, nvml=FakeNvml.no_library())
    assert not facts.cpu.cgroup_quota.known


def test_malformed_ancestor_quota_makes_the_reading_unknown(copy_tree):
    root = copy_tree("v2-k8s-pod")
    pod_max = next(root.glob(f"sys/fs/cgroup/kubepods.slice/kubepods-burstable.slice/{K8S_POD}/cpu.max"))
    pod_max.write_text("four cpus\n")
    quota, _ = cgroup_cpu(Tree(root))
    assert not quota.known and K8S_POD in quota.unknown


@pytest.mark.parametrize(
    "quota_text, period_text, why",
    [
        ("abc\n", "100000\n", "malformed"),
        ("", "100000\n", "malformed"),
        ("150000\n", "zero\n", "malformed"),
        ("0\n", "100000\n", "malformed"),
    ],
)
def test_malformed_v1_cfs_files(copy_tree, quota_text, period_text, why):
    root = copy_tree("v1-docker-quota")
    (root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us").write_text(quota_text)
    (root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us").write_text(period_text)
    quota, _ = cgroup_cpu(Tree(root))
    assert not quota.known and why in quota.unknown


def test_v1_quota_without_period_file(copy_tree):
    root = copy_tree("v1-docker-quota")
    (root / "sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us").unlink()
    quota, _ = cgroup_cpu(Tree(root))
    assert not quota.known and "cpu.cfs_period_us does not exist" in quota.unknown


def test_unreadable_quota_file_is_unknown(copy_tree):
    # root can read any file, so make the path unreadable as a file: a directory
    root = copy_tree("v2-docker-cgroupns")
    (root / "sys/fs/cgroup/cpu.max").unlink()
    (root / "sys/fs/cgroup/cpu.max").mkdir()
    quota, _ = cgroup_cpu(Tree(root))
    assert not quota.known and "is a directory" in quota.unknown


def test_unreadable_file_via_permission_error(copy_tree, monkeypatch):
    root = copy_tree("v2-docker-cgroupns")
    real_open = open

    def fake_open(path, *args, **kwargs):
        if str(path).endswith("memory.max"):
            raise PermissionError(13, "Permission denied")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr("builtins.open", fake_open)
    limit, usage = cgroup_memory(Tree(root))
    assert not limit.known and "permission denied" in limit.unknown


@pytest.mark.parametrize("content", ["12GB\n", "-1\n", "\n"])
def test_malformed_memory_max(copy_tree, content):
    root = copy_tree("v2-docker-cgroupns")
    (root / "sys/fs/cgroup/memory.max").write_text(content)
    limit, _ = cgroup_memory(Tree(root))
    assert not limit.known and "memory.max" in limit.unknown


def test_malformed_v1_memory_limit(copy_tree):
    root = copy_tree("v1-docker-quota")
    (root / "sys/fs/cgroup/memory/memory.limit_in_bytes").write_text("lots\n")
    limit, usage = cgroup_memory(Tree(root))
    assert not limit.known and "memory.limit_in_bytes" in limit.unknown


def test_garbage_proc_self_cgroup(copy_tree):
    root = copy_tree("v2-docker-cgroupns")
    (root / "proc/self/cgroup").write_text("this is not a cgroup file\n")
    quota, version = cgroup_cpu(Tree(root))
    assert not quota.known and not version.known and "no parsable lines" in quota.unknown
    facts = detect(root, env={}, nvml=FakeNvml.no_library())
    assert facts.cpu.budget_source in ("logical", "affinity", "unknown")


def test_missing_proc_self_cgroup_means_no_cgroups(copy_tree):
    root = copy_tree("v2-docker-cgroupns")
    (root / "proc/self/cgroup").unlink()
    quota, version = cgroup_cpu(Tree(root))
    assert quota.known and quota.value is None and version.known and version.value is None


def test_missing_mountinfo_falls_back_to_the_standard_mount(copy_tree):
    root = copy_tree("v2-docker-cgroupns")
    (root / "proc/self/mountinfo").unlink()
    quota, version = cgroup_cpu(Tree(root))
    assert (quota.value, version.value) == (2.5, 2)


def test_v1_controller_listed_but_not_mounted(copy_tree):
    root = copy_tree("v1-docker-quota")
    text = (root / "proc/self/mountinfo").read_text()
    (root / "proc/self/mountinfo").write_text(
        "\n".join(line for line in text.splitlines() if "cpu,cpuacct" not in line) + "\n"
    )
    quota, version = cgroup_cpu(Tree(root))
    assert not quota.known and "shows no mount" in quota.unknown


def test_cgroup_path_not_visible_uses_the_mount_top(copy_tree):
    # a host-view path that does not exist inside this container's cgroup mount
    root = copy_tree("v2-docker-cgroupns")
    (root / "proc/self/cgroup").write_text("0::/system.slice/docker-abc.scope\n")
    loc = locate(Tree(root), "cpu")
    assert loc.directory == "/sys/fs/cgroup" and "not visible" in loc.note
    quota, _ = cgroup_cpu(Tree(root))
    assert quota.value == 2.5


def test_cgroup_namespace_escape_path(copy_tree):
    root = copy_tree("v2-docker-cgroupns")
    (root / "proc/self/cgroup").write_text("0::/../../user.slice\n")
    quota, _ = cgroup_cpu(Tree(root))
    assert quota.value == 2.5


def test_v2_without_cpu_controller_has_no_quota(copy_tree):
    root = copy_tree("v2-docker-cgroupns")
    (root / "sys/fs/cgroup/cpu.max").unlink()
    quota, version = cgroup_cpu(Tree(root))
    assert quota.known and quota.value is None and "no quota file" in quota.source


# --- parsers ------------------------------------------------------------------------------------


def test_parse_mountinfo_handles_optional_fields_and_escapes():
    text = (
        "36 35 98:0 /mnt1 /mnt\\040two rw,noatime master:1 shared:2 - ext3 /dev/root rw,errors=continue\n"
        "garbage line\n"
        "40 31 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n"
    )
    mounts = parse_mountinfo(text)
    assert [m.mountpoint for m in mounts] == ["/mnt two", "/sys/fs/cgroup/unified"]
    assert mounts[0].fstype == "ext3" and mounts[0].super_options == ["rw", "errors=continue"]


def test_parse_proc_cgroup_v1_and_v2_lines():
    members = parse_proc_cgroup("4:cpu,cpuacct:/docker/abc\n0::/\n1:name=systemd:/x\nbad\n")
    assert [(m.hierarchy, m.controllers, m.path) for m in members] == [
        ("4", ["cpu", "cpuacct"], "/docker/abc"),
        ("0", [], "/"),
        ("1", ["name=systemd"], "/x"),
    ]


def test_mount_size_takes_the_topmost_shm_mount():
    # this box mounts /dev/shm twice; the later line is on top
    size = mount_size(tree("v1-ci-box"))
    assert size.known and size.value > 64 * MiB and "size=" in size.source
