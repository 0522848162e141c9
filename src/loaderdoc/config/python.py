"""Python configs (mmengine, MMDetection, detectron2 LazyConfig) read with ``ast``: never run.

The module's top-level statements are followed the way the config system would see them:

- ``train_dataloader = dict(batch_size=2, num_workers=2)``, ``OmegaConf.create()`` and any call
  with keyword arguments (``L(build_detection_train_loader)(num_workers=4, ...)``) become mappings;
- a name bound earlier is followed (``batch_size=batch_size``), and so are attribute and item
  assignment (``dataloader.train.total_batch_size = 64``, ``cfg['data']['workers'] = 2``) and
  ``X.update(...)``;
- imports of other config files (``with read_base(): from .._base_.datasets.coco import *``,
  ``from ..common.data.coco import dataloader``) are read through ``import_file``, a callback of
  :mod:`.inherit`, when the file lies beside the config;
- arithmetic on numbers the file states (``16 * 4``) is worked out.

Anything that would need running the file (``os.cpu_count()``, a name from an installed package, a
comprehension) becomes :class:`~loaderdoc.config.tree.Unread`, which the reader reports instead of
guessing.
"""

from __future__ import annotations

import ast
import copy
import operator
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.config.script import read_script
from loaderdoc.config.tree import MAX_CONFIG_VALUES, Origin, Seq, Table, Unread, merge_into

EXPORT_FUNCTION = "make_loader"  # the function of loaderdoc's own Python export
# calls that build a mapping from a mapping and keywords, as a config system's own dict types do
MAPPING_CALLS = {"dict", "ConfigDict", "Config", "DictConfig", "EasyDict", "edict", "OmegaConf.create", "AttrDict",
                 "CN", "CfgNode"}
ARITHMETIC = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.FloorDiv: operator.floordiv,
              ast.Div: operator.truediv, ast.Mod: operator.mod}

# (module name, relative level, names or None for *) -> the names it binds, or None when not beside the config
ImportFile = Callable[[str, int, int], "Table | None"]


