"""detect() on this machine, the Host seam, torch without import, distributed, containers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.fake_nvml import FakeNvml

from loaderdoc.system._files import Tree, parse_cpu_list
from loaderdoc.system.container import read_container
from loaderdoc.system.detect import detect, make_host
from loaderdoc.system.distributed import expand_tasks_per_node, read_distributed
from loaderdoc.system.facts import CpuFacts, MachineFacts, Reading
from loaderdoc.system.host import LiveHost, TreeHost
from loaderdoc.system.limits import sharing_strategy
from loaderdoc.system.shm import read_shm
from loaderdoc.system.torchenv import parse_version_py, read_torch

TREES = Path(__file__).parent / "fixtures" / "cgroup"
LINUX = sys.platform.startswith("linux")


# --- the live machine -----------------------------------------------------------------------


def test_detect_imports_neither_torch_nor_textual_nor_cpuinfo():
    code = textwrap.dedent(
        """
        import json, sys
        from loaderdoc.system.detect import detect
        facts = detect()
        print(json.dumps({"heavy": sorted(m for m in ("torch", "textual", "cpuinfo") if m in sys.modules),
                          "logical": facts.cpu.logical.value}))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    result = json.loads(out.stdout)
    assert result["heavy"] == [] and result["logical"] >= 1


def test_live_detect_gives_sensible_values():
    facts = detect()
    cpu = facts.cpu
    assert cpu.logical.value >= 1 and cpu.logical.source == "os.cpu_count()"
    if hasattr(os, "sched_getaffinity"):
        assert cpu.affinity.value == sorted(os.sched_getaffinity(0))
        assert set(cpu.affinity.value) <= set(range(max(cpu.affinity.value) + 1))
    assert 0 < cpu.budget <= cpu.logical.value
    assert cpu.budget_source in ("logical", "affinity", "cgroup quota")
    assert cpu.physical.get(1) <= cpu.logical.value
    assert cpu.model.known or cpu.model.unknown  # /proc/cpuinfo model name, cheaply
    assert not cpu.flags.known and cpu.flags.unknown.startswith("not asked")
    assert facts.memory.total.get() > 0 and 0 < facts.memory.budget <= facts.memory.total.value
    assert facts.platform.python.value == ".".join(map(str, sys.version_info[:3]))
    # NVML either answered or says why not (on the CPU-only CI box: no NVIDIA driver)
    assert facts.gpu.nvml.known or facts.gpu.nvml.unknown
    if not facts.gpu.nvml.known:
        assert facts.gpu.count == 0 and facts.usable_gpus == 0
    assert facts.limits.sharing_strategy.value in ("file_descriptor", "file_system")
    assert MachineFacts.from_json(facts.to_json()) == facts


@pytest.mark.skipif(not LINUX, reason="Linux /proc and /sys")
def test_tree_readers_agree_with_the_live_syscalls():
    """The files a TreeHost reads are what the live calls report on this machine."""
    live, tree = LiveHost(), TreeHost(Tree("/"))
    assert tree.cpu_count().value == live.cpu_count().value == os.cpu_count()
    assert tree.affinity().value == live.affinity().value
    assert tree.nofile() == tuple(
        Reading.of(r.value, "/proc/self/limits: Max open files") for r in live.nofile()
    )
    psutil = pytest.importorskip("psutil")
    assert tree.physical_cores().value == psutil.cpu_count(logical=False)
    assert tree.memory()["total"].value == psutil.virtual_memory().total
    assert tree.memory()["swap_total"].value == psutil.swap_memory().total
    # the kernel files and os.uname agree
    assert tree.platform()["kernel"].value == live.platform()["kernel"].value
    assert tree.platform()["hostname"].value == live.platform()["hostname"].value


def test_live_torch_matches_the_installed_distribution():
    from importlib import metadata

    try:
        installed = metadata.version("torch")
    except metadata.PackageNotFoundError:
        installed = None
    facts = detect(env={}).torch
    if installed is None:
        assert facts.installed.value is False
    else:
        # torch.__version__ (what we read) carries the local build tag, e.g. "2.14.1+cu130",
        # while the PyPI wheel's metadata says "2.14.1"; the CPU wheel has "+cpu" in both
        assert facts.installed.value is True
        assert facts.version.value.split("+")[0] == installed.split("+")[0]


