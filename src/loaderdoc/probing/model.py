"""Where a step's time goes, and the throughput curve over ``num_workers`` it predicts.

An operational model in the spirit of Plumber (Kuchnik et al., MLSys 2022): every stage of a step
has a rate it alone could sustain, and the pipeline runs at the slowest one. From the timings the
instrumented 0-worker run took inside the process that loaded (:class:`~.result.StageTimes`):

- ``W`` workers, each loading a batch in ``load_ms`` of wall time, deliver ``W x 1000 / load_ms``
  batches a second: waiting (storage, network, sleep) overlaps freely across workers;
- the CPU budget runs at most ``cpus x 1000 / cpu_ms`` batches a second, however many workers
  share it: CPU work saturates at the CPUs (the training process's receiving counts too). When
  other processes keep ``others`` CPUs busy, the kernel shares CPU time per runnable thread: ``W``
  workers get ``cpus x W / (W + others)`` of the CPUs once there are more threads than CPUs;
- the training process takes a batch (``receive_ms``) and runs the step (``step_ms``) one at a
  time: ``1000 / (step_ms + receive_ms)``;
- with CUDA its pin-memory thread copies each batch into page-locked memory (``pin_ms``, measured
  in the measuring process at the user's batch), one batch at a time beside the step:
  ``1000 / pin_ms``, and that copy is CPU time the workers' budget shares.

``rate(W)`` is the lowest of the three; memory and ``/dev/shm`` cap ``W`` through
:mod:`loaderdoc.policy`. The model is a prediction: the search measures around it and reports
predicted against measured. Pure arithmetic, no torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loaderdoc import policy
from loaderdoc.base.units import fmt_bytes
from loaderdoc.probing.result import Breakdown, ConfigResult, CurvePoint, Prediction, StageCost


def by_workers(table: dict[policy.Key, float]) -> dict[int, float]:
    """Steps/s by worker count at torch's default prefetch (0 workers included): the measured side
    of the curve over num_workers."""
    return {k[0]: v for k, v in table.items() if k[1] in (0, policy.DEFAULT_PREFETCH)}


@dataclass
class LoadModel:
    load_ms: float  # one batch, loaded by one worker (samples + collate), wall time
    cpu_ms: float  # ... of which CPU time
    step_ms: float  # the training step
    receive_ms: float = 0.0  # the training process taking a ready batch from a worker
    cpus: float | None = None  # the rank's CPU budget; None: unknown, no CPU cap
    zero_per_s: float | None = None  # measured steady rate with 0 workers
    max_workers: int = 64  # the most workers memory and /dev/shm allow (policy)
    others: float = 0.0  # CPUs other processes kept busy with 0 workers: their threads compete for the CPUs
    pin_ms: float = 0.0  # the pin-memory thread's copy of one batch (CUDA; 0: not pinned or not measured)

    # ---- the stages' rates ------------------------------------------------------------------
    def workers_per_s(self, workers: int) -> float:
        return workers * 1000.0 / max(self.load_ms, 1e-6)

    def cpu_share(self, workers: int | None = None) -> float | None:
        """CPUs ``workers`` CPU-bound workers get: all of the budget on their own, a share per
        runnable thread beside other processes (all of it with no ``workers`` given: the asymptote)."""
        if self.cpus is None:
            return None
        if workers is None or not self.others or workers + self.others <= self.cpus:
            return self.cpus
        return self.cpus * workers / (workers + self.others)

    def cpu_per_s(self, workers: int | None = None) -> float | None:
        share = self.cpu_share(workers)
        per_batch = self.cpu_ms + self.receive_ms + self.pin_ms
        if share is None or per_batch <= 0:
            return None
        return share * 1000.0 / per_batch

    def step_per_s(self) -> float:
        return 1000.0 / max(self.step_ms + self.receive_ms, 1e-6)

    def pin_per_s(self) -> float | None:
        """The pin-memory thread, one batch at a time (None: nothing pinned, or not measured)."""
        return 1000.0 / self.pin_ms if self.pin_ms > 0 else None

    def rate(self, workers: int) -> tuple[float, str]:
        """Predicted steady steps/s at ``workers`` (default prefetch), and what limits it."""
        if workers == 0:
            serial = 1000.0 / max(self.load_ms + self.step_ms, 1e-6)
            return (self.zero_per_s or serial), "loading and the step take turns"
        limits = [(self.workers_per_s(workers), "workers"), (self.step_per_s(), "step")]
        pin = self.pin_per_s()
        if pin is not None:
            limits.append((pin, "pinning"))
        cpu = self.cpu_per_s(workers)
        if cpu is not None:
            limits.append((cpu, "CPU"))
        return min(limits)

    @property
    def ceiling(self) -> float:
        """The rate no number of workers can pass: the CPUs, the step or the pinning."""
        cpu = self.cpu_per_s()
        return min(rate for rate in (self.step_per_s(), self.pin_per_s(), cpu) if rate is not None)

    def workers_for(self, share: float) -> int:
        """Fewest workers whose predicted rate reaches ``share`` of the ceiling (within the caps);
        beside other processes, of the best rate the caps allow (the share only nears the CPUs)."""
        if self.others and self.cpus is not None:
            top = max(self.rate(w)[0] for w in range(1, self.max_workers + 1))
            return next(w for w in range(1, self.max_workers + 1) if self.rate(w)[0] >= share * top - 1e-9)
        need = math.ceil(share * self.ceiling * self.load_ms / 1000.0 - 1e-9)
        return max(1, min(self.max_workers, need))

    def pick(self, tolerance: float = policy.TOLERANCE) -> int:
        """Fewest workers within ``tolerance`` of the best predicted (0 when loading in the training
        process is already that fast)."""
        top = max(self.rate(w)[0] for w in (0, self.workers_for(1.0)))
        if self.rate(0)[0] >= (1 - tolerance) * top:
            return 0
        return self.workers_for(1 - tolerance)

    def describe(self) -> str:
        cpus = f" on {self.cpus:g} CPUs" if self.cpus is not None else ""
        others = f" (other processes kept {self.others:.1f} of them busy)" if self.others and cpus else ""
        return (f"a worker loads a batch in {self.load_ms:.1f} ms ({self.cpu_ms:.1f} ms of it CPU){cpus}{others}; "
                f"the step takes {self.step_ms:.1f} ms and receiving a batch {self.receive_ms:.1f} ms"
                + (f", pinning it {self.pin_ms:.1f} ms" if self.pin_ms > 0 else ""))


@dataclass
class ContentionFit:
    """CPU-bound workers beside other busy processes, calibrated on two measured sizes.

    The kernel's share (:meth:`LoadModel.cpu_share`) alone says that every worker more wins CPU
    time from the other processes, so the curve keeps rising towards the CPUs; measured, it flattens
    sooner (torchvision decode beside a burnt core, 2 CPUs: 6 workers as fast as 12, 16 slower):
    each worker costs the others something (caches, memory bandwidth, handing batches over). So the
    rate at ``W`` workers is the share times the rate per CPU ``low`` measured (at most as many
    workers as CPUs: none contend), divided by ``1 + contention x (W - cpus)``, ``contention``
    fitted so that ``high`` (past the CPUs) is met; 0 where ``high`` measured at least the share's
    prediction (the plain model held). The step caps it as it caps the model."""

    model: LoadModel
    low: int
    high: int
    per_cpu: float  # steps/s a CPU's worth of worker time delivered at ``low``
    contention: float  # share of the rate each worker past the CPUs costs
    expected_high: float  # what the kernel's share alone predicted at ``high``

    def rate(self, workers: int) -> float:
        share = _cpus_taken(self.model, workers)
        past = max(0.0, workers - (self.model.cpus or 0.0))
        return min(self.model.step_per_s(), self.per_cpu * share / (1.0 + self.contention * past))

    def pick(self, tolerance: float = policy.TOLERANCE) -> tuple[int, int]:
        """(fewest workers within ``tolerance`` of the fitted curve's top, the top's size), from
        ``low`` to the model's cap."""
        sizes = range(self.low, max(self.low, self.model.max_workers) + 1)
        top = max(sizes, key=self.rate)
        return next(w for w in sizes if self.rate(w) >= (1 - tolerance) * self.rate(top) - 1e-9), top


