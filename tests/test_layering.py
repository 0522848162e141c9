"""The house rules, read from the source: imports only run down the layers, and never in a circle.

Every ``import loaderdoc...`` / ``from loaderdoc... import`` in src/loaderdoc counts, at module level
or inside a function (a lazy import is still a dependency); imports under ``if TYPE_CHECKING:``
do not (they name types, they never run).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "loaderdoc"

# lowest first; a module may import its own group and the groups below it, nothing above
LAYERS: list[set[str]] = [
    {"units", "errors", "_compat", "_serde", "_version", "visible"},
    {"output", "safe_write", "textfile", "preflight"},
    {"jsondoc", "usercode"},
    {"settings"},
    {"config", "system"},
    {"policy"},
    {"probing"},
    {"advice"},
    {"summary"},
    {"checking"},
    {"cluster"},
    {"watching"},
    {"tuning"},
    {"reports"},
    {"export"},
    {"session"},
    {"text"},
    {"tui"},
    {"commands"},
    {"cli"},
    {"api"},
    {"__main__", ""},  # "" is the package's own __init__ (the lazy public API)
]
LAYER_OF = {group: i for i, layer in enumerate(LAYERS) for group in layer}
MAX_LINES = 500


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def group(module: str) -> str:
    """The top-level unit a module belongs to: ``loaderdoc.advice.rules.cpu`` -> ``advice``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports(path: Path) -> set[str]:
    """The loaderdoc modules ``path`` imports (submodules resolved: ``from loaderdoc import policy``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            typing_only.update(id(n) for n in ast.walk(node))
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "loaderdoc":
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "loaderdoc")
    return found


GRAPH = {name: imports(path) for name, path in MODULES.items()}


def test_every_module_has_a_layer():
    missing = sorted({group(m) for m in MODULES} - set(LAYER_OF))
    assert not missing, f"add these to LAYERS in {__file__}: {missing}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_no_import_runs_back_up(module):
    mine = LAYER_OF[group(module)]
    upward = sorted(t for t in GRAPH[module] if group(t) != group(module) and LAYER_OF[group(t)] >= mine)
    assert not upward, f"{module} (layer {mine}) imports {upward}"


def test_no_import_cycle():
    # module-level cycles between files (a package importing its own submodules is not one)
    def deps(m: str) -> set[str]:
        return {t for t in GRAPH[m] if t in MODULES and not m.startswith(t + ".") and t != m}

    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for t in sorted(deps(m)):
            if state.get(t) == 1:
                cycle = stack[stack.index(t):] + [t]
                pytest.fail("import cycle: " + " -> ".join(cycle))
            if t not in state:
                visit(t)
        stack.pop()
        state[m] = 2

    for m in sorted(MODULES):
        if m not in state:
            visit(m)


def test_no_module_over_500_lines():
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in MODULES.items()}
    assert not {m: n for m, n in sizes.items() if n > MAX_LINES}, "split these modules"


def test_no_string_imports_of_our_own_modules():
    # importlib.import_module("loaderdoc....") hides a dependency from readers and from this test
    offenders = []
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                    node.value.startswith("loaderdoc.") and node.value.split(":")[0] in MODULES:
                offenders.append(f"{name}: {node.value!r}")
    assert not offenders
