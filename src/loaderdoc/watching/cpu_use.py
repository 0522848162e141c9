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

**Work, not spinning.** The training process's CPU time counts every thread, and torch's intra-op
pool (OpenMP) spins while it waits for the next op: CPU time, not work. Where the hook read the
loop's own thread apart (``time.thread_time``), loading without workers and the hand-over are that
thread's CPU time only; what the other threads burnt while the loop waited is :attr:`CpuUse.spin_s`
(the pool spinning beside a loop that loads; with ``pin_memory`` and workers, the pin thread's copy too,
so it is not counted as spin there). Saturation is judged on the work; the spin is shown as such.

**Threads.** :meth:`CpuUse.predict` takes the intra-op thread count too. The step's CPU time over
its wall time at the run's threads gives its parallel share (Amdahl); a step of ``k`` threads runs
in ``S ((1-p) + p/k)``. Where its ``k`` threads and the CPUs the workers want at that rate exceed the
budget, an OpenMP region waits at its barrier for the thread that lost its CPU: the parallel part then
runs as if each of its threads shared a CPU (twice as long, or by the threads per CPU past that). ``S``
is the step's CPU time at the run's threads, spin between ops included: a bound from above, so a
prediction for fewer threads is on the low side.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loaderdoc.policy import NOT_STARVED_PCT, cpu_limit

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
    # the loop thread's own CPU time per wait and per step (None: recorded before the hook read it apart)
    wait_loop_cpu_s: float | None = None
    step_loop_cpu_s: float | None = None
    pin_memory: bool = False  # the pin-memory thread copies each batch: its CPU time is work, not spin

    # ---- threads: work and spin ------------------------------------------------------------------
    @property
    def others_wait_cpu_s(self) -> float | None:
        """Per batch, the CPU time the training process's other threads (the intra-op pool, the
        pin-memory thread) took while the loop waited (None: not read apart)."""
        if self.wait_loop_cpu_s is None:
            return None
        return max(0.0, self.wait_cpu_s - self.wait_loop_cpu_s)

    @property
    def spin_s(self) -> float:
        """Per batch, CPU time the intra-op pool burnt spinning while the loop waited: its other
        threads' CPU then (their work waits for the loop's ops), where torch runs more than one
        thread; with workers and pin_memory the pin thread's copy is in it too, so none is claimed."""
        others = self.others_wait_cpu_s
        if others is None or not self.torch_threads or self.torch_threads < 2 or (self.workers and self.pin_memory):
            return 0.0
        return others

    @property
    def spin_cpus(self) -> float:
        """CPUs the spinning kept busy on average (CPU time, no work)."""
        return self.spin_s * self.rate

    @property
    def work_cpus(self) -> float | None:
        """CPUs this process and its workers kept busy with work: what they used less the spin."""
        return None if self.used_cpus is None else max(0.0, self.used_cpus - self.spin_cpus)

    # ---- what was measured -------------------------------------------------------------------
    @property
    def rate(self) -> float:
        """The steady batches per second the run reached."""
        return 1.0 / max(self.wait_wall_s + self.step_wall_s, TINY)

    @property
    def handover_cpu_s(self) -> float:
        """With workers: the loop's own work to take a ready batch (unpickling it out of shared
        memory), which no worker count removes; 0 without workers (the wait is the loading)."""
        if not self.workers:
            return 0.0
        loop = self.wait_loop_cpu_s if self.wait_loop_cpu_s is not None else self.wait_cpu_s
        return min(loop, self.wait_wall_s)

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
        """This process and its workers alone kept >= 90 % of the rank's CPUs busy with work."""
        return self.work_cpus is not None and self.work_cpus >= SATURATED_SHARE * self.budget

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
        if self.idle_share * 100 < NOT_STARVED_PCT:
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
        """Work (this tree's, less the pool's spin, and other processes') filled >= 90 % of the CPUs:
        a spinning pool gives its CPU up to nothing, but a thread that would work in its place does."""
        if self.work_cpus is None:
            return False
        return self.work_cpus + (self.others_cpus or 0.0) >= SATURATED_SHARE * self.budget

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
    @property
    def threads_known(self) -> bool:
        """The run says how its step scales with intra-op threads: torch's thread count was read, the
        loop's own CPU time apart from the other threads', a CPU step on more than one thread that ran
        without workers competing for its CPUs (a contended step hides its parallel share)."""
        return (bool(self.torch_threads) and self.torch_threads > 1 and self.wait_loop_cpu_s is not None
                and self.step_is_cpu
                and self._contention(self.torch_threads, self._workers_demand(self.workers, self.rate)) <= 1.0
                and self.step_cpu_s > self.step_wall_s > 0)

    def _workers_runnable(self, n: int) -> float:
        """CPUs n workers want: each all the time where loading is CPU work, else its CPU share of a
        batch's loading."""
        if n == 0:
            return 0.0
        wall = self.load_wall_s
        if self.load_is_cpu:
            return float(n)
        if wall:  # each worker on a CPU for its batch's CPU share of the load time
            return n * min(1.0, self.load_cpu_s / wall)
        return min(float(n), self.load_cpu_s * self.rate)  # workers that kept up: what the batches took

    def _workers_demand(self, n: int, rate: float) -> float:
        """CPUs n workers want to load ``rate`` batches a second (at most one each)."""
        return min(float(n), self.load_cpu_s * rate) if n else 0.0

    def _step_threads_at(self, k: int | None) -> float:
        """CPUs a CPU step keeps busy on ``k`` intra-op threads (None: as the run measured)."""
        if k is None:
            return self.step_threads
        return max(1.0, min(float(k), self.budget, self.step_cpu_s / max(self._step_wall_alone(k), TINY)))

    def _runnable(self, n: int, k: int | None = None) -> float:
        """Threads wanting a CPU: the step's (the loop's one, without workers), and n workers, each
        all the time where loading is CPU work, else for its CPU share of a batch's loading."""
        step = self._step_threads_at(k) if self.step_is_cpu else 1.0
        if n == 0:
            return step
        return self._workers_runnable(n) + (step if self.step_is_cpu else 0.0)

    @property
    def parallel_share(self) -> float | None:
        """The share of the step's work that runs on the intra-op threads (Amdahl: the step's CPU time
        ``S`` over its wall time ``w`` at ``T`` threads, ``w = S ((1-p) + p/T)``); None where the run
        cannot say (:attr:`threads_known`)."""
        if not self.threads_known:
            return None
        t = min(float(self.torch_threads), self.budget)
        if t <= 1.0:
            return None
        return max(0.0, min(1.0, (1.0 - self.step_wall_s / self.step_cpu_s) / (1.0 - 1.0 / t)))

    def _step_wall_alone(self, k: int) -> float:
        """The step's wall time on ``k`` intra-op threads with no worker taking its CPUs."""
        p = self.parallel_share
        if p is None:
            return self.step_wall_s
        return self.step_cpu_s * ((1.0 - p) + p / min(float(k), max(1.0, self.budget)))

    def _contention(self, k: int, busy: float) -> float:
        """How much longer the parallel part of a step on ``k`` intra-op threads takes beside workers
        that keep ``busy`` CPUs loading: 1 while both fit the CPUs; past that each OpenMP region waits
        at its barrier for a thread that shares its CPU, so it runs as slowly as the most shared CPU:
        twice as long, or the threads per CPU where more. On this project's 2-CPU VM a 2-thread CNN step
        took 1.9-2.0x as long beside 1-3 workers that wanted 0.45 CPU in all (issue 47's grid)."""
        want = k + busy
        if k <= 1 or want <= self.budget + 0.05:
            return 1.0
        return max(2.0, math.ceil(want / max(self.budget, TINY) - 1e-6))

    def _step_wall(self, n: int, k: int, rate: float) -> float:
        """The step's wall time on ``k`` threads beside ``n`` workers loading at ``rate`` batches per
        second: the serial part shares a CPU with the workers past the budget; the parallel part waits
        for its slowest thread."""
        p = self.parallel_share or 0.0
        alone = self._step_wall_alone(k)
        serial = self.step_cpu_s * (1.0 - p) if self.parallel_share is not None else alone
        parallel = alone - serial
        busy = self._workers_demand(n, rate)
        serial_slow = max(1.0, (1.0 + busy) / max(self.budget, TINY))
        return serial * serial_slow + parallel * self._contention(k, busy)

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

    def _cpus(self, n: int, k: int | None = None) -> float:
        """The CPUs the process tree can get with n workers: the budget, or, beside others' busy
        processes, the kernel's share of it."""
        runnable = max(1.0, self._runnable(n, k))
        m = self.others_runnable
        share = self.budget * runnable / (runnable + m) if m > 0.05 else self.budget
        return max(0.1, min(runnable, self.budget, share))

    def _slow(self, n: int, k: int | None = None) -> float:
        """How much longer CPU work takes with n workers: runnable threads over the CPUs they get."""
        return max(1.0, self._runnable(n, k) / self._cpus(n, k))

    def _loop_wait_stretch(self, k: int | None) -> float:
        """Without workers, how much longer the loop's loading took than its CPU time because the
        intra-op pool's spinning threads shared its CPUs (more threads than CPUs); with ``k`` threads
        the same where ``k`` still exceeds the CPUs, else none."""
        if self.workers or self.wait_loop_cpu_s is None or not self.torch_threads:
            return 1.0
        t = k if k is not None else self.torch_threads
        return max(1.0, t / max(self.budget, TINY)) if t > self.budget + 0.05 else 1.0

    def predict(self, n: int, threads: int | None = None) -> float | None:
        """Steady batches per second with ``n`` workers and ``threads`` intra-op threads in the
        training process (None: as the run had them); None where the run cannot say how long loading
        takes (workers kept up, and fewer would be a guess), or how the step scales with threads."""
        if threads is not None and threads != self.torch_threads and not self.threads_known:
            return None
        if n == self.workers and threads in (None, self.torch_threads):
            return self.rate
        wall = self.load_wall_s
        if wall is None:
            return None
        # where the run says how its step scales, the step's threads are part of the model at any
        # worker count (beside workers they contend); else the step keeps its measured wall time
        k = (threads or self.torch_threads) if self.threads_known else None
        load_cpu = min(self.load_cpu_s, wall)
        # the part of loading no CPU speeds up: the wall less the CPU time, stretched by what shared its CPUs
        io = max(0.0, wall - load_cpu * max(self._slow(self.workers), self._loop_wait_stretch(None)))
        hand = self.handover_cpu_s if n else 0.0
        ceiling = self._cpus(n, k) / max(self.load_cpu_s + self.step_cpu_s + hand, TINY)
        if n == 0:
            stretch = self._loop_wait_stretch(threads)
            step_wall = self.step_wall_s if k is None else self._step_wall_alone(k)
            return min(ceiling, 1.0 / max(io + load_cpu * stretch + step_wall, TINY))
        loading = n / max(io + load_cpu * self._slow(n, k), TINY)
        if k is None:
            return min(ceiling, 1.0 / max(self.step_wall_s + hand, TINY), loading)
        # the workers' demand depends on the rate, and the step's contention on that demand: iterate
        rate = min(ceiling, loading, 1.0 / max(self._step_wall_alone(k) + hand, TINY))
        for _ in range(8):
            rate = min(ceiling, loading, 1.0 / max(self._step_wall(n, k, rate) + hand, TINY))
        return rate

    def fewer_threads(self, worker_counts) -> dict[tuple[int, int], float]:
        """(workers, intra-op threads) -> the predicted rate, for each count in ``worker_counts`` and
        every thread count below the run's ({} where the run cannot predict threads)."""
        if not self.threads_known:
            return {}
        return {(n, k): rate for n in worker_counts for k in range(1, self.torch_threads)
                if (rate := self.predict(n, k)) is not None}

    @property
    def ceiling_matters(self) -> bool:
        """The CPUs could be what limits this loop: its ceiling is within reach of its rate."""
        return self.ceiling <= CEILING_SHOWN * self.rate

    def _worker_range(self, needed: int | None) -> range:
        """Worker counts above this run's worth predicting: up to what keeping up needs and one past
        the CPUs, never past the CPU cap for CPU-bound loading."""
        cap = self.worker_cap
        top = max(self.workers + 1, needed or 0, math.ceil(self.budget) + 1)
        if cap is not None:
            top = min(top, cap)
        return range(self.workers + 1, min(top, MAX_WORKERS) + 1)

    def best_workers(self, needed: int | None = None) -> tuple[int, float] | None:
        """The fewest workers above this run's whose predicted rate is within 1 % of the best
        (looked for up to what keeping up needs, the CPU cap for CPU-bound loading), and that
        rate; None where the run cannot predict."""
        known = {n: r for n in self._worker_range(needed) if (r := self.predict(n)) is not None}
        return fewest_near_best(known) if known else None

    def best_setting(self, needed: int | None = None) -> tuple[int, int | None, float] | None:
        """What the model expects to be fastest: (workers, intra-op threads or None for the run's
        own, rate). Fewer threads are chosen only where they are expected to gain >= 5 % over the
        best worker count at the run's threads (a change of the training process needs a clear
        reason); among those, the fewest workers, then the most threads, within 1 % of the best.
        None where nothing above this run is predicted."""
        at_own = self.best_workers(needed)
        base = max(self.rate, at_own[1] if at_own else 0.0)
        fewer = self.fewer_threads((self.workers, *self._worker_range(needed)))
        if fewer and max(fewer.values()) >= GAIN_WORTH * base:
            (n, k), rate = fewest_near_best(fewer, order=fewest_workers_most_threads)
            return n, k, rate
        return (at_own[0], None, at_own[1]) if at_own else None