def _cpus_taken(model: LoadModel, workers: int) -> float:
    """CPUs ``workers`` CPU-bound workers keep busy: their share, and never more than one each."""
    return min(workers, model.cpu_share(workers) or 0.0)


def fit_contention(model: LoadModel, measured: dict[int, float], low: int, high: int) -> ContentionFit | None:
    """The model calibrated on ``low`` (1 to the CPUs) and ``high`` (past them) workers' measured
    rates; None without CPUs, either rate, or such sizes."""
    cpus = model.cpus
    if cpus is None or not measured.get(low) or not measured.get(high) or high <= cpus or not 1 <= low <= cpus:
        return None
    low_share = _cpus_taken(model, low)
    if low_share <= 0:
        return None
    per_cpu = measured[low] / low_share
    expected = per_cpu * _cpus_taken(model, high)
    contention = max(0.0, (expected / measured[high] - 1.0) / (high - cpus))
    return ContentionFit(model=model, low=low, high=high, per_cpu=per_cpu, contention=contention,
                         expected_high=expected)


def model_from(baseline: ConfigResult, cpus: float | None, max_workers: int,
               receive_ms: float | None = None, others: float = 0.0) -> LoadModel | None:
    """The model from the 0-worker run: its instrumented stages, else its waits (each wait with 0
    workers is one batch loaded in the training process) and the CPU share of that loading."""
    if not baseline.ok or not baseline.batches_per_s:
        return None
    stages = baseline.stages
    if stages is not None and stages.load_ms:
        load, cpu = stages.load_ms, stages.load_cpu_ms or 0.0
    elif baseline.wait.mean_ms:
        load = baseline.wait.mean_ms
        cpu = load * (baseline.fetch_cpu_pct or 0.0) / 100.0
    else:
        return None
    pin = stages.pin_ms if stages is not None and stages.pin_ms else 0.0
    return LoadModel(load_ms=load, cpu_ms=cpu, step_ms=baseline.step_ms_achieved or 0.0,
                     receive_ms=receive_ms or 0.0, cpus=cpus, zero_per_s=baseline.batches_per_s,
                     max_workers=max(1, max_workers), others=others, pin_ms=pin)


