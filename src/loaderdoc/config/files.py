"""Reading a config file: everything it inherits merged (:mod:`.inherit`), its DataLoader settings
found by meaning (:mod:`.meaning`), refined by its layout (:mod:`.layouts`), each with its file and line.

A setting the file does not state is never given a value here: a loader's :meth:`ConfigFile.settings`
fills torch's defaults (or the framework's, said as such), and :meth:`ConfigFile.set_by` says,
setting by setting, which key set it, or that none did.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.config.inherit import Loaded, load
from loaderdoc.config.layouts import (
    BY_NAMES,
    DECIDED_BY_CODE,
    LAYOUTS_UNDERSTOOD,
    RULE_PICKS_KEYS,
    builder_known,
    check_native,
    is_loaderdoc_shaped,
    native_owners,
    process_settings,
    refine,
)
from loaderdoc.config.meaning import SETTING_ORDER, FoundLoader, builds_a_loader, collect_hits, group
from loaderdoc.config.tree import Origin, Table, origin_of, plain

READ_COMPLETE, READ_PARTIAL, READ_NONE = "complete", "partial", "none"


@dataclass
class ConfigFile:
    """A config and what it inherits: its DataLoaders, and any other tables it holds."""

    path: Path
    document: Table
    loaders: list[FoundLoader]
    layout: str = BY_NAMES
    files: list[str] = field(default_factory=list)  # the config first, then what it inherits
    texts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # bases named but not read
    unattributed: list[str] = field(default_factory=list)  # settings found that no loader could take
    disagreeing: dict[str, str] = field(default_factory=dict)  # setting -> its note: two keys that disagree
    references: dict[tuple[str, ...], tuple[tuple[str, ...], Origin | None]] = field(default_factory=dict)
    process: dict[str, int] = field(default_factory=dict)  # loaderdoc's [process] table, checked: torch_threads
    # per loader (by name), the settings it leaves to a training code loaderdoc does not know (layouts.builder_known)
    code_decides: dict[str, list[str]] = field(default_factory=dict)
    # loaders whose batch_size key names no scope, in a framework loaderdoc knows no rule of: per process or
    # a total its code divides among the GPUs (MMF's training.batch_size) is that code's rule
    scope_unknown: list[str] = field(default_factory=list)

    @property
    def torch_threads(self) -> int | None:
        """``[process] torch_threads``: the training process's intra-op threads, or None (not set)."""
        return self.process.get("torch_threads")

    @property
    def loaderdoc_shaped(self) -> bool:
        """Nothing but loaderdoc's own tables: its [training] table is loaderdoc's, not a project's."""
        return is_loaderdoc_shaped(self.document)

    # ---- what was read, and how completely -------------------------------------------------------
    @property
    def read(self) -> str:
        """"complete", "partial" (a base not found, a value only run time knows, keys that disagree)
        or "none" (no DataLoader settings)."""
        if not self.loaders:
            return READ_PARTIAL if self.missing or self.unattributed else READ_NONE
        if self.missing or self.unattributed or self.code_decides or self.scope_unknown or \
                any(lo.unreadable for lo in self.loaders):
            return READ_PARTIAL
        return READ_COMPLETE

    @property
    def partial_reasons(self) -> list[str]:
        out = list(self.missing) + list(self.unattributed)
        if self.code_decides:
            shown = "; ".join(f"{name or 'loader'}: {', '.join(unset)}" for name, unset in self.code_decides.items())
            whose = ("this file's framework is not one loaderdoc knows" if self.layout == BY_NAMES else
                     f"loaderdoc knows no rule of how {self.layout} builds its DataLoaders")
            out.append(f"not set in the file, so the training code decides ({shown}): {whose} (it may build more "
                       "loaders than these, and pass its own values); 'loaderdoc watch' measures what the run gets")
        if self.scope_unknown:
            names = ", ".join(name or "loader" for name in self.scope_unknown)
            out.append(f"batch_size ({names}): each process's, or a total the training code divides among the GPUs, "
                       "is its framework's rule, which loaderdoc does not know; judged as each process's")
        for loader in self.loaders:
            for setting, source in loader.unreadable.items():
                out.append(f"{_label(loader)}{setting} = {source}: {loader.unreadable_why.get(setting, '')}".rstrip(": "))
        return out

    @property
    def skipped(self) -> list[str]:
        """Settings left out because only run time knows them (the report's ``skipped``)."""
        return [f"{'.'.join(_key_path(lo, s))} = {src} ({lo.unreadable_why.get(s, 'not a literal')}; left out)"
                for lo in self.loaders for s, src in lo.unreadable.items()]

    def no_settings_line(self) -> str:
        return f"no DataLoader settings in {self.path}; layouts understood: {LAYOUTS_UNDERSTOOD}"

    # ---- lines -------------------------------------------------------------------------------
    def line_of_origin(self, origin: Origin | None) -> int | None:
        """The line of a key: exact for YAML and Python, found by scanning for TOML and JSON."""
        if origin is None:
            return None
        if origin.line is not None:
            return origin.line
        return _scan_for(self.texts.get(origin.file, ""), origin.local_path)

    def line_of(self, path: tuple[str, ...]) -> int | None:
        """The line of a key path in the merged config (its deepest key that has one)."""
        return self.line_of_origin(origin_of(self.document, path))

    def set_by(self, loader: FoundLoader, setting: str) -> dict[str, Any] | None:
        """Which key set a setting: {file, line, key}, or None when the file does not set it."""
        if setting not in loader.keys and setting not in loader.unreadable:
            return None
        origin = loader.origins.get(setting)
        path = loader.keys.get(setting) or _key_path(loader, setting)
        out = {"file": origin.file if origin else str(self.path), "line": self.line_of_origin(origin),
               "key": ".".join(path)}
        if path in self.references:
            target, target_origin = self.references[path]
            out["via"] = ".".join(target)
            if target_origin is not None:
                out["value_from"] = {"file": target_origin.file, "line": self.line_of_origin(target_origin)}
        return out

    @property
    def training_table(self) -> dict[str, Any] | None:
        """The optional ``[training]`` table (what the training script does, for advice rules); the
        caller decides whether it is loaderdoc's (:attr:`loaderdoc_shaped`) or a project's own section."""
        table = self.document.get("training")
        if table is None:
            return None
        if not isinstance(table, dict):
            raise SettingsError(f"{self.path}: [training] must be a table of facts about the training script")
        return plain(table)

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
        lines = {setting: self.line_of_origin(loader.origins.get(setting)) for setting in loader.keys}
        return {setting: line for setting, line in lines.items() if line}

    def settings(self, loader: FoundLoader, *, strict: bool = True,
                 counts: dict[str, int | None] | None = None) -> LoaderSettings:
        """The loader's settings as the run gets them, every value checked; an error names the file,
        line and key path. What the file does not set is torch's default (or the framework's, in
        ``loader.defaults``); what the framework makes of a value, ``loader.run``'s (on a machine of
        these ``counts``, meaning.MACHINE_COUNTS, where the machine decides it)."""
        files = {s: o.file for s, o in loader.origins.items()}
        return LoaderSettings.from_mapping(loader.raw_settings(counts), where=str(self.path),
                                           lines=self.lines_for(loader),
                                           strict=strict, paths={k: loader.where(k) for k in loader.values},
                                           files=files)


