"""CPU accounting of a watched loader: where its CPU time went, and what the CPUs allow.

``loaderdoc watch`` measures, per loader, the training process's CPU time while it waited for
batches and while it stepped (every thread: torch's intra-op pool included), its workers' CPU
time (``/proc/<pid>/stat``, reaped workers through the parent's children's time), and what other
processes took from the CPUs this process may use (``/proc/stat``). From them, against the CPU
budget the rank really has (affinity, cgroup quota, ranks on the node), this module says:

- whether loading is CPU work or waiting (I/O, sleeps), and what it costs per batch;
- whether the step is CPU work too (a CPU-trained model): then loading and the step compete;
- whether the CPUs were saturated, and the ceiling they allow: the CPU seconds one trained batch
  needs (loading + step + hand-over) against the CPUs the process tree can get;
- :meth:`CpuUse.predict`: the steady rate with ``n`` workers, from a small fluid model (below),
  which the ``watch`` rules use so a proposed change states the gain it expects and never one the
  CPUs cannot give.

The model, per trained batch: the step takes its measured wall time and CPU; one worker loads a
batch in its measured wall time, the CPU part of which stretches by ``k / A`` when the ``k``
runnable threads (workers busy loading, the step's threads) outnumber the ``A`` CPUs they get;
``A`` is the budget, or, beside other busy processes, the kernel's fair share ``B k / (k + m)``
(``m``: the CPUs the others took). The rate is the least of: the CPUs' ceiling ``A / cpu_per_batch``,
the serial step plus hand-over, and ``n`` workers' loading. It ignores what no run showed yet
(a multi-threaded step that slows down more than its share when workers take its CPUs: the rules
say so where the step runs on several threads). No torch, no textual; plain numbers in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loaderdoc.policy import cpu_limit

SATURATED_SHARE = 0.9  # the process tree and the others used >= 90 % of the CPUs: saturated
CPU_WORK_SHARE = 0.5  # loading (or the step) is CPU work when >= half its wall time is CPU time
SATURATED_STEP_SHARE = 0.2  # ... the step, where the CPUs were saturated: it waited for them too
GAIN_WORTH = 1.05  # a change is proposed for speed only when it is expected to gain >= 5 %
NEAR_BEST = 0.99  # the fewest workers whose predicted rate is within 1 % of the best (a worker count
#                   that only just keeps up leaves the loop waiting at every hiccup)
CEILING_SHOWN = 3.0  # the CPUs' ceiling is said where it is within 3x of the rate reached
MAX_WORKERS = 64
TINY = 1e-9  # seconds: a divisor that was 0 (a loop whose loading or step took no time) stays finite


@dataclass(frozen=True)
class CpuUse:
    """One loader's CPU accounting (seconds are per batch or per step; CPUs are rates)."""

    workers: int
    budget: float  # the CPUs this rank may use (affinity, quota, ranks on the node)
    step_wall_s: float  # per step
    step_cpu_s: float  # the training process's CPU time per step (all its threads)
    wait_wall_s: float  # per steady batch
    wait_cpu_s: float  # the training process's CPU time while it waited (0 workers: the loading)
    load_cpu_s: float  # CPU time to load one batch (the workers', or the loop's with 0 workers)
    load_queued_s: float | None  # per batch, the workers' time runnable but waiting for a CPU
    used_cpus: float | None  # CPUs this process and its workers used while the loader ran
    others_cpus: float | None  # CPUs other processes took from this process's CPUs meanwhile
    torch_threads: int | None = None
    on_gpu: bool = False  # the run timed its waits on a GPU: the step is GPU work (a spinning sync is no CPU model)

    # ---- what was measured -------------------------------------------------------------------
    @property
    def rate(self) -> float:
        """The steady batches per second the run reached."""
        return 1.0 / max(self.wait_wall_s + self.step_wall_s, TINY)

    @property
    def handover_cpu_s(self) -> float:
        """With workers: the loop's own work to take a ready batch (unpickling it out of shared
        memory), which no worker count removes; 0 without workers (the wait is the loading)."""
        return min(self.wait_cpu_s, self.wait_wall_s) if self.workers else 0.0

    @property
    def idle_wait_s(self) -> float:
        """The wait beyond the hand-over: the loop waiting for a batch not yet loaded."""
        return max(0.0, self.wait_wall_s - self.handover_cpu_s)

    @property
    def idle_share(self) -> float:
        return self.idle_wait_s * self.rate

    @property
    def cpu_per_batch_s(self) -> float:
        """CPU seconds one trained batch needs: its loading, the step, the hand-over."""
        return self.load_cpu_s + self.step_cpu_s + self.handover_cpu_s

    @property
    def step_threads(self) -> float:
        """CPUs the step keeps busy (its CPU time over its wall time, at least one)."""
        return max(1.0, min(self.budget, self.step_cpu_s / self.step_wall_s)) if self.step_wall_s > 0 else 1.0

    @property
    def saturated_by_itself(self) -> bool:
        """This process and its workers alone kept >= 90 % of the rank's CPUs busy."""
        return self.used_cpus is not None and self.used_cpus >= SATURATED_SHARE * self.budget

    @property
    def step_is_cpu(self) -> bool:
        """The step is CPU work (a model trained on the CPU), not a wait for a GPU: half its wall
        time on a CPU, or a fifth where the CPUs were saturated (a CPU step that waits for CPUs
        the workers hold takes longer than its CPU time; a sleeping or GPU-waiting step needs little)."""
        if self.on_gpu:
            return False
        share = SATURATED_STEP_SHARE if self.saturated else CPU_WORK_SHARE
        return self.step_wall_s > 0 and self.step_cpu_s >= share * self.step_wall_s

    @property
    def load_wall_s(self) -> float | None:
        """One batch's loading by one worker (0 workers: the wait); None where the run cannot say
        (workers that kept up hide how long a batch takes)."""
        if self.workers == 0:
            return self.wait_wall_s
        if self.idle_share * 100 < 5.0:
            return None
        return self.workers * (self.wait_wall_s + self.step_wall_s)  # starved workers deliver back to back

    @property
    def workers_to_keep_up(self) -> int | None:
        """Workers that, each loading a batch in this run's time, deliver one per step (None where
        the run cannot say how long loading takes)."""
        wall = self.load_wall_s
        if wall is None or self.step_wall_s <= 0:
            return None
        return min(MAX_WORKERS, max(1, math.ceil(round(wall / self.step_wall_s, 6))))

    @property
    def load_is_cpu(self) -> bool:
        """Loading is CPU work: without workers, the loop's CPU time while it waited is at least half
        the wait; with workers, at the rate the loop took batches they wanted at least half a CPU
        (running, or runnable and waiting for one: workers that wait on I/O want neither)."""
        if self.workers == 0:
            return self.load_cpu_s >= CPU_WORK_SHARE * self.wait_wall_s
        wanted = (self.load_cpu_s + (self.load_queued_s or 0.0)) * self.rate
        # ... and used a quarter of a CPU: I/O workers woken on a busy machine queue too, briefly
        return wanted >= CPU_WORK_SHARE and self.load_cpu_s * self.rate >= CPU_WORK_SHARE / 2

    @property
    def saturated(self) -> bool:
        if self.used_cpus is None:
            return False
        return self.used_cpus + (self.others_cpus or 0.0) >= SATURATED_SHARE * self.budget

    @property
    def ceiling(self) -> float:
        """The most steady batches per second the CPUs allow: the CPUs the process tree can get
        (with at least as many workers as CPUs) over the CPU time one trained batch needs."""
        cpus = self._cpus(max(self.workers, cpu_limit(self.budget)))
        return cpus / max(self.cpu_per_batch_s, TINY)

    @property
    def worker_cap(self) -> int | None:
        """Loading that is CPU work gains nothing from more workers than the rank's CPUs (they
        share the CPUs with each other and the step); None where loading mostly waits."""
        return cpu_limit(self.budget) if self.load_is_cpu else None

    # ---- the model -----------------------------------------------------------------------------
    def _runnable(self, n: int) -> float:
        """Threads wanting a CPU: the step's (the loop's one, without workers), and n workers, each
        all the time where loading is CPU work, else for its CPU share of a batch's loading."""
        step = self.step_threads if self.step_is_cpu else 1.0
        if n == 0:
            return step
        wall = self.load_wall_s
        if self.load_is_cpu:
            workers = float(n)
        elif wall:  # each worker on a CPU for its batch's CPU share of the load time
            workers = n * min(1.0, self.load_cpu_s / wall)
        else:  # workers that kept up: together they used what the batches took
            workers = min(float(n), self.load_cpu_s * self.rate)
        return workers + (step if self.step_is_cpu else 0.0)

    @property
    def others_runnable(self) -> float:
        """How many threads of other processes competed for the CPUs: what they used, or, where the
        CPUs were saturated, what the share this process tree got implies (``k B / (k + m)`` = what it
        used): a process of several busy threads takes more than one CPU's share. Only where this tree
        wanted CPU (its loading or its step is CPU work): a loop that sleeps or waits on I/O used little
        because it asked for little, which implies nothing about the others."""
        m = self.others_cpus or 0.0
        if self.saturated and self.used_cpus and m > 0.05 and (self.load_is_cpu or self.step_is_cpu):
            k = max(1.0, self._runnable(self.workers))
            m = max(m, k * (self.budget / self.used_cpus - 1.0))
        return m

    def _cpus(self, n: int) -> float:
        """The CPUs the process tree can get with n workers: the budget, or, beside others' busy
        processes, the kernel's share of it."""
        k = max(1.0, self._runnable(n))
        m = self.others_runnable
        share = self.budget * k / (k + m) if m > 0.05 else self.budget
        return max(0.1, min(k, self.budget, share))

    def _slow(self, n: int) -> float:
        """How much longer CPU work takes with n workers: runnable threads over the CPUs they get."""
        return max(1.0, self._runnable(n) / self._cpus(n))

    def predict(self, n: int) -> float | None:
        """Steady batches per second with ``n`` workers (None where the run cannot say how long
        loading takes: workers kept up, and fewer would be a guess)."""
        if n == self.workers:
            return self.rate
        wall = self.load_wall_s
        if wall is None:
            return None
        load_cpu = min(self.load_cpu_s, wall)
        io = max(0.0, wall - load_cpu * self._slow(self.workers))  # the part of loading no CPU speeds up
        hand = self.handover_cpu_s if n else 0.0
        ceiling = self._cpus(n) / max(self.load_cpu_s + self.step_cpu_s + hand, TINY)
        if n == 0:
            return min(ceiling, 1.0 / max(io + load_cpu + self.step_wall_s, TINY))
        serial = 1.0 / max(self.step_wall_s + hand, TINY)
        return min(ceiling, serial, n / max(io + load_cpu * self._slow(n), TINY))

    @property
    def ceiling_matters(self) -> bool:
        """The CPUs could be what limits this loop: its ceiling is within reach of its rate."""
        return self.ceiling <= CEILING_SHOWN * self.rate

    def best_workers(self, needed: int | None = None) -> tuple[int, float] | None:
        """The fewest workers above this run's whose predicted rate is within 1 % of the best
        (looked for up to what keeping up needs, the CPU cap for CPU-bound loading), and that
        rate; None where the run cannot predict."""
        cap = self.worker_cap
        top = max(self.workers + 1, needed or 0, math.ceil(self.budget) + 1)
        if cap is not None:
            top = min(top, cap)
        top = min(top, MAX_WORKERS)
        if top <= self.workers:
            return None
        known = {n: r for n in range(self.workers + 1, top + 1) if (r := self.predict(n)) is not None}
        if not known:
            return None
        best = max(known.values())
        pick = min(n for n, r in known.items() if r >= NEAR_BEST * best)
        return pick, known[pick]


