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
from loaderdoc.textfile import InputTooLarge, read_bounded

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
        text = read_bounded(path)
    except FileNotFoundError:
        raise SettingsError(f"{path}: no such file; check the --config path") from None
    except IsADirectoryError:
        raise SettingsError(f"{path}: is a directory, not a config file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path}: cannot read it ({_short(exc)})") from None
    except InputTooLarge as exc:
        raise SettingsError(f"{path}: {exc}") from None
    suffix = path.suffix.lower()
    parse = _parse_yaml if suffix in (".yaml", ".yml") else _parse_json if suffix == ".json" else _parse_toml
    try:
        document = parse(text, path)
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply to be a config file") from None
    return ConfigFile(path=path, document=document, loader_table=_pick_table(document, path), lines=_key_lines(text))


def load_settings(path: str | Path, *, strict: bool = True) -> LoaderSettings:
    """Read a TOML, YAML or JSON config file; raise SettingsError naming the line and key."""
    config = read_config(path)
    return LoaderSettings.from_mapping(config.loader_table, where=str(config.path), lines=config.lines,
                                       strict=strict)


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _pick_table(data: dict[str, Any], path: Path) -> dict[str, Any]:
    tables = [name for name in TABLE_NAMES if name in data]
    if len(tables) > 1:  # which one would the script use? the file contradicts itself
        raise SettingsError(f"{path}: loader settings in both [{tables[0]}] and [{tables[1]}]; keep one table")
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

    loader = UniqueKeyLoader(text)
    try:
        node = loader.get_single_node()  # aliases are shared nodes here: cheap, whatever they expand to
        if node is not None:
            _bound_expansion(node, path)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or _short(exc)
        raise SettingsError(f"{path}{line}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()
    return _as_mapping(data, path)


# A DataLoader config holds dozens of values; a few thousand covers any real project's file. YAML
# aliases can make a 1 KB file expand to billions ("billion laughs"): count before building it.
MAX_CONFIG_VALUES = 100_000


def _bound_expansion(root, path: Path) -> None:
    """Refuse a YAML document whose aliases expand past MAX_CONFIG_VALUES values, or into a cycle."""
    import yaml

    expanded: dict[int, int] = {}  # node id -> values it expands to (each alias target counted once)
    open_nodes: set[int] = set()

    def size(node) -> int:
        key = id(node)
        if key in expanded:
            return expanded[key]
        if key in open_nodes:
            raise SettingsError(f"{path}:{node.start_mark.line + 1}: a YAML alias refers to a value that "
                                "contains it; a config cannot be infinite")
        open_nodes.add(key)
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k) + size(v) for k, v in node.value)
        open_nodes.discard(key)
        expanded[key] = total
        if total > MAX_CONFIG_VALUES:
            raise SettingsError(f"{path}:{node.start_mark.line + 1}: YAML aliases expand this value to over "
                                f"{MAX_CONFIG_VALUES:,} values; a loader config needs a few dozen")
        return total

    size(root)