def read_config(path: str | Path, *, flag: str = "--config") -> ConfigFile:
    """Read a config (.yaml/.yml, .json, .py, else TOML) and everything it inherits; find its loaders.
    A file with no DataLoader settings is read (``loaders`` empty), not refused; ``flag`` names the
    option that named the file, for the message when it cannot be read."""
    path = Path(path)
    loaded: Loaded = load(path, flag=flag)
    config = ConfigFile(path=path, document=loaded.tree, loaders=[], files=loaded.files, texts=loaded.texts,
                        notes=loaded.notes, missing=loaded.missing, references=loaded.references)
    check_native(loaded.tree, config.line_of_origin)
    config.process = process_settings(loaded.tree, config.line_of_origin)
    opaque: list[str] = []
    try:
        hits = collect_hits(loaded.tree, opaque)
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply to be a config file") from None
    used = {hit.path for hit in hits}
    referenced: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for here, (target, _) in loaded.references.items():
        if here in used:
            referenced.setdefault(target, []).append(here)
    found = group(hits, native=native_owners(loaded.tree), referenced=referenced)
    config.loaders = found.loaders
    config.unattributed = found.unattributed + opaque + loaded.run_time
    config.disagreeing = found.disagreeing
    config.missing += _unread_bases(loaded.tree, loaded.files)
    config.layout = refine(loaded.tree, found.loaders, loaded.frameworks)
    if config.layout in RULE_PICKS_KEYS:
        for setting in [s for s in config.disagreeing if all(s in lo.keys for lo in found.loaders)]:
            note = config.disagreeing.pop(setting)
            config.unattributed = [line for line in config.unattributed if line != note]
    if not builder_known(config.layout):
        for loader in found.loaders:
            if _from_call(loaded.tree, loader):
                continue  # a DataLoader(...) call: what it leaves out is torch's default
            if "batch_size" in loader.keys and loader.batch_scope == "loader" and "batch_size" not in loader.run:
                config.scope_unknown.append(loader.name)
            unset = [s for s in DECIDED_BY_CODE if s not in loader.keys and s not in loader.unreadable
                     and s not in loader.defaults and s not in loader.run]
            if unset:
                config.code_decides[loader.name] = unset
    return config


