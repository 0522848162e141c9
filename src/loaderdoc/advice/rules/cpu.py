"""CPU: workers against the CPUs one rank may use (the cgroup quota included)."""

from __future__ import annotations

from loaderdoc import policy
from loaderdoc.advice.findings import WARNING, Finding
from loaderdoc.advice.rules.registry import (
    QUOTA_HIDDEN_RATIO,
    Inputs,
    found,
    judged_by_the_run,
    rule,
)
from loaderdoc.base.units import cpus_text
from loaderdoc.policy import (
    BEYOND_CPUS_PAYS,
    fewer_workers,
    worker_target,
    workers_text,
)


def cpu_evidence(i: Inputs) -> list[str]:
    cpu = i.facts.cpu
    out = [f"effective CPU budget: {cpus_text(cpu.budget)} (limited by {cpu.budget_source})"]
    if cpu.logical.get() is not None:
        out.append(f"os.cpu_count() = {cpu.logical.value} (what torch and most scripts count)")
    quota = cpu.cgroup_quota.get()
    if quota is not None:
        out.append(f"cgroup CPU quota: {cpus_text(float(quota))} ({cpu.cgroup_quota.source or 'cgroup'})")
    per_task = getattr(i.facts.distributed, "cpus_per_task", None)
    if per_task is not None and per_task.get():
        out.append(f"SLURM_CPUS_PER_TASK = {per_task.value} (each Slurm task owns its CPUs)")
    if i.ranks > 1:
        launcher = i.facts.distributed.launcher.get() or "launcher"
        per_rank = i.per_rank
        out.append(f"{i.ranks} ranks on this node ({launcher}): "
                   + (f"{cpus_text(per_rank)} per rank" if per_rank is not None else "CPUs per rank unknown"))
    return out


@rule("cpu-oversubscribed", WARNING, "More workers than CPUs", "settings",
      "num_workers above the CPUs one rank may use: the least of os.cpu_count(), the affinity set and "
      "the cgroup quota, divided by the ranks on this node (torch's own warning counts the affinity set only); "
      f"silent when the probe measured a worker count above that budget at least {BEYOND_CPUS_PAYS - 1:.0%} "
      "faster than one at or above it (I/O-bound workers: CPU-bound work cannot speed up past its CPUs; "
      f"{BEYOND_CPUS_PAYS - 1:.0%} clears the ~10% run-to-run noise of probe runs on a busy machine)")
def _cpu_oversubscribed(i: Inputs) -> Finding | None:
    if i.settings is None or i.settings.num_workers <= 0:
        return None
    per_rank = i.per_rank
    n = i.settings.num_workers
    if per_rank is None or not policy.oversubscribed(n, per_rank):
        return None  # no CPU count was read, or within the budget
    if i.cpu_use is not None:  # a measured run: its CPU time, not the count, says whether workers contend
        return judged_by_the_run("cpu-oversubscribed", i)
    target = worker_target(per_rank)
    evidence = [f"num_workers = {n}"] + cpu_evidence(i)
    if i.ranks > 1:
        evidence.append(f"{n} workers x {i.ranks} ranks = {n * i.ranks} worker processes on this node")
    if i.probe is not None:
        if policy.beyond_cpus_evidence(i.probe.results, per_rank) is not None:
            return None  # measured: throughput keeps rising past the CPU count (workers wait on I/O)
        measured = sorted((r for r in i.probe.ok_results if r.batches_per_s and r.settings.num_workers > 0),
                          key=lambda r: r.settings.num_workers)
        if measured:
            evidence.append("measured: " + ", ".join(
                f"{r.settings.num_workers} workers {r.batches_per_s:.1f} batches/s" for r in measured))
    fix_text = ("(one CPU left for the training process)" if per_rank >= 2
                else "(sharing the CPU with the training process)")
    change = fewer_workers(target)
    choice = i.choice if i.same_batch_as_probe else None
    if choice is not None and choice.workers > 0 and not choice.oversubscribed:
        # measurement outranks the rule of thumb: the policy's pick among what the probe measured
        target = choice.workers
        fix_text = f"(the cheapest measured within {choice.tolerance:.0%} of the fastest that fits the CPUs)"
        change = policy.key_change(i.settings, choice.key)
    quota = i.facts.cpu.cgroup_quota.get()
    cause = (
        f"{n} workers (plus the training process) compete for {cpus_text(per_rank)}; they take turns, "
        "each batch takes longer, and the context switching and memory cost buys nothing."
    )
    if quota is not None and float(quota) < float(i.facts.cpu.logical.get(0) or 0):
        cause += " The cgroup quota throttles the container when it is exceeded; os.cpu_count() does not see it."
    return found(
        WARNING,
        f"{n} workers{' per rank' if i.ranks > 1 else ''} on {cpus_text(per_rank)}: the loader is oversubscribed",
        evidence,
        cause,
        f"Use at most {workers_text(target)}{' per rank' if i.ranks > 1 else ''} {fix_text}"
        "; if the step still waits for data, make each batch cheaper rather than adding workers.",
        change,
    )


@rule("cpu-quota-hidden", WARNING, "A cgroup CPU quota far below os.cpu_count()", "machine",
      f"cgroup quota below {QUOTA_HIDDEN_RATIO:.0%} of os.cpu_count(): torch sizes its thread pool and most "
      "scripts size num_workers from the host count, which the quota does not change (machine-level: with "
      "a config, cpu-oversubscribed judges its num_workers instead)")
def _cpu_quota_hidden(i: Inputs) -> Finding | None:
    if i.settings is not None:
        return None
    quota = i.facts.cpu.cgroup_quota.get()
    logical = i.facts.cpu.logical.get()
    if quota is None or logical is None or float(quota) >= QUOTA_HIDDEN_RATIO * float(logical):
        return None
    q = float(quota)
    per_rank = i.per_rank
    if per_rank is None:
        return None
    target = worker_target(per_rank)
    threads = i.facts.torch.intra_op_threads.get()
    if threads is None:  # the pool's size was not read: say what it should be, beside these workers
        k = policy.thread_target(per_rank, target)
        pool = f", and set OMP_NUM_THREADS={k} (or torch.set_num_threads({k})) for the training process."
    elif policy.threads_oversubscribed(threads, per_rank):
        pool = "; the training process's own threads: see threads-oversubscribed."
    else:
        pool = "."
    return found(
        WARNING,
        f"This container may use {cpus_text(q)} but os.cpu_count() says {logical}",
        cpu_evidence(i),
        "The CPU quota (CFS bandwidth limit) is invisible to os.cpu_count() and os.sched_getaffinity(): "
        f"code that sizes workers or thread pools from them starts ~{logical} of each and is throttled.",
        f"Size from the quota: num_workers <= {target} per rank{pool}",
        {},
    )
