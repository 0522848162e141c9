"""A config and everything it inherits, merged the way its framework merges it, from files beside it.

Followed, never run:

- mmengine / MMCV ``_base_ = [...]`` (.py, .yaml, .json): bases merged in order, the child over
  them, ``_delete_=True`` replacing instead of merging;
- mmengine's pure-Python configs (``with read_base(): from .._base_.x import *``) and detectron2
  LazyConfig imports (``from ..common.data.coco import dataloader``), with later
  ``.update(...)``, item and attribute assignment (:mod:`.python`);
- detectron2 / yacs ``_BASE_: "../Base-RCNN-FPN.yaml"``;
- RT-DETR's ``__include__: [...]`` (D-FINE's, DEIM's): merged in order, the file over them;
- Hydra ``defaults`` lists (groups, ``override``, ``optional``, ``@package``, ``_self_``);
- ``${a.b}`` / ``${.x}`` interpolations and SpeechBrain's ``!ref <a>``; ``${oc.env:VAR}`` is left
  unresolved and said.

A base that is not beside the config (a missing file, a module of an installed package) is a note
naming it, never a guess.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.textfile import read_input
from loaderdoc.config.parse import Tagged, parse_file, scanned_text
from loaderdoc.config.python import module_file
from loaderdoc.config.tree import Origin, Seq, Table, Unread, get_path, merge_into, origin_of, without

MAX_FILES = 200  # a config's inheritance is a handful of files; a chain past this is a loop or a mistake


@dataclass
class Loaded:
    """The merged tree, the files read (the config first), and what could not be followed."""

    tree: Table
    files: list[str] = field(default_factory=list)
    texts: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # each one line: a missing base, an env variable, ...
    missing: list[str] = field(default_factory=list)  # bases named but not found: the read is partial
    # what a script's run decides (argparse defaults a command line overrides, a DataLoader built in
    # a function): the read is partial, each one line
    run_time: list[str] = field(default_factory=list)
    # key path -> (the path it refers to, that value's origin): `batch_size: ${data.batch_size}`
    references: dict[tuple[str, ...], tuple[tuple[str, ...], Origin | None]] = field(default_factory=dict)
    frameworks: set[str] = field(default_factory=set)  # inheritance seen: "mmengine", "Hydra", "detectron2", ...


def load(path: str | Path, *, flag: str = "--config") -> Loaded:
    path = Path(path)
    loaded = Loaded(tree=Table())
    text = read_input(path, what="config file", flag=flag, error=SettingsError)
    try:
        loaded.tree = _Loader(loaded, path).file(path, text)
        _resolve_references(loaded)
    except RecursionError:
        raise SettingsError(f"{path}: nested too deeply to be a config file") from None
    return loaded


class _Loader:
    def __init__(self, loaded: Loaded, primary: Path) -> None:
        self.loaded = loaded
        self.primary = primary
        self.open: list[Path] = []  # files being read, to refuse a cycle
        self.cache: dict[Path, Table] = {}

    def file(self, path: Path, text: str | None = None, *, named_by: str = "",
             list_ok: bool = False) -> Table | Seq | None:
        """One file, its own inheritance followed; None (and a note) when it cannot be read.
        ``list_ok``: the file may be a list (a Hydra group option, placed at its package)."""
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):  # a symlink loop: read_input names it below
            resolved = path.absolute()
        if resolved in self.open:
            raise SettingsError(f"{path}: inherits from itself ({' -> '.join(p.name for p in [*self.open, path])})")
        if resolved in self.cache:
            return copy.deepcopy(self.cache[resolved])
        if len(self.loaded.files) >= MAX_FILES:
            raise SettingsError(f"{self.primary}: inherits from over {MAX_FILES} files; not a config")
        if text is None:
            try:
                text = read_input(path, what="config file", flag="base", error=SettingsError)
            except SettingsError as err:  # "PATH: no such file; ...": the reason after the path
                reason = str(err).removeprefix(f"{path}: ").split(";")[0]
                self.missing(f"{path} ({named_by}) could not be read: {reason}")
                return None
        self.loaded.files.append(str(path))
        self.loaded.texts[str(path)] = scanned_text(path, text)
        self.open.append(resolved)
        try:
            tree = parse_file(path, text, import_file=self.importer(path), notes=self.loaded.notes,
                              run_time=self.loaded.run_time, list_ok=list_ok)
            if isinstance(tree, Table):
                tree = self.inherit(path, tree)
        finally:
            self.open.pop()
        self.cache[resolved] = copy.deepcopy(tree)
        return tree

    def missing(self, line: str) -> None:
        if line not in self.loaded.missing:
            self.loaded.missing.append(line)

    def importer(self, path: Path):
        def import_file(module: str, level: int, lineno: int) -> Table | None:
            found = module_file(module, level, path)
            if found is None:
                if level:  # a relative import names a file beside the config: it is missing
                    self.missing(f"{path}:{lineno}: imports {'.' * level}{module}, not found beside it")
                return None
            self.loaded.frameworks.add("Python imports")
            return self.file(found, named_by=f"imported at {path.name}:{lineno}")
        return import_file

    # ---- the frameworks' inheritance ---------------------------------------------------------
    def inherit(self, path: Path, tree: Table) -> Table:
        if "_base_" in tree:
            tree = self.mmengine_bases(path, tree)
        if isinstance(tree.get("_BASE_"), str):
            tree = self.yacs_base(path, tree)
        if isinstance(tree.get("__include__"), list):
            tree = self.includes(path, tree)
        if path.suffix.lower() in (".yaml", ".yml") and isinstance(tree.get("defaults"), list):
            tree = self.hydra_defaults(path, tree)
        return tree

    def mmengine_bases(self, path: Path, tree: Table) -> Table:
        self.loaded.frameworks.add("mmengine _base_")
        bases = tree["_base_"]
        names = [bases] if isinstance(bases, str) else [b for b in bases if isinstance(b, str)] \
            if isinstance(bases, list) else []
        return self.merged_bases(path, tree, "_base_", names)

    def yacs_base(self, path: Path, tree: Table) -> Table:
        self.loaded.frameworks.add("detectron2 _BASE_")
        name = tree["_BASE_"]
        base = self.file(path.parent / name, named_by=f"_BASE_ of {path.name}") or Table()
        return merge_into(base, without(tree, "_BASE_"))

    def includes(self, path: Path, tree: Table) -> Table:
        """RT-DETR's ``__include__`` (its YAMLConfig, which D-FINE and DEIM share): merged as
        mmengine merges ``_base_``."""
        self.loaded.frameworks.add("RT-DETR __include__")
        return self.merged_bases(path, tree, "__include__", [n for n in tree["__include__"] if isinstance(n, str)])

    def merged_bases(self, path: Path, tree: Table, key: str, names: list[str]) -> Table:
        """The files ``names`` (each relative to ``path``) merged in order, later over earlier, and
        ``tree`` less ``key`` over them all."""
        merged = Table()
        for name in names:
            if "::" in name:  # `mmdet::_base_/...`: a file inside an installed package
                self.missing(f"{path}: {key} {name!r} lives in an installed package, not beside the config")
                continue
            base = self.file(path.parent / name, named_by=f"{key} of {path.name}")
            if base is not None:
                merge_into(merged, base)
        return merge_into(merged, without(tree, key))

    def hydra_defaults(self, path: Path, tree: Table) -> Table:
        """Compose a Hydra config: each defaults entry's file merged at its package, ``_self_``
        where listed (last when not), a later ``override`` replacing a group's earlier choice."""
        self.loaded.frameworks.add("Hydra defaults")
        own = without(tree, "defaults")
        entries: list[tuple[str, Any]] = []  # ("self", None) | ("group", (group, option, pkg, optional)) | ("file", name)
        choices: dict[str, int] = {}
        for item in tree["defaults"]:
            if item == "_self_":
                entries.append(("self", None))
            elif isinstance(item, str):
                entries.append(("file", item))
            elif isinstance(item, dict) and len(item) == 1:
                (key, option), = item.items()
                words = key.split()
                override, optional = "override" in words, "optional" in words
                group, _, pkg = words[-1].partition("@")
                if group.strip("/").split("/")[0] == "hydra":
                    continue  # Hydra's own launcher and logging: no DataLoader there (and often in a plugin)
                entry = ("group", (group, option, pkg, optional))
                if override and group.strip("/") in choices:
                    entries[choices[group.strip("/")]] = entry
                else:
                    choices[group.strip("/")] = len(entries)
                    entries.append(entry)
        if ("self", None) not in entries:
            entries.append(("self", None))
        composed = Table()
        for kind, entry in entries:
            if kind == "self":
                merge_into(composed, own)
            elif kind == "file":
                entry, _, pkg = entry.partition("@")  # `reward_manager@reward_manager`: placed at that key (verl)
                name = entry if entry.endswith((".yaml", ".yml")) else f"{entry}.yaml"
                found = self.group_file(path, name.lstrip("/"), absolute=name.startswith("/"))
                if found is None:
                    self.missing(f"{path}: defaults names {entry!r}, not found beside it")
                    continue
                node = self.file(found, named_by=f"defaults of {path.name}") or Table()
                merge_into(composed, _placed(node, _package_path(pkg, "")) if pkg else node)
            else:
                group, option, pkg, optional = entry
                options = option if isinstance(option, list) else [option]
                for choice in options:
                    if choice is None or not isinstance(choice, str):
                        continue
                    if choice == "???":  # chosen on the command line (`config=pretrain/...`)
                        self.missing(f"{path}: defaults leaves {group.strip('/')} to the command line (???); "
                                     "what that choice sets is not read")
                        continue
                    relative = f"{group.strip('/')}/{choice}.yaml"
                    found = self.group_file(path, relative, absolute=group.startswith("/"))
                    if found is None:
                        if not optional:
                            self.missing(f"{path}: defaults names {group.strip('/')}: {choice}, not found "
                                         f"({relative})")
                        continue
                    # a group's option may be a list (pytorchvideo's module/metrics: accuracy), placed at its key
                    node = self.file(found, named_by=f"defaults of {path.name}", list_ok=True)
                    if node is None:
                        continue
                    header = _package_header(self.loaded.texts.get(str(found), ""))
                    at = _package_path(pkg or header, group.strip("/"))
                    if isinstance(node, Seq) and not at:
                        raise SettingsError(f"{found}: a list, which Hydra cannot merge at the config's root "
                                            f"(defaults of {path.name}); a group's option there is a mapping")
                    merge_into(composed, _placed(node, at))
        return composed

    def group_file(self, config: Path, relative: str, *, absolute: bool) -> Path | None:
        """A defaults entry's file: beside the config naming it, else in a folder above (the config
        root Hydra searches: an experiment's ``/data: mnist`` is ``<root>/data/mnist.yaml``)."""
        config, primary = config.absolute(), self.primary.absolute()  # parents of "." are none
        folders = [] if absolute else [config.parent]
        folders += [primary.parent, *primary.parent.parents][:4]
        folders += [config.parent, *config.parent.parents][:4]
        for folder in folders:
            candidate = folder / relative
            if candidate.is_file():
                return candidate
        return None


