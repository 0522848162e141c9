"""The ``loaderdoc.check/1`` report as one typed value: :class:`CheckReport` and the loaders it
checked (:class:`CheckedLoader`), each with its findings.

Built once by :func:`loaderdoc.checking.build.build_check`; written by :meth:`CheckReport.to_json`,
the one serializer (the documented JSON of docs/check-json.md); printed by ``commands/check.py``
from this value. Every derived figure (the report's findings, batch bytes, status, exit code) is
a property here and nowhere else. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from loaderdoc.advice.findings import Finding, new_findings, worst
from loaderdoc.advice.recommend import Recommendation, batch_bytes_for
from loaderdoc.base._serde import to_dict
from loaderdoc.base.errors import EXIT_FOR_STATUS
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.summary import machine_summary
from loaderdoc.checking import CHECK_SCHEMA


@dataclass
class CheckedLoader:
    """One DataLoader of the config, as it was judged."""

    loader: Any  # config.meaning.FoundLoader: its name, layout, keys and where they were read
    settings: LoaderSettings  # as judged: the file's, else the defaults named in set_by
    batch: int | None  # the batch one DataLoader makes on this machine; None: the file does not set it
    batch_bytes: int | None
    findings: list[Finding]
    described: dict[str, Any]  # its entry of the loaderdoc.config/1 description: every setting's read

    @property
    def name(self) -> str:
        return self.loader.name

    @property
    def status(self) -> str:
        return worst(self.findings)

    @property
    def unreadable(self) -> dict[str, str]:
        """Settings computed at run time: they were not judged."""
        return dict(self.loader.unreadable)

    @property
    def judged_without_batch(self) -> bool:
        """Only the batch is computed at run time: the other settings were judged without it."""
        return set(self.loader.unreadable) == {"batch_size"}

    def to_json(self, config: Any) -> dict[str, Any]:
        loader, described = self.loader, self.described
        return {
            "name": loader.name,
            "layout": loader.layout,
            "settings": self.settings.as_kwargs(),
            "set_by": {k: v["set_by"] for k, v in described["settings"].items()},  # null: the file does not set it
            "read": described["settings"],
            "batch_scope": described["batch_scope"],
            "batch_per_process": self.batch,
            "unreadable": self.unreadable,
            "found": {k: {"key": loader.where(k), "line": config.line_of_origin(loader.origins.get(k))}
                      for k in loader.keys},
            "batch_bytes": self.batch_bytes,
            "status": self.status,
            "findings": [to_dict(f) for f in self.findings],
        }


@dataclass
class CheckReport:
    """Everything `check` knows: the machine, the config's loaders as judged, the findings and the
    recommendation."""

    facts: Any  # system.facts.MachineFacts
    config_path: str | None = None  # --config as given
    config: Any = None  # config.files.ConfigFile, when --config was read
    description: dict[str, Any] = field(default_factory=dict)  # the config's loaderdoc.config/1 description
    context: Any = None  # advice.context.TrainingContext, from the config's [training]
    loaders: list[CheckedLoader] = field(default_factory=list)
    given_batch_size: int | None = None  # --batch-size
    sample_bytes: int | None = None  # one sample, from --sample-shape and --dtype
    machine_findings: list[Finding] = field(default_factory=list)  # without a loader: the machine's alone
    recommendation: Recommendation | None = None

    @property
    def first(self) -> CheckedLoader | None:
        return self.loaders[0] if self.loaders else None

    @property
    def settings(self) -> LoaderSettings | None:
        """The first loader's settings (the JSON's config.settings, as before loaders were many)."""
        return self.first.settings if self.first else None

    @property
    def batch_size(self) -> int | None:
        """The batch the recommendation names: a batch size the file does not set is not given."""
        return self.given_batch_size or (self.first.batch if self.first else None)

    @property
    def batch_bytes(self) -> int | None:
        return self.first.batch_bytes if self.first else batch_bytes_for(self.batch_size, self.sample_bytes)

    @property
    def findings(self) -> list[Finding]:
        """The first loader's findings, then what only another loader (val, test) has; said once each."""
        if not self.first:
            return list(self.machine_findings)
        findings = list(self.first.findings)
        seen = {f.key for f in findings}
        for entry in self.loaders[1:]:
            findings += new_findings(entry.findings, seen)
        return findings

    @property
    def status(self) -> str:
        return worst([f for entry in self.loaders for f in entry.findings] + self.findings)

    @property
    def exit_code(self) -> int:
        return EXIT_FOR_STATUS[self.status]

    @property
    def summary_lines(self) -> dict[str, str]:
        """The machine, topic by topic, one line each."""
        return dict(machine_summary(self.facts))

    def to_json(self) -> dict[str, Any]:
        """The ``loaderdoc.check/1`` document that ``check --json`` prints."""
        facts, rec = self.facts, self.recommendation
        return {
            "schema": CHECK_SCHEMA,
            "status": self.status,
            "exit_code": self.exit_code,
            "summary": {
                "cpu_budget": facts.cpu.budget,
                "cpu_budget_source": facts.cpu.budget_source,
                "cpus_per_rank": facts.cpus_per_rank,
                "memory_budget_bytes": facts.memory.budget,
                "shm_free_bytes": facts.shm.free.get(),
                "gpus": facts.gpu.count,
                "usable_gpus": facts.usable_gpus,
                "lines": self.summary_lines,
            },
            "config": self._config_json(),
            "batch_bytes": self.batch_bytes,
            "findings": [to_dict(f) for f in self.findings],
            "recommended": {"settings": rec.settings.as_kwargs(), "reasons": rec.reasons} if rec else None,
            "machine": facts.to_dict(),
        }

    def _config_json(self) -> dict[str, Any]:
        settings = self.settings
        return {
            "path": self.config_path,
            "settings": settings.as_kwargs() if settings else None,  # the first loader's, as before
            "training": self.context.to_dict() if self.context else None,
            **{k: v for k, v in self.description.items() if k not in ("path", "loaders")},
            "loaders": [entry.to_json(self.config) for entry in self.loaders],
            "skipped": self.config.skipped if self.config else [],
        }
