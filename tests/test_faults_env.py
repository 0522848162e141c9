"""Faults in the environment, through `python -m loaderdoc` as a user runs it: torch that does not
import, NVML missing or failing in the middle of a query, garbage and unreadable cgroup files.

Detection never raises: a fact it can't read is unknown with the reason, and `facts`, `check` and
`--export` still work. Only the probe needs torch, and it says in one line what to install.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from faults_support import fault_env, loaderdoc, namespaces_usable, one_line_error

from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import EXIT_CRITICAL, EXIT_OK, EXIT_USAGE, EXIT_WARNING

CHECK_CODES = (EXIT_OK, EXIT_WARNING, EXIT_CRITICAL)


# ---- torch fails to import ----------------------------------------------------------------------
@pytest.fixture
def broken_torch(tmp_path):
    """A `torch` package first on PYTHONPATH that fails as a torch with a missing libtorch does."""
    pkg = tmp_path / "shadow" / "torch"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(
        'raise ImportError("libtorch_cpu.so: cannot open shared object file: No such file or directory")\n')
    env, _ = fault_env(pythonpath=[str(tmp_path / "shadow")])
    return env


def test_without_an_importable_torch_facts_check_and_export_still_work(broken_torch, tmp_path):
    env = broken_torch
    facts = loaderdoc("facts", env=env)
    assert facts.returncode == EXIT_OK, facts.stderr
    assert "CPU" in facts.stdout and "torch" in facts.stdout
    doc = json.loads(loaderdoc("facts", "--json", env=env).stdout)
    assert doc["cpu"]["logical"]["value"] >= 1
    check = loaderdoc("check", "--batch-size", "32", "--sample-shape", "3x224x224", "--json", env=env)
    assert check.returncode in CHECK_CODES and not check.stderr, check.stderr
    assert json.loads(check.stdout)["recommended"]["settings"]["batch_size"] == 32
    out = tmp_path / "loader.toml"
    export = loaderdoc("--export", str(out), "--batch-size", "32", env=env)
    assert export.returncode == EXIT_OK, export.stderr
    assert tomllib.loads(out.read_text())["dataloader"]["batch_size"] == 32


@pytest.mark.parametrize("args", [
    ["probe", "image", "--budget", "2"],
    ["probe", "--dataset", "faults_data:make_slow", "--budget", "2"],
    ["--export", "{out}", "--preset", "image", "--budget", "2"],
], ids=["preset", "dataset", "probed-export"])
def test_without_an_importable_torch_the_probe_says_what_to_install(broken_torch, tmp_path, args):
    out = tmp_path / "loader.toml"
    proc = loaderdoc(*[a.format(out=out) for a in args], env=broken_torch)
    line = one_line_error(proc, EXIT_USAGE, "needs PyTorch", "pip install torch", "libtorch_cpu.so")
    assert line.startswith("loaderdoc: error: ")
    assert not out.exists()


# ---- NVML ---------------------------------------------------------------------------------------
def test_no_nvml_library_is_a_fact_not_an_error():
    # this machine (and CI) has no NVIDIA driver; where one exists the assertion names what it saw
    doc = json.loads(loaderdoc("facts", "--json").stdout)
    nvml = doc["gpu"]["nvml"]
    if nvml["value"] is not None:
        pytest.skip(f"NVML is present here ({nvml['value']}): the no-driver case is covered with a fake NVML")
    assert "no NVIDIA driver" in nvml["unknown"]
    check = loaderdoc("check", "--json")
    assert check.returncode in CHECK_CODES, check.stderr
    report = json.loads(check.stdout)
    assert report["summary"]["gpus"] == 0
    assert not [f for f in report["findings"] if f["rule_id"].startswith(("gpu", "cuda"))]


FAKE_PYNVML = """
    import sys
    from support.fake_nvml import FakeGpu, FakeNvml, NVMLError_GpuIsLost
    gpus = [FakeGpu(name="NVIDIA H100 80GB HBM3", uuid=f"GPU-0000000{i}-0000-0000-0000-000000000000",
                    memory_total=80 * 2**30, pcie_gen_current=5, pcie_gen_max=5) for i in range(2)]
    # the second GPU falls off the bus half-way through the query
    gpus[1].errors = {"nvmlDeviceGetMemoryInfo": NVMLError_GpuIsLost(),
                      "nvmlDeviceGetCurrPcieLinkGeneration": NVMLError_GpuIsLost(),
                      "nvmlDeviceGetUtilizationRates": RuntimeError("driver returned garbage")}
    sys.modules[__name__] = FakeNvml(gpus)