_PACKAGE = re.compile(r"^#\s*@package\s+(\S+)", re.MULTILINE)


def _package_header(text: str) -> str:
    match = _PACKAGE.search("\n".join(text.splitlines()[:20]))
    return match.group(1) if match else ""


def _package_path(package: str, group: str) -> tuple[str, ...]:
    """Where a group's option lands: its group path by default, the root for ``_global_``."""
    if package in ("_global_",):
        return ()
    if package.startswith("_global_."):
        return tuple(package.split(".")[1:])
    if package in ("", "_group_"):
        return tuple(part for part in group.split("/") if part)
    return tuple(part for part in package.replace("_group_", group.replace("/", ".")).split(".") if part)


def _placed(node: Table | Seq, at: tuple[str, ...]) -> Table:
    for key in reversed(at):
        outer = Table()
        outer.put(key, node, None)
        node = outer
    return node


# ---- ${...} and !ref <...> ------------------------------------------------------------------------
_INTERPOLATION = re.compile(r"^\$\{([^${}]+)\}$")
_REF = re.compile(r"^<([^<>]+)>$")
_ENV = re.compile(r"\$\{\s*(?:oc\.)?env\s*:\s*([A-Za-z_][A-Za-z0-9_]*)")
_RESOLVER = re.compile(r"\$\{\s*([A-Za-z_][\w.]*)\s*:")
MAX_REFERENCE_DEPTH = 20


