"""`check`'s producer: the machine's facts and a config's loaders judged by the rules, once, into a
:class:`~loaderdoc.checking.report.CheckReport`. No torch, no textual: `check` answers in well
under half a second."""

from __future__ import annotations

from typing import Any

from loaderdoc.advice.recommend import batch_bytes_for, keep_stated, recommend
from loaderdoc.advice.rules import TrainingContext, evaluate
from loaderdoc.checking.report import CheckedLoader, CheckReport


def is_loaderdoc_training(config: Any) -> bool:
    """[training] describes the script for the rules when it is loaderdoc's: in a file of loaderdoc's
    own tables, or holding nothing but its facts; a project's `training:` (epochs, lr) is not."""
    from dataclasses import fields

    table = config.training_table
    if table is None:
        return False
    names = {f.name for f in fields(TrainingContext)}
    return config.loaderdoc_shaped or bool(table) and all(key in names for key in table)


def machine_counts(facts: Any) -> dict[str, int | None]:
    """What a framework's run-time rule counts on this machine (config.meaning.MACHINE_COUNTS):
    ``os.cpu_count()``, and the job's processes (the launcher's WORLD_SIZE, else one per usable GPU)."""
    world = facts.distributed.world_size.get()
    return {"cpu_count": facts.cpu.logical.get(),
            "world_size": int(world) if isinstance(world, int) else max(1, facts.usable_gpus)}


def per_process_batch(loader, settings, facts) -> int | None:
    """The batch one DataLoader makes: a total over all GPUs (detectron2's IMS_PER_BATCH, YOLO's
    batch) is split over this machine's GPUs, one process each; None when the file does not set it."""
    if "batch_size" not in loader.keys or settings.batch_size is None:
        return None
    if "batch_size" in loader.run:  # the framework's rule worked out one process's batch from the file
        return settings.batch_size
    if loader.batch_scope == "total":
        return max(1, settings.batch_size // max(1, facts.usable_gpus))
    return settings.batch_size


def build_check(facts: Any, *, config_path: str | None = None, batch_size: int | None = None,
                sample_bytes: int | None = None) -> CheckReport:
    """Everything `check` knows about ``facts`` and the config at ``config_path`` (each of its
    loaders judged by the rules), for batches of ``batch_size`` samples of ``sample_bytes``."""
    report = CheckReport(facts, config_path=config_path, given_batch_size=batch_size, sample_bytes=sample_bytes)
    if config_path:
        from loaderdoc.config import read_config
        from loaderdoc.config.report import describe

        config = report.config = read_config(config_path)
        report.description = describe(config)
        if is_loaderdoc_training(config):
            report.context = TrainingContext.from_mapping(config.training_table, where=str(config.path),
                                                          lines=config.training_lines)
        for loader, described in zip(config.loaders, report.description["loaders"], strict=True):
            settings = config.settings(loader, strict=False, counts=machine_counts(facts))
            batch = batch_size or per_process_batch(loader, settings, facts)
            if batch is not None and batch != settings.batch_size:
                settings = settings.replace(batch_size=batch)
            loader_batch = batch_bytes_for(batch, sample_bytes)
            # a setting computed at run time is unknown, not torch's default: a batch only the run counts
            # (packed by size) leaves every other setting judged, each rule that needs a batch silent;
            # any other such setting leaves the machine alone judged
            judged = settings if not loader.unreadable else None
            if set(loader.unreadable) == {"batch_size"}:
                judged, loader_batch = settings.replace(batch_size=None), None
            findings = evaluate(facts, judged, batch_bytes=loader_batch, context=report.context)
            report.loaders.append(CheckedLoader(loader, settings, batch, loader_batch, findings, described))
    if not report.loaders:
        report.machine_findings = evaluate(facts, None, batch_bytes=report.batch_bytes, context=report.context)
    report.recommendation = recommend(facts, batch_size=report.batch_size, sample_bytes=sample_bytes)
    if report.first is not None:  # what the training loader's file sets stays, unless a finding says why
        first = report.first
        stated = {k: (getattr(first.settings, k), _where(v["set_by"]) + ("; the framework's rule" if v.get("run") else ""))
                  for k, v in first.described["settings"].items() if v["set_by"] is not None and "unreadable" not in v}
        report.recommendation = keep_stated(report.recommendation, stated, first.findings)
    return report


def _where(set_by: dict[str, Any]) -> str:
    return f"{set_by['key']}, line {set_by['line']}" if set_by.get("line") else set_by["key"]
