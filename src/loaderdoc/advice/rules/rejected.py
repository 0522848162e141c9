"""Settings torch refuses: the combinations DataLoader(...) raises on, and arguments the installed
torch does not have yet."""

from __future__ import annotations

import re
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
from loaderdoc.system.facts import MachineFacts

IN_ORDER_SINCE = (2, 6)  # DataLoader(in_order=...) arrived in torch 2.6

REJECT_FIXES: dict[str, dict[str, Any]] = {
    "prefetch_factor": {"prefetch_factor": None},
    "persistent_workers": {"persistent_workers": False},
    "multiprocessing_context": {"multiprocessing_context": None},
    "num_workers": dict(ZERO_WORKERS),
    "timeout": {"timeout": 0.0},
    "batch_size": {"batch_size": 1},
    "shuffle": {"shuffle": False},
    "in_order": {"in_order": True},
}


@rule("settings-rejected", CRITICAL, "Settings torch refuses", "settings",
      "torch.utils.data.DataLoader's own argument checks (ValueError at construction); shuffle=True only "
      "when a probe measured the dataset and it is an IterableDataset; in_order=False only when the installed "
      "torch is read as older than 2.6, which has no such argument (TypeError)")
def _settings_rejected(i: Inputs) -> Finding | None:
    if i.settings is None or i.watch is not None:  # a watched run's torch accepted its settings
        return None
    problems = i.settings.problems()
    if i.settings.shuffle and i.probe is not None and i.probe.workload.iterable:
        seen = len(i.probe.results)
        problems.append(("shuffle", f"shuffle=True with an IterableDataset ({i.probe.workload.name}, as the probe "
                                    f"loaded it in {seen} configuration{'s' * (seen != 1)}): torch raises ValueError "
                                    "('expected unspecified shuffle option'); the stream decides the order"))
    release = torch_release(i.facts)
    if not i.settings.in_order and release is not None and release < IN_ORDER_SINCE:
        problems.append(("in_order", f"in_order=False needs torch >= 2.6: with the installed torch "
                                     f"{i.facts.torch.version.get()}, DataLoader(...) raises TypeError (got an "
                                     "unexpected keyword argument 'in_order'), with or without workers"))
    if not problems:
        return None
    change: dict[str, Any] = {}
    for key, _ in problems:
        fix = dict(REJECT_FIXES.get(key, {}))
        if key == "prefetch_factor" and i.settings.num_workers > 0:
            fix = {"prefetch_factor": 2}  # a value below 1; torch's default is 2
        change.update(fix)
    keys = ", ".join(dict.fromkeys(k for k, _ in problems))
    causes, fixes = [], []
    if any(k not in ("shuffle", "in_order") for k, _ in problems):
        cause = ("These combinations are refused by torch's DataLoader itself (prefetch_factor, "
                 "persistent_workers and multiprocessing_context only mean something with worker processes).")
        fix = "Remove the worker-only settings, or give the loader workers."
        if "shuffle" in change:
            cause = cause[:-1] + "; an IterableDataset takes no shuffle."
            fix += " Leave shuffle off for the IterableDataset."
        causes.append(cause)
        fixes.append(fix)
    elif "shuffle" in change:
        causes.append("torch's DataLoader refuses shuffle (and a sampler) for an IterableDataset: the stream "
                      "decides the order.")
        fixes.append("Leave shuffle off; shuffle inside the stream (e.g. a shuffle buffer) if training needs it.")
    if "in_order" in change:
        causes.append("DataLoader(in_order=...) arrived in torch 2.6; older versions take no such argument (and "
                      "always deliver batches in order).")
        fixes.append("Leave in_order out (or set it true) on this torch, or upgrade to torch 2.6 or later.")
    return found(
        CRITICAL,
        f"DataLoader(...) will raise before the first batch: {keys}",
        [msg for _, msg in problems],
        " ".join(causes),
        " ".join(fixes),
        change,
    )


def torch_release(facts: MachineFacts) -> tuple[int, int] | None:
    """(major, minor) of the installed torch, None when it is not installed or its version was not read."""
    if facts.torch.installed.get() is not True:
        return None
    match = re.match(r"\s*(\d+)\.(\d+)", str(facts.torch.version.get() or ""))
    return (int(match.group(1)), int(match.group(2))) if match else None
