"""What ``loaderdoc tune`` measured: one :class:`Trial` per run of the user's job, and the
:class:`TuneReport` (schema ``loaderdoc.tune/1``) that the text, ``--report`` and the app read.

Every figure here was measured on the user's real job (the trial's steady window) or is named as a
prediction (``predicted_per_s``). No torch, no textual; round-trips through JSON (``_serde``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from loaderdoc.base._serde import from_dict, to_dict
from loaderdoc.base.jsondoc import stamped

TUNE_SCHEMA = "loaderdoc.tune/1"

OK = "ok"
FAILED = "failed"  # the command exited (non-zero, or before a settled window) or could not start
NO_BATCH = "no-batch"  # no batch of a DataLoader within the time allowed (a hang before the first batch)
NO_LOADER = "no-loader"  # the command ended without iterating a torch DataLoader
SHORT = "too-short"  # the job ended before its window settled: measured, but on fewer batches
STOPPED = "stopped"  # Ctrl+C or the budget ended it
# why the search ended (TuneReport.stopped), in words
STOPPED_TEXT = {"settled": "the search settled", "budget": "the --budget was spent", "trials": "--trials reached",
                "interrupted": "interrupted"}


@dataclass
class TrialSettings:
    """What a trial changed on the training loader (None: as the script wrote it)."""

    num_workers: int = 0
    prefetch_factor: int | None = None
    persistent_workers: bool | None = None
    # the training process's intra-op threads (OMP_NUM_THREADS / torch.set_num_threads; None: the job's own)
    torch_threads: int | None = None

    @property
    def prefetch_depth(self) -> int:
        """Batches each worker holds in flight (torch's default where unset); 0 without workers."""
        # imported here: `loaderdoc --help` reads this module and need not load the policy
        from loaderdoc.policy import DEFAULT_PREFETCH

        return (self.prefetch_factor or DEFAULT_PREFETCH) if self.num_workers else 0

    @property
    def key(self) -> tuple[int, int]:
        """(workers, prefetch depth) as policy.choose compares them."""
        return self.num_workers, self.prefetch_depth

    @property
    def persistent(self) -> bool:
        return bool(self.persistent_workers) and self.num_workers > 0

    def columns(self) -> tuple[str, str]:
        """The trials table's workers ("4p": persistent_workers=True; "2 t1": one intra-op thread in the
        training process) and prefetch ("-": no workers)."""
        threads = f" t{self.torch_threads}" if self.torch_threads is not None else ""
        return f"{self.num_workers}{'p' if self.persistent else ''}{threads}", str(self.prefetch_depth or "-")

    def text(self) -> str:
        parts = [f"num_workers={self.num_workers}"]
        if self.num_workers and self.prefetch_factor is not None:
            parts.append(f"prefetch_factor={self.prefetch_factor}")
        if self.persistent:
            parts.append("persistent_workers=True")
        if self.torch_threads is not None:
            parts.append(f"torch_threads={self.torch_threads}")
        return ", ".join(parts)


@dataclass
class RankRate:
    rank: int | None
    pid: int | None
    steps_per_s: float
    steps: int
    seconds: float


@dataclass
class Trial:
    number: int  # 1: the user's own settings
    settings: TrialSettings = field(default_factory=TrialSettings)
    purpose: str = ""  # why the search ran it
    status: str = OK
    reason: str | None = None  # one line, for a trial that did not measure
    exit_code: int | None = None  # the command's, where it ended on its own; None: tune stopped it
    predicted_per_s: float | None = None  # what the earlier trials predicted for these settings
    steps_per_s: float | None = None  # the slowest rank's steady rate
    window_steps: int = 0
    window_s: float = 0.0
    settled: bool = False
    spread: float | None = None  # the window's two halves' rates, relative difference (noise within the run)
    wait_share: float | None = None  # the loop's share of the window spent waiting for a batch
    idle_share: float | None = None  # ... beyond taking a ready batch (the hand-over)
    step_ms: float | None = None  # the training step, per batch
    wait_ms: float | None = None
    # what persistent workers would save of the window's time (each epoch's restart priced as watch
    # prices it: loaderdoc.policy.restart_cost_s); None with persistent workers or no epoch start
    restart_share: float | None = None
    workers_pss_bytes: int | None = None  # summed over the workers, peak in the window
    shm_peak_bytes: int | None = None  # /dev/shm above what it held when the job started sampling
    proc_cpus: float | None = None  # CPUs the training process used in the window (every thread)
    workers_cpus: float | None = None  # ... its workers
    others_cpus: float | None = None  # ... other processes, on its CPUs
    load_is_cpu: bool | None = None
    step_is_cpu: bool | None = None
    ranks: list[RankRate] = field(default_factory=list)
    first_batch_s: float | None = None  # from the command's start to the training loader's first batch
    duration_s: float = 0.0  # the whole trial, start-up and stop included
    applied: bool | None = None  # the settings reached the loader (the hook says so)
    torch_threads: int | None = None  # the intra-op threads the training process ran with (the hook read them)
    settings_seen: bool = True  # False: trial 1's loader never showed itself, so the script's settings are unknown

    @property
    def ok(self) -> bool:
        return self.status in (OK, SHORT) and bool(self.steps_per_s)

    def columns(self) -> tuple[str, str]:
        """The trials table's workers and prefetch cells: "?" where the script's own were never seen
        (a first trial stopped before its loader showed itself is not a 0-worker run)."""
        return self.settings.columns() if self.settings_seen else ("?", "?")


@dataclass
class Pick:
    settings: TrialSettings
    steps_per_s: float
    trial: int  # the trial that measured it
    reason: str
    predicted_per_s: float | None = None
    best_trial: int | None = None  # the fastest allowed trial (the pick is the cheapest within tolerance of it)
    tolerance: float = 0.0
    gain: float | None = None  # the pick's rate over the user's own settings'
    user_within_tolerance: bool = False
    excluded: dict[str, str] = field(default_factory=dict)  # trial settings measured but not allowed, and why
    noise: float = 0.0  # half the largest spread between repeats of one configuration, or within a run's window
    repeated: list[int] = field(default_factory=list)  # trials that measured the user's settings or the pick again

    def headline(self) -> str:
        """The pick, its measured rate, the trial, and how far the prediction was."""
        pred = ""
        if self.predicted_per_s:
            pred = f" (predicted {self.predicted_per_s:.1f}, {100 * (self.steps_per_s / self.predicted_per_s - 1):+.0f} %)"
        return f"{self.settings.text()}: {self.steps_per_s:.1f} steps/s measured in trial {self.trial}{pred}"

    @property
    def verdict(self) -> str:
        return ("your settings are already within tolerance of the fastest trial" if self.user_within_tolerance
                else "worth changing")


@dataclass
class TuneReport:
    schema: str = TUNE_SCHEMA
    command: list[str] = field(default_factory=list)
    loader: dict = field(default_factory=dict)  # the training loader: site, role, class, what the script asked
    cpu_budget: float | None = None  # CPUs per rank
    steps_asked: int = 0
    budget_s: float | None = None
    trials: list[Trial] = field(default_factory=list)
    pick: Pick | None = None
    notes: list[str] = field(default_factory=list)
    stopped: str | None = None  # why the search ended ("settled", "budget", "trials", "interrupted", a failure)
    elapsed_s: float = 0.0
    exit_code: int = 0

    @property
    def user(self) -> Trial | None:
        return self.trials[0] if self.trials else None

    @property
    def others_cpus(self) -> tuple[float, float] | None:
        """The least and most CPUs other processes used in the measured trials' windows (None: unknown)."""
        seen = [t.others_cpus for t in self.trials if t.ok and t.others_cpus is not None]
        return (min(seen), max(seen)) if seen else None

    @property
    def busy(self) -> bool:
        """Some trial ran beside other processes' load (``policy.busy``): the text says so first."""
        from loaderdoc.policy import busy

        seen = self.others_cpus
        return seen is not None and busy(seen[1], self.cpu_budget)

    @property
    def user_measured(self) -> bool:
        return self.user is not None and self.user.ok

    @property
    def no_pick_reason(self) -> str:
        """Why there is no pick: your settings unmeasured, the search interrupted, or nothing else measured."""
        user = self.user
        if not self.user_measured:
            why = user.reason if user is not None and user.reason else "no trial measured"
            return f"your own settings could not be measured ({why})"
        if self.stopped == "interrupted":
            return (f"interrupted in trial {len(self.trials)}: the search did not finish, so nothing is picked "
                    "(each trial above is as measured)")
        others = self.trials[1:]
        if not others:
            return (f"only your own settings were measured ({self.stopped_text} after trial 1): "
                    "nothing to compare them with")
        failed = ", ".join(f"trial {t.number} {t.status}" for t in others)
        return f"only your own settings were measured ({failed}): nothing to compare them with"

    @property
    def stopped_text(self) -> str:
        return STOPPED_TEXT.get(self.stopped or "", self.stopped or "")

    @property
    def loader_site(self) -> str:
        """Where the training loader was built, file names without their folders ("data.py:12 <
        train.py:40"); "" where no line is known."""
        site = (self.loader or {}).get("site") or ""
        return " < ".join(part.rsplit("/", 1)[-1] for part in site.split(" < ") if part)

    @property
    def written(self) -> dict:
        """The training loader's settings as the script asked for them (as it ran, where the hook
        did not record the asking); empty where no loader was seen."""
        loader = self.loader or {}
        return dict(loader.get("asked") or loader.get("settings") or {})

    def pick_settings(self):
        """The training loader as the script built it, with the pick's workers, prefetch depth and
        persistence (None without a pick): what --export writes and the app takes as chosen."""
        from loaderdoc.base.settings import LoaderSettings

        if self.pick is None:
            return None
        ran = self.written
        pick = self.pick.settings
        return LoaderSettings(
            batch_size=ran.get("batch_size") if isinstance(ran.get("batch_size"), int) else None,
            shuffle=ran.get("shuffle") is True,  # the script's own (None: a sampler decides, shuffle stays off)
            drop_last=bool(ran.get("drop_last")),
            pin_memory=bool(ran.get("pin_memory")),
            num_workers=pick.num_workers,
            prefetch_factor=pick.prefetch_factor if pick.num_workers else None,
            persistent_workers=(pick.persistent or bool(ran.get("persistent_workers"))) and pick.num_workers > 0,
        )

    def to_dict(self) -> dict:
        return stamped(to_dict(self))

    @classmethod
    def from_dict(cls, data: dict) -> TuneReport:
        return from_dict(cls, data)