def curve(model: LoadModel, measured: dict[int, float], upto: int | None = None) -> list[CurvePoint]:
    """Predicted (and, where measured, measured) steps/s from 0 workers to past the knee."""
    knee = model.workers_for(1.0)
    last = min(model.max_workers, max(upto or 0, knee + max(2, knee // 2), max(measured, default=0)))
    points = []
    for w in range(0, last + 1):
        rate, limit = model.rate(w)
        points.append(CurvePoint(workers=w, predicted_per_s=round(rate, 3), measured_per_s=measured.get(w),
                                 limit=limit))
    return points


def prediction(model: LoadModel, measured: dict[int, float], pick: int | None) -> Prediction:
    predicted_pick = model.pick()
    out = Prediction(curve=curve(model, measured, upto=pick), workers=predicted_pick, model=model.describe(),
                     pick_workers=pick)
    if pick is not None:
        out.pick_predicted_per_s = round(model.rate(pick)[0], 3)
        out.pick_measured_per_s = measured.get(pick)
    return out


# ---- the breakdown of one measured configuration ------------------------------------------------
def breakdown(result: ConfigResult, label: str, cpus: float | None) -> Breakdown:
    """Where a step's time went at ``result``'s configuration, and which stage limits it."""
    out = Breakdown(settings=result.settings, label=label, measured_per_s=result.batches_per_s,
                    wait_ms=result.wait.mean_ms)
    st = result.stages
    workers = result.settings.num_workers
    step = result.step_ms_achieved or 0.0
    if st is None or st.dataset_ms is None:
        out.why = "not instrumented: no stage timings for this run"
        return out
    load = st.load_ms or 0.0
    cpu = st.load_cpu_ms or 0.0
    parallel = max(1, workers)

    def rate(ms: float, n: int = 1) -> float | None:
        return n * 1000.0 / ms if ms > 0 else None

    others = policy.contended(result.other_cpus)  # CPUs other processes held in this run
    where = f"in {policy.workers_text(workers)}" if workers else "in the training process"
    out.stages.append(StageCost("dataset (CPU)", round(st.dataset_cpu_ms or 0.0, 3), None,
                                f"__getitem__ running, {where}"))
    if st.dataset_queued_ms:
        out.stages.append(StageCost("dataset (waiting for a CPU)", round(st.dataset_queued_ms, 3), None,
                                    "runnable, but other processes held the CPUs"))
    read = st.dataset_read_bytes or 0.0
    out.stages.append(StageCost("dataset (waiting)", round(st.dataset_wait_ms or 0.0, 3), None,
                                "storage, network, sleeps, locks: wall minus CPU time"
                                + (f"; {fmt_bytes(int(read))} a batch read from storage, not the page cache"
                                   if read >= 1 else "")))
    out.stages.append(StageCost("collate", round(st.collate_ms or 0.0, 3), None, where))
    loading = StageCost("loading, all stages", round(load, 3), rate(load, parallel),
                        f"{policy.workers_text(parallel)} in parallel" if workers else "one batch at a time")
    out.stages.append(loading)
    if cpu > 0 and cpus is not None and workers:
        share = max(0.1, cpus - others)  # what other processes kept of the CPUs in this run is not the workers'
        out.stages.append(StageCost("CPU budget", round(cpu, 3), share * 1000.0 / (cpu + (st.receive_ms or 0.0)),
                                    f"{cpus:g} CPUs shared by the workers" if not others else
                                    f"{share:.1f} of {cpus:g} CPUs: other processes held {others:.1f}"))
    if workers:
        moved = fmt_bytes(result.batch_bytes) if result.batch_bytes else "the batch"
        out.stages.append(StageCost("transfer", round(st.receive_ms or 0.0, 3), None,
                                    f"{moved} a batch through /dev/shm, taken by the training process"))
    if st.pin_ms is not None:
        out.stages.append(StageCost("pin memory", round(st.pin_ms, 3), 1000.0 / st.pin_ms if st.pin_ms > 0 else None,
                                    "CUDA: the pin-memory thread's copy, in the training process"))
    if result.h2d_pinned_ms is not None:
        h2d = result.h2d_pinned_ms if result.settings.pin_memory else (result.h2d_pageable_ms or 0.0)
        out.stages.append(StageCost("host-to-device copy", round(h2d, 3), None, "CUDA"))
    serial = step + (st.receive_ms or 0.0) + (0.0 if workers else load)
    out.stages.append(StageCost("training step", round(step, 3), rate(serial),
                                "one at a time" + ("" if workers else ", taking turns with loading")))
    limits = [s for s in out.stages if s.per_s]
    if not limits:
        return out
    slowest = min(limits, key=lambda s: s.per_s)
    if workers == 0:
        share = load / (load + step) if load + step > 0 else 0.0
        if load >= step:
            io = st.dataset_wait_ms or 0.0
            kind = "waiting on storage/network" if io > cpu else "CPU work"
            out.bottleneck = "loading"
            out.why = (f"loading takes {load:.0f} ms of every {load + step:.0f} ms step ({share:.0%}), mostly {kind}, "
                       "in the training process: the step waits for it")
        else:
            out.bottleneck = "training step"
            out.why = f"the step ({step:.0f} ms) outlasts loading ({load:.0f} ms a batch)"
        return out
    out.bottleneck = {"loading, all stages": "workers", "CPU budget": "CPU", "training step": "training step"}.get(
        slowest.stage, slowest.stage)
    out.why = {
        "workers": f"{policy.workers_text(workers)} at {load:.0f} ms a batch deliver {slowest.per_s:.1f} batches/s, "
                   "below what the step could take",
        "CPU": f"the {cpus:g} CPUs at {cpu:.0f} ms of CPU a batch run out at {slowest.per_s:.1f} batches/s: more "
               "workers would only take turns" + (" (or take CPU time from the other processes)" if others else ""),
        "training step": f"the step ({step:.0f} ms) is the slowest stage: the data side keeps up",
    }.get(out.bottleneck, f"{slowest.stage} is the slowest stage ({slowest.per_s:.1f} batches/s)")
    return out
