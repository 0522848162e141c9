"""GPUs and pinned memory: a usable GPU, a CUDA build of torch, pinned copies."""

from __future__ import annotations

from loaderdoc.advice.findings import WARNING, Finding
from loaderdoc.advice.rules.registry import (
    H2D_MIN_SAVING,
    Inputs,
    found,
    gpu_absence_known,
    rule,
)
from loaderdoc.base.units import fmt_bytes


@rule("pin-memory-without-gpu", WARNING, "pin_memory=True with no usable GPU", "settings",
      "facts.usable_gpus == 0 (NVML sees no GPU, or torch is a CPU-only build): torch only warns and "
      "skips pinning")
def _pin_without_gpu(i: Inputs) -> Finding | None:
    if i.settings is None or not i.settings.pin_memory or not gpu_absence_known(i.facts):
        return None
    evidence = [f"NVIDIA GPUs visible: {i.facts.gpu.count}"]
    if not i.facts.gpu.nvml.known:
        evidence.append(f"NVML: {i.facts.gpu.nvml.unknown}")
    build = i.facts.torch.cuda_build
    if i.facts.torch.installed.get() is False:
        evidence.append("torch is not installed in this environment")
    elif build.known:
        evidence.append(f"torch build: CUDA {build.value}" if build.value else "torch build: CPU-only")
    cause = "Pinned (page-locked) memory only speeds up copies to a GPU; there is none this process can use."
    if i.facts.gpu.count > 0:
        cause += " GPUs are visible, but the installed torch was built without CUDA."
    return found(
        WARNING,
        "pin_memory=True but no GPU is usable here: it does nothing except print a warning",
        evidence,
        cause,
        "Set pin_memory=False on this machine (keep it True where you train on a GPU)"
        + ("; or install a CUDA build of torch to use the GPUs." if i.facts.gpu.count > 0 else "."),
        {"pin_memory": False},
    )


@rule("gpu-without-cuda-torch", WARNING, "GPUs visible but torch is a CPU-only build", "machine",
      "NVML lists GPUs while the installed torch has no CUDA build (torch.version.cuda is None)")
def _gpu_without_cuda_torch(i: Inputs) -> Finding | None:
    t = i.facts.torch
    if i.watch is not None:  # a run's launcher reads its own torch, which need not be the command's
        return None
    if i.facts.gpu.count == 0 or not (t.installed.get() and t.cuda_build.known) or t.cuda_build.value:
        return None
    name = i.facts.gpu.devices[0].name.get("GPU")
    return found(
        WARNING,
        f"{i.facts.gpu.count} x {name} visible, but torch {t.version.get('?')} can't use them",
        [f"NVML: {i.facts.gpu.count} GPU(s), driver {i.facts.gpu.driver_version.get('?')}",
         f"torch {t.version.get('?')}: built without CUDA"],
        "A CPU-only torch wheel was installed (e.g. from the /whl/cpu index); training runs on the CPU.",
        "Install a CUDA build that the driver supports, e.g. `pip install torch --index-url "
        "https://download.pytorch.org/whl/cu128`.",
        {},
    )


@rule("cuda-torch-without-driver", WARNING, "Training on CUDA requested, but no NVIDIA driver answers", "context",
      "context.device == 'cuda' while NVML finds no GPU: the script will fail at .cuda() or fall back to CPU")
def _cuda_without_driver(i: Inputs) -> Finding | None:
    if i.context.device != "cuda" or i.facts.gpu.count > 0:
        return None
    t = i.facts.torch
    evidence = ["context: device = 'cuda'", f"NVIDIA GPUs visible: {i.facts.gpu.count}",
                f"NVML: {i.facts.gpu.nvml.unknown or 'no GPUs listed'}"]
    if t.cuda_build.known:
        evidence.append(f"torch build: CUDA {t.cuda_build.value}" if t.cuda_build.value else "torch build: CPU-only")
    return found(
        WARNING,
        "The training step is meant to run on CUDA, but this machine shows no usable NVIDIA GPU",
        evidence,
        "Without a loaded NVIDIA driver (or with CUDA_VISIBLE_DEVICES hiding the GPUs) torch.cuda is "
        "unavailable.",
        "Check `nvidia-smi`; in a container, start it with `--gpus all` (Docker) or request "
        "nvidia.com/gpu in the pod spec.",
        {},
    )


@rule("pin-memory-off-slow-copy", WARNING, "pin_memory off while host-to-device copies are slow", "probe",
      f"the probe's measured copy of one batch: pinned at least {H2D_MIN_SAVING:.0%} faster than pageable and "
      "the saving at least 10% of the step (or 1 ms when no step is simulated)")
def _pin_off_slow_copy(i: Inputs) -> Finding | None:
    # no GPU check: host-to-device copy times exist only where the probe had a CUDA device
    if i.settings is None or i.settings.pin_memory or i.probe is None or not i.same_batch_as_probe:
        return None
    pairs = [(r.h2d_pageable_ms, r.h2d_pinned_ms) for r in i.probe.results
             if r.h2d_pageable_ms is not None and r.h2d_pinned_ms is not None]
    if not pairs:
        return None
    pageable = sorted(p for p, _ in pairs)[len(pairs) // 2]
    pinned = sorted(q for _, q in pairs)[len(pairs) // 2]
    saving = pageable - pinned
    step = i.step_ms
    floor = 0.1 * step if step else 1.0
    if saving < H2D_MIN_SAVING * pageable or saving < floor:
        return None
    evidence = [f"copy of one {fmt_bytes(i.probe.workload.batch_bytes)} batch to the GPU: {pageable:.1f} ms pageable, "
                f"{pinned:.1f} ms pinned (measured by the probe)"]
    if step:
        evidence.append(f"simulated training step: {step:g} ms; pinning saves {saving / step:.0%} of it")
    return found(
        WARNING,
        f"Each batch spends {saving:.1f} ms more than needed on its way to the GPU",
        evidence,
        "Pageable memory is copied through a staging buffer; page-locked memory can be copied by DMA "
        "directly and asynchronously.",
        "Set pin_memory=True and move batches with .to(device, non_blocking=True).",
        {"pin_memory": True},
    )
