"""Settings torch refuses: the combinations DataLoader(...) raises on."""

from __future__ import annotations

from typing import Any

from loaderdoc.advice.findings import CRITICAL, Finding
from loaderdoc.advice.rules.registry import (
    Inputs,
    found,
    rule,
)
from loaderdoc.policy import (
    ZERO_WORKERS,
)

_REJECT_FIXES: dict[str, dict[str, Any]] = {
    "prefetch_factor": {"prefetch_factor": None},
    "persistent_workers": {"persistent_workers": False},
    "multiprocessing_context": {"multiprocessing_context": None},
    "num_workers": dict(ZERO_WORKERS),
    "timeout": {"timeout": 0.0},
    "batch_size": {"batch_size": 1},
    "shuffle": {"shuffle": False},
}


@rule("settings-rejected", CRITICAL, "Settings torch refuses", "settings",
      "torch.utils.data.DataLoader's own argument checks (ValueError at construction); shuffle=True only "
      "when a probe measured the dataset and it is an IterableDataset")
def _settings_rejected(i: Inputs) -> Finding | None:
    if i.settings is None:
        return None
    problems = i.settings.problems()
    if i.settings.shuffle and i.probe is not None and i.probe.workload.iterable:
        seen = len(i.probe.results)
        problems.append(("shuffle", f"shuffle=True with an IterableDataset ({i.probe.workload.name}, as the probe "
                                    f"loaded it in {seen} configuration{'s' * (seen != 1)}): torch raises ValueError "
                                    "('expected unspecified shuffle option'); the stream decides the order"))
    if not problems:
        return None
    change: dict[str, Any] = {}
    for key, _ in problems:
        fix = dict(_REJECT_FIXES.get(key, {}))
        if key == "prefetch_factor" and i.settings.num_workers > 0:
            fix = {"prefetch_factor": 2}  # a value below 1; torch's default is 2
        change.update(fix)
    keys = ", ".join(dict.fromkeys(k for k, _ in problems))
    cause = ("These combinations are refused by torch's DataLoader itself (prefetch_factor, "
             "persistent_workers and multiprocessing_context only mean something with worker processes).")
    fix = "Remove the worker-only settings, or give the loader workers."
    if keys == "shuffle":
        cause = "torch's DataLoader refuses shuffle (and a sampler) for an IterableDataset: the stream decides the order."
        fix = "Leave shuffle off; shuffle inside the stream (e.g. a shuffle buffer) if training needs it."
    elif "shuffle" in change:
        cause = cause[:-1] + "; an IterableDataset takes no shuffle."
        fix += " Leave shuffle off for the IterableDataset."
    return found(
        CRITICAL,
        f"DataLoader(...) will raise before the first batch: {keys}",
        [msg for _, msg in problems],
        cause,
        fix,
        change,
    )
