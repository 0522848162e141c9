"""One config file's text to a :class:`~loaderdoc.config.tree.Table`, by its suffix.

TOML, YAML and JSON are parsed as data (YAML safely and bounded, a custom tag such as SpeechBrain's
``!ref <batch_size>`` or ``!new:module.Class`` read as a plain value, never constructed); ``.py`` is
read with ``ast`` (:mod:`.python`), never run. Keys carry their file and line.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.textfile import first_line
from loaderdoc.config.python import ImportFile, read_python
from loaderdoc.config.tree import MAX_CONFIG_VALUES, Origin, Seq, Table, Unread


class Tagged(Unread):
    """A YAML scalar under a tag only another program knows (``!ref <batch_size>``): its text kept."""

    def __init__(self, tag: str, text: str) -> None:
        super().__init__(f"{tag} {text}".strip(), f"a {tag} tag, given its meaning by the program that reads the file")
        self.tag = tag
        self.text = text


HUGE_NUMBER = "holds a number of thousands of digits; no DataLoader setting is that large"

# formats a config may come in that are not read: said as such (each was "not valid TOML", issue 49)
NOT_READ = {".json5": "JSON5", ".ini": "INI", ".cfg": "INI (setup.cfg-style)",
            ".env": "dotenv", ".jsonnet": "Jsonnet", ".libsonnet": "Jsonnet", ".dhall": "Dhall",
            ".hocon": "HOCON", ".properties": "Java properties", ".xml": "XML"}


def parse_file(path: Path, text: str, *, import_file: ImportFile | None = None,
               notes: list[str] | None = None, run_time: list[str] | None = None,
               list_ok: bool = False) -> Table | Seq:
    """The file's tree; ``notes`` and ``run_time`` get what a ``.py`` file leaves to its run.
    ``list_ok``: a YAML or JSON file may hold a list (a Hydra group option placed at a key)."""
    table = _parse_file(path, text, import_file=import_file, notes=notes, run_time=run_time, list_ok=list_ok)
    if _has_huge_int(table):  # 0x and 4000 hex digits parse (a power of two base has no digit limit), then
        raise SettingsError(f"{path}: {HUGE_NUMBER}")  # nothing can print it: exit 70 (issue 49)
    return table


MAX_INT_BITS = 256  # far past any DataLoader setting; a decimal of about 77 digits


def _has_huge_int(value: Any, depth: int = 0) -> bool:
    if isinstance(value, int) and not isinstance(value, bool):
        return value.bit_length() > MAX_INT_BITS
    if depth > 200:  # nested that deep: the parsers refused it already
        return False
    if isinstance(value, dict):
        return any(_has_huge_int(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_huge_int(v, depth + 1) for v in value)
    return False


def _parse_file(path: Path, text: str, *, import_file: ImportFile | None = None,
                notes: list[str] | None = None, run_time: list[str] | None = None,
                list_ok: bool = False) -> Table | Seq:
    suffix = path.suffix.lower() or (path.name.lower() if path.name.startswith(".") else "")
    where = str(path)
    try:
        if suffix == ".py":
            return read_python(text, where, import_file=import_file, notes=notes, run_time=run_time)
        if suffix in (".yaml", ".yml"):
            return _parse_yaml(text, path, list_ok=list_ok)
        if suffix in (".json", ".jsonc"):
            return _with_origins(_parse_json(text, path, list_ok=list_ok), where, (), {})
        if suffix == ".toml":
            return _with_origins(_parse_toml(text, path), where, (), {})
        if suffix in NOT_READ:  # read where its text is also TOML or YAML (an INI section often is)
            try:
                return _sniffed(text, path)
            except SettingsError:
                raise SettingsError(f"{path}: {NOT_READ[suffix]} files are not read; loaderdoc reads TOML, YAML, "
                                    "JSON and Python (.py) configs: put the DataLoader settings in one of those") from None
        return _sniffed(text, path)
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply to be a config file") from None
    except ValueError as exc:  # Python refuses to turn over 4300 digits into an int
        if "integer string conversion" in str(exc) or "Exceeds the limit" in str(exc):
            raise SettingsError(f"{path}: {HUGE_NUMBER}") from None
        raise


def _sniffed(text: str, path: Path) -> Table:
    """A file whose name says nothing (``--config <(cmd)`` is ``/dev/fd/63``): TOML, else YAML
    (which JSON is too); the TOML error where neither reads it."""
    try:
        return _with_origins(_parse_toml(text, path), str(path), (), {})
    except SettingsError as toml_error:
        try:
            return _parse_yaml(text, path)
        except SettingsError:
            raise toml_error from None


def _with_origins(value: Any, where: str, path: tuple[str, ...], lines: dict[tuple[str, ...], int],
                  templates: frozenset[tuple[str, ...]] = frozenset()) -> Any:
    """Plain parsed data as Tables and Seqs, each key's origin its path here (and line when known);
    the tables at ``templates`` marked as such (YAML's anchored mappings others take)."""
    if isinstance(value, dict):
        out = Table()
        out.template = path in templates
        for key, item in value.items():
            key = str(key)
            out.put(key, _with_origins(item, where, (*path, key), lines, templates),
                    Origin(where, (*path, key), lines.get((*path, key))))
        return out
    if isinstance(value, list):
        seq = Seq()
        for i, item in enumerate(value):
            seq.append(_with_origins(item, where, (*path, str(i)), lines, templates))
            seq.origins[i] = Origin(where, (*path, str(i)), lines.get((*path, str(i))))
        return seq
    return value


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _as_mapping(data: Any, path: Path, *, list_ok: bool = False) -> dict[str, Any] | list[Any]:
    if data is None:
        return {}
    if list_ok and isinstance(data, list):
        return data
    if not isinstance(data, dict):
        raise SettingsError(f"{path}: expected a mapping of settings, got {type(data).__name__}")
    return data


def _parse_toml(text: str, path: Path) -> dict[str, Any]:
    from loaderdoc.base._compat import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path}: not valid TOML: {first_line(exc)}") from None


