"""Shared memory: the batches in flight against /dev/shm."""

from __future__ import annotations

from typing import Any

from loaderdoc import policy
from loaderdoc.advice.findings import CRITICAL, WARNING, Finding
from loaderdoc.advice.rules.registry import (
    SHM_ERROR_MARKERS,
    SHM_SMALL_BYTES,
    Inputs,
    change_text,
    describe,
    found,
    rule,
)
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import GiB, fmt_bytes, shm_size_flag
from loaderdoc.policy import (
    SHM_SAFE_SHARE,
    ZERO_WORKERS,
)
from loaderdoc.probing.result import ConfigResult


def _shm_error(i: Inputs) -> ConfigResult | None:
    if i.probe is None:
        return None
    for r in i.probe.results:
        text = f"{r.error or ''}\n{r.traceback or ''}".lower()
        if r.status == "failed" and any(m in text for m in SHM_ERROR_MARKERS):
            return r
    return None


def _shm_command(i: Inputs, needed: float) -> str:
    size = shm_size_flag(needed)
    kind = i.facts.container.kind.get()
    if kind == "kubernetes":
        return (f"mount a memory-backed emptyDir at /dev/shm (emptyDir: {{medium: Memory, sizeLimit: {size[:-1]}Gi}}) "
                "in the pod spec")
    if kind == "podman":
        return f"podman run --shm-size={size} ... (or --ipc=host)"
    return f"docker run --shm-size={size} ... (or --ipc=host to share the host's /dev/shm)"


def _fit_in_shm(i: Inputs) -> dict[str, Any]:
    """The settings change that keeps the batches in flight within the policy's room (empty when
    these settings already fit: then the fix is more /dev/shm)."""
    assert i.settings is not None and i.batch_bytes
    n, pf = i.settings.num_workers, i.settings.effective_prefetch_factor
    workers, prefetch, limited, _ = policy.fit_in_flight(n, pf, i.batch_bytes, i.room)
    if not limited:
        return {}
    if workers == 0:
        return dict(ZERO_WORKERS)
    change: dict[str, Any] = {"num_workers": workers} if workers != n else {}
    change["prefetch_factor"] = prefetch
    return change


@rule("shm-too-small", CRITICAL, "/dev/shm too small for the batches in flight", "machine",
      "workers pass every batch through /dev/shm: num_workers x prefetch_factor x batch bytes (x ranks on "
      f"the node) must fit in free /dev/shm (critical) and in {SHM_SAFE_SHARE:.0%} of it (warning; the policy's "
      "margin for transient tensors and other processes); without a batch size, "
      f"/dev/shm under {fmt_bytes(SHM_SMALL_BYTES)} cannot hold torch's default 2 workers x 2 batches of "
      "64 x 3x224x224 float32 (4 x 36.8 MiB)")
