"""Python configs (mmengine / MMDetection style) read with ``ast``: literal values only, never run.

``train_dataloader = dict(batch_size=2, num_workers=2, sampler=dict(type='DefaultSampler'))`` is
read as a mapping. A name bound earlier to a literal (``batch_size = 16`` then
``batch_size=batch_size``) is followed; anything that would need running the file (a call, an
import, arithmetic) becomes :class:`NotALiteral`, which the reader reports instead of guessing.
"""

from __future__ import annotations

import ast
import copy
from typing import Any

from loaderdoc.errors import SettingsError

EXPORT_FUNCTION = "make_loader"  # the function of loaderdoc's own Python export


class NotALiteral:
    """A value loaderdoc cannot know without running the config (``os.cpu_count()``, an import)."""

    def __init__(self, source: str) -> None:
        self.source = source

    def __repr__(self) -> str:
        return f"<not a literal: {self.source}>"


def read_python(text: str, where: str) -> tuple[dict[str, Any], dict[tuple[str, ...], int]]:
    """The module's top-level names -> values, and key path -> line of every assignment and key."""
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise SettingsError(f"{where}:{exc.lineno}: not valid Python: {exc.msg}") from None
    namespace: dict[str, Any] = {}
    lines: dict[tuple[str, ...], int] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            target, value = node.target.id, node.value
        elif isinstance(node, ast.FunctionDef) and node.name == EXPORT_FUNCTION and _export_kwargs(node):
            target, value = "dataloader", _export_kwargs(node)  # read as loaderdoc's own [dataloader] table
        else:
            continue  # imports, `with read_base():`, function definitions: nothing literal to read
        lines[(target,)] = node.lineno
        namespace[target] = _value(value, (target,), namespace, lines)
    return namespace, lines


def _export_kwargs(function: ast.FunctionDef) -> ast.AST | None:
    """The ``kwargs = dict(...)`` of the ``make_loader`` that ``loaderdoc --export x.py`` writes."""
    for node in function.body:
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id == "kwargs" and isinstance(node.value, ast.Call)):
            return node.value
    return None


def _value(node: ast.AST, path: tuple[str, ...], namespace: dict[str, Any],
           lines: dict[tuple[str, ...], int]) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        operand = _value(node.operand, path, namespace, lines)
        if isinstance(operand, (int, float)) and not isinstance(operand, bool):
            return -operand if isinstance(node.op, ast.USub) else operand
    if isinstance(node, ast.Dict):
        out: dict[str, Any] = {}
        for key_node, value_node in zip(node.keys, node.values, strict=True):
            if not (isinstance(key_node, ast.Constant) and isinstance(key_node.value, str)):
                continue  # `**base` or a computed key: not readable without running
            key = key_node.value
            lines[(*path, key)] = key_node.lineno
            out[key] = _value(value_node, (*path, key), namespace, lines)
        return out
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict" and not node.args:
        out = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                continue  # dict(**base)
            lines[(*path, keyword.arg)] = keyword.lineno
            out[keyword.arg] = _value(keyword.value, (*path, keyword.arg), namespace, lines)
        return out
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_value(item, (*path, str(i)), namespace, lines) for i, item in enumerate(node.elts)]
    if isinstance(node, ast.Name):
        if node.id in namespace:
            return copy.deepcopy(namespace[node.id])
        return {"True": True, "False": False, "None": None}.get(node.id, NotALiteral(node.id))
    return NotALiteral(ast.unparse(node)[:60])
