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
}


@rule("settings-rejected", CRITICAL, "Settings torch refuses", "settings",
      "torch.utils.data.DataLoader's own argument checks (ValueError at construction)")
def _settings_rejected(i: Inputs) -> Finding | None:
    if i.settings is None:
        return None
    problems = i.settings.problems()
    if not problems:
        return None
    change: dict[str, Any] = {}
    for key, _ in problems:
        fix = dict(_REJECT_FIXES.get(key, {}))
        if key == "prefetch_factor" and i.settings.num_workers > 0:
            fix = {"prefetch_factor": 2}  # a value below 1; torch's default is 2
        change.update(fix)
    keys = ", ".join(dict.fromkeys(k for k, _ in problems))
    return found(
        CRITICAL,
        f"DataLoader(...) will raise before the first batch: {keys}",
        [msg for _, msg in problems],
        "These combinations are refused by torch's DataLoader itself (prefetch_factor, "
        "persistent_workers and multiprocessing_context only mean something with worker processes).",
        "Remove the worker-only settings, or give the loader workers.",
        change,
    )