@pytest.mark.skipif(not LINUX, reason="Linux cgroup v1")
def test_a_real_cgroup_v1_quota_reads_as_cpus():
    """As root on a cgroup-v1 host: a process moved into a 1.5-CPU cgroup sees 1.5."""
    base = Path("/sys/fs/cgroup/cpu")
    if not (base / "cpu.cfs_quota_us").exists() or not os.access(base, os.W_OK):
        pytest.skip("needs a writable cgroup v1 cpu hierarchy (root on a v1 host)")
    group = base / f"loaderdoc-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("150000")
    except OSError as exc:
        pytest.skip(f"cannot create a cgroup here: {exc}")
    code = textwrap.dedent(
        f"""
        import os
        with open({str(group / "cgroup.procs")!r}, "w") as fh:
            fh.write(str(os.getpid()))
        from loaderdoc.system.detect import detect
        f = detect(env={{}})
        print(f.cpu.cgroup_quota.value, f.cpu.budget, f.cpu.budget_source, f.cpu.cgroup_quota.source)
        """
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    finally:
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.05)
    assert out.returncode == 0, out.stderr
    quota, budget, source, path = out.stdout.split(" ", 3)
    assert (float(quota), float(budget)) == (1.5, 1.5) and source == "cgroup"
    assert group.name in path


def test_cpu_info_when_asked_uses_py_cpuinfo(monkeypatch):
    class FakeCpuinfo:
        @staticmethod
        def get_cpu_info():
            return {"brand_raw": "Intel(R) Xeon(R) Platinum 8480C", "flags": ["avx2", "avx512f", "amx_tile"]}

    monkeypatch.setitem(sys.modules, "cpuinfo", FakeCpuinfo)
    facts = detect(TREES / "v1-ci-box", env={}, nvml=FakeNvml.no_library(), cpu_info=True)
    assert facts.cpu.model.value == "Intel(R) Xeon(R) Platinum 8480C"
    assert facts.cpu.flags.value == ["amx_tile", "avx2", "avx512f"]

    class Broken:
        @staticmethod
        def get_cpu_info():
            raise RuntimeError("cpuid unavailable")

    monkeypatch.setitem(sys.modules, "cpuinfo", Broken)
    facts = detect(TREES / "v1-ci-box", env={}, nvml=FakeNvml.no_library(), cpu_info=True)
    assert not facts.cpu.model.known and "cpuid unavailable" in facts.cpu.model.unknown


def test_cpu_info_for_real():
    pytest.importorskip("cpuinfo")
    facts = detect(env={}, cpu_info=True)  # ~1 s: py-cpuinfo
    assert facts.cpu.model.known and facts.cpu.flags.known and len(facts.cpu.flags.value) > 3


# --- the Host seam ------------------------------------------------------------------------------


def test_tree_mode_leaks_no_live_values(tmp_path):
    facts = detect(tmp_path, env={}, nvml=FakeNvml.no_library())
    assert not facts.cpu.logical.known and not facts.cpu.affinity.known
    assert not facts.shm.total.known and "not recorded" in facts.shm.total.unknown
    assert not facts.platform.python.known and not facts.torch.installed.known
    assert facts.cpu.budget == 1.0 and facts.cpu.budget_source == "unknown"
    assert isinstance(make_host(tmp_path), TreeHost) and isinstance(make_host("/"), LiveHost)


def test_host_json_and_overrides(tmp_path):
    (tmp_path / "loaderdoc-host.json").write_text(
        json.dumps({"cpu_count": 64, "affinity": "0-3,8", "shm_total": 1 << 26})
    )
    host = TreeHost(Tree(tmp_path), overrides={"nofile_soft": 4096})
    facts = detect(tmp_path, env={}, nvml=FakeNvml.no_library(), host=host)
    assert facts.cpu.logical.value == 64 and facts.cpu.logical.source == "os.cpu_count() [recorded]"
    assert facts.cpu.affinity.value == [0, 1, 2, 3, 8] and facts.cpu.budget == 5.0
    assert facts.shm.looks_like_docker_default
    assert facts.limits.nofile_soft.value == 4096