"""


@pytest.fixture
def failing_nvml(tmp_path):
    shadow = tmp_path / "nvml"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text(textwrap.dedent(FAKE_PYNVML))
    env, _ = fault_env(pythonpath=[str(shadow), str(Path(__file__).parent)])  # tests/ holds support.fake_nvml
    return env


def test_nvml_raising_mid_query_leaves_the_rest_known(failing_nvml, tmp_path):
    env = failing_nvml
    proc = loaderdoc("facts", "--json", env=env)
    assert proc.returncode == EXIT_OK and not proc.stderr, proc.stderr
    gpu = json.loads(proc.stdout)["gpu"]
    assert len(gpu["devices"]) == 2
    good, lost = gpu["devices"]
    assert good["memory_total"]["value"] == 80 * 2**30
    assert lost["name"]["value"] == "NVIDIA H100 80GB HBM3"  # read before it was lost
    assert lost["memory_total"]["value"] is None and "GPU is lost" in lost["memory_total"]["unknown"]
    assert lost["utilization"]["value"] is None and "garbage" in lost["utilization"]["unknown"]
    text = loaderdoc("facts", env=env)
    assert text.returncode == EXIT_OK and "H100" in text.stdout, text.stderr
    check = loaderdoc("check", "--json", env=env)
    assert check.returncode in CHECK_CODES and not check.stderr, check.stderr
    assert json.loads(check.stdout)["summary"]["gpus"] == 2
    out = tmp_path / "loader.py"
    assert loaderdoc("--export", str(out), env=env).returncode == EXIT_OK
    assert "DataLoader(" in out.read_text()


def test_pynvml_that_fails_to_import_is_unknown_not_a_crash(tmp_path):
    shadow = tmp_path / "nvml"
    shadow.mkdir()
    (shadow / "pynvml.py").write_text('raise OSError("libnvidia-ml.so.1: wrong ELF class")\n')
    env, _ = fault_env(pythonpath=[str(shadow)])
    proc = loaderdoc("facts", "--json", env=env)
    assert proc.returncode == EXIT_OK, proc.stderr
    nvml = json.loads(proc.stdout)["gpu"]["nvml"]
    assert nvml["value"] is None and "wrong ELF class" in nvml["unknown"]
    assert loaderdoc("check", env=env).returncode in CHECK_CODES


# ---- cgroup files: garbage and unreadable, on this machine, in a private mount namespace --------
NS_REASON = namespaces_usable()


def v1_paths() -> tuple[Path, Path] | None:
    """(cpu.cfs_quota_us, memory.limit_in_bytes) of this process's cgroup v1, if that is what runs here."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    where = {}
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(","):
            where[c] = path.lstrip("/")
    if "cpu" not in where or "memory" not in where:
        return None
    cpu = next((p for p in (Path("/sys/fs/cgroup/cpu") / where["cpu"] / "cpu.cfs_quota_us",
                            Path("/sys/fs/cgroup/cpu,cpuacct") / where["cpu"] / "cpu.cfs_quota_us") if p.exists()),
               None)
    mem = Path("/sys/fs/cgroup/memory") / where["memory"] / "memory.limit_in_bytes"
    return (cpu, mem) if cpu and mem.exists() else None


def in_namespace(*mounts: str) -> list[str]:
    """Run the command after bind mounts (`SRC TARGET` pairs; `$$` is the command's own pid)."""
    script = " && ".join(f"mount --bind {m}" for m in mounts)
    return ["unshare", "--mount", "sh", "-c", f'{script} && exec "$@"', "sh"]


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_garbage_and_unreadable_cgroup_files_are_unknown_with_the_reason(tmp_path):
    paths = v1_paths()
    if paths is None:
        pytest.skip("this machine does not run cgroup v1 cpu+memory (the recorded trees cover v2)")
    quota, limit = paths
    garbage = tmp_path / "garbage"
    garbage.write_text("lots of cpus\n")
    # reading /proc/PID/mem at offset 0 fails with EIO: a file that exists but can't be read
    prefix = in_namespace(f"{garbage} {quota}", f"/proc/$$/mem {limit}")
    env, _ = fault_env()
    proc = loaderdoc("facts", "--json", env=env, prefix=prefix)
    assert proc.returncode == EXIT_OK and not proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)
    q, lim = doc["cpu"]["cgroup_quota"], doc["memory"]["cgroup_limit"]
    assert q["value"] is None and "malformed" in q["unknown"] and "cpu.cfs_quota_us" in q["unknown"]
    assert lim["value"] is None and "memory.limit_in_bytes" in lim["unknown"] and "error" in lim["unknown"]
    assert doc["cpu"]["logical"]["value"] >= 1  # everything else still read
    env, _ = fault_env()
    check = loaderdoc("check", "--json", env=env, prefix=prefix)
    assert check.returncode in CHECK_CODES and not check.stderr, check.stderr
    assert json.loads(check.stdout)["summary"]["cpu_budget"] >= 1
    env, _ = fault_env()
    out = tmp_path / "loader.toml"
    assert loaderdoc("--export", str(out), env=env, prefix=prefix).returncode == EXIT_OK
    assert tomllib.loads(out.read_text())["dataloader"]


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_garbage_proc_self_cgroup_and_mountinfo(tmp_path):
    garbage = tmp_path / "garbage"
    garbage.write_text("this is not a cgroup file\n")
    for target in ("cgroup", "mountinfo"):
        env, _ = fault_env()
        proc = loaderdoc("check", "--json", env=env, prefix=in_namespace(f"{garbage} /proc/$$/{target}"))
        assert proc.returncode in CHECK_CODES and not proc.stderr, proc.stderr
        doc = json.loads(proc.stdout)
        assert doc["summary"]["cpu_budget"] >= 1
        if target == "cgroup":
            assert "no parsable lines" in doc["machine"]["cpu"]["cgroup_quota"]["unknown"]