CONFIG_SUFFIXES = (".yaml", ".yml", ".py", ".json", ".toml")


BASE_KEYS = {"include", "includes", "import", "imports", "extends", "inherit", "inherits"}  # besides *base*


def _unread_bases(tree: Table, files: list[str]) -> list[str]:
    """Keys naming base config files that the reading did not follow (OpenPCDet's ``_BASE_CONFIG_``,
    Amphion's ``base_config``, MMF's ``includes:`` list, each resolved by the project's own code):
    each one line saying whether the file is there (beside this one or in a folder above it, where
    projects resolve such paths from their root), the read partial."""
    read = {Path(f).name for f in files}
    here = Path(files[0]).resolve().parent if files else None
    out: list[str] = []

    def named(key: str, value: str) -> None:
        if Path(value).name in read or len(out) >= 5:
            return
        where = next((folder / value for folder in ([here, *here.parents] if here else [])
                      if (folder / value).is_file()), None)
        status = (f"found at {os.path.relpath(where, here)}, not read: loaderdoc knows no rule of how this project merges it"
                  if where is not None else "not found beside it or in a folder above it")
        out.append(f"{key} = {value}: a base config this file names ({status}); the settings it holds are not "
                   "in this reading")

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                name = str(key).lower().strip("_")
                if "base" in name or name in BASE_KEYS:
                    values = value if isinstance(value, list) else [value]
                    for v in values:
                        if isinstance(v, str) and v.strip().endswith(CONFIG_SUFFIXES):
                            named(".".join((*path, str(key))), v.strip())
                walk(value, (*path, str(key)))
        elif isinstance(node, list):
            for i, value in enumerate(node):
                walk(value, (*path, str(i)))

    walk(tree, ())
    return out


def _from_call(tree: Table, loader: FoundLoader) -> bool:
    """Whether a loader's settings come from a ``DataLoader(...)`` call a script makes (config/script.py)
    or a node that is the call (``_target_: DataLoader``, as Hydra and MONAI bundles instantiate it)."""
    for path in [*loader.keys.values(), *loader.unread_keys.values()]:
        node: Any = tree
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, Table) and (node.call or builds_a_loader(node)):
            return True
    return False


def load_settings(path: str | Path, *, strict: bool = True) -> LoaderSettings:
    """The first loader's settings in a config file; raise SettingsError naming the line and key."""
    config = read_config(path)
    if not config.loaders:
        raise SettingsError(config.no_settings_line())
    return config.settings(config.loaders[0], strict=strict)


def _label(loader: FoundLoader) -> str:
    return f"{loader.name}: " if loader.name else ""


def _key_path(loader: FoundLoader, setting: str) -> tuple[str, ...]:
    """The key path of a setting, read or left to run time."""
    if setting in loader.keys:
        return loader.keys[setting]
    return loader.unread_keys.get(setting, (setting,))


def _scan_for(text: str, path: tuple[str, ...]) -> int | None:
    """The line of ``a.b.c`` in TOML or JSON text: each key searched for after the previous one's line."""
    lines = text.splitlines()
    start, found = 0, None
    for i, key in enumerate(path):
        if key.isdigit():  # a list item: its key is the list's; in TOML, the n-th [[list]] table after it
            if i and int(key):
                header = re.compile(rf"""^\s*\[\[\s*(?:[^\]]*\.)?["']?{re.escape(path[i - 1])}["']?\s*\]\]""")
                tables = [n for n in range(start, len(lines)) if header.search(lines[n])]
                if len(tables) > int(key):
                    found = start = tables[int(key)]
                    found += 1
            continue
        # a key (`key =`, `"key":`) or a component of a table header (`[key]`, `[tool.key.data]`: a
        # dotted header lost its line, issue 49)
        pattern = re.compile(rf"""(^|[\s{{,(])["']?{re.escape(key)}["']?\s*[=:]"""
                             rf"""|^\s*\[+\s*(?:[^\]]*[.\s"'])?["']?{re.escape(key)}["']?\s*[.\]]""")
        for number in range(start, len(lines)):
            if lines[number].lstrip().startswith(("#", "//")):
                continue  # a commented-out key (`# num_workers = 4`, `// "batch_size": 8`) set nothing
            if pattern.search(lines[number]):
                found, start = number + 1, number  # the next key may sit on the same line (JSON)
                break
        else:
            return found
    return found


__all__ = ["ConfigFile", "FoundLoader", "SETTING_ORDER", "load_settings", "read_config"]