def _parse_json(text: str, path: Path, *, list_ok: bool = False) -> dict[str, Any] | list[Any]:
    """JSON, and JSON with ``//`` and ``/* */`` comments outside its strings and commas before a
    closing bracket (what Mozilla TTS's, Amphion's json5 and VS Code's loaders read): the comments
    and those commas become blanks, so every line keeps its number."""
    try:
        try:
            data = json.loads(text, object_pairs_hook=_no_duplicate_keys)
        except json.JSONDecodeError:
            uncommented = _without_comments(text)
            bare = _without_trailing_commas(uncommented or text) or uncommented
            if bare is None:
                raise
            data = json.loads(bare, object_pairs_hook=_no_duplicate_keys)
    except json.JSONDecodeError as exc:
        raise SettingsError(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        if "integer string conversion" in str(exc):
            raise SettingsError(f"{path}: {HUGE_NUMBER}") from None
        raise SettingsError(f"{path}: not valid JSON: {exc}") from None
    return _as_mapping(data, path, list_ok=list_ok)


def scanned_text(path: Path, text: str) -> str:
    """The text a key's line is looked for in: a JSON file's with its comments blanked (a key in a
    ``/* */`` block set nothing); any other file's as it is."""
    if (path.suffix.lower() in (".json", ".jsonc")) and ("//" in text or "/*" in text):
        return _without_comments(text) or text
    return text


def _string_end(text: str, start: int) -> int:
    """The index just past the JSON string opening at ``start``: its closing quote, escapes skipped
    (or the line's end, for one left open)."""
    j, n = start + 1, len(text)
    while j < n and text[j] not in '"\n':
        j += 2 if text[j] == "\\" else 1
    return j + 1


def _without_comments(text: str) -> str | None:
    """``text`` with its ``//`` and ``/* */`` comments outside strings blanked (newlines kept); None
    where it holds none (then it is plain JSON, and its error stands)."""
    out: list[str] = []
    i, n, found = 0, len(text), False
    while i < n:
        char = text[i]
        if char == '"':  # a string, escapes included, to its closing quote (or the line's end)
            j = _string_end(text, i)
            out.append(text[i:j])
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i, found = j, True
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("".join(c if c == "\n" else " " for c in text[i:j]))
            i, found = j, True
        else:
            out.append(char)
            i += 1
    return "".join(out) if found else None


def _without_trailing_commas(text: str) -> str | None:
    """``text`` with each comma that only blanks separate from a closing ``}`` or ``]`` (outside
    strings) blanked; None where it has none. Such a comma has one meaning (json5's, JavaScript's):
    nothing follows it."""
    out = list(text)
    i, n, found = 0, len(text), False
    while i < n:
        char = text[i]
        if char == '"':
            i = _string_end(text, i)
            continue
        if char == ",":
            j = i + 1
            while j < n and text[j] in " \t\r\n":
                j += 1
            if j < n and text[j] in "}]":
                out[i], found = " ", True
        i += 1
    return "".join(out) if found else None


def _parse_yaml(text: str, path: Path, *, list_ok: bool = False) -> Table | Seq:
    import yaml

    class ConfigLoader(yaml.SafeLoader):
        """Safe YAML that refuses two equal keys (YAML keeps the last silently; a config that says
        both contradicts itself) and reads any tag it does not know as plain data."""

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

    def unknown_tag(loader, tag_suffix, node):
        if isinstance(node, yaml.MappingNode):
            return loader.construct_mapping(node, deep=True)
        if isinstance(node, yaml.SequenceNode):
            return loader.construct_sequence(node, deep=True)
        return Tagged(node.tag, node.value)

    for prefix in ("!", "tag:"):
        ConfigLoader.add_multi_constructor(prefix, unknown_tag)

    try:  # the reader refuses a control character (NUL, BEL, DEL: a binary file, /proc/self/environ) at once
        loader = ConfigLoader(text)
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, max(0, exc.position)) + 1
        raise SettingsError(f"{path}:{line}: not valid YAML: it holds the control character U+{exc.character:04X} "
                            "(a config file is text)") from None
    lines: dict[tuple[str, ...], int] = {}
    templates: set[tuple[str, ...]] = set()
    try:
        node = loader.get_single_node()  # aliases are shared nodes here: cheap, whatever they expand to
        if node is not None:
            _bound_expansion(node, path)
            _record_key_lines(node, (), lines, {}, templates)
        data = loader.construct_document(node) if node is not None else None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or first_line(exc)
        raise SettingsError(f"{path}{line}: not valid YAML: {problem}") from None
    finally:
        loader.dispose()
    return _with_origins(_as_mapping(data, path, list_ok=list_ok), str(path), (), lines, frozenset(templates))


