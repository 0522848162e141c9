"""``loaderdoc watch --apply FILE``, the launcher's half: the file's settings as per-role tables for
the child (:mod:`loaderdoc.watching.apply` builds the loaders with them), and afterwards what came of
them for the report.

FILE is anything ``read_config`` reads (what ``loaderdoc --export`` writes in each of its formats, a
LightningCLI, Hydra or Hugging Face config...). A loader the file names ("train", "val"/"eval",
"test", "predict") becomes that role's table; a loader without a name ("") applies to every loader,
and a role's own table wins over it. Only the settings that change how batches are made are applied
(:data:`~loaderdoc.watching.apply.APPLIED`); batch_size, shuffle and drop_last change the training
itself and are said, never applied. A ``[process]`` table's ``torch_threads`` (loaderdoc's own layout)
is per process: ``OMP_NUM_THREADS`` in the command's environment and ``torch.set_num_threads`` in
each process the hook runs in. No torch, no textual.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loaderdoc.base.errors import UserError
from loaderdoc.config.layouts import HF_LAYOUT  # its loaders share every setting but the batch size
from loaderdoc.watching.apply import APPLIED, ENV_APPLY, table_key

if TYPE_CHECKING:
    from loaderdoc.watching.watched import LoaderReport

__all__ = ["ENV_APPLY", "OMP_ENV", "ApplyPlan", "plan_from_file", "role_of_name"]
OMP_ENV = "OMP_NUM_THREADS"  # [process] torch_threads, in the command's environment

# a config's loader name -> the role its table is for; a name none of these words is in: every loader
ROLE_WORDS = {
    "train": "train", "training": "train",
    "val": "val", "valid": "val", "validation": "val", "eval": "val", "evaluation": "val", "dev": "val",
    "test": "test", "testing": "test",
    "predict": "predict", "prediction": "predict", "inference": "predict",
}


def role_of_name(name: str) -> str:
    """``train_dataloader`` -> "train", ``eval`` -> "val", ``dataloader`` or "" -> "" (every loader)."""
    for word in re.split(r"[^a-z]+", name.lower()):
        if word in ROLE_WORDS:
            return ROLE_WORDS[word]
    return ""


def _label(key: str) -> str:
    return f"[{key}] " if key else ""


@dataclass
class ApplyPlan:
    """What --apply will try: per role ("" = every loader) the settings, and what it leaves out."""

    file: str
    tables: dict[str, dict[str, Any]]
    not_applied: list[str] = field(default_factory=list)  # "batch_size=64", "[val] shuffle=False"
    process: dict[str, int] = field(default_factory=dict)  # [process]: {"torch_threads": k}, per process

    def env_value(self) -> str:
        """``LOADERDOC_WATCH_APPLY`` for the child (``process`` only where the file has a [process] table)."""
        return json.dumps({"file": self.file, "tables": self.tables, **({"process": self.process} if self.process else {})})

    def environment(self) -> dict[str, str]:
        """What the command's environment gets beside the hook's: ``OMP_NUM_THREADS=k`` for
        ``torch_threads`` (replacing an inherited one; torch sizes its pool from it at import)."""
        threads = self.process.get("torch_threads")
        return {OMP_ENV: str(threads)} if threads is not None else {}

    def process_line(self, environ: Mapping[str, str]) -> str | None:
        """What --apply does with [process], said before the command runs (``environ``: the launcher's)."""
        threads = self.process.get("torch_threads")
        if threads is None:
            return None
        inherited = environ.get(OMP_ENV)
        replacing = f" (replacing the inherited {OMP_ENV}={inherited})" if inherited not in (None, str(threads)) else ""
        return (f"--apply {self.file}: torch_threads={threads}: {OMP_ENV}={threads} in the command's environment"
                f"{replacing}, and torch.set_num_threads({threads}) in each of its processes as it imports torch")

    def not_applied_line(self) -> str | None:
        if not self.not_applied:
            return None
        they = "it changes" if len(self.not_applied) == 1 else "they change"
        return f"--apply: {self.file} sets {', '.join(self.not_applied)}; not applied: {they} the training itself"

    def outcome(self, loaders: list[LoaderReport]) -> dict[str, Any]:
        """The report's ``apply``: the tables, how many loaders one matched, and the tables naming
        a role no iterated loader had (``unmatched``)."""
        roles = {table_key(e.role) for e in loaders}
        unmatched = [key for key in self.tables if (key not in roles if key else not loaders)]
        out = {"file": self.file, "tables": self.tables, "not_applied": list(self.not_applied),
               "loaders_matched": sum(1 for e in loaders if e.applied.get("apply_tables")), "unmatched": unmatched}
        if self.process:  # what was applied, and the torch_threads the epochs began with (what ran)
            ran = sorted({e.torch_threads for entry in loaders for e in entry.epochs if e.torch_threads is not None})
            out["process"] = {**self.process, "torch_threads_ran": ran}
        return out


def plan_from_file(path: str) -> ApplyPlan:
    """Read FILE; UserError (exit 3, before anything runs) when it cannot be read, a value is
    invalid, or it sets nothing --apply would change."""
    from loaderdoc.base.errors import SettingsError
    from loaderdoc.base.jsondoc import MEASURED_BOUNDS
    from loaderdoc.config import read_config

    try:
        config = read_config(path, flag="--apply")
    except SettingsError as err:
        raise UserError(f"watch: --apply {err}") from None
    tables: dict[str, dict[str, Any]] = {}
    left: list[str] = []
    for loader in config.loaders:
        try:
            settings = config.settings(loader, strict=False)  # each value checked, with its line
        except SettingsError as err:
            raise UserError(f"watch: --apply {err}") from None
        key = role_of_name(loader.name)
        for setting in loader.keys:  # only what the file states (not a layout's implied default)
            value = getattr(settings, setting)
            bound = MEASURED_BOUNDS.get(setting) if setting in APPLIED else None
            if bound is not None and isinstance(value, int) and value > bound:  # 100000 workers would be forked
                raise UserError(f"watch: --apply {path}: {_label(key)}{setting}={value:,} is beyond any machine's "
                                f"(at most {bound:,}); nothing was started")
            if setting not in APPLIED:
                item = f"{_label(key)}{setting}={value!r}"
                if item not in left:
                    left.append(item)
            elif loader.layout == HF_LAYOUT:  # TrainingArguments' dataloader_* go to every loader it builds
                tables.setdefault("", {})[setting] = value
            else:
                tables.setdefault(key, {})[setting] = value
    # two keys that disagree on a setting --apply sets are left out of the loader: say so, never
    # apply the rest as if the file were whole ("sets only batch_size=32", issue 49)
    disagree = [note for setting, note in config.disagreeing.items() if setting in APPLIED]
    if disagree:
        raise UserError(f"watch: --apply {path}: {disagree[0]}; keep one of them")
    if not tables and not config.process:
        says = (f"sets only {', '.join(left)}, which change the training itself" if left
                else "names no DataLoader setting")
        raise UserError(f"watch: --apply {path} {says}; nothing to try (--apply sets {', '.join(APPLIED)}, "
                        "and [process] torch_threads)")
    return ApplyPlan(file=str(path), tables=tables, not_applied=left, process=dict(config.process))
