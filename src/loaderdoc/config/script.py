"""What a training script (not a config file) states about its loaders, read with ``ast``, never
run: its argparse defaults (``add_argument("--workers", type=int, default=8)``) become the table
``args`` (``args.workers``, as the script reads them), and each ``DataLoader(...)`` built inside a
function is named with the arguments only its run computes. Both go to the read's ``run_time``
lines: a command line that passes a flag runs with its own value (issue 49: such a script read as
"no DataLoader settings", with nothing said of what was not read)."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

from loaderdoc.config.tree import Origin, Table, Unread

ARGS = "args"  # the name scripts give parse_args()'s result, and the table its defaults are read as
SHOWN = 3  # DataLoader calls named, at most


def read_script(tree: ast.Module, where: str, namespace: Table, value: Callable[[ast.AST, tuple[str, ...]], Any],
                run_time: list[str]) -> None:
    """Add the ``DataLoader(...)`` calls made in functions (their ``args.X`` read as the argparse
    defaults), then the argparse defaults themselves (unless the file binds ``args`` itself), to
    ``namespace``; the lines saying what the run decides to ``run_time``. The calls come first: a
    setting the call and ``args`` both state is read from the call, the line that builds the loader."""
    defaults = Table()
    for call in _calls(tree, "add_argument"):
        dest = _dest(call)
        default = next((k.value for k in call.keywords if k.arg == "default"), None)
        if dest is None or default is None or dest in defaults or \
                isinstance(default, ast.Constant) and default.value is None:  # argparse's own default: unset
            continue
        defaults.put(dest, value(default, (ARGS, dest)), Origin(where, (ARGS, dest), call.lineno))
    calls: list[str] = []  # said after the argparse line
    args = defaults if ARGS not in namespace else namespace.get(ARGS)
    for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        targets = _assigned(function)
        for call in _calls(function, "DataLoader"):
            name = targets.get(id(call)) or f"DataLoader_line{call.lineno}"
            path = (function.name, name)
            table = Table()
            table.call = True
            for keyword in call.keywords:
                if keyword.arg is not None:
                    table.put(keyword.arg, _argument(keyword.value, args),
                              Origin(where, (*path, keyword.arg), keyword.value.lineno))
            holder = namespace.get(function.name)
            if not isinstance(holder, Table):
                holder = Table()
                namespace.put(function.name, holder, Origin(where, (function.name,), function.lineno))
            holder.put(name, table, Origin(where, path, call.lineno))
            computed = [f"{k.arg}={ast.unparse(k.value)[:40]}" for k in call.keywords
                        if k.arg is not None and not isinstance(k.value, ast.Constant)]
            if computed and len(calls) < SHOWN:
                calls.append(f"{where}:{call.lineno}: DataLoader(...) is built in {function.name}() with "
                                f"{', '.join(computed[:4])} computed when it runs (argparse defaults as read; "
                                "anything else left unread); 'loaderdoc watch' measures the settings the run uses")
    if defaults and ARGS not in namespace:
        namespace.put(ARGS, defaults, Origin(where, (ARGS,), min(o.line for o in defaults.origins.values())))
        flags = ", ".join(f"--{k.replace('_', '-')}={v!r}" if _literal(v) else f"--{k.replace('_', '-')}=?"
                          for k, v in list(defaults.items())[:6])
        run_time.append(f"{where}: argparse defaults read as {ARGS}.* ({flags}{', ...' if len(defaults) > 6 else ''}): "
                        "a command line that passes them runs with its own values")
    run_time.extend(calls)


def _assigned(function: ast.AST) -> dict[int, str]:
    """Each call assigned to a plain name in ``function`` (``train_loader = DataLoader(...)``): id -> the name."""
    return {id(node.value): node.targets[0].id for node in ast.walk(function)
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}


def _argument(node: ast.expr, args: Any) -> Any:
    """A DataLoader argument as the file states it: a constant, an argparse default (``args.X``), or
    unread (computed when the script runs)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == ARGS \
            and isinstance(args, Table) and node.attr in args:
        return args[node.attr]
    return Unread(ast.unparse(node)[:60], "computed when the script runs")


def _calls(tree: ast.AST, name: str) -> list[ast.Call]:
    """Calls of ``name`` or ``anything.name``, in the order of the file."""
    found = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and
             ((isinstance(n.func, ast.Attribute) and n.func.attr == name) or
              (isinstance(n.func, ast.Name) and n.func.id == name))]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def _dest(call: ast.Call) -> str | None:
    """Where argparse keeps an option: ``dest=``, else its first long flag (``--batch-size`` ->
    ``batch_size``), else its first flag; None for a positional argument."""
    explicit = next((k.value for k in call.keywords if k.arg == "dest"), None)
    if isinstance(explicit, ast.Constant) and isinstance(explicit.value, str):
        return explicit.value
    flags = [a.value for a in call.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
    if not flags or not flags[0].startswith("-"):
        return None
    chosen = next((f for f in flags if f.startswith("--")), flags[0])
    return chosen.lstrip("-").replace("-", "_") or None


def _literal(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str)) or value is None
