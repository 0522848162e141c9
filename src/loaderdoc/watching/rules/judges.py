"""The watch feature's judgement of two general rules on a watched run (registered in the catalogue's
WATCHED_JUDGES): where a run was measured, its CPU accounting, not the counts, says whether workers
contend for the CPUs (cpu-oversubscribed) and whether fewer intra-op threads would be faster
(threads-oversubscribed)."""

from __future__ import annotations

from loaderdoc import policy
from loaderdoc.advice.findings import WARNING, Finding
from loaderdoc.advice.rules.cpu import cpu_evidence
from loaderdoc.advice.rules.registry import WATCHED_JUDGES, Inputs, found
from loaderdoc.base.units import cpus_text, fmt_bytes
from loaderdoc.policy import workers_text
from loaderdoc.watching.cpu_use import CpuUse
from loaderdoc.watching.rules.run import cpu_lines, spin_line, threads_fix, workers_needed


def _oversubscribed(i: Inputs) -> Finding | None:
    use, per_rank = i.cpu_use, i.per_rank
    if use is None or per_rank is None or i.settings is None:
        return None
    return _watched_oversubscribed(i, use, i.settings.num_workers, per_rank)


def _threads(i: Inputs) -> Finding | None:
    return _watched_threads(i, i.cpu_use) if i.cpu_use is not None else None


def _watched_oversubscribed(i: Inputs, use: CpuUse, n: int, per_rank: float) -> Finding | None:
    """More workers than CPUs in a watched run: a finding only where the CPU time shows them
    contend (loading is CPU work and the CPUs were saturated); the fix is the CPU cap the data-starved
    rule never proposes more than, so one run's fix is not undone by the next's."""
    cap = use.worker_cap
    if cap is None or not use.saturated_by_itself or n <= cap:
        # workers that mostly wait (I/O) do not contend for CPUs, and where others' processes fill the
        # CPUs a run cannot tell CPU-bound workers that kept up from waiting ones: more are fine
        return None
    evidence = [f"num_workers = {n}"] + cpu_evidence(i) + cpu_lines(use)
    peaks = [e.workers_pss_max_bytes for e in i.watch.epochs if e.workers_pss_max_bytes]
    pss = max(peaks) if peaks else None
    saving = f"; {n - cap} fewer worker processes" + (
        f" (about {fmt_bytes(pss * (n - cap) // n)} of the {fmt_bytes(pss)} they held)" if pss else "")
    return found(
        WARNING,
        f"{n} workers{' per rank' if i.ranks > 1 else ''} on {cpus_text(per_rank)}: the workers contend for the CPUs",
        evidence,
        f"Loading is CPU work and the CPUs were saturated: {n} workers and the training process take turns on "
        f"{cpus_text(per_rank)}, so the extra workers add memory and context switches, not batches.",
        f"Use {workers_text(cap)}{' per rank' if i.ranks > 1 else ''}: expected about the same "
        f"{use.rate:.1f} steps/s (the CPUs, not the worker count, set the pace){saving}; check it with "
        "'loaderdoc watch --apply'.",
        policy.fewer_workers(cap),
        expected_gain=1.0,
    )