def cpu_use(*, workers: int, budget: float | None, waits: int, steps: int, steps_timed: int, wait_s: float,
            step_s: float, cpu_wait_s: float | None, cpu_step_s: float | None, cpu_wait_wall_s: float,
            cpu_step_wall_s: float, workers_cpu_s: float | None,
            workers_runq_s: float | None,
            tree_cpu_s: float | None, others_cpu_s: float | None, cpu_wall_s: float | None,
            torch_threads: int | None = None, ranks: int = 1, on_gpu: bool = False) -> CpuUse | None:
    """The accounting from a loader's sums, None where the run did not record CPU time (an older
    records file) or too little ran to divide by. ``ranks``: the ranks on this node, whose CPU
    time the other processes' includes (each rank's budget is its share of the node already)."""
    if not budget or not waits or not steps_timed or cpu_wait_s is None or cpu_step_s is None:
        return None
    if cpu_step_wall_s <= 0 or cpu_wait_wall_s <= 0:
        return None  # no batch was CPU-timed (a run of a few batches)
    # the loop's CPU time is read on a sample of the batches: its share of their wall time, over all
    step_cpu = cpu_step_s / cpu_step_wall_s * step_s / steps_timed
    wait_cpu = cpu_wait_s / cpu_wait_wall_s * wait_s / waits
    if workers and workers_cpu_s is None:
        return None
    load_cpu = (workers_cpu_s or 0.0) / waits if workers else wait_cpu
    used = others = None
    if cpu_wall_s and tree_cpu_s is not None:
        used = tree_cpu_s / cpu_wall_s
        others = (others_cpu_s / cpu_wall_s) if others_cpu_s is not None else None
        if others is not None and ranks > 1:  # the sibling ranks, as busy as this one, are not "others"
            others = max(0.0, others - (ranks - 1) * used)
    return CpuUse(workers=workers, budget=float(budget), step_wall_s=step_s / steps_timed,
                  step_cpu_s=step_cpu, wait_wall_s=wait_s / waits, wait_cpu_s=wait_cpu,
                  load_cpu_s=load_cpu, load_queued_s=(workers_runq_s / waits
                                                      if workers and workers_runq_s is not None else None),
                  used_cpus=used, others_cpus=others, torch_threads=torch_threads, on_gpu=on_gpu)