def test_bad_host_json_is_reported_not_raised(tmp_path):
    (tmp_path / "loaderdoc-host.json").write_text("{not json")
    facts = detect(tmp_path, env={}, nvml=FakeNvml.no_library())
    assert "loaderdoc-host.json" in facts.shm.total.unknown


def test_a_host_that_raises_is_contained():
    class Buggy(LiveHost):
        def cpu_count(self):
            raise ZeroDivisionError("bug")

    facts = detect(
        TREES / "v1-ci-box", env={}, nvml=FakeNvml.no_library(), host=Buggy(Tree(TREES / "v1-ci-box"))
    )
    assert not facts.cpu.logical.known and "internal error reading cpu" in facts.cpu.logical.unknown
    assert facts.memory.total.known  # the other sections are unaffected


def test_shm_falls_back_to_the_mount_size(tmp_path):
    (tmp_path / "proc/self").mkdir(parents=True)
    (tmp_path / "proc/self/mountinfo").write_text(
        "617 614 0:58 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k,inode64\n"
    )
    shm = read_shm(Tree(tmp_path), TreeHost(Tree(tmp_path)))
    assert shm.total.value == 64 * 1024 * 1024 and shm.looks_like_docker_default
    assert "size=65536k" in shm.total.source and not shm.free.known


def test_live_shm_statvfs():
    shm = read_shm(Tree("/"), LiveHost())
    if os.path.isdir("/dev/shm"):
        st = os.statvfs("/dev/shm")
        assert shm.total.value == st.f_blocks * st.f_frsize
    else:
        assert not shm.total.known or "size=" in shm.total.source


