"""What the policy reads of one measured configuration: :class:`Measurement`.

The probe's :class:`~loaderdoc.probing.result.ConfigResult` is one (it holds much more, for its
report); a tune trial is another (:class:`Measured`, built from what the real job showed). The
policy is typed on this, so a feature that measures asks ``policy.choose`` without pretending to
be the probe. Part of :mod:`loaderdoc.policy`; import it from there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from loaderdoc.base.settings import LoaderSettings


class Waits(Protocol):
    @property
    def mean_ms(self) -> float | None: ...


class Stages(Protocol):
    @property
    def load_ms(self) -> float | None: ...


class Growth(Protocol):
    """How the workers' memory moved through the measured window (see policy.still_growing)."""

    @property
    def first_bytes(self) -> int: ...
    @property
    def last_bytes(self) -> int: ...


class Measurement(Protocol):
    """One configuration as measured; None where the measurement did not see a quantity."""

    @property
    def settings(self) -> LoaderSettings: ...
    @property
    def ok(self) -> bool: ...
    @property
    def batches_per_s(self) -> float | None: ...  # steady training steps per second
    @property
    def wait(self) -> Waits: ...
    @property
    def stages(self) -> Stages | None: ...
    @property
    def first_batch_s(self) -> float | None: ...
    @property
    def epoch_restart_s(self) -> float | None: ...
    @property
    def epoch_restart_persistent_s(self) -> float | None: ...
    @property
    def worker_pss_bytes(self) -> int | None: ...
    @property
    def worker_memory_growth(self) -> Growth | None: ...
    @property
    def shm_peak_bytes(self) -> int | None: ...
    @property
    def batch_bytes(self) -> int | None: ...
    @property
    def cpu_util_pct(self) -> float | None: ...
    @property
    def other_cpus(self) -> float | None: ...  # CPUs other processes kept busy in the window
    @property
    def loader_cpus(self) -> float | None: ...  # CPUs the process and its workers kept busy
    @property
    def fetch_cpu_pct(self) -> float | None: ...  # 0 workers: share of the fetch that was CPU


@dataclass(frozen=True)
class MeanWait:
    mean_ms: float | None = None


@dataclass
class Measured:
    """A measurement that is not the probe's: what a run showed of one configuration, the rest
    unseen (None). It is always a success: a failed run is not measured."""

    settings: LoaderSettings
    batches_per_s: float | None = None
    wait: MeanWait = field(default_factory=MeanWait)
    starvation_pct: float | None = None
    worker_pss_bytes: int | None = None
    shm_peak_bytes: int | None = None
    other_cpus: float | None = None
    fetch_cpu_pct: float | None = None
    stages: None = None
    first_batch_s: float | None = None
    epoch_restart_s: float | None = None
    epoch_restart_persistent_s: float | None = None
    worker_memory_growth: None = None
    batch_bytes: int | None = None
    cpu_util_pct: float | None = None
    loader_cpus: float | None = None
    ok: bool = True
