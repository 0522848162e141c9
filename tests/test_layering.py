"""The house rules, read from the source: two boxes, a headless core and the front ends; the core
never imports the front; inside the core the features are siblings, each importing the base and
only the features the table below allows; and no import runs in a circle.

Every ``import loaderdoc...`` / ``from loaderdoc... import`` in src/loaderdoc counts, at module level
or inside a function (a lazy import is still a dependency); imports under ``if TYPE_CHECKING:``
do not (they name types, they never run). A group is a top-level module or package
(``loaderdoc.advice.rules.cpu`` is in ``advice``); "" is the package's own ``__init__``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "loaderdoc"

# ---- the core: headless, never imports the front -------------------------------------------------
# The base, lowest first: a base group may import its own level and the levels below it, no feature.
# The modules of loaderdoc/base/ are each a group of their own ("base.units"), so its levels hold.
BASE: list[set[str]] = [
    {"base", "base.units", "base.errors", "base._compat", "base._serde", "_version", "base.visible", "base.torchload"},
    {"base.output", "base.safe_write", "base.own_files", "base.textfile", "base.preflight"},
    {"base.jsondoc", "base.usercode", "base.batches"},
    {"base.settings"},
    {"system"},
    {"policy", "base.summary"},
]
# The features, siblings: each may import the whole base and the features named here, no other.
# The edges are what the code needs (test_every_allowed_import_is_used keeps the table honest).
FEATURES: dict[str, set[str]] = {
    "config": set(),
    "probing": set(),
    "advice": {"probing"},
    "checking": {"advice", "config"},
    "cluster": {"advice"},
    "watching": {"advice", "config"},
    "tuning": {"probing", "watching"},
    "reports": {"cluster", "probing", "tuning", "watching"},
    "export": {"advice", "config"},
    "session": {"advice", "cluster", "export", "probing", "reports", "watching"},
}
# ---- the front: may import the whole core, and the front groups named here ----------------------
FRONT: dict[str, set[str]] = {
    "text": set(),  # one renderer per report: reports in, lines out
    "tui": {"text"},
    "api": {"text"},  # loaderdoc.watch(loader): the Python front of watch (its summary() is text/watch)
    "commands": {"text", "tui"},  # parse, call the core, print with text/
    "cli": {"commands"},
    "__main__": {"cli"},
    "": {"api"},  # the package's own __init__: the lazy public API
}
LEVEL_OF = {g: i for i, level in enumerate(BASE) for g in level}
CORE = set(LEVEL_OF) | set(FEATURES)
TORCH_AT_LOAD = {"loaderdoc.probing.synthetic", "loaderdoc.probing.consumer"}  # only the measuring code imports them
MAX_LINES = 500
pytestmark = pytest.mark.xdist_group("layering")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def group(module: str) -> str:
    """The top-level unit a module belongs to: ``loaderdoc.advice.rules.cpu`` -> ``advice``; in the base
    package, each module: ``loaderdoc.base.units`` -> ``base.units`` (its package's own __init__: ``base``)."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "base":
        return f"base.{parts[2]}"
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


@functools.cache
def graph() -> dict[str, set[str]]:
    """Every module's loaderdoc imports. Built on first use, not at import: parsing the ~180 modules
    is a second of CPU, and every pytest-xdist worker imports this file to collect the suite; this
    file's tests are one xdist group, so one worker parses them."""
    return {name: imports(path) for name, path in MODULES.items()}


def test_every_group_is_in_one_box():
    groups = {group(m) for m in MODULES}
    placed = [*LEVEL_OF, *FEATURES, *FRONT]
    assert len(placed) == len(set(placed)), "a group is in two places"
    assert sorted(groups - set(placed)) == [], f"place these in BASE, FEATURES or FRONT in {__file__}"
    assert sorted(set(placed) - groups) == [], "these groups are gone: take them out of the tables"


def allowed(source: str, target: str) -> bool:
    """May a module of group ``source`` import one of group ``target``?"""
    if source == target:
        return True
    if source in LEVEL_OF:
        return target in LEVEL_OF and LEVEL_OF[target] <= LEVEL_OF[source]
    if source in FEATURES:
        return target in LEVEL_OF or target in FEATURES[source]
    return target in CORE or target in FRONT[source]


@pytest.mark.parametrize("module", sorted(m for m in MODULES if group(m) in CORE))
def test_the_core_never_imports_the_front(module):
    front = sorted(t for t in graph()[module] if group(t) in FRONT)
    assert not front, f"{module} (core) imports the front: {front}"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_import_is_allowed_by_the_tables(module):
    mine = group(module)
    wrong = sorted(t for t in graph()[module] if not allowed(mine, group(t)))
    assert not wrong, f"{module} ({mine}) imports {wrong}: not in the tables of {__file__}"


def test_every_allowed_import_is_used():
    # the tables say what the code needs: an edge nothing uses is a stale allowance
    used = {(group(m), group(t)) for m, targets in graph().items() for t in targets}
    table = {(s, t) for s, ts in (*FEATURES.items(), *FRONT.items()) for t in ts}
    assert sorted(table - used) == []


def test_the_features_are_a_dag():
    order: list[str] = []
    left = dict(FEATURES)
    while left:
        ready = sorted(f for f, needs in left.items() if needs <= set(order))
        assert ready, f"the features' table has a cycle among {sorted(left)}"
        order += ready
        for f in ready:
            del left[f]


def test_no_textual_outside_the_tui():
    offenders = sorted(m for m, path in MODULES.items() if group(m) != "tui" and "textual" in top_packages(path))
    assert not offenders


def test_no_torch_at_module_load_but_the_measuring_modules():
    offenders = sorted(m for m, path in MODULES.items() if "torch" in top_packages(path, module_level=True))
    assert set(offenders) <= TORCH_AT_LOAD, offenders


def top_packages(path: Path, *, module_level: bool = False) -> set[str]:
    """The top-level packages ``path`` imports (anywhere, or at module load: outside functions)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    nodes = ast.walk(tree)
    if module_level:
        inside: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inside.update(id(n) for n in ast.walk(node) if n is not node)
        nodes = (n for n in ast.walk(tree) if id(n) not in inside)
    found: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_no_import_cycle():
    # module-level cycles between files (a package importing its own submodules is not one)
    def deps(m: str) -> set[str]:
        return {t for t in graph()[m] if t in MODULES and not m.startswith(t + ".") and t != m}

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


# each feature's package owns the feature: a core module named for one lives in its package (the
# front's commands/ and text/ hold one thin module per feature by design)
FEATURE_HOMES = {"watch": "watching", "tun": "tuning", "prob": "probing", "job": "cluster"}  # word stems


def test_each_feature_lives_in_its_package():
    misplaced = sorted(m for m in MODULES if group(m) in CORE
                       for word in m.rsplit(".", 1)[-1].split("_")
                       for stem, home in FEATURE_HOMES.items() if word.startswith(stem) and group(m) != home)
    assert not misplaced, f"move these into their feature's package: {misplaced}"


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
