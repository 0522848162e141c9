"""Raw recordings of the shipped example machines, and the builder that turns them into the
``MachineFacts`` JSON in ``src/loaderdoc/system/machines/`` through the real readers.

Each machine is a small Linux tree (``/proc``, ``/sys``, cgroup files, mountinfo), the values no
file holds (``statvfs`` of ``/dev/shm``, python, torch build) and a fake NVML returning the raw
values a real driver reports. ``detect()`` runs on that, so the JSON is exactly what loaderdoc
would record on such a machine, and ``tests/test_system_machines.py`` checks the shipped JSON
still equals a fresh build.

Sources of the values (public spec sheets and recorded tool output):
* H100 80GB HBM3 reports 81559 MiB total (``nvidia-smi --query-gpu=name,memory.total``:
  "NVIDIA H100 80GB HBM3, 81559 MiB"); SXM5 H100 is PCIe Gen5 x16; a DGX H100 has two 56-core
  Xeon Platinum 8480C (112 cores / 224 threads) and 2 TB RAM. Driver 580.95.05 ships CUDA 13.0.
  torch 2.8.0+cu128 pins nvidia-cudnn-cu12 9.10.2.21.
* RTX 3050 Laptop GPU (GA107): 4096 MiB GDDR6 ("NVIDIA GeForce RTX 3050 Laptop GPU, 4096 MiB"),
  a PCIe 4.0 x8 device; behind a Comet Lake i5-10300H (4 cores / 8 threads, PCIe 3.0) the link
  tops out at Gen3 x8. GeForce GPUs have no MIG (NVML answers Not Supported). torch 2.5.1+cu124
  pins nvidia-cudnn-cu12 9.1.0.70; driver 550.120 reports CUDA 12.4.
* Docker gives a container a 64 MiB /dev/shm ("size=65536k") unless --shm-size/--ipc=host.
  RTX 3090: 24576 MiB, PCIe 4.0 x16. torch 2.3.1+cu121 pins nvidia-cudnn-cu12 8.9.2.26;
  driver 535.183.01 reports CUDA 12.2.
* A Kubernetes pod with ``resources.limits.cpu: 4`` gets ``cpu.max = 400000 100000`` on cgroup
  v2; containerd gives pods a 64 MiB /dev/shm too. n2d-standard-64: 64 vCPUs (AMD EPYC 7B12,
  32 cores), 256 GB.

Regenerate after changing a reader or a spec: ``python tests/system_machine_specs.py --write``.
``ci-2core.json`` is a live recording of the CI box: ``python tests/system_machine_specs.py
--record-live ci-2core``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from support.fake_nvml import FakeGpu, FakeNvml

from loaderdoc.system._files import Tree
from loaderdoc.system.detect import detect
from loaderdoc.system.facts import MachineFacts, MiB, TorchFacts
from loaderdoc.system.fixtures import MACHINES_DIR
from loaderdoc.system.host import TreeHost

KiB = 1024


def cpuinfo(model: str, sockets: int, cores_per_socket: int, threads_per_core: int) -> str:
    """/proc/cpuinfo as Linux numbers CPUs: all first threads of every socket, then siblings."""
    blocks = []
    n = 0
    for _thread in range(threads_per_core):
        for socket in range(sockets):
            for core in range(cores_per_socket):
                blocks.append(
                    f"processor\t: {n}\nvendor_id\t: {'AuthenticAMD' if 'AMD' in model else 'GenuineIntel'}\n"
                    f"model name\t: {model}\nphysical id\t: {socket}\n"
                    f"siblings\t: {cores_per_socket * threads_per_core}\ncore id\t\t: {core}\n"
                    f"cpu cores\t: {cores_per_socket}\n"
                )
                n += 1
    return "\n".join(blocks) + "\n"


def limits_file(nofile_soft: int, nofile_hard: int) -> str:
    rows = [
        ("Max cpu time", "unlimited", "unlimited", "seconds"),
        ("Max file size", "unlimited", "unlimited", "bytes"),
        ("Max stack size", "8388608", "unlimited", "bytes"),
        ("Max processes", "254339", "254339", "processes"),
        ("Max open files", str(nofile_soft), str(nofile_hard), "files"),
        ("Max locked memory", "8388608", "8388608", "bytes"),
    ]
    head = f"{'Limit':<26}{'Soft Limit':<21}{'Hard Limit':<21}Units     \n"
    return head + "".join(f"{a:<26}{b:<21}{c:<21}{d:<10}\n" for a, b, c, d in rows)


def meminfo(total_kb: int, available_kb: int, swap_total_kb: int = 0, swap_free_kb: int = 0) -> str:
    free_kb = available_kb * 9 // 10
    return (
        f"MemTotal:       {total_kb:>10} kB\nMemFree:        {free_kb:>10} kB\n"
        f"MemAvailable:   {available_kb:>10} kB\nBuffers:        {4096:>10} kB\n"
        f"Cached:         {available_kb - free_kb:>10} kB\nSwapTotal:      {swap_total_kb:>10} kB\n"
        f"SwapFree:       {swap_free_kb:>10} kB\n"
    )


HOST_MOUNTS = (
    "22 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro\n"
    "23 22 0:5 / /dev rw,nosuid,relatime shared:2 - devtmpfs udev rw,mode=755,inode64\n"
    "24 23 0:25 / /dev/shm rw,nosuid,nodev shared:3 - tmpfs tmpfs rw,size={shm_kb}k,inode64\n"
    "25 22 0:22 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw\n"
    "26 22 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw\n"
    "27 26 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 "
    "rw,nsdelegate,memory_recursiveprot\n"
)

CONTAINER_MOUNTS = (
    "612 540 0:52 / / rw,relatime master:1 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/Q3,"
    "upperdir=/var/lib/docker/overlay2/7c/diff,workdir=/var/lib/docker/overlay2/7c/work\n"
    "613 612 0:55 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "614 612 0:56 / /dev rw,nosuid - tmpfs tmpfs rw,size=65536k,mode=755,inode64\n"
    "617 614 0:58 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size={shm_kb}k,inode64\n"
    "618 612 0:59 / /sys ro,nosuid,nodev,noexec,relatime - sysfs sysfs ro\n"
    "619 618 0:30 / /sys/fs/cgroup ro,nosuid,nodev,noexec,relatime - cgroup2 cgroup rw,nsdelegate,"
    "memory_recursiveprot\n"
)


@dataclass
class MachineSpec:
    label: str
    files: dict[str, str]  # machine path -> content
    host: dict[str, Any]  # what no file holds (TreeHost overrides)
    gpus: list[FakeGpu] = field(default_factory=list)
    driver_version: str = ""
    cuda_driver_version: int = 0
    env: dict[str, str] = field(default_factory=dict)

    def nvml(self) -> FakeNvml:
        if not self.driver_version:
            return FakeNvml.no_library()
        return FakeNvml(
            self.gpus, driver_version=self.driver_version, cuda_driver_version=self.cuda_driver_version
        )


def linux(
    *,
    model: str,
    sockets: int,
    cores: int,
    threads: int,
    mem_total_kb: int,
    mem_available_kb: int,
    swap_kb: int = 0,
    nofile: tuple[int, int],
    kernel: str,
    hostname: str,
    shm_kb: int,
    container: bool,
    cgroup_path: str,
    cgroup_files: dict[str, str],
) -> dict[str, str]:
    logical = sockets * cores * threads
    mounts = (CONTAINER_MOUNTS if container else HOST_MOUNTS).format(shm_kb=shm_kb)
    files = {
        "/proc/cpuinfo": cpuinfo(model, sockets, cores, threads),
        "/sys/devices/system/cpu/online": f"0-{logical - 1}\n",
        "/proc/self/status": f"Name:\tpython\nState:\tR (running)\nCpus_allowed_list:\t0-{logical - 1}\n",
        "/proc/meminfo": meminfo(mem_total_kb, mem_available_kb, swap_kb, swap_kb),
        "/proc/self/limits": limits_file(*nofile),
        "/proc/sys/kernel/ostype": "Linux\n",
        "/proc/sys/kernel/osrelease": kernel + "\n",
        "/proc/sys/kernel/hostname": hostname + "\n",
        "/proc/self/mountinfo": mounts,
        "/proc/self/cgroup": f"0::{cgroup_path}\n",
        "/proc/1/cgroup": "0::/\n" if container else "0::/init.scope\n",
    }
    files.update(cgroup_files)
    return files


def _user_slice(leaf: str, usage: int) -> dict[str, str]:
    """cgroup v2 files of a desktop/ssh session: cpu.max/memory.max 'max' at every level."""
    files: dict[str, str] = {}
    parts = [p for p in leaf.split("/") if p]
    for depth in range(1, len(parts) + 1):
        d = "/sys/fs/cgroup/" + "/".join(parts[:depth])
        files[f"{d}/cpu.max"] = "max 100000\n"
        files[f"{d}/memory.max"] = "max\n"
        files[f"{d}/memory.current"] = f"{usage * (len(parts) + 1 - depth)}\n"
        files[f"{d}/cgroup.controllers"] = "cpu memory pids\n"
    return files


LAPTOP_SESSION = "/user.slice/user-1000.slice/user@1000.service/app.slice/app-org.gnome.Terminal.slice/vte-spawn-5c1f0e6a.scope"
H100_SESSION = "/user.slice/user-1001.slice/session-4.scope"
H100_UUIDS = [
    "GPU-4d18a5ff-37f1-44af-87c8-37fa76c44ef4",
    "GPU-6024b7db-a45a-4d62-b635-40df796225a6",
    "GPU-7a572c27-d013-4f6d-8141-fded29088d6c",
    "GPU-75f6ca08-4f41-4114-85d3-238d3ac28efc",
    "GPU-bf70d17c-4774-4782-9463-8bfacd858ee8",
    "GPU-6b2b7e16-29e4-4b51-91ef-ac2a6378f511",
    "GPU-05095d76-c02f-4376-af4f-a228cde8f221",
    "GPU-6b750e7f-7490-4cc0-8a11-47c9dc7f3c66",
]

SPECS: dict[str, MachineSpec] = {
    "laptop-rtx3050": MachineSpec(
        label="Laptop: i5-10300H (4 cores / 8 threads), GeForce RTX 3050 Laptop GPU 4 GB, 16 GB RAM",
        files=linux(
            model="Intel(R) Core(TM) i5-10300H CPU @ 2.50GHz",
            sockets=1,
            cores=4,
            threads=2,
            mem_total_kb=16_190_800,
            mem_available_kb=11_806_332,
            swap_kb=2 * 1024 * 1024,
            nofile=(1024, 1048576),
            kernel="6.8.0-52-generic",
            hostname="thinkbook",
            shm_kb=8_095_400,
            container=False,
            cgroup_path=LAPTOP_SESSION,
            cgroup_files=_user_slice(LAPTOP_SESSION, 412_000_000),
        ),
        host={
            "shm_total": 8_095_400 * KiB,
            "shm_free": 8_095_400 * KiB - 37_748_736,
            "python": "3.11.9",
            "torch": {"installed": True, "version": "2.5.1+cu124", "cuda": "12.4", "cudnn": "9.1.0.70"},
        },
        gpus=[
            FakeGpu(
                name="NVIDIA GeForce RTX 3050 Laptop GPU",
                uuid="GPU-c72c7e01-a644-422a-9312-9016686df50d",
                memory_total=4096 * MiB,
                memory_used=5 * MiB,
                utilization=0,
                pcie_gen_current=3,
                pcie_gen_max=3,
                pcie_width_current=8,
                pcie_width_max=8,
                mig_mode=None,
            )
        ],
        driver_version="550.120",
        cuda_driver_version=12040,
    ),
    "docker-64m-shm": MachineSpec(
        label="Docker container (docker run --gpus all, no --shm-size): 16 threads, RTX 3090, 64 MiB /dev/shm",
        files={
            **linux(
                model="AMD Ryzen 7 5800X 8-Core Processor",
                sockets=1,
                cores=8,
                threads=2,
                mem_total_kb=65_776_036,
                mem_available_kb=58_912_440,
                nofile=(1048576, 1048576),
                kernel="5.15.0-119-generic",
                hostname="3f2a9c1d7b4e",
                shm_kb=65536,
                container=True,
                cgroup_path="/",
                cgroup_files={
                    "/sys/fs/cgroup/cpu.max": "max 100000\n",
                    "/sys/fs/cgroup/memory.max": "max\n",
                    "/sys/fs/cgroup/memory.current": "734003200\n",
                    "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
                },
            ),
            "/.dockerenv": "",
        },
        host={
            "shm_total": 64 * MiB,
            "shm_free": 64 * MiB,
            "python": "3.10.12",
            "torch": {"installed": True, "version": "2.3.1+cu121", "cuda": "12.1", "cudnn": "8.9.2.26"},
        },
        gpus=[
            FakeGpu(
                name="NVIDIA GeForce RTX 3090",
                uuid="GPU-6a226982-03d1-4120-b9f6-4622b97fd142",
                memory_total=24576 * MiB,
                memory_used=282 * MiB,
                utilization=0,
                pcie_gen_current=4,
                pcie_gen_max=4,
                pcie_width_current=16,
                pcie_width_max=16,
                mig_mode=None,
            )
        ],
        driver_version="535.183.01",
        cuda_driver_version=12020,
    ),
    "k8s-4cpu-quota": MachineSpec(
        label="Kubernetes pod: 4-CPU limit (cpu.max 400000 100000) on a 64-vCPU node, 16 GiB memory limit, 64 MiB /dev/shm",
        files=linux(
            model="AMD EPYC 7B12",
            sockets=1,
            cores=32,
            threads=2,
            mem_total_kb=264_165_400,
            mem_available_kb=247_013_120,
            nofile=(1048576, 1048576),
            kernel="6.1.100+",
            hostname="trainer-7d9f8b6c5-x2x4q",
            shm_kb=65536,
            container=True,
            cgroup_path="/",
            cgroup_files={
                "/sys/fs/cgroup/cpu.max": "400000 100000\n",
                "/sys/fs/cgroup/memory.max": "17179869184\n",
                "/sys/fs/cgroup/memory.current": "1288490188\n",
                "/sys/fs/cgroup/cgroup.controllers": "cpuset cpu io memory hugetlb pids rdma misc\n",
            },
        ),
        host={
            "shm_total": 64 * MiB,
            "shm_free": 64 * MiB,
            "python": "3.11.10",
            "torch": {"installed": True, "version": "2.5.1+cpu", "cuda": None},
        },
        env={"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"},
    ),
    "h100x8-node": MachineSpec(
        label="8x NVIDIA H100 80GB HBM3 node (DGX H100 class): 2x Xeon Platinum 8480C, 224 threads, 2 TB RAM",
        files=linux(
            model="Intel(R) Xeon(R) Platinum 8480C",
            sockets=2,
            cores=56,
            threads=2,
            mem_total_kb=2_113_502_892,
            mem_available_kb=2_071_330_156,
            nofile=(1048576, 1048576),
            kernel="5.15.0-1063-nvidia",
            hostname="dgx-h100-07",
            shm_kb=1_056_751_446,
            container=False,
            cgroup_path=H100_SESSION,
            cgroup_files=_user_slice(H100_SESSION, 2_300_000_000),
        ),
        host={
            "shm_total": 1_056_751_446 * KiB,
            "shm_free": 1_056_751_446 * KiB,
            "python": "3.11.9",
            "torch": {"installed": True, "version": "2.8.0+cu128", "cuda": "12.8", "cudnn": "9.10.2.21"},
        },
        gpus=[
            FakeGpu(
                name="NVIDIA H100 80GB HBM3",
                uuid=uuid,
                memory_total=81559 * MiB,
                memory_used=1 * MiB,
                utilization=0,
                pcie_gen_current=5,
                pcie_gen_max=5,
                pcie_width_current=16,
                pcie_width_max=16,
                mig_mode=0,
            )
            for uuid in H100_UUIDS
        ],
        driver_version="580.95.05",
        cuda_driver_version=13000,
    ),
}


def write_tree(root: str | os.PathLike[str], files: dict[str, str]) -> None:
    for path, text in files.items():
        target = Path(root) / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


def build(name: str, root: str | os.PathLike[str] | None = None) -> MachineFacts:
    """Run detect() on the recorded machine ``name`` (in ``root`` or a temporary directory)."""
    spec = SPECS[name]
    if root is None:
        with tempfile.TemporaryDirectory(prefix=f"loaderdoc-{name}-") as tmp:
            return build(name, tmp)
    write_tree(root, spec.files)
    host = TreeHost(Tree(root), overrides=spec.host)
    facts = detect(root, env=spec.env, nvml=spec.nvml(), host=host, label=spec.label)
    # the shipped recordings predate torch's intra-op thread count: kept as recorded (their specs hold
    # no OMP_NUM_THREADS, and the torchrun scenarios built on them would need torchrun's 1 per rank)
    facts.torch.intra_op_threads = TorchFacts().intra_op_threads
    return facts


CI_LABEL = "CI box: 2 vCPU, CPU-only (no NVIDIA driver), Docker on cgroup v1 (recorded live)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the built machines' JSON")
    parser.add_argument("--record-live", metavar="NAME", help="record this machine as NAME.json")
    args = parser.parse_args(argv)
    if args.record_live:
        facts = detect(label=CI_LABEL if args.record_live == "ci-2core" else args.record_live)
        (MACHINES_DIR / f"{args.record_live}.json").write_text(facts.to_json() + "\n", encoding="utf-8")
        print(f"recorded {args.record_live}")
    if args.write:
        for name in SPECS:
            (MACHINES_DIR / f"{name}.json").write_text(build(name).to_json() + "\n", encoding="utf-8")
            print(f"wrote {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
