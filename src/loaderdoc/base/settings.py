"""LoaderSettings: the DataLoader knobs users set, validated by torch's own rules.

A value object: built from a plain mapping (names and types checked, 0/1 accepted as booleans
the way hand-written training configs use them), validated, turned into DataLoader kwargs.
Reading config files is :mod:`loaderdoc.config`'s job, writing them :mod:`loaderdoc.export`'s.
Imports neither torch nor textual.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from dataclasses import dataclass, fields
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.jsondoc import MEASURED_BOUNDS, beyond_measured

MP_CONTEXTS = ("fork", "spawn", "forkserver")


@dataclass
class LoaderSettings:
    """Keyword arguments for ``torch.utils.data.DataLoader`` (torch's defaults)."""

    batch_size: int | None = 1
    shuffle: bool = False
    num_workers: int = 0
    pin_memory: bool = False
    drop_last: bool = False
    timeout: float = 0.0
    prefetch_factor: int | None = None  # torch uses 2 when num_workers > 0 and this is None
    persistent_workers: bool = False
    multiprocessing_context: str | None = None
    # torch >= 2.6: False lets a worker's ready batch overtake a slow one (batch order then varies)
    in_order: bool = True

    # ---- validation -------------------------------------------------------------------
    def problems(self) -> list[tuple[str, str]]:
        """(key, message) for every rule torch would reject, or that would hang the loader."""
        return self.range_problems() + self.combination_problems()

    def range_problems(self) -> list[tuple[str, str]]:
        """Values that are wrong on their own (negative counts, unknown context names)."""
        out: list[tuple[str, str]] = []
        bs = self.batch_size
        if bs is not None and bs < 1:
            out.append(("batch_size", f"batch_size must be a positive integer (or unset), got {bs}"))
        if self.num_workers < 0:
            out.append(("num_workers", f"num_workers must be >= 0, got {self.num_workers}"))
        if self.timeout < 0:
            out.append(("timeout", f"timeout must be >= 0 seconds, got {self.timeout:g}"))
        if self.prefetch_factor is not None and self.prefetch_factor < 1:
            out.append((
                "prefetch_factor",
                f"prefetch_factor must be >= 1, got {self.prefetch_factor} "
                "(0 queues no batches and the loader waits forever)",
            ))
        ctx = self.multiprocessing_context
        if ctx is not None and ctx not in MP_CONTEXTS:
            out.append((
                "multiprocessing_context",
                f"multiprocessing_context must be one of {', '.join(MP_CONTEXTS)}, got {ctx!r}",
            ))
        return out

    def combination_problems(self) -> list[tuple[str, str]]:
        """Settings torch rejects together: multiprocessing options without workers."""
        out: list[tuple[str, str]] = []
        if self.batch_size is None and self.drop_last:
            out.append((
                "drop_last",
                "drop_last needs a batch_size (batch_size unset turns batching off; torch raises ValueError)",
            ))
        if self.num_workers != 0:
            return out
        if self.prefetch_factor is not None:
            out.append((
                "prefetch_factor",
                "prefetch_factor needs num_workers > 0 (torch raises ValueError); "
                "remove it or raise num_workers",
            ))
        if self.persistent_workers:
            out.append((
                "persistent_workers",
                "persistent_workers needs num_workers > 0 (torch raises ValueError); "
                "set it false or raise num_workers",
            ))
        if self.multiprocessing_context is not None:
            out.append((
                "multiprocessing_context",
                "multiprocessing_context needs num_workers > 0 (torch raises ValueError)",
            ))
        return out

    def validate(self) -> LoaderSettings:
        problems = self.problems()
        if problems:
            raise SettingsError(problems[0][1])
        return self

    @property
    def effective_prefetch_factor(self) -> int:
        """Batches each worker holds in flight (torch's default 2 when unset); 0 without workers."""
        if self.num_workers == 0:
            return 0
        return self.prefetch_factor if self.prefetch_factor is not None else 2

    @property
    def batches_in_flight(self) -> int:
        """Batches alive at once in shared memory: workers x prefetch_factor."""
        return self.num_workers * self.effective_prefetch_factor

    # ---- construction -----------------------------------------------------------------
    @classmethod
    def from_mapping(
        cls,
        data: dict[str, Any],
        *,
        where: str = "",
        lines: dict[str, int] | None = None,
        strict: bool = True,
        paths: dict[str, str] | None = None,
        files: dict[str, str] | None = None,
    ) -> LoaderSettings:
        """Build from a plain mapping, checking names and types; ``where`` names the source.

        With ``strict`` (the default) combinations torch rejects raise too; ``check`` passes
        False so it can report them as findings about the user's config instead. ``paths`` names
        where a setting sits when the file calls it otherwise (``dataloader_num_workers``); ``files``
        the file that set it, where that is not ``where`` (a base the config inherits)."""
        lines = lines or {}
        paths = paths or {}
        files = files or {}

        def location_of(key: str) -> str:
            loc = location(files.get(key, where), lines.get(key))
            path = paths.get(key)
            return f"{loc}{path}: " if path and path != key else loc

        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in data.items():
            loc = location_of(key)
            if key not in known:
                hint = difflib.get_close_matches(str(key), list(known), n=1)
                suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
                raise SettingsError(
                    f"{loc}unknown setting {key!r}{suggestion}; known: {', '.join(known)}"
                )
            kwargs[key] = _coerce(key, raw, loc)
        settings = cls(**kwargs)
        problems = settings.range_problems() + (settings.combination_problems() if strict else [])
        if problems:
            key, message = problems[0]
            raise SettingsError(f"{location_of(key)}{message}")
        return settings

    def as_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that go straight into ``DataLoader(dataset, **kwargs)``."""
        out = dataclasses.asdict(self)
        if self.num_workers == 0:
            # torch rejects these without workers; leaving them out is the same as the default
            for key in ("prefetch_factor", "multiprocessing_context"):
                out.pop(key)
            out["persistent_workers"] = False
        if self.in_order:
            out.pop("in_order")  # torch's default; leaving it out keeps torch < 2.6 working
        return {k: v for k, v in out.items() if v is not None or k == "batch_size"}

    def replace(self, **changes: Any) -> LoaderSettings:
        return dataclasses.replace(self, **changes)


# ---- helpers ------------------------------------------------------------------------------
_BOOL_KEYS = {"shuffle", "pin_memory", "drop_last", "persistent_workers", "in_order"}
SETTING_NAMES = {"batch_size", "shuffle", "num_workers", "pin_memory", "drop_last", "timeout", "prefetch_factor",
                  "persistent_workers", "multiprocessing_context", "in_order"}
_INT_KEYS = {"num_workers"}
_OPT_INT_KEYS = {"batch_size", "prefetch_factor"}


def recorded_counts_problem(data: dict[str, Any], where: str) -> str | None:
    """Why the counts a report recorded (``batch_size``, ``num_workers``, ``prefetch_factor`` of a
    probe's or a watched run's settings, at ``where``) are no measurement: past what any run can
    have measured (:data:`loaderdoc.base.jsondoc.MEASURED_BOUNDS`), or refused by torch on their own (a
    negative ``num_workers``). Values that are not numbers are left to the reader."""
    counts = {key: data[key] for key in MEASURED_BOUNDS
              if isinstance(data.get(key), (int, float)) and not isinstance(data.get(key), bool)}
    for key, value in counts.items():
        problem = beyond_measured(f"{where}.{key}", value)
        if problem:
            return problem
    problems = LoaderSettings(**counts).range_problems()
    return f"{where}: {problems[0][1]}" if problems else None


def coerce_bool(key: str, raw: Any, loc: str) -> bool:
    """true/false, or 1/0 as hand-written configs use them; a string such as "no" is refused, never truthy."""
    if isinstance(raw, bool):
        return raw
    if isinstance(raw, int) and raw in (0, 1):
        return bool(raw)
    raise SettingsError(f"{loc}{key} must be true/false (or 1/0), got {raw!r}")


def coerce_count(key: str, raw: Any, loc: str) -> int:
    """A whole number (not a bool, a float or a string) below an absurd bound."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise SettingsError(f"{loc}{key} must be a whole number, got {raw!r}")
    if raw > 1_000_000_000_000:
        raise SettingsError(f"{loc}{key} = {raw} is absurd; check the value")
    return raw


def _coerce(key: str, raw: Any, loc: str) -> Any:
    if key in _BOOL_KEYS:
        return coerce_bool(key, raw, loc)
    if key in _INT_KEYS or key in _OPT_INT_KEYS:
        if key in _OPT_INT_KEYS and (raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null"))):
            return None
        coerce_count(key, raw, loc)
        if raw > 1_000_000:
            raise SettingsError(f"{loc}{key} = {raw} is absurd; use a value below 1,000,000")
        return raw
    if key == "timeout":
        if isinstance(raw, bool) or not isinstance(raw, (int, float)):
            raise SettingsError(f"{loc}timeout must be a number of seconds, got {raw!r}")
        if not math.isfinite(raw):  # torch's queue wait overflows on inf; nan disables every check
            raise SettingsError(f"{loc}timeout must be a finite number of seconds (0 = wait forever), got {raw!r}")
        return float(raw)
    if key == "multiprocessing_context":
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str):
            raise SettingsError(f"{loc}multiprocessing_context must be a string, got {raw!r}")
        return raw
    return raw


def location(where: str, line: int | None) -> str:
    if not where:
        return ""
    return f"{where}:{line}: " if line else f"{where}: "


# ---- the training process's own knob: not a DataLoader argument, never in LoaderSettings ----------
# loaderdoc's own layout holds it in a [process] table (what `--export` writes, `watch --apply` reads:
# OMP_NUM_THREADS=k in the command's environment and torch.set_num_threads(k) in each process)
PROCESS_TABLE = "process"
PROCESS_KEYS = ("torch_threads",)


def coerce_torch_threads(raw: Any, loc: str = "") -> int:
    """The training process's intra-op threads (torch.set_num_threads): a whole number >= 1."""
    value = coerce_count("torch_threads", raw, loc)
    if value < 1:
        raise SettingsError(f"{loc}torch_threads must be >= 1 (the training process's intra-op threads), got {value}")
    if value > 1_000_000:
        raise SettingsError(f"{loc}torch_threads = {value} is absurd; use a value below 1,000,000")
    return value


def split_process(change: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """A finding's change as (DataLoader keyword arguments, the process's own knobs: torch_threads)."""
    return ({k: v for k, v in change.items() if k not in PROCESS_KEYS},
            {k: v for k, v in change.items() if k in PROCESS_KEYS})