def test_unlimited_open_files_is_none(monkeypatch):
    resource = pytest.importorskip("resource")
    monkeypatch.setattr(resource, "getrlimit", lambda which: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    soft, hard = LiveHost().nofile()
    assert soft.known and soft.value is None and hard.value is None


def test_non_linux_fallbacks_use_psutil(monkeypatch):
    pytest.importorskip("psutil")
    host = LiveHost(Tree("/nonexistent-root-for-test"))
    host.linux = False
    mem = host.memory()
    assert mem["total"].get() > 0 and mem["total"].source == "psutil.virtual_memory()"
    assert host.physical_cores().get() >= 1


@pytest.mark.parametrize(
    "system, strategy", [("Linux", "file_descriptor"), ("Darwin", "file_system"), ("Windows", "file_system")]
)
def test_sharing_strategy_follows_the_os(system, strategy):
    assert sharing_strategy(Reading.of(system, "os.uname().sysname")).value == strategy
    assert not sharing_strategy(Reading.missing("no idea")).known


# --- torch, read without importing it ---------------------------------------------------------


def fake_site(
    tmp_path: Path, version_py: str | None, dists: dict[str, str] | None = None, libs: list[str] | None = None
) -> Path:
    site = tmp_path / "site-packages"
    pkg = site / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("raise RuntimeError('torch must not be imported')\n")
    if version_py is not None:
        (pkg / "version.py").write_text(version_py)
    for name, version in (dists or {}).items():
        d = site / f"{name}-{version}.dist-info"
        d.mkdir()
        (d / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    for lib in libs or []:
        (pkg / "lib").mkdir(exist_ok=True)
        (pkg / "lib" / lib).write_text("")
    return site


def test_torch_cpu_build(tmp_path):
    site = fake_site(
        tmp_path, "from typing import Optional\n__version__ = '2.13.0+cpu'\ncuda: Optional[str] = None\n"
    )
    facts = read_torch(paths=[str(site)])
    assert facts.installed.value is True
    assert facts.version.value == "2.13.0+cpu" and facts.cuda_build.value is None
    assert facts.cudnn.known and facts.cudnn.value is None


def test_torch_cuda_build_with_the_cudnn_wheel(tmp_path):
    site = fake_site(
        tmp_path,
        "__version__ = '2.8.0+cu128'\ncuda = '12.8'\nhip = None\n",
        dists={"torch": "2.8.0+cu128", "nvidia_cudnn_cu12": "9.10.2.21", "nvidia_cublas_cu12": "12.8.4.1"},
    )
    facts = read_torch(paths=[str(site)])
    assert (facts.version.value, facts.cuda_build.value, facts.cudnn.value) == (
        "2.8.0+cu128",
        "12.8",
        "9.10.2.21",
    )
    assert "nvidia-cudnn-cu12" in facts.cudnn.source


def test_torch_cuda_build_with_bundled_cudnn(tmp_path):
    site = fake_site(
        tmp_path, "__version__ = '2.1.0'\ncuda = '11.8'\n", libs=["libcudnn.so.8", "libtorch.so"]
    )
    assert read_torch(paths=[str(site)]).cudnn.value == "8"
    site2 = fake_site(tmp_path / "b", "__version__ = '2.1.0'\ncuda = '11.8'\n")
    cudnn = read_torch(paths=[str(site2)]).cudnn
    assert not cudnn.known and "nvidia-cudnn" in cudnn.unknown


def test_torch_version_from_metadata_when_version_py_lacks_it(tmp_path):
    site = fake_site(tmp_path, "cuda = None\n", dists={"torch": "2.4.1"})
    facts = read_torch(paths=[str(site)])
    assert facts.version.value == "2.4.1" and "METADATA" in facts.version.source


def test_torch_broken_version_py(tmp_path):
    site = fake_site(tmp_path, "cuda = (\n")
    facts = read_torch(paths=[str(site)])
    assert facts.installed.value is True
    assert not facts.cuda_build.known and "SyntaxError" in facts.cuda_build.unknown
    site2 = fake_site(tmp_path / "b", None)
    facts = read_torch(paths=[str(site2)])
    assert not facts.cuda_build.known and "version.py" in facts.cuda_build.unknown


def test_torch_not_installed(tmp_path):
    facts = read_torch(paths=[str(tmp_path)])
    assert facts.installed.known and facts.installed.value is False
    assert facts.version.known and facts.version.value is None
    facts = read_torch(find_spec=lambda name: (_ for _ in ()).throw(ValueError("torch.__spec__ is None")))
    assert not facts.installed.known and "find_spec" in facts.installed.unknown


def test_parse_version_py():
    fields = parse_version_py(
        "from typing import Optional\n__version__ = '2.5.1+cu124'\ncuda: Optional[str] = '12.4'\ngit_version = 'abc'\nx = f()\n"
    )
    assert fields == {"__version__": "2.5.1+cu124", "cuda": "12.4", "git_version": "abc"}


# --- distributed context ------------------------------------------------------------------------


def test_no_launcher():
    d = read_distributed({})
    assert d.launcher.known and d.launcher.value is None and d.ranks_on_this_node == 1


def test_torchrun():
    d = read_distributed(
        {
            "WORLD_SIZE": "16",
            "LOCAL_WORLD_SIZE": "8",
            "RANK": "9",
            "LOCAL_RANK": "1",
            "TORCHELASTIC_RUN_ID": "x",
        }
    )
    assert (
        d.launcher.value,
        d.world_size.value,
        d.local_world_size.value,
        d.rank.value,
        d.local_rank.value,
    ) == ("torchrun", 16, 8, 9, 1)
    assert d.ranks_on_this_node == 8 and d.ranks_sharing_budget == 8


def test_world_size_without_local_world_size():
    d = read_distributed({"WORLD_SIZE": "4", "RANK": "0"})
    assert not d.local_world_size.known and d.ranks_on_this_node == 1


def test_slurm_tasks():
    env = {"SLURM_JOB_ID": "1", "SLURM_NTASKS": "16", "SLURM_PROCID": "5", "SLURM_LOCALID": "1",
           "SLURM_TASKS_PER_NODE": "4(x4)", "SLURM_NODEID": "1"}  # fmt: skip
    d = read_distributed(env)
    assert (
        d.launcher.value,
        d.world_size.value,
        d.local_world_size.value,
        d.rank.value,
        d.local_rank.value,
    ) == ("slurm", 16, 4, 5, 1)
    assert d.local_world_size.source == "SLURM_TASKS_PER_NODE[SLURM_NODEID=1]"
    d = read_distributed({**env, "SLURM_NTASKS_PER_NODE": "8"})
    assert d.local_world_size.value == 8 and d.local_world_size.source == "SLURM_NTASKS_PER_NODE"


def test_cpus_per_rank_with_slurm_cpus_per_task():
    cpu = CpuFacts(logical=Reading.of(224, "x"), affinity=Reading.of(list(range(32)), "x"))
    m = MachineFacts(cpu=cpu)
    # four Slurm tasks on this node, each with --cpus-per-task=8: 8 CPUs per rank, not 32/4/...
    m.distributed = read_distributed(
        {"SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_NTASKS_PER_NODE": "4", "SLURM_CPUS_PER_TASK": "8"}
    )
    assert m.cpus_per_rank == 8.0
    m.cpu.affinity = Reading.of(list(range(8)), "x")  # the task bound to its own 8 CPUs
    assert m.cpus_per_rank == 8.0
    # torchrun inside one Slurm task with 32 CPUs, 4 local ranks: 8 each
    m.cpu.affinity = Reading.of(list(range(64)), "x")
    m.distributed = read_distributed(
        {"SLURM_PROCID": "0", "SLURM_CPUS_PER_TASK": "32", "WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4"}
    )
    assert m.distributed.launcher.value == "torchrun" and m.cpus_per_rank == 8.0
    # Slurm tasks without --cpus-per-task share the node budget
    m.distributed = read_distributed({"SLURM_PROCID": "0", "SLURM_NTASKS_PER_NODE": "4"})
    assert m.cpus_per_rank == 16.0


@pytest.mark.parametrize("env, field", [({"WORLD_SIZE": "many"}, "world_size"), ({"LOCAL_WORLD_SIZE": "0"}, "local_world_size"),
                                        ({"SLURM_PROCID": "0", "SLURM_TASKS_PER_NODE": "4(x"}, "local_world_size"),
                                        ({"SLURM_PROCID": "0", "SLURM_CPUS_PER_TASK": "all"}, "cpus_per_task")])  # fmt: skip
def test_malformed_launcher_variables_are_unknown(env, field):
    reading = getattr(read_distributed(env), field)
    assert not reading.known and reading.unknown


def test_expand_tasks_per_node():
    assert expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert expand_tasks_per_node("8") == [8]
    with pytest.raises(ValueError):
        expand_tasks_per_node("two")


# --- containers -------------------------------------------------------------------------------


def test_container_hints(tmp_path):
    t = Tree(tmp_path)
    assert read_container(t, {}).kind.value is None
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/cgroup").write_text("0::/system.slice/containerd.service\n")
    assert read_container(t, {}).kind.value == "containerd"
    (tmp_path / "proc/1/cgroup").write_text("12:pids:/kubepods/burstable/pod1/abc\n")
    assert read_container(t, {}).kind.value == "kubernetes"
    assert read_container(t, {"container": "podman"}).kind.value == "podman"
    (tmp_path / ".dockerenv").write_text("")
    assert read_container(t, {}).kind.value == "docker"
    (tmp_path / "run").mkdir()
    (tmp_path / "run/.containerenv").write_text("")
    assert read_container(t, {}).kind.value == "podman"
    kind = read_container(t, {"KUBERNETES_SERVICE_HOST": "10.0.0.1"}).kind
    assert (kind.value, kind.source) == ("kubernetes", "KUBERNETES_SERVICE_HOST")


def test_parse_cpu_list():
    assert parse_cpu_list("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpu_list("") == []
    with pytest.raises(ValueError):
        parse_cpu_list("3-1")
