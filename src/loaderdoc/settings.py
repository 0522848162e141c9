"""LoaderSettings: the DataLoader knobs users set, validated by torch's own rules.

Loads TOML (a ``[dataloader]`` table or top-level keys) and YAML (the same; 0/1 accepted as
booleans the way hand-written training configs use them). Emits DataLoader kwargs, TOML, a
runnable Python snippet and JSON. Imports neither torch nor textual.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import re
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from loaderdoc.errors import SettingsError

MP_CONTEXTS = ("fork", "spawn", "forkserver")
TABLE_NAMES = ("dataloader", "data_loader", "loader")


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
    ) -> LoaderSettings:
        """Build from a plain mapping, checking names and types; ``where`` names the source.

        With ``strict`` (the default) combinations torch rejects raise too; ``check`` passes
        False so it can report them as findings about the user's config instead."""
        lines = lines or {}
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, raw in data.items():
            loc = _location(where, lines.get(key))
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
            raise SettingsError(f"{_location(where, lines.get(key))}{message}")
        return settings

    @classmethod
    def load(cls, path: str | Path, *, strict: bool = True) -> LoaderSettings:
        """Read a TOML, YAML or JSON config file; raise SettingsError naming the line and key."""
        config = read_config(path)
        return cls.from_mapping(config.loader_table, where=str(config.path), lines=config.lines, strict=strict)

    # ---- output -----------------------------------------------------------------------
    def as_kwargs(self) -> dict[str, Any]:
        """Keyword arguments that go straight into ``DataLoader(dataset, **kwargs)``."""
        out = dataclasses.asdict(self)
        if self.num_workers == 0:
            # torch rejects these without workers; leaving them out is the same as the default
            for key in ("prefetch_factor", "multiprocessing_context"):
                out.pop(key)
            out["persistent_workers"] = False
        return {k: v for k, v in out.items() if v is not None or k == "batch_size"}

    def to_json(self, indent: int = 2) -> str:
        return json.dumps(self.as_kwargs(), indent=indent)

    def to_toml(self, header: list[str] | None = None) -> str:
        import tomli_w  # small; only the export path needs it

        # TOML has no null: an unset batch_size (automatic batching off) is written as "none"
        table = {k: ("none" if v is None else v) for k, v in self.as_kwargs().items()}
        body = tomli_w.dumps({"dataloader": table})
        return _comment_block(header) + body

    def to_python(self, header: list[str] | None = None) -> str:
        args = "".join(f"        {k}={v!r},\n" for k, v in self.as_kwargs().items())
        return (
            _comment_block(header)
            + "from torch.utils.data import DataLoader\n\n\n"
            + "def make_loader(dataset, **overrides):\n"
            + '    """Build the DataLoader with the settings loaderdoc chose for this machine."""\n'
            + "    kwargs = dict(\n"
            + args
            + "    )\n"
            + "    kwargs.update(overrides)\n"
            + "    return DataLoader(dataset, **kwargs)\n"
        )

    def replace(self, **changes: Any) -> LoaderSettings:
        return dataclasses.replace(self, **changes)


@dataclass
class ConfigFile:
    """A parsed config file: the loader settings table, and any other tables it holds."""

    path: Path
    document: dict[str, Any]
    loader_table: dict[str, Any]
    lines: dict[str, int]  # key -> line number, to name the line of a bad value

    @property
    def training_table(self) -> dict[str, Any] | None:
        """The optional ``[training]`` table (what the training script does, for advice rules)."""
        table = self.document.get("training")
        if table is not None and not isinstance(table, dict):
            raise SettingsError(f"{self.path}: [training] must be a table of facts about the training script")
        return table


def read_config(path: str | Path) -> ConfigFile:
    """Parse a config file by its suffix (.yaml/.yml, .json, else TOML)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SettingsError(f"{path}: no such file; check the --config path") from None
    except IsADirectoryError:
        raise SettingsError(f"{path}: is a directory, not a config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read it ({_short(exc)})") from None
    suffix = path.suffix.lower()
    if suffix in (".yaml", ".yml"):
        document = _parse_yaml(text, path)
    elif suffix == ".json":
        document = _parse_json(text, path)
    else:
        document = _parse_toml(text, path)
    return ConfigFile(path=path, document=document, loader_table=_pick_table(document, path), lines=_key_lines(text))


# ---- helpers ------------------------------------------------------------------------------
_BOOL_KEYS = {"shuffle", "pin_memory", "drop_last", "persistent_workers"}
_SETTING_NAMES = {"batch_size", "shuffle", "num_workers", "pin_memory", "drop_last", "timeout", "prefetch_factor",
                  "persistent_workers", "multiprocessing_context"}
_INT_KEYS = {"num_workers"}
_OPT_INT_KEYS = {"batch_size", "prefetch_factor"}


def _coerce(key: str, raw: Any, loc: str) -> Any:
    if key in _BOOL_KEYS:
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, int) and raw in (0, 1):
            return bool(raw)
        raise SettingsError(f"{loc}{key} must be true/false (or 1/0), got {raw!r}")
    if key in _INT_KEYS or key in _OPT_INT_KEYS:
        if key in _OPT_INT_KEYS and (raw is None or (isinstance(raw, str) and raw.lower() in ("none", "null"))):
            return None
        if isinstance(raw, bool) or not isinstance(raw, int):
            raise SettingsError(f"{loc}{key} must be a whole number, got {raw!r}")
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


def _location(where: str, line: int | None) -> str:
    if not where:
        return ""
    return f"{where}:{line}: " if line else f"{where}: "


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _comment_block(lines: list[str] | None) -> str:
    if not lines:
        return ""
    return "".join(f"# {line}".rstrip() + "\n" for line in lines) + "\n"


def _pick_table(data: dict[str, Any], path: Path) -> dict[str, Any]:
    for name in TABLE_NAMES:
        if name in data:
            table = data[name]
            if not isinstance(table, dict):
                raise SettingsError(f"{path}: [{name}] must be a table of settings")
            both = sorted(k for k in data if k in _SETTING_NAMES)
            if both:  # which one would torch get? the file contradicts itself
                raise SettingsError(f"{path}: {', '.join(both)} set both in [{name}] and at the top level; "
                                    "keep one")
            return table
    return {k: v for k, v in data.items() if k != "training"}


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _as_mapping(data: Any, path: Path) -> dict[str, Any]:
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _key_lines(text: str) -> dict[str, int]:
    """Line numbers of ``key =`` / ``key:`` assignments, to name the line of a bad value."""
    out: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        m = re.match(r"\s*[\"']?([A-Za-z_][\w-]*)[\"']?\s*[=:]", line)
        if m:
            out.setdefault(m.group(1), number)
    return out


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    from loaderdoc._compat import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML: {_short(exc)}") from None
    return data


def _parse_json(text: str, path: Path) -> dict[str, Any]:
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise SettingsError(f"{path}: not valid JSON: {exc}") from None
    return _as_mapping(data, path)


def _parse_yaml(text: str, path: Path) -> dict[str, Any]:
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        """YAML takes the last of two equal keys silently; a config that says both is contradictory."""

        def construct_mapping(self, node, deep=False):
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, yaml.ScalarNode) and key_node.value != "<<":
                    if key_node.value in seen:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key_node.value!r} (first on line {seen[key_node.value]})",
                            key_node.start_mark)
                    seen[key_node.value] = key_node.start_mark.line + 1
            return super().construct_mapping(node, deep=deep)

    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or _short(exc)
        raise SettingsError(f"{path}{line}: not valid YAML: {problem}") from None
    return _as_mapping(data, path)
