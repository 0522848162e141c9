"""Reading the config files users already have: which table holds the DataLoader settings.

``read_config(path)`` parses TOML, YAML or JSON by suffix and finds the loader table (a
``[dataloader]`` table or top-level keys) and the optional ``[training]`` table, with the line
of every key so an error can name it. ``load_settings(path)`` turns the table into
:class:`~loaderdoc.settings.LoaderSettings`. Imports neither torch nor textual.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loaderdoc.errors import SettingsError
from loaderdoc.settings import SETTING_NAMES, LoaderSettings

TABLE_NAMES = ("dataloader", "data_loader", "loader")


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


def load_settings(path: str | Path, *, strict: bool = True) -> LoaderSettings:
    """Read a TOML, YAML or JSON config file; raise SettingsError naming the line and key."""
    config = read_config(path)
    return LoaderSettings.from_mapping(config.loader_table, where=str(config.path), lines=config.lines,
                                       strict=strict)


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _pick_table(data: dict[str, Any], path: Path) -> dict[str, Any]:
    for name in TABLE_NAMES:
        if name in data:
            table = data[name]
            if not isinstance(table, dict):
                raise SettingsError(f"{path}: [{name}] must be a table of settings")
            both = sorted(k for k in data if k in SETTING_NAMES)
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
