"""Worker memory that had not settled when the probe measured it."""

from __future__ import annotations

from loaderdoc import policy
from loaderdoc.advice.findings import WARNING, Finding
from loaderdoc.advice.rules.registry import Inputs, describe, found, rule
from loaderdoc.base.units import fmt_bytes

_TUNABLE = f"GLIBC_TUNABLES=glibc.malloc.mmap_threshold={policy.MALLOC_MMAP_THRESHOLD}"


MALLOC_CAUSE = ("glibc's malloc keeps freed memory for reuse. An allocation above its mmap threshold (128 KiB at "
                "first) gets pages of its own, given back on free; but each such free raises the threshold to that "
                "size, so from then on sample-sized buffers come from the heap, which is only given back from its "
                "top. Each worker's heap grows batch after batch until fragmentation settles, which can take many "
                "times a sample's size per worker.")


def malloc_fix(measure: str) -> str:
    """The fix for memory malloc holds in the workers, and how to ``measure`` it."""
    return (f"Start training with {_TUNABLE} in its environment (MALLOC_MMAP_THRESHOLD_={policy.MALLOC_MMAP_THRESHOLD} "
            "on older glibc): a fixed threshold is never raised, so sample buffers are mapped and given back "
            f"(mapping each afresh costs some speed). Measure both: {measure}. If the workers' memory still grows "
            "with it, the memory is live: a cache or a leak in the dataset.")


@rule("worker-memory-growing", WARNING, "Worker memory was still growing when the probe measured it", "probe",
      f"measured by the probe: the workers' summed PSS rose through a steady window to >= "
      f"{policy.WORKER_GROWTH_RATIO:g} x its first reading and >= {fmt_bytes(policy.WORKER_GROWTH_MIN_BYTES)} "
      f"above it, and above one batch a worker (loaderdoc.policy.still_growing); malloc is named when the "
      f"workers' heaps grew by >= {policy.HEAP_HELD_SHARE:.0%} of that rise between the same samples and, where "
      f"malloc counts it, >= {policy.HEAP_HELD_SHARE:.0%} of that is free (policy.heap_held)")
def _worker_memory_growing(i: Inputs) -> Finding | None:
    if i.probe is None:
        return None
    growing = [r for r in i.probe.results if policy.still_growing(r)]
    if not growing:
        return None
    subject = i.subject
    mine = [r for r in growing if i.settings is not None and policy.same_stream(r.settings, i.settings)]
    picked = [r for r in growing if i.probe.recommended is not None
              and policy.same_stream(r.settings, i.probe.recommended)]
    if i.settings is not None and subject is not None and not mine:
        return None  # the user's own settings were measured, and their workers' memory settled
    r = (mine or picked or sorted(growing, key=lambda x: x.worker_memory_growth.per_s))[-1]
    g = r.worker_memory_growth
    evidence = [f"{describe(r.settings)}: workers' PSS {fmt_bytes(g.first_bytes)} -> {fmt_bytes(g.last_bytes)} in "
                f"{g.seconds:.1f} s of the steady window (+{fmt_bytes(g.per_s)}/s), still rising when it ended"]
    others = len({policy.stream_key(x.settings) for x in growing}) - 1
    if others:
        evidence.append(f"{others} more configuration{'s' * (others > 1)} measured grew the same way")
    sample = i.probe.workload.sample_bytes
    if sample:
        evidence.append(f"one sample: {fmt_bytes(sample)}")
    held = policy.heap_held(g.heap_rise_bytes, g.last_bytes - g.first_bytes, g.malloc_free_bytes)
    if held and g.malloc_arena_bytes is not None:
        evidence.append(f"in the same {g.seconds:.1f} s malloc's arenas in the workers grew by "
                        f"{fmt_bytes(g.heap_rise_bytes)} (mallinfo2 in each worker); at the last sample they held "
                        f"{fmt_bytes(g.malloc_arena_bytes)}, {fmt_bytes(g.malloc_free_bytes or 0)} of it free: kept "
                        "for reuse, not given back")
    elif held:
        evidence.append(f"in the same {g.seconds:.1f} s the workers' malloc heaps ([heap] in /proc/<pid>/maps) "
                        f"grew by {fmt_bytes(g.heap_rise_bytes)}"
                        + (f", {fmt_bytes(g.heap_grown_bytes)} since they started" if g.heap_grown_bytes else ""))
    if held:
        cause = MALLOC_CAUSE + " The probe's memory figures are a floor, and so are the memory fits computed from them."
        fix = malloc_fix(f"`{_TUNABLE} loaderdoc probe ...` (the probe's workers inherit it)")
    else:
        cause = ("Something in the workers holds more memory with every batch: a cache in the dataset, a leak, or "
                 "copy-on-read (reading the dataset's Python objects writes their reference counts, which copies "
                 "the pages they live on into each worker). The probe's memory figures are a floor.")
        fix = ("Keep the dataset's index in numpy arrays (or Arrow, or a memory-mapped file) instead of lists and "
               "dicts of Python objects; bound any cache; watch a real run (`loaderdoc watch`) to see where the "
               "memory settles.")
    return found(WARNING, f"Worker memory was still growing when the probe measured it "
                          f"(+{fmt_bytes(g.per_s)}/s with {policy.workers_text(r.settings.num_workers)})",
                 evidence, cause, fix)