def _bound_expansion(root, path: Path) -> None:
    """Refuse a YAML document whose aliases expand it past MAX_CONFIG_VALUES values, or into a cycle.
    A long list written out in full is as large as its file (bounded by the read): not refused."""
    import yaml

    expanded: dict[int, int] = {}  # node id -> values it expands to (each alias target counted once)
    open_nodes: set[int] = set()
    written = [0]  # nodes as written in the file, each counted once

    def size(node) -> int:
        key = id(node)
        if key in expanded:
            return expanded[key]
        written[0] += 1
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
        if total > MAX_CONFIG_VALUES and total > 2 * written[0]:  # aliases, not the file, made it this large
            raise SettingsError(f"{path}:{node.start_mark.line + 1}: YAML aliases expand this value to over "
                                f"{MAX_CONFIG_VALUES:,} values; a loader config needs a few dozen")
        return total

    size(root)


def _record_key_lines(node, path: tuple[str, ...], out: dict[tuple[str, ...], int],
                      first: dict[int, tuple[str, ...]], templates: set[tuple[str, ...]]) -> None:
    """Key path -> line from the composed YAML nodes (an alias's keys keep the first path they had).
    A merge key (``<<: *base``, or a list of them) gives the mapping the keys it does not set itself,
    each at the line its value is written on (the anchor's), as PyYAML merges them: the mapping's own
    keys, then the merged mappings, the last in the list first. ``templates`` gets the path where each
    mapping that is merged or taken whole again was first written (``first``: node -> that path)."""
    import yaml

    if isinstance(node, yaml.MappingNode):
        if id(node) in first:  # an alias: the mapping is written at first[...]
            if first[id(node)] != path:
                templates.add(first[id(node)])
        else:
            first[id(node)] = path
        merged = []
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            if key_node.value == "<<" and key_node.tag == "tag:yaml.org,2002:merge":
                merged += value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
            elif (*path, key_node.value) not in out:
                key_path = (*path, key_node.value)
                out[key_path] = key_node.start_mark.line + 1
                _record_key_lines(value_node, key_path, out, first, templates)
        for base in reversed(merged):
            if isinstance(base, yaml.MappingNode) and id(base) in first:
                templates.add(first[id(base)])
            _record_key_lines(base, path, out, first, templates)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            out.setdefault((*path, str(i)), item.start_mark.line + 1)
            _record_key_lines(item, (*path, str(i)), out, first, templates)
