"""The ``loaderdoc.watch/1`` report as one typed value: :class:`WatchReport`, its loaders
(:class:`~loaderdoc.watching.watched.LoaderReport`) and its findings.

Built once, from the hook's records, by :mod:`.report` (or from the nodes' reports by
:mod:`.merge`); read back, checked, by :mod:`.report_file`; written by :meth:`WatchReport.to_json`,
the one serializer. The run's totals and the memory peaks the app shows are properties, derived
from the loaders and the memory samples here and nowhere else. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderdoc.advice.findings import Finding, worst
from loaderdoc.base._serde import to_dict
from loaderdoc.base.jsondoc import stamped
from loaderdoc.watching.watched import LoaderReport, wait_share_of

WATCH_SCHEMA = "loaderdoc.watch/1"


@dataclass
class WatchReport:
    """One watched run (or a job's runs merged): every process, loader and finding."""

    command: list[str] | None = None
    exit_code: int | None = None
    processes: list[dict[str, Any]] = field(default_factory=list)  # pid, hostname, rank, ... (+ source, merged)
    ranks: list[dict[str, Any]] = field(default_factory=list)  # one row per rank, two or more ranks
    loaders: list[LoaderReport] = field(default_factory=list)
    memory: list[dict[str, Any]] = field(default_factory=list)  # per process: its samples, /dev/shm
    gpu: dict[str, Any] | None = None
    findings: list[Finding] = field(default_factory=list)
    machine: Any = None
    traces: list[dict[str, Any]] | None = None  # under --trace only
    apply: dict[str, Any] | None = None  # under --apply only: the tables and what they matched
    merged_from: list[str] | None = None  # a merged report's: where each node's report came from
    commands: list[Any] | None = None
    machines: list[Any] | None = None
    path: str | None = None  # the file it was read from (the app names it); never written

    @property
    def status(self) -> str:
        return worst(self.findings)

    @property
    def steps(self) -> int:
        return sum(lo.totals.steps for lo in self.loaders)

    @property
    def wait_s(self) -> float:
        return sum(lo.totals.wait_s for lo in self.loaders)

    @property
    def step_s(self) -> float:
        return sum(lo.totals.step_s for lo in self.loaders)

    @property
    def wait_share(self) -> float | None:
        return wait_share_of(self.wait_s, self.step_s)

    @property
    def several_processes(self) -> bool:
        """Loaders of more than one process (of one node or, merged, several): names say which."""
        return len({(lo.source, lo.pid) for lo in self.loaders}) > 1

    def _sampled(self, key: str) -> list[int]:
        return [s[key] for m in self.memory for s in m.get("samples") or [] if s.get(key) is not None]

    @property
    def main_pss_peak_bytes(self) -> int | None:
        return max(self._sampled("main_pss_bytes"), default=None)

    @property
    def workers_pss_peak_bytes(self) -> int | None:
        """The workers' summed PSS at its highest: a sample's, or a loader's epoch maximum."""
        loaders = [lo.totals.workers_pss_max_bytes for lo in self.loaders if lo.totals.workers_pss_max_bytes is not None]
        return max(self._sampled("workers_pss_bytes") + loaders, default=None)

    @property
    def shm_peak_bytes(self) -> int | None:
        peaks = [m["shm_peak_used_bytes"] for m in self.memory if m.get("shm_peak_used_bytes") is not None]
        return max(self._sampled("shm_used_bytes") + peaks, default=None)

    @property
    def shm_total_bytes(self) -> int | None:
        totals = [m["shm_total_bytes"] for m in self.memory if m.get("shm_total_bytes") is not None]
        return totals[-1] if totals else None

    @property
    def gpu_timing(self) -> str | None:
        """"cuda-events" | "unavailable" | None (not recorded)."""
        timing = (self.gpu or {}).get("timing")
        return timing if isinstance(timing, str) else None

    def to_json(self) -> dict[str, Any]:
        """The ``loaderdoc.watch/1`` document: what --json prints and --report writes."""
        out: dict[str, Any] = {
            "schema": WATCH_SCHEMA, "command": self.command, "exit_code": self.exit_code, "status": self.status,
            "steps": self.steps, "wait_share": self.wait_share, "wait_s": self.wait_s, "step_s": self.step_s,
            "processes": self.processes, "ranks": self.ranks, "loaders": [lo.to_json() for lo in self.loaders],
            "memory": self.memory, "gpu": self.gpu, "findings": [to_dict(f) for f in self.findings],
            "machine": self.machine,
        }
        if self.traces is not None:
            out["traces"] = self.traces
        if self.apply is not None:
            out["apply"] = self.apply
        if self.merged_from is not None:
            out.update(merged_from=self.merged_from, commands=self.commands, machines=self.machines)
        return stamped(out)
