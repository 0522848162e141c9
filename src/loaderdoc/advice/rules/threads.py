"""Threads: the training process's intra-op pool (torch's OpenMP threads) beside its workers.

torch starts one intra-op thread per CPU it sees (the affinity set, see ``system/threads.py``), blind
to a cgroup quota and to the other ranks on the node. Where that pool alone wants more CPUs than the
rank has, its threads, spinning while they wait for work, take the CPUs the DataLoader workers need.
"""

from __future__ import annotations

import math

from loaderdoc import policy
from loaderdoc.advice.findings import WARNING, Finding
from loaderdoc.advice.rules.cpu import cpu_evidence
from loaderdoc.advice.rules.registry import Inputs, found, judged_by_the_run, rule
from loaderdoc.base.units import cpus_text


@rule("threads-oversubscribed", WARNING, "torch's intra-op threads alone exceed the rank's CPUs", "machine",
      "the training process's intra-op threads as torch will size them (MKL_NUM_THREADS, else "
      "OMP_NUM_THREADS, else one per CPU of the affinity set, capped at the physical cores) above 1 and above "
      "the CPUs one rank may use (the least of os.cpu_count(), the affinity set and the cgroup quota, divided "
      "by the ranks on this node); a pool that fits the budget leaves its split with the workers to a "
      "measurement (loaderdoc tune); in a watched run its CPU accounting decides: the finding proposes fewer "
      "threads where the run's model (loaderdoc.watching.cpu_use) expects >= 5 % more steps/s, and otherwise "
      "fires only where the pool alone exceeds the CPUs, with what the run measured")
def _threads_oversubscribed(i: Inputs) -> Finding | None:
    if i.watch is not None:
        # the facts are the launcher's environment, which --apply may have changed for the run
        return judged_by_the_run("threads-oversubscribed", i) if i.cpu_use is not None else None
    reading = i.facts.torch.intra_op_threads
    threads, per_rank = reading.get(), i.per_rank
    if threads is None or per_rank is None or not policy.threads_oversubscribed(threads, per_rank):
        return None
    if i.settings is not None:
        workers, whose = i.settings.num_workers, "the config's num_workers"
    else:
        workers, whose = policy.workers_for_cpus(i.facts)[0], "the count recommended for this machine"
    k = policy.thread_target(per_rank, workers)
    each = " per rank" if i.ranks > 1 else ""
    evidence = [f"intra-op threads: {threads} ({reading.source})",
                f"DataLoader workers: {workers} ({whose})"] + cpu_evidence(i)
    wanting = f"{threads} threads + {policy.workers_text(workers)} = {threads + workers} wanting a CPU"
    if i.ranks > 1:
        evidence.append(f"{i.ranks} ranks x ({threads} threads + {policy.workers_text(workers)}) = "
                        f"{i.ranks * (threads + workers)} on this node's {cpus_text(per_rank * i.ranks)}")
    evidence.append(f"{wanting}{each} during a CPU step, on {cpus_text(per_rank)}{each}")
    cause = ("torch sizes its intra-op pool from the CPUs it sees (the affinity set), not from a cgroup quota "
             "or the ranks sharing the node. While the training process runs CPU ops, its pool threads spin "
             "waiting for work and take the CPUs the DataLoader workers need")
    if i.facts.cpu.budget_source == "cgroup quota":
        cause += "; past the quota the kernel throttles the whole container"
    cause += "."
    # torch follows MKL_NUM_THREADS over OMP_NUM_THREADS: name the variable that sizes the pool
    variable = "MKL_NUM_THREADS" if reading.source.startswith("MKL_NUM_THREADS") else "OMP_NUM_THREADS"
    if workers == 0:
        split = f"with 0 workers nothing else loads, so the pool may have the rank's whole {cpus_text(per_rank)}"
    elif workers < math.floor(per_rank):
        split = f"{k} thread{'s' if k > 1 else ''} + {policy.workers_text(workers)} fill the {cpus_text(per_rank)}{each}"
    else:  # the workers alone take every CPU: how many is cpu-oversubscribed's question
        split = f"1 thread, the least there is, as {policy.workers_text(workers)} already take every CPU"
    fix = (f"Set {variable}={k} in the job's environment (or call torch.set_num_threads({k}) at the top of the "
           f"training script{', in every rank' if i.ranks > 1 else ''}): {split}. The gain depends on how much CPU work the step does; "
           "measure it with 'loaderdoc tune'.")
    return found(WARNING, f"torch's intra-op pool runs {threads} threads{each} on {cpus_text(per_rank)}{each}",
                 evidence, cause, fix, {"torch_threads": k})