def read_python(text: str, where: str, *, import_file: ImportFile | None = None,
                notes: list[str] | None = None, run_time: list[str] | None = None) -> Table:
    """The module's top-level names as a :class:`Table` whose keys carry their lines, and a
    script's argparse defaults as ``args`` (:mod:`.script`; ``run_time`` says what its run decides)."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        if "Exceeds the limit" in str(exc.msg):  # over 4300 digits: Python will not make the int
            raise SettingsError(f"{where}:{exc.lineno}: holds a number of thousands of digits; no DataLoader "
                                "setting is that large") from None
        raise SettingsError(f"{where}:{exc.lineno}: not valid Python: {exc.msg}") from None
    run_time = run_time if run_time is not None else []
    reader = _Reader(where, import_file, notes if notes is not None else [], run_time)
    reader.statements(tree.body)
    read_script(tree, where, reader.namespace, reader.value, run_time)
    return reader.namespace


class _Reader:
    def __init__(self, where: str, import_file: ImportFile | None, notes: list[str],
                 run_time: list[str] | None = None) -> None:
        self.where = where
        self.import_file = import_file
        self.notes = notes
        self.run_time = run_time if run_time is not None else []
        self.packaged: dict[str, str] = {}  # a name bound from an installed package's module -> that module
        self.namespace = Table()
        self.built = 0  # values made so far, each copy of a bound name counted whole

    def copied(self, value: Any) -> Any:
        """A copy of a bound name's value, within MAX_CONFIG_VALUES in all: ten lines that each list
        the last name ten times make 10^10 values (a 443-byte file took 2.4 GB and hung, issue 49)."""
        self.built += _size(value, MAX_CONFIG_VALUES - self.built + 1)
        if self.built > MAX_CONFIG_VALUES:
            raise SettingsError(f"{self.where}: its names copied into one another make over {MAX_CONFIG_VALUES:,} "
                                "values; not a config file loaderdoc reads")
        return copy.deepcopy(value)

    def origin(self, path: tuple[str, ...], node: ast.AST) -> Origin:
        return Origin(self.where, path, getattr(node, "lineno", None))

    # ---- statements --------------------------------------------------------------------------
    def statements(self, body: list[ast.stmt]) -> None:
        for node in body:
            try:
                self.statement(node)
            except RecursionError:
                raise SettingsError(f"{self.where}:{node.lineno}: nested too deeply to be a config file") from None

    def statement(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                self.assign(target, node.value, node)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            self.assign(node.target, node.value, node)
        elif isinstance(node, ast.With):  # `with read_base():` holds the imports of the bases
            self.statements(node.body)
        elif isinstance(node, ast.ImportFrom):
            self.import_from(node)
        elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            self.call_statement(node.value)
        elif isinstance(node, ast.FunctionDef) and node.name == EXPORT_FUNCTION:
            kwargs = _export_kwargs(node)
            if kwargs is not None:  # read as loaderdoc's own [dataloader] table
                self.namespace.put("dataloader", self.value(kwargs, ("dataloader",)), self.origin(("dataloader",), node))
        elif isinstance(node, ast.ClassDef):
            self.class_attributes(node)
        # anything else (an `if`, a loop, a class) needs running: nothing literal to read

    def class_attributes(self, node: ast.ClassDef) -> None:
        """An experiment class (YOLOX's ``Exp``): ``self.data_num_workers = 4`` in ``__init__`` and
        class-level ``batch_size = 8`` read as the class's table; a dataclass's fields too
        (``num_workers: int = 8``, ``field(default=8)``, ``field(default_factory=DataConfig)``)."""
        table = Table()
        for item in node.body:
            if isinstance(item, ast.Assign) and len(item.targets) == 1 and isinstance(item.targets[0], ast.Name):
                key = item.targets[0].id
                table.put(key, self.value(item.value, (node.name, key)), self.origin((node.name, key), item))
            elif isinstance(item, ast.AnnAssign) and item.value is not None and isinstance(item.target, ast.Name):
                key = item.target.id
                table.put(key, self.field_value(item.value, (node.name, key)), self.origin((node.name, key), item))
            elif isinstance(item, ast.FunctionDef) and item.name == "__init__":
                for statement in ast.walk(item):
                    target = self.target_path(statement.targets[0]) if isinstance(statement, ast.Assign) \
                        and len(statement.targets) == 1 else None
                    if target and target[0] == "self" and len(target) > 1:
                        # self.num_workers = 4, or DAMO-YOLO's self.train.batch_size = 256
                        path = (node.name, *target[1:])
                        _put_at(table, target[1:], self.value(statement.value, path), self.origin(path, statement))
        inherited = [self.packaged[b.id] for b in node.bases if isinstance(b, ast.Name) and b.id in self.packaged]
        if table and inherited:  # YOLOX's `class Exp(MyExp)`: the base's defaults decide what is not set here
            self.run_time.append(f"{self.where}:{node.lineno}: class {node.name} inherits {', '.join(inherited)}, an "
                                 "installed package's, not read: the values it sets for what this class leaves out "
                                 "are not in this reading")
        if table:
            self.namespace.put(node.name, table, self.origin((node.name,), node))

    def field_value(self, node: ast.expr, path: tuple[str, ...]) -> Any:
        """A class attribute's value; a dataclass ``field(...)``'s default, or a fresh instance of
        the class its ``default_factory`` names where the file defines it."""
        if isinstance(node, ast.Call) and ast.unparse(node.func) in ("field", "dataclasses.field"):
            given = {k.arg: k.value for k in node.keywords if k.arg in ("default", "default_factory")}
            if "default" in given:
                return self.value(given["default"], path)
            factory = given.get("default_factory")
            if isinstance(factory, ast.Name) and isinstance(self.namespace.get(factory.id), Table):
                return self.copied(self.namespace[factory.id])
            return Unread(ast.unparse(node)[:60])
        return self.value(node, path)

    def assign(self, target: ast.expr, value_node: ast.expr, statement: ast.stmt) -> None:
        if isinstance(target, ast.Name):
            path = (target.id,)
            self.namespace.put(target.id, self.value(value_node, path), self.origin(path, statement))
            return
        path = self.target_path(target)
        if path is None:
            return  # `a, b = ...` or a computed key: not readable without running
        container = self.lookup(path[:-1])
        if isinstance(container, Table):
            container.put(path[-1], self.value(value_node, path), self.origin(path, statement))
        elif container is not None and not isinstance(container, Unread):
            self.notes.append(f"{self.where}:{statement.lineno}: {'.'.join(path)} set on a value that is not a mapping")

    def call_statement(self, call: ast.Call) -> None:
        """``X.update(dict(...))`` / ``X.update(key=value)``: merged into X, key by key."""
        func = call.func
        if not (isinstance(func, ast.Attribute) and func.attr == "update"):
            return
        path = self.target_path(func.value)
        container = self.lookup(path) if path else None
        if not isinstance(container, Table):
            return
        change = Table()
        for arg in call.args:
            value = self.value(arg, path)
            if isinstance(value, Table):
                merge_into(change, value)
        for keyword in call.keywords:
            if keyword.arg is not None:
                key_path = (*path, keyword.arg)
                change.put(keyword.arg, self.value(keyword.value, key_path), self.origin(key_path, keyword))
        merge_into(container, change)

    def import_from(self, node: ast.ImportFrom) -> None:
        names = self.import_file(node.module or "", node.level, node.lineno) if self.import_file else None
        if names is None:  # a package's module (`from detectron2.config import LazyCall as L`): nothing to read
            for alias in node.names:
                self.packaged[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            return
        for alias in node.names:
            if alias.name == "*":
                for key, value in names.items():
                    if not key.startswith("_"):
                        self.namespace.put(key, copy.deepcopy(value), names.origins.get(key))
            elif alias.name in names:
                bound = alias.asname or alias.name
                self.namespace.put(bound, copy.deepcopy(names[alias.name]), names.origins.get(alias.name))

    # ---- paths -------------------------------------------------------------------------------
    def target_path(self, node: ast.expr) -> tuple[str, ...] | None:
        """``a.b['c']`` -> ("a", "b", "c"); None when a part is computed."""
        parts: list[str] = []
        while True:
            if isinstance(node, ast.Name):
                return (node.id, *reversed(parts))
            if isinstance(node, ast.Attribute):
                parts.append(node.attr)
                node = node.value
            elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) \
                    and isinstance(node.slice.value, (str, int)) and not isinstance(node.slice.value, bool):
                parts.append(str(node.slice.value))
                node = node.value
            else:
                return None

    def lookup(self, path: tuple[str, ...]) -> Any:
        node: Any = self.namespace
        for key in path:
            if isinstance(node, dict) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return None
        return node

    # ---- values ------------------------------------------------------------------------------
    def value(self, node: ast.AST, path: tuple[str, ...]) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            operand = self.value(node.operand, path)
            if _number(operand):
                return -operand if isinstance(node.op, ast.USub) else operand
        if isinstance(node, ast.BinOp) and type(node.op) in ARITHMETIC:
            left, right = self.value(node.left, path), self.value(node.right, path)
            if _number(left) and _number(right) and abs(left) < 1e12 and abs(right) < 1e12:
                try:
                    return ARITHMETIC[type(node.op)](left, right)
                except ZeroDivisionError:
                    pass
        if isinstance(node, ast.Dict):
            out = Table()
            for key_node, value_node in zip(node.keys, node.values, strict=True):
                if key_node is None:  # {**base, ...}
                    base = self.value(value_node, path)
                    if isinstance(base, Table):
                        merge_into(out, copy.deepcopy(base))
                    continue
                if not (isinstance(key_node, ast.Constant) and isinstance(key_node.value, (str, int))):
                    continue  # a computed key: not readable without running
                key = str(key_node.value)
                out.put(key, self.value(value_node, (*path, key)), self.origin((*path, key), key_node))
            return out
        if isinstance(node, ast.Call):
            return self.call_value(node, path)
        if isinstance(node, (ast.List, ast.Tuple)):
            seq = Seq()
            for i, item in enumerate(node.elts):
                seq.append(self.value(item, (*path, str(i))))
                seq.origins[i] = self.origin((*path, str(i)), item)
            return seq
        if isinstance(node, ast.Name):
            if node.id in self.namespace:
                return self.copied(self.namespace[node.id])
            if node.id in ("True", "False", "None"):
                return {"True": True, "False": False, "None": None}[node.id]
            return Unread(node.id, "a name the file does not bind")
        if isinstance(node, (ast.Attribute, ast.Subscript)):
            target = self.target_path(node)
            found = self.lookup(target) if target else None
            if found is not None and target and target[0] in self.namespace:
                return self.copied(found)
        return Unread(ast.unparse(node)[:60])

    def call_value(self, node: ast.Call, path: tuple[str, ...]) -> Any:
        """A call that builds a config node: ``dict(...)``, ``OmegaConf.create({...})``, or any call with
        keyword arguments (``L(build_detection_train_loader)(num_workers=4)``); other calls are Unread."""
        name = ast.unparse(node.func)
        mapping_call = name in MAPPING_CALLS or name.split(".")[-1] in MAPPING_CALLS
        if not node.keywords and not (mapping_call and len(node.args) <= 1):
            return Unread(ast.unparse(node)[:60])
        out = Table()
        if mapping_call and node.args:
            base = self.value(node.args[0], path)
            if not isinstance(base, Table):
                return Unread(ast.unparse(node)[:60])
            merge_into(out, base)
        elif not mapping_call:
            target = node.func.args[0] if (isinstance(node.func, ast.Call) and node.func.args) else node.func
            out.put("_target_", ast.unparse(target), None)  # what the node builds, as LazyConfig records it
        for keyword in node.keywords:
            if keyword.arg is None:  # dict(**base)
                base = self.value(keyword.value, path)
                if isinstance(base, Table):
                    merge_into(out, copy.deepcopy(base))
                continue
            key_path = (*path, keyword.arg)
            out.put(keyword.arg, self.value(keyword.value, key_path), self.origin(key_path, keyword))
        return out


def _size(value: Any, limit: int) -> int:
    """How many values ``value`` holds (itself and everything nested), counted up to ``limit``."""
    count, stack = 0, [value]
    while stack and count < limit:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _export_kwargs(function: ast.FunctionDef) -> ast.AST | None:
    """The ``kwargs = dict(...)`` of the ``make_loader`` that ``loaderdoc --export x.py`` writes."""
    for node in function.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "kwargs" and isinstance(node.value, ast.Call)):
            return node.value
    return None


def module_file(module: str, level: int, importer: Path) -> Path | None:
    """The file a ``from <level dots><module> import`` in ``importer`` names, when it lies beside the
    config: relative imports from the importer's folder, absolute ones from any folder above it that
    holds the package (``from mmdet.configs._base_.x import *`` inside a clone of mmdet)."""
    parts = [p for p in module.split(".") if p]
    importer = importer.absolute()  # "../" from a config named relative to the working folder
    if level:
        base = importer.parent
        for _ in range(level - 1):
            base = base.parent
        roots = [base]
    else:
        roots = list(importer.parents)
    for root in roots:
        stem = root.joinpath(*parts) if parts else root
        for candidate in (stem.with_suffix(".py") if parts else None, stem / "__init__.py"):
            if candidate is not None and candidate.is_file():
                return candidate
    return None


def _put_at(table: Table, chain: tuple[str, ...], value: Any, origin: Origin) -> None:
    """``value`` at ``chain`` below ``table``, its tables made where the class sets none."""
    for key in chain[:-1]:
        if not isinstance(table.get(key), Table):
            table.put(key, Table(), None)
        table = table[key]
    table.put(chain[-1], value, origin)
