"""The machine and the settings in the words the core's reports and exports store: the machine
summary (topic, one line; `check --json`'s ``summary.lines``), the machine on one line (an export's
header, `tradeoffs --json`'s ``machine_line``), settings on one line and what changed between two
(the session's messages). Plain strings from facts; the front's text package prints them."""

from __future__ import annotations

import dataclasses
from collections import Counter

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import fmt_bytes, fmt_cpus
from loaderdoc.system.facts import MachineFacts, Reading


def _val(reading: Reading, fmt=str, unset: str = "none") -> str:
    if not reading.known:
        return f"unknown ({reading.unknown})"
    if reading.value is None:
        return unset
    return fmt(reading.value)


def machine_summary(facts: MachineFacts) -> list[tuple[str, str]]:
    cpu, mem, shm, lim = facts.cpu, facts.memory, facts.shm, facts.limits
    affinity = cpu.affinity.get()
    cpu_line = (
        f"{_val(cpu.logical)} logical / {_val(cpu.physical)} physical, "
        f"affinity {len(affinity) if affinity is not None else _val(cpu.affinity)}, "
        f"cgroup quota {_val(cpu.cgroup_quota, fmt_cpus)} -> budget {fmt_cpus(cpu.budget)} CPUs ({cpu.budget_source})"
    )
    if cpu.model.get():
        cpu_line += f"; {cpu.model.value}"
    rows = [("CPU", cpu_line)]
    ranks = facts.distributed.ranks_on_this_node
    launcher = facts.distributed.launcher.get()
    if ranks > 1 or launcher:
        per_rank = facts.cpus_per_rank
        rows.append((
            "Ranks",
            f"{launcher or 'distributed'}: {ranks} local rank(s), world size {facts.distributed.world_size.get('?')}"
            f" -> {fmt_cpus(None if per_rank is None else round(per_rank, 2))} CPUs per rank",
        ))
    rows.append((
        "Memory",
        f"{_val(mem.total, fmt_bytes)} total, {_val(mem.available, fmt_bytes)} available, "
        f"cgroup limit {_val(mem.cgroup_limit, fmt_bytes)} -> budget {fmt_bytes(mem.budget)}",
    ))
    shm_line = f"{shm.path} {_val(shm.total, fmt_bytes)}, {_val(shm.free, fmt_bytes)} free"
    if shm.looks_like_docker_default:
        shm_line += " (Docker's 64 MiB default)"
    rows.append(("Shm", shm_line))
    kind = facts.container.kind.get()
    if kind:
        rows.append(("Container", str(kind)))
    rows.append((
        "Files",
        f"open-file limit {_val(lim.nofile_soft, unset='unlimited')} (hard {_val(lim.nofile_hard, unset='unlimited')}), "
        f"sharing strategy {_val(lim.sharing_strategy)}",
    ))
    rows.append(("GPU", gpu_line(facts)))
    rows.append(("torch", torch_line(facts)))
    return rows


def gpu_line(facts: MachineFacts) -> str:
    gpu = facts.gpu
    if not gpu.devices:
        if not gpu.nvml.known:
            return f"none ({gpu.nvml.unknown})"
        vis = gpu.visible_devices.get()
        return "none visible" + (f" (CUDA_VISIBLE_DEVICES={vis!r})" if vis is not None else "")
    names = Counter(str(dev.name.get("unknown GPU")) for dev in gpu.devices)
    first = gpu.devices[0]
    parts = [", ".join(f"{n}x {name}" for name, n in names.items())]
    if first.memory_total.get():
        parts.append(f"{fmt_bytes(first.memory_total.value)} each")
    if first.pcie_gen_max.get():
        parts.append(f"PCIe gen {first.pcie_gen_current.get('?')}/{first.pcie_gen_max.value} "
                     f"x{first.pcie_width_current.get('?')}/{first.pcie_width_max.get('?')}")
    if gpu.driver_version.get():
        parts.append(f"driver {gpu.driver_version.value}")
    if gpu.cuda_driver_version.get():
        parts.append(f"CUDA {gpu.cuda_driver_version.value}")
    return ", ".join(parts)


def torch_line(facts: MachineFacts) -> str:
    t = facts.torch
    if not t.installed.known:
        return f"unknown ({t.installed.unknown})"
    if not t.installed.value:
        return "not installed (pip install torch)"
    build = t.cuda_build
    if not build.known:
        kind = f"build unknown ({build.unknown})"
    else:
        kind = f"CUDA {build.value} build" if build.value else "CPU-only build"
    cudnn = f", cuDNN {t.cudnn.value}" if t.cudnn.get() else ""
    return f"{t.version.get('?')} ({kind}{cudnn})"


def settings_line(settings: LoaderSettings) -> str:
    """A compact one-line rendering of the chosen settings."""
    s = settings
    parts = [f"batch_size={s.batch_size}", f"num_workers={s.num_workers}"]
    if s.num_workers:
        parts.append(f"prefetch_factor={s.effective_prefetch_factor}")
        parts.append(f"persistent_workers={s.persistent_workers}")
    parts.append(f"pin_memory={s.pin_memory}")
    if s.shuffle:
        parts.append("shuffle=True")
    if s.drop_last:
        parts.append("drop_last=True")
    if s.timeout:
        parts.append(f"timeout={s.timeout:g}")
    if s.multiprocessing_context:
        parts.append(f"multiprocessing_context={s.multiprocessing_context!r}")
    if not s.in_order:
        parts.append("in_order=False")
    return ", ".join(parts)


def settings_diff(old: LoaderSettings, new: LoaderSettings) -> str:
    changes = [f"{k}: {getattr(old, k)!r} -> {getattr(new, k)!r}" for k in (f.name for f in dataclasses.fields(LoaderSettings))
               if getattr(old, k) != getattr(new, k)]
    return "; ".join(changes) or "no change"


def machine_line(facts: MachineFacts) -> str:
    """One line naming the machine: host, CPU budget, RAM, /dev/shm, GPUs, torch."""
    host = facts.label or facts.platform.hostname.get("this machine")
    gpus = facts.gpu.devices
    gpu = f"{len(gpus)}x {gpus[0].name.get('GPU')}" if gpus else "no GPU"
    if facts.torch.installed.get():
        torch = f"torch {facts.torch.version.get('(version unknown)')}"
    else:
        torch = "torch not installed" if facts.torch.installed.known else "torch unknown"
    return (
        f"{host}: {fmt_cpus(facts.cpu.budget)} CPUs ({facts.cpu.budget_source}), "
        f"{fmt_bytes(facts.memory.budget)} RAM available, /dev/shm {fmt_bytes(facts.shm.free.get())} free, "
        f"{gpu}, {torch}"
    )