def _resolve_references(loaded: Loaded) -> None:
    root = loaded.tree

    def target_of(value: Any, here: tuple[str, ...]) -> tuple[str, tuple[str, ...] | None] | Unread | None:
        """(the text, the absolute path it names), an Unread, or None when the value is no reference."""
        if value == "???":  # OmegaConf's mandatory value: the command line gives it
            return Unread(value, "a mandatory value (???) given on the command line")
        if isinstance(value, str) and "${" in value:
            match = _INTERPOLATION.match(value.strip())
            if not match or ":" in match.group(1):  # a resolver (oc.env, oc.decode, ...) or text around it
                env = _ENV.search(value)
                if env:
                    return Unread(value, f"read from the environment variable {env.group(1)} when the job starts")
                resolver = _RESOLVER.search(value)
                what = f"the {resolver.group(1)} resolver" if resolver else "OmegaConf"
                return Unread(value, f"{what} works it out when the job starts")
            inner = match.group(1).strip()
            dots = len(inner) - len(inner.lstrip("."))
            parts = tuple(p for p in re.split(r"[.\[\]]", inner.lstrip(".")) if p)
            base = here[:-1][:len(here) - dots] if dots else ()
            return value, (*base, *parts)
        if isinstance(value, Tagged) and value.tag == "!ref":
            match = _REF.match(value.text.strip())
            if not match:
                return None  # `!ref <a> // 2`: arithmetic on a reference, left as it is
            parts = tuple(p.strip("'\"") for p in re.split(r"[.\[\]]", match.group(1)) if p)
            return value.source, parts
        return None

    def resolve(value: Any, here: tuple[str, ...], depth: int = 0) -> Any:
        found = target_of(value, here)
        if found is None or isinstance(found, Unread):
            return found if isinstance(found, Unread) else value
        text, target = found
        if depth > MAX_REFERENCE_DEPTH or target == here:
            return Unread(text, "a reference that leads back to itself")
        try:
            referred = get_path(root, target)
        except KeyError:
            return Unread(text, f"refers to {'.'.join(target)}, which the config does not set")
        loaded.references[here] = (target, origin_of(root, target))
        return resolve(referred, target, depth + 1) if not isinstance(referred, (dict, list)) else referred

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if isinstance(node, Table):
            for key in list(node):
                value = node[key]
                if isinstance(value, (Table, Seq)):
                    walk(value, (*path, key))
                else:
                    new = resolve(value, (*path, key))
                    if new is not value:
                        node[key] = new
        elif isinstance(node, Seq):
            for i, value in enumerate(node):
                if isinstance(value, (Table, Seq)):
                    walk(value, (*path, str(i)))

    walk(root, ())
