"""Reading a config file: parse it by its suffix, find its DataLoaders, name the line of every key.

TOML, YAML and JSON are parsed as data (YAML safely, bounded); ``.py`` is read with ``ast``
(:mod:`.python`), never run. :func:`~loaderdoc.config.layouts.find_loaders` finds the loaders.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderdoc.config.layouts import LAYOUTS_UNDERSTOOD, FoundLoader, find_loaders
from loaderdoc.config.python import NotALiteral, read_python
from loaderdoc.errors import SettingsError
from loaderdoc.settings import LoaderSettings
from loaderdoc.textfile import first_line, read_input


@dataclass
class ConfigFile:
    """A parsed config file: its DataLoaders, and any other tables it holds."""

    path: Path
    document: dict[str, Any]
    loaders: list[FoundLoader]
    text: str = ""
    key_lines: dict[tuple[str, ...], int] = field(default_factory=dict)  # exact, where the parser knows them
    skipped: list[str] = field(default_factory=list)  # settings left out: not literals in a .py config

    @property
    def training_table(self) -> dict[str, Any] | None:
        """The optional ``[training]`` table (what the training script does, for advice rules)."""
        table = self.document.get("training")
        if table is not None and not isinstance(table, dict):
            raise SettingsError(f"{self.path}: [training] must be a table of facts about the training script")
        return table

    def line_of(self, path: tuple[str, ...]) -> int | None:
        """The line of a key path: exact for YAML and Python, found by scanning for TOML and JSON."""
        for end in range(len(path), 0, -1):
            if path[:end] in self.key_lines:
                return self.key_lines[path[:end]]
        return _scan_for(self.text, path)

    @property
    def training_lines(self) -> dict[str, int]:
        """[training] key -> line, for the training context's messages."""
        training = self.document.get("training")
        if not isinstance(training, dict):
            return {}
        lines = {key: self.line_of(("training", key)) for key in training}
        return {key: line for key, line in lines.items() if line}

    def lines_for(self, loader: FoundLoader) -> dict[str, int]:
        """Setting -> line, for :meth:`LoaderSettings.from_mapping`'s messages."""
        out = {}
        for setting, path in loader.keys.items():
            line = self.line_of(path)
            if line:
                out[setting] = line
        return out

    def settings(self, loader: FoundLoader, *, strict: bool = True) -> LoaderSettings:
        """The loader's settings, every value checked; an error names the file, line and key path."""
        return LoaderSettings.from_mapping(loader.values, where=str(self.path), lines=self.lines_for(loader),
                                           strict=strict, paths={k: loader.where(k) for k in loader.values})


def read_config(path: str | Path, *, flag: str = "--config") -> ConfigFile:
    """Parse a config file by its suffix (.yaml/.yml, .json, .py, else TOML) and find its loaders;
    ``flag``: the option that named the file, for the message when it cannot be read."""
    path = Path(path)
    text = read_input(path, what="config file", flag=flag, error=SettingsError)
    suffix = path.suffix.lower()
    key_lines: dict[tuple[str, ...], int] = {}
    try:
        if suffix == ".py":
            document, key_lines = read_python(text, str(path))
        elif suffix in (".yaml", ".yml"):
            document = _parse_yaml(text, path, key_lines)
        elif suffix == ".json":
            document = _parse_json(text, path)
        else:
            document = _parse_toml(text, path)
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply to be a config file") from None
    loaders = find_loaders(document, str(path))
    skipped = _drop_unreadable(loaders)
    if not loaders and "training" not in document:
        hint = " (its _base_ files are not read: point --config at the file that sets them)" if "_base_" in document \
            else ""
        raise SettingsError(f"{path}: no DataLoader settings found{hint}; understood: {LAYOUTS_UNDERSTOOD}")
    return ConfigFile(path=path, document=document, loaders=loaders or [FoundLoader("", "defaults")], text=text,
                      key_lines=key_lines, skipped=skipped)


def load_settings(path: str | Path, *, strict: bool = True) -> LoaderSettings:
    """The first loader's settings in a config file; raise SettingsError naming the line and key."""
    config = read_config(path)
    return config.settings(config.loaders[0], strict=strict)


def _drop_unreadable(loaders: list[FoundLoader]) -> list[str]:
    """Settings a Python config computes (``os.cpu_count()``): left out and said, never guessed."""
    skipped = []
    for loader in loaders:
        for setting, value in list(loader.values.items()):
            if isinstance(value, NotALiteral):
                skipped.append(f"{loader.where(setting)} = {value.source} (not a literal; left out)")
                loader.unreadable[setting] = value.source
                del loader.values[setting]
                loader.keys.pop(setting, None)
    return skipped


def _scan_for(text: str, path: tuple[str, ...]) -> int | None:
    """The line of ``a.b.c`` in TOML or JSON text: each key searched for after the previous one's line."""
    lines = text.splitlines()
    start, found = 0, None
    for key in path:
        pattern = re.compile(rf"""(^|[\s{{,(])["']?{re.escape(key)}["']?\s*[=:]|^\s*\[+[^\]]*\b{re.escape(key)}\]""")
        for number in range(start, len(lines)):
            if pattern.search(lines[number]):
                found, start = number + 1, number  # the next key may sit on the same line (JSON)
                break
        else:
            return found
    return found


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


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    from loaderdoc._compat import tomllib

    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML: {first_line(exc)}") from None
    return data


def _parse_json(text: str, path: Path) -> dict[str, Any]:
    try:
        data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise SettingsError(f"{path}: not valid JSON: {exc}") from None
    return _as_mapping(data, path)


def _parse_yaml(text: str, path: Path, key_lines: dict[tuple[str, ...], int]) -> dict[str, Any]:
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
            _record_key_lines(node, (), key_lines)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
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


def _record_key_lines(node, path: tuple[str, ...], out: dict[tuple[str, ...], int]) -> None:
    """Key path -> line from the composed YAML nodes (an alias's keys keep the first path they had)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            if isinstance(key_node, yaml.ScalarNode) and (*path, key_node.value) not in out:
                key_path = (*path, key_node.value)
                out[key_path] = key_node.start_mark.line + 1
                _record_key_lines(value_node, key_path, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _record_key_lines(item, (*path, str(i)), out)