def fewest_workers_most_threads(nk: tuple[int, int]) -> tuple[int, int]:
    """The order among (workers, threads) pairs as fast: fewer workers first, then more threads."""
    return nk[0], -nk[1]


def fewest_near_best(rates: dict, order=None):
    """The least (by ``order``) of the choices whose rate is within 1 % of the best, and its rate."""
    best = max(rates.values())
    pick = min((c for c, r in rates.items() if r >= NEAR_BEST * best), key=order)
    return pick, rates[pick]


def cpu_use(*, workers: int, budget: float | None, waits: int, steps: int, steps_timed: int, wait_s: float,
            step_s: float, cpu_wait_s: float | None, cpu_step_s: float | None, cpu_wait_wall_s: float,
            cpu_step_wall_s: float, workers_cpu_s: float | None,
            workers_runq_s: float | None,
            tree_cpu_s: float | None, others_cpu_s: float | None, cpu_wall_s: float | None,
            torch_threads: int | None = None, ranks: int = 1, on_gpu: bool = False,
            cpu_wait_loop_s: float | None = None, cpu_step_loop_s: float | None = None,
            pin_memory: bool = False) -> CpuUse | None:
    """The accounting from a loader's sums, None where the run did not record CPU time (an older
    records file) or too little ran to divide by. ``ranks``: the ranks on this node, whose CPU
    time the other processes' includes (each rank's budget is its share of the node already).
    ``cpu_wait_loop_s``/``cpu_step_loop_s``: the loop thread's own share of the CPU-timed sums."""
    if not budget or not waits or not steps_timed or cpu_wait_s is None or cpu_step_s is None:
        return None
    if cpu_step_wall_s <= 0 or cpu_wait_wall_s <= 0:
        return None  # no batch was CPU-timed (a run of a few batches)
    # the loop's CPU time is read on a sample of the batches: its share of their wall time, over all
    step_cpu = cpu_step_s / cpu_step_wall_s * step_s / steps_timed
    wait_cpu = cpu_wait_s / cpu_wait_wall_s * wait_s / waits
    if workers and workers_cpu_s is None:
        return None
    wait_loop = step_loop = None
    if cpu_wait_loop_s is not None and cpu_step_loop_s is not None:
        # a thread's clock never runs ahead of the process's (a loop handed between threads would)
        wait_loop = min(max(0.0, cpu_wait_loop_s), cpu_wait_s) / cpu_wait_wall_s * wait_s / waits
        step_loop = min(max(0.0, cpu_step_loop_s), cpu_step_s) / cpu_step_wall_s * step_s / steps_timed
    # without workers the loop's own thread loads: the other threads' CPU meanwhile is not loading
    load_cpu = (workers_cpu_s or 0.0) / waits if workers else (wait_cpu if wait_loop is None else wait_loop)
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
                  used_cpus=used, others_cpus=others, torch_threads=torch_threads, on_gpu=on_gpu,
                  wait_loop_cpu_s=wait_loop, step_loop_cpu_s=step_loop, pin_memory=bool(pin_memory))
