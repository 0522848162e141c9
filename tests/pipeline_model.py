"""A modelled data pipeline for testing the search and the policy without a DataLoader.

Each model gives the steady throughput of a configuration the way a real pipeline behaves:
the step runs at most 1000/step_ms times a second, and the data side delivers what its
workers can produce (capped by the CPU for CPU work, not capped for I/O wait). A fake clock
advances by each configuration's cost, so budgets can be tested in no time.
"""

from __future__ import annotations

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ConfigResult, WaitStats

MiB = 1024**2


class Model:
    """A pipeline: per-batch load time ``fetch_ms`` (share ``cpu_share`` of it CPU), a step of ``step_ms``."""

    def __init__(self, fetch_ms, step_ms=20.0, cpu_share=0.05, cpus=2.0, worker_overhead=0.0,
                 pss_per_worker=100 * MiB, fail=None, cost_s=2.0, batch_bytes=MiB, spiky=False, others=0.0):
        self.fetch_ms, self.step_ms, self.cpu_share, self.cpus = fetch_ms, step_ms, cpu_share, cpus
        self.worker_overhead = worker_overhead
        self.pss_per_worker = pss_per_worker
        self.fail = fail or (lambda s: False)
        self.cost_s = cost_s
        self.batch_bytes = batch_bytes
        # waits come in bursts: p95 five times the median ("workers": only with workers, the
        # 0-worker run's loads are even)
        self.spiky = spiky
        self.others = others  # CPUs other processes keep busy: CPU time is shared per runnable thread
        self.now = 0.0
        self.calls: list[LoaderSettings] = []

    def clock(self) -> float:
        return self.now

    def rate(self, s: LoaderSettings) -> float:
        step = self.step_ms / 1000
        fetch = self.fetch_ms / 1000
        if s.num_workers == 0:
            return 1.0 / (step + fetch)
        # CPU-bound work cannot run on more CPUs than there are; waiting can overlap freely
        parallel = s.num_workers
        if self.cpu_share > 0:
            cpus = self.cpus
            if self.others and s.num_workers + self.others > self.cpus:
                cpus = self.cpus * s.num_workers / (s.num_workers + self.others)
            parallel = min(parallel, cpus / self.cpu_share)
        produce = parallel / fetch * (1 - self.worker_overhead * s.num_workers)
        return min(1.0 / step, produce)

    def __call__(self, s: LoaderSettings, purpose: str, restart: bool) -> ConfigResult:
        self.calls.append(s)
        self.now += self.cost_s * (1.5 if restart else 1.0)
        if self.fail(s):
            return ConfigResult(settings=s, status="failed", error="ValueError: boom", duration_s=self.cost_s)
        rate = self.rate(s)
        step_s = self.step_ms / 1000
        wait_s = max(0.0, 1.0 / rate - step_s)
        spiky = self.spiky is True or (self.spiky == "workers" and s.num_workers > 0)
        return ConfigResult(
            settings=s, batches=50, duration_s=self.cost_s, batches_per_s=rate, samples_per_s=rate * 32,
            wait=WaitStats(p50_ms=wait_s * 1000 / (2 if spiky else 1),
                           p95_ms=wait_s * 1000 * (2.5 if spiky else 1),
                           max_ms=wait_s * 1000 * (4 if spiky else 1), mean_ms=wait_s * 1000),
            starvation_pct=100 * wait_s * rate, step_ms_achieved=self.step_ms,
            first_batch_s=0.1 + 0.05 * s.num_workers,
            epoch_restart_s=(0.02 if s.persistent_workers else 0.1 + 0.05 * s.num_workers) if restart else None,
            epoch_restart_persistent_s=0.02 if restart and s.num_workers and not s.persistent_workers else None,
            worker_pss_bytes=self.pss_per_worker * s.num_workers, shm_peak_bytes=self.batch_bytes * s.batches_in_flight,
            batch_bytes=self.batch_bytes, fetch_cpu_pct=100 * self.cpu_share if s.num_workers == 0 else None,
            other_cpus=self.others if s.num_workers == 0 else None,
        )