def _shm_too_small(i: Inputs) -> Finding | None:
    shm = i.facts.shm
    free = shm.free.get(shm.total.get())
    total = shm.total.get()
    failed = _shm_error(i)
    shm_line = f"{shm.path}: {fmt_bytes(total)} total, {fmt_bytes(shm.free.get())} free"
    if shm.looks_like_docker_default:
        shm_line += " (Docker's 64 MiB default)"
    if failed is not None:
        evidence = [f"the probe's {describe(failed.settings)} failed: {failed.error or 'worker died'}", shm_line]
        batch = i.batch_bytes or getattr(failed, "batch_bytes", None)
        needed = (batch or 0) * max(1, failed.settings.batches_in_flight) * i.ranks
        if batch:
            evidence.append(f"{failed.settings.batches_in_flight} batches in flight x {fmt_bytes(batch)}"
                            f" = {fmt_bytes(needed / i.ranks)}")
        # critical for settings holding at least as many batches as the run that failed; settings
        # without workers never touch /dev/shm, so for them it only says workers are out of reach
        s = i.settings
        if s is not None and s.num_workers == 0:
            return found(
                WARNING,
                "Workers can't be used on this machine yet: the probe's worker runs ran out of shared memory",
                evidence,
                "These settings load in the main process and don't use /dev/shm, but every batch a worker "
                "prepares must fit there.",
                f"To use workers, give the container more shared memory: {_shm_command(i, max(needed, GiB / 2))}.",
                {},
            )
        same_or_more = s is None or s.batches_in_flight >= failed.settings.batches_in_flight
        return found(
            CRITICAL if same_or_more else WARNING,
            "DataLoader workers ran out of shared memory (Bus error / unable to allocate shared memory)",
            evidence,
            "Each worker hands its batches to the training process through /dev/shm; when the batches in "
            "flight don't fit, the worker is killed by SIGBUS or the allocation fails.",
            f"Give the container more shared memory: {_shm_command(i, max(needed, GiB / 2))}; "
            "or lower num_workers / prefetch_factor / batch_size.",
            _fit_in_shm(i) if (s and s.num_workers and i.batch_bytes and free is not None) else {},
        )
    if free is None:
        return None
    if i.settings is not None and i.settings.num_workers == 0:
        return None  # the main process loads; nothing goes through /dev/shm
    if i.settings is None and i.batch_bytes:
        # a batch size but no settings (`check --batch-size N --sample-shape ...`): judge the usual
        # start with workers, 2 workers x torch's prefetch 2; there are no settings to change
        usual = LoaderSettings(batch_size=None, num_workers=2, prefetch_factor=2)
        usual_finding = _shm_too_small(Inputs(i.facts, usual, i.batch_bytes, None, i.context))
        if usual_finding is not None:
            usual_finding.evidence.insert(0, "no DataLoader settings given: judged for 2 workers x prefetch_factor 2")
            usual_finding.settings_change = {}
        return usual_finding
    if i.settings is None or not i.batch_bytes:
        # machine-level: no batch size, so only a /dev/shm too small for any image batch speaks;
        # a watched run that measured /dev/shm is judged on that (watch-shm-nearly-full) instead
        measured = i.watch is not None and i.watch.shm_peak_used_bytes is not None
        if total is None or total >= SHM_SMALL_BYTES or measured:
            return None
        return found(
            WARNING,
            f"/dev/shm is only {fmt_bytes(total)}: workers will crash with 'Bus error' on image-sized batches",
            [shm_line, "4 batches in flight (2 workers x prefetch 2) of 64 x 3x224x224 float32 "
             f"= 4 x {fmt_bytes(64 * 3 * 224 * 224 * 4)} = {fmt_bytes(4 * 64 * 3 * 224 * 224 * 4)}"],
            "DataLoader workers pass every batch through /dev/shm.",
            f"Enlarge it: {_shm_command(i, SHM_SMALL_BYTES)}; pass --batch-size and --sample-shape for an "
            "exact check.",
            {},
        )
    s = i.settings
    inflight = s.batches_in_flight
    per_rank = inflight * i.batch_bytes
    needed = per_rank * i.ranks
    if policy.shm_level(needed, free) == "fits":
        return None
    formula = (f"{s.num_workers} workers x prefetch {s.effective_prefetch_factor} x {fmt_bytes(i.batch_bytes)} "
               f"= {fmt_bytes(per_rank)}")
    evidence = [formula]
    if i.ranks > 1:
        evidence.append(f"x {i.ranks} ranks on this node sharing one /dev/shm = {fmt_bytes(needed)}")
    evidence.append(shm_line)
    critical = policy.shm_level(needed, free) == "over"
    fit = _fit_in_shm(i)
    return found(
        CRITICAL if critical else WARNING,
        (f"The batches in flight ({fmt_bytes(needed)}) don't fit in /dev/shm ({fmt_bytes(free)} free): "
         "expect 'Bus error' / 'unable to allocate shared memory'") if critical else
        (f"The batches in flight take {needed / free:.0%} of free /dev/shm ({fmt_bytes(needed)} of "
         f"{fmt_bytes(free)}): little margin before 'Bus error'"),
        evidence,
        "Every batch a worker has prepared waits in /dev/shm until the training loop takes it; the batch "
        "being consumed (and other programs) need room too.",
        f"Give the container more shared memory: {_shm_command(i, needed)}"
        + (f"; or hold fewer batches in flight: {change_text(fit)} fits {SHM_SAFE_SHARE:.0%} of the free space."
           if fit else "."),
        fit,
    )