def _watched_threads(i: Inputs, use: CpuUse) -> Finding | None:
    """The intra-op threads judged by a watched run's CPU accounting (``use``, a CpuUse): a measurement
    outranks the rule of thumb. It fires where the run's model expects fewer threads to gain >= 5 %
    (the change and its gain, the same :meth:`CpuUse.best_setting` watch-data-starved reads), or where
    the pool alone exceeds the rank's CPUs (then with what the run measured, and 'loaderdoc tune' to
    measure the gain, which the run cannot predict)."""
    threads, per_rank, w = use.torch_threads, i.per_rank, i.watch
    if not threads or threads <= 1 or per_rank is None or w is None:
        return None
    best = use.best_setting(workers_needed(w))
    proposes = best is not None and best[1] is not None
    if not proposes and use.step_is_cpu and policy.busy(use.others_cpus, per_rank):
        return _threads_beside_load(i, use, threads, per_rank)
    if not proposes and not policy.threads_oversubscribed(threads, per_rank):
        return None
    each = " per rank" if i.ranks > 1 else ""
    evidence = [f"torch.get_num_threads() = {threads} in the training process (read by the hook as each epoch began)",
                f"DataLoader workers: {use.workers}"] + cpu_evidence(i)
    if use.spin_s > 0.0:
        evidence.append(spin_line(use))
    if use.parallel_share is not None:
        evidence.append(f"the step: {use.step_cpu_s * 1000:.0f} ms of CPU in {use.step_wall_s * 1000:.0f} ms on "
                        f"{threads} threads: about {use.parallel_share:.0%} of it runs in parallel")
    cause = ("torch sizes its intra-op pool from the CPUs it sees. Its threads spin while they wait for the next op, "
             "and beside busy DataLoader workers each parallel op waits for the thread that lost its CPU")
    if not proposes:
        k = policy.thread_target(per_rank, use.workers)
        fix = (f"Cap them: OMP_NUM_THREADS={k} in the job's environment (or torch.set_num_threads({k})){each}. This "
               "run cannot predict the gain (its step shared the CPUs with the workers, which hides how it scales): "
               "measure it with 'loaderdoc tune', which tries the thread count on the real job.")
        return found(WARNING, f"{w.name}: torch's intra-op pool runs {threads} threads on {cpus_text(per_rank)}{each}",
                     evidence, cause + ".", fix)
    n, k, rate = best
    gain = rate / use.rate
    change = {"torch_threads": k}
    what = threads_fix(use, k)
    if n != use.workers:
        change = {**policy.fewer_workers(n), **change}
        what = f"raise num_workers from {use.workers} to {n} and {what}"
    fix = (f"{what[0].upper()}{what[1:]}: expected about {rate:.1f} steps/s, {gain:.2f}x the {use.rate:.1f} measured "
           "(the CPU accounting's estimate; its step time counts the pool's spin between ops as work, so fewer "
           "threads are predicted on the slow side); check it with 'loaderdoc watch --apply' or 'loaderdoc tune'.")
    return found(WARNING, f"{w.name}: {threads} intra-op threads{each} beside {policy.workers_text(n)} on "
                 f"{cpus_text(per_rank)}: {k} would be faster", evidence, cause + ".", fix, change, expected_gain=gain)


def _threads_beside_load(i: Inputs, use: CpuUse, threads: int, per_rank: float) -> Finding | None:
    """A CPU step on several intra-op threads beside other processes' load: the model cannot say what
    fewer threads would do (each parallel op waits for the thread the kernel gave away), so the change
    is proposed without a gain, for the next run to measure. Beside a process spinning on one of the 2
    CPUs the ImageNet script's 0-worker run ran 1.1 steps/s at 2 threads in watch (0.1-0.2 in tune's
    trials) and 3.5 at 1 thread, where this run's model had said fewer threads would be no better."""
    k = max(1, min(threads - 1, int(per_rank - use.others_cpus)))
    each = " per rank" if i.ranks > 1 else ""
    evidence = [f"torch.get_num_threads() = {threads} in the training process (read by the hook as each epoch began)",
                f"other processes kept {use.others_cpus:.2f} of the {cpus_text(per_rank)} busy during the run"]
    evidence += [line for line in cpu_lines(use) if line.startswith("the step")]
    return found(
        WARNING,
        f"{i.watch.name}: its step's {threads} intra-op threads{each} ran beside other processes' load "
        f"({use.others_cpus:.1f} of the {cpus_text(per_rank)})",
        evidence,
        "Each parallel op of the step waits for its slowest thread, and beside other processes' load that is a thread "
        "the kernel gave their CPU to: the step can run many times slower than with fewer threads, which no model "
        "of this run predicts.",
        f"Try {threads_fix(use, k)}: this run cannot predict the gain, so measure it ('loaderdoc watch --apply' the "
        "--fixes file, or 'loaderdoc tune', which tries the thread count on the real job).",
        {"torch_threads": k},
    )


WATCHED_JUDGES["cpu-oversubscribed"] = _oversubscribed
WATCHED_JUDGES["threads-oversubscribed"] = _threads
