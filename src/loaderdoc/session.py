"""The app's state and the probe's lifecycle, without a terminal.

A :class:`Session` holds what the interactive app shows: the machine facts, the workload the probe
will measure, the chosen settings and where they came from, the recommendation, the findings, the
trade-offs and the probe's progress and report. Every change goes through one of its methods, which
recompute what depends on it. The Textual app (``loaderdoc.tui``) renders a session and runs its
slow parts (:meth:`Session.read_facts`, :meth:`Session.run_probe`) in thread workers; tests drive a
session directly. Imports neither textual nor torch (the probe imports torch when it runs).
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoc.advice.findings import Finding
from loaderdoc.advice.recommend import Recommendation, recommend
from loaderdoc.advice.rules import evaluate
from loaderdoc.advice.tradeoffs import KnobTradeoff, tradeoffs
from loaderdoc.base.errors import SettingsError, UserError
from loaderdoc.base.settings import LoaderSettings, coerce_torch_threads, split_process
from loaderdoc.base.summary import settings_diff, settings_line
from loaderdoc.base.visible import visible
from loaderdoc.cluster.job_report import JobReport
from loaderdoc.export import export_header
from loaderdoc.probing.real_loop import VersusRealLoop, versus_real_loop
from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.probing.workloads import PRESETS
from loaderdoc.reports import TuneRun, real_loops, watched_choice
from loaderdoc.system.facts import MachineFacts
from loaderdoc.watching.report import WatchReport

DetectFn = Callable[..., MachineFacts]
ProbeFn = Callable[..., ProbeReport]


# ---- workload -----------------------------------------------------------------------------
@dataclass
class ConfigChoice:
    """A loader read from the user's config (``loaderdoc --config FILE``): its settings, and per
    setting where it came from, or that the file does not set it (torch's default, named)."""

    path: str
    loader: str  # "train", "val", ... or "" for a file's one loader
    settings: LoaderSettings
    sources: dict[str, str]  # setting -> "opt.yaml:54 workers" | "not set (torch default 0)" | ...
    read: str = "complete"  # or "partial": something in the file only run time knows

    def __post_init__(self) -> None:
        # a file or key name is data: a control sequence in it is shown escaped, never obeyed
        self.path, self.loader = visible(self.path), visible(self.loader)
        self.sources = {key: visible(text) for key, text in self.sources.items()}

    @property
    def origin(self) -> str:
        loader = f", loader {self.loader}" if self.loader else ""
        partial = "; read partial" if self.read == "partial" else ""
        return f"read from {self.path}{loader}{partial}"


@dataclass
class ProbeRequest:
    """What the probe will measure: a preset or the user's dataset, and the run's limits."""

    preset: str | None = None
    dataset: str | None = None  # "module:factory" from --dataset
    batch_size: int = 32
    step_ms: float = 20.0
    budget_s: float = 30.0
    sample_bytes: int | None = None  # from --sample-shape x --dtype, for memory sizing
    batch_size_given: bool = False  # False: 32 is only the probe's default, not the user's size
    step_ms_given: bool = False  # False: the preset's typical step, as `loaderdoc probe PRESET` uses

    @property
    def source(self) -> str:
        return f"--dataset {self.dataset}" if self.dataset else f"preset {self.preset or '(none)'}"

    @property
    def batch_bytes(self) -> int | None:
        return None if self.sample_bytes is None else self.sample_bytes * self.batch_size

    def choose_preset(self, name: str) -> None:
        """Make preset ``name`` the workload, with its own batch size and step wherever the user
        gave none: the app then probes exactly what `loaderdoc probe NAME` probes."""
        self.preset, self.dataset = name, None
        spec = PRESETS.get(name)
        if spec is None:
            return
        if not self.batch_size_given:
            self.batch_size = spec.batch_size
        if not self.step_ms_given:
            self.step_ms = spec.step_ms


def preset_names() -> list[tuple[str, str]]:
    """[(name, one-line description)] of the probe presets."""
    return [(name, spec.description) for name, spec in PRESETS.items()]


def parse_workload_field(key: str, text: str) -> tuple[Any, str | None]:
    """A workload form field's value, or an error message for it."""
    text = text.strip()
    try:
        if key == "batch_size":
            value: Any = int(text)
            if value < 1:
                return None, "batch size must be >= 1"
            return value, None
        value = float(text)
    except ValueError:
        return None, f"{key.replace('_', ' ')}: expected a number, got {text!r}"
    if key == "step_ms" and not (0 <= value < 1e6):
        return None, "step time must be >= 0 ms"
    if key == "budget_s" and not (0 < value <= 3600):
        return None, "budget must be between 0 and 3600 seconds"
    return value, None


def apply_change(settings: LoaderSettings, change: dict[str, Any]) -> LoaderSettings:
    """``settings`` with a finding's settings change applied (its DataLoader keys: the process's own
    ``torch_threads`` is never a DataLoader argument; :meth:`Session.apply_fix` keeps it apart).

    Raises :class:`SettingsError` when the result is something torch would reject."""
    merged = dataclasses.asdict(settings)
    merged.update(split_process(change)[0])
    return LoaderSettings.from_mapping(merged, where="fix")


def one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if isinstance(exc, UserError) and text else f"{type(exc).__name__}: {' '.join(text)}"


# ---- the session --------------------------------------------------------------------------
class Session:
    """Everything the app shows, and the only way to change it.

    ``detect_fn(cpu_info=...)`` replaces :func:`loaderdoc.system.detect.detect`, ``probe_fn`` replaces
    :func:`loaderdoc.probing.probe.probe` (same keyword arguments), ``load_dataset_fn`` replaces
    :func:`loaderdoc.probing.workloads.load_user_dataset`, ``header_fn`` replaces
    :func:`loaderdoc.export.export_header` (snapshots want no clock)."""

    def __init__(
        self,
        *,
        workload: ProbeRequest | None = None,
        settings: LoaderSettings | None = None,
        detect_fn: DetectFn | None = None,
        probe_fn: ProbeFn | None = None,
        load_dataset_fn: Callable[[str], Any] | None = None,
        header_fn: Callable[..., list[str]] | None = None,
        watch_run: WatchReport | None = None,
        job_run: JobReport | None = None,
        tune_run: TuneRun | None = None,
        config: ConfigChoice | None = None,
    ) -> None:
        self._detect_fn = detect_fn
        self._probe_fn = probe_fn
        self._load_dataset_fn = load_dataset_fn
        self._header_fn = header_fn or export_header

        self.facts: MachineFacts | None = None
        self.pending_facts: frozenset[str] = frozenset()  # slow facts still being read
        self.facts_error: str | None = None
        self.workload = workload or ProbeRequest()
        if self.workload.preset is None and self.workload.dataset is None and PRESETS:
            self.workload.choose_preset("image" if "image" in PRESETS else next(iter(PRESETS)))
        self.dataset_arg = self.workload.dataset  # --dataset, kept while a preset is chosen
        self.settings = settings or LoaderSettings(batch_size=self.workload.batch_size)
        self.settings_origin = "torch defaults: machine facts not read yet" if settings is None else "given"
        self.user_touched = settings is not None  # the user chose settings: recommendations only suggest
        self.torch_threads: int | None = None  # the training process's threads a fix chose: exported beside
        self.recommendation: Recommendation | None = None
        self.recommend_error: str | None = None
        self.watch_run = watch_run  # a watched run's report (`loaderdoc --report FILE`): its findings lead
        self.job_run = job_run  # or a job's (`check --distributed --json`): likewise
        self.tune_run = tune_run  # or a tune's (`loaderdoc tune --report FILE`): its trials, no findings
        self.config = config  # the user's config (`loaderdoc --config FILE`): its loader is the chosen settings
        if config is not None and settings is None:
            self.settings = config.settings
            self.settings_origin = config.origin
            self.user_touched = True
        chosen = watched_choice(watch_run) if watch_run is not None and settings is None and config is None else None
        if chosen is not None:  # what the run used: its findings are about these
            self.settings, self.settings_origin = chosen
            self.user_touched = True
        picked = tune_run.report.pick_settings() if tune_run is not None and settings is None else None
        if picked is not None:  # measured on the real job: chosen, and what Export writes
            self.settings = picked
            self.settings_origin = f"measured by loaderdoc tune (trial {tune_run.report.pick.trial})"
            self.user_touched = True
        self.findings: list[Finding] = sorted(self.report_findings, key=lambda f: -f.rank)
        self.findings_error: str | None = None
        self.tradeoffs: list[KnobTradeoff] = []
        self.tradeoffs_error: str | None = None

        self.live_results: list[ConfigResult] = []
        self.report: ProbeReport | None = None
        self.report_complete = False  # False for a cancelled probe's partial report
        self.probe_state = "idle"  # idle | running | stopping | done | cancelled | failed
        self.probe_progress: tuple[float, str] = (0.0, "")
        self.probe_error: str | None = None
        self.cancel: threading.Event | None = None

    @property
    def report_findings(self) -> list[Finding]:
        """The findings of the report opened with --report: measured or gathered elsewhere, they
        stay whatever the chosen settings."""
        opened = self.watch_run or self.job_run
        return list(opened.findings) if opened is not None else []

    @property
    def opened_report(self) -> WatchReport | JobReport | TuneRun | None:
        """The report opened with --report (a watched run, a job or a tune); None without one."""
        return self.watch_run or self.job_run or self.tune_run

    @property
    def setting_sources(self) -> dict[str, str]:
        """Where each chosen value came from while the config's settings are the chosen ones (the
        file's key and line, or "not set (torch default 0)"); empty otherwise."""
        if self.config is not None and self.settings == self.config.settings:
            return dict(self.config.sources)
        return {}

    @property
    def report_basis(self) -> str | None:
        """Where the report's findings come from, as the diagnoses say it; None without one."""
        if self.watch_run is not None:
            return f"the watched run {self.watch_run.path}"
        if self.job_run is not None:
            return f"the job report {self.job_run.path}"
        return None

    @property
    def probe_versus_real(self) -> VersusRealLoop | None:
        """The probe's rate against the real loop's, where both were measured."""
        if self.report is None or not self.report_complete:
            return None
        return versus_real_loop(self.report, real_loops(self.watch_run or self.tune_run))

    def evidence_from(self, finding: Finding) -> str:
        """Where a finding's evidence was found, as the diagnoses head it."""
        if finding in self.report_findings:
            return "in the watched run" if self.watch_run is not None else "in the job's nodes"
        return "on this machine"

    # ---- machine facts ------------------------------------------------------------------
    def read_facts(self, *, cpu_info: bool) -> MachineFacts:
        """Detect the machine (blocking: the app calls it in a thread worker)."""
        if self._detect_fn is not None:
            return self._detect_fn(cpu_info=cpu_info)
        from loaderdoc.system.detect import detect

        return detect(cpu_info=cpu_info)

    def facts_arrived(self, facts: MachineFacts, pending: frozenset[str] = frozenset()) -> None:
        self.facts = facts
        self.pending_facts = pending
        self.refresh()

    def facts_failed(self, stage: str, error: str) -> None:
        if self.facts is None:
            self.facts_error = f"could not read machine facts: {error}"
        self.pending_facts = frozenset()

    # ---- recommendation, findings, trade-offs -------------------------------------------
    @property
    def batch_bytes(self) -> int | None:
        """Bytes of one batch at the chosen batch size: measured by the probe, else from
        --sample-shape."""
        if self.report is not None and self.report.workload.batch_bytes:
            per_sample = self.report.workload.batch_bytes / max(1, self.report.workload.batch_size)
            return int(per_sample * (self.settings.batch_size or self.report.workload.batch_size))
        if self.workload.sample_bytes is not None:
            return self.workload.sample_bytes * (self.settings.batch_size or self.workload.batch_size)
        return None

    def _sample_bytes(self) -> int | None:
        if self.workload.sample_bytes is not None:
            return self.workload.sample_bytes
        w = self.report.workload if self.report is not None else None
        if w is not None and w.batch_bytes and w.batch_size:
            return w.batch_bytes // w.batch_size
        return None

    @property
    def recommendation_origin(self) -> str:
        src = self.recommendation.source if self.recommendation is not None else "facts"
        return "recommended from the probe" if src == "probe" else "recommended from machine facts"

    def refresh(self) -> None:
        """Recompute the recommendation (the chosen settings follow it until the user chooses),
        then the findings and trade-offs for the chosen settings."""
        self._recommend()
        self.update_advice()

    def _recommend(self) -> None:
        if self.facts is None:
            return
        try:
            self.recommendation = recommend(
                self.facts,
                batch_size=self.workload.batch_size if self.workload.batch_size_given else None,
                sample_bytes=self._sample_bytes(),
                probe=self.report if self.report_complete else None,
            )
            self.recommend_error = None
        except Exception as exc:  # a bug in recommend() must not take the app down
            self.recommendation, self.recommend_error = None, f"recommend() failed: {one_line(exc)}"
        if self.user_touched:
            return
        if self.recommendation is not None:
            self.settings = self.recommendation.settings
            self.settings_origin = self.recommendation_origin
        else:
            self.settings_origin = "torch defaults: no recommendation available"

    def update_advice(self) -> None:
        """Re-run the rules and the trade-offs for the chosen settings."""
        if self.facts is None:
            return
        try:
            found = evaluate(self.facts, self.settings, batch_bytes=self.batch_bytes, probe=self.report)
            self.findings = sorted([*self.report_findings, *found], key=lambda f: -f.rank)  # most severe first, catalogue order within
            self.findings_error = None
        except Exception as exc:
            self.findings = sorted(self.report_findings, key=lambda f: -f.rank)
            self.findings_error = f"the rules failed: {one_line(exc)}"
        try:
            self.tradeoffs = list(tradeoffs(self.facts, self.settings, batch_bytes=self.batch_bytes,
                                            probe=self.report))
            self.tradeoffs_error = None
        except Exception as exc:
            self.tradeoffs, self.tradeoffs_error = [], f"trade-offs failed: {one_line(exc)}"

    def set_workload_field(self, key: str, value: Any) -> bool:
        """A value the user gave for the probe's workload (batch_size, step_ms, budget_s); the
        recommendation follows a new batch size. False when it is the value already."""
        if getattr(self.workload, key) == value:
            return False
        setattr(self.workload, key, value)
        if key == "batch_size":
            self.workload.batch_size_given = True
            self.refresh()
        elif key == "step_ms":
            self.workload.step_ms_given = True
        return True

    def choose_workload(self, preset: str | None) -> bool:
        """Make preset ``preset`` the workload (None: the user's --dataset); True when the batch size
        changed, and the recommendation (and advice) followed it."""
        w = self.workload
        if preset is None:
            w.dataset = self.dataset_arg
            return False
        if preset == w.preset and not w.dataset:
            return False
        batch = w.batch_size
        w.choose_preset(preset)
        if w.batch_size == batch:
            return False
        self.refresh()
        return True

    # ---- chosen settings ----------------------------------------------------------------
    def set_settings(self, settings: LoaderSettings, origin: str) -> bool:
        """Make ``settings`` the chosen settings (validated), then re-run the advice; False when
        an edit changed nothing."""
        if settings == self.settings and origin == "edited":
            return False
        self.settings = settings.validate()
        self.settings_origin = origin
        self.user_touched = True
        self.update_advice()
        return True

    def apply_fix(self, finding: Finding) -> tuple[bool, str]:
        """Apply a finding's settings change: (applied, what changed or why not)."""
        if not finding.settings_change:
            return False, "This finding has no settings change to apply; its fix is outside the DataLoader."
        try:
            new = apply_change(self.settings, finding.settings_change)
            process = {k: coerce_torch_threads(v, "fix: ") for k, v in split_process(finding.settings_change)[1].items()}
        except SettingsError as exc:
            return False, f"Not applied: {exc}"
        diff = settings_diff(self.settings, new)
        if "torch_threads" in process:  # per process, not a DataLoader argument: the export carries it
            said = f"torch_threads: {self.torch_threads!r} -> {process['torch_threads']!r}"
            diff = said if new == self.settings else f"{diff}; {said}"
            self.torch_threads = process["torch_threads"]
        self.set_settings(new, f"fix applied: {finding.rule_id}")
        return True, diff

    def adopt_recommendation(self) -> str | None:
        """Make the recommendation the chosen settings; the reason when there is none."""
        if self.recommendation is None:
            return self.recommend_error or "no recommendation yet"
        self.set_settings(self.recommendation.settings, self.recommendation_origin)
        return None

    def export_header(self) -> list[str]:
        """The header an exported file carries: the machine, the reasons, what differs."""
        if self.facts is None:
            return ["DataLoader settings by loaderdoc (machine facts were not read)"]
        rec = self.recommendation
        matches = rec is not None and rec.settings == self.settings
        header = list(self._header_fn(self.facts, rec if matches else None, self.findings))
        if not matches:
            header.insert(2, f"settings: {self.settings_origin}")
            if rec is not None:
                header.insert(3, "differs from the recommendation: " + settings_diff(rec.settings, self.settings))
        return header

    # ---- the probe's lifecycle ----------------------------------------------------------
    @property
    def probe_running(self) -> bool:
        return self.probe_state in ("running", "stopping")

    def start_probe(self) -> str | None:
        """Begin a probe run (then call :meth:`run_probe`); the reason when one can't start."""
        if self.probe_running:
            return "A probe is already running; Esc stops it."
        if not self.workload.preset and not self.workload.dataset:
            return "Choose a workload (a preset or --dataset) first."
        self.live_results = []
        self.report = None
        self.report_complete = False
        self.probe_error = None
        self.probe_state = "running"
        self.probe_progress = (0.0, f"starting: {self.workload.source}")
        self.cancel = threading.Event()
        return None

    def stop_probe(self) -> bool:
        """Ask the running probe to stop (its workers are gone within ~0.1 s); False if none runs."""
        if not self.probe_running or self.cancel is None:
            return False
        self.cancel.set()
        self.probe_state = "stopping"
        self.probe_progress = (self.probe_progress[0], "waiting for the DataLoader workers to exit")
        return True

    def run_probe(self, on_result: Callable[[ConfigResult], None],
                  on_progress: Callable[[float, str], None]) -> ProbeReport:
        """Measure the workload (blocking; the app runs it in a thread worker and posts the
        callbacks back to its own thread). Raises what the probe raises."""
        probe = self._probe_fn
        if probe is None:
            from loaderdoc.probing.probe import probe
        w = self.workload
        kwargs: dict[str, Any] = dict(batch_size=w.batch_size, step_ms=w.step_ms, budget_s=w.budget_s,
                                      facts=self.facts, on_result=on_result, on_progress=on_progress,
                                      cancel=self.cancel)
        if w.dataset:
            load = self._load_dataset_fn
            if load is None:
                from loaderdoc.probing.workloads import load_user_dataset as load
            loaded = load(w.dataset)
            dataset, collate = loaded if isinstance(loaded, tuple) else (loaded, None)
            return probe(dataset, collate_fn=collate, factory=w.dataset, **kwargs)
        return probe(preset=w.preset, **kwargs)

    def probe_progressed(self, fraction: float, text: str) -> None:
        if self.probe_state == "running":
            self.probe_progress = (fraction, text)

    def result_arrived(self, result: ConfigResult) -> None:
        self.live_results.append(result)

    def probe_finished(self, report: ProbeReport) -> tuple[str, str]:
        """Take the report; (title, message) for the user."""
        self.report = report
        cancelled = (self.cancel is not None and self.cancel.is_set()) or report.stopped == "cancelled"
        # a cancelled run's measurements are shown and feed the diagnoses, but its partial search
        # does not replace the recommendation
        self.report_complete = not cancelled
        self.probe_state = "cancelled" if cancelled else "done"
        fraction = self.probe_progress[0] if cancelled else 1.0
        self.probe_progress = (fraction, f"{len(report.results)} configurations in {report.elapsed_s:.1f} s"
                               + ("" if cancelled else f", stopped: {report.stopped or 'done'}"))
        self.refresh()
        if cancelled:
            return "Probe cancelled", (f"Stopped after {len(report.results)} configurations; the recommendation "
                                       "is unchanged.")
        if report.recommended is None:
            return "Probe finished", "No configuration could be measured; see the failures."
        if self.user_touched:
            return "Probe finished", "The probe has a recommendation; 'Use recommendation' (Probe or Settings) adopts it."
        return "Probe finished: settings chosen", settings_line(self.settings)

    def probe_failed(self, error: str) -> None:
        self.probe_state = "failed"
        self.probe_error = error
        self.probe_progress = (self.probe_progress[0], "")
