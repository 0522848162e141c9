"""A config as a tree of mappings and lists whose every key remembers the file and line that set it.

Every reader (YAML, JSON, TOML, a ``.py`` read with ``ast``) builds :class:`Table` and :class:`Seq`;
inheritance (:mod:`.inherit`) merges trees the way the frameworks do, and the origins travel with
the values, so a setting in a merged config still says which of five files set it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# A DataLoader config holds dozens of values; a few thousand covers any real project's file. YAML
# aliases, or Python names copied into one another, can make a 1 KB file expand to billions
# ("billion laughs"): the readers count before building.
MAX_CONFIG_VALUES = 100_000


@dataclass(frozen=True)
class Origin:
    """Where a key was set: its file, and the key's path inside that file (its line where the
    parser knows it; TOML and JSON lines are found by scanning the text when asked)."""

    file: str
    local_path: tuple[str, ...]
    line: int | None = None


class Table(dict):
    """A mapping whose keys each carry their :class:`Origin` (``origins[key]``). ``template``: a
    YAML mapping other mappings take whole or merge (``&base`` then ``<<: *base``): its keys are
    read where it is used, not as settings of every loader. ``call``: the arguments of a
    ``DataLoader(...)`` call a script makes: what it leaves out is torch's default."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.origins: dict[str, Origin] = {}
        self.template = False
        self.call = False

    def __deepcopy__(self, memo: dict) -> Table:
        import copy

        out = Table()
        memo[id(self)] = out
        for key, value in self.items():
            out[key] = copy.deepcopy(value, memo)
        out.origins = dict(self.origins)
        out.template, out.call = self.template, self.call
        return out

    def put(self, key: str, value: Any, origin: Origin | None) -> None:
        self[key] = value
        if origin is not None:
            self.origins[key] = origin
        else:
            self.origins.pop(key, None)


class Seq(list):
    """A list whose items carry their :class:`Origin` (``origins[index]``)."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.origins: dict[int, Origin] = {}

    def __deepcopy__(self, memo: dict) -> Seq:
        import copy

        out = Seq()
        memo[id(self)] = out
        out.extend(copy.deepcopy(item, memo) for item in self)
        out.origins = dict(self.origins)
        return out


class Unread:
    """A value loaderdoc cannot know without running something: a call in a ``.py`` config, an
    environment variable, a custom YAML tag's meaning, a reference that leads nowhere."""

    def __init__(self, source: str, why: str = "computed when the config runs") -> None:
        self.source = source
        self.why = why

    def __repr__(self) -> str:
        return f"<unread: {self.source}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Unread) and (self.source, self.why) == (other.source, other.why)

    def __hash__(self) -> int:
        return hash((self.source, self.why))


def plain(value: Any) -> Any:
    """The tree as plain dicts and lists (for JSON and for code that only reads values)."""
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    if isinstance(value, list):
        return [plain(item) for item in value]
    if isinstance(value, Unread):
        return f"<{value.source}>"
    return value


def tables(value: Any) -> Table:
    """Plain dicts and lists turned into :class:`Table` / :class:`Seq` (origins empty)."""
    if isinstance(value, dict) and not isinstance(value, Table):
        out = Table()
        for key, item in value.items():
            out[key] = tables(item)
        return out
    if isinstance(value, list) and not isinstance(value, Seq):
        return Seq(tables(item) for item in value)
    return value


def merge_into(base: Table, child: Table) -> Table:
    """``child`` over ``base``, as mmengine and detectron2 merge a config over its bases: mappings
    merge key by key, anything else replaces; ``_delete_=True`` in a child mapping replaces the
    base's mapping instead of merging into it. ``base`` is changed and returned."""
    for key, value in child.items():
        origin = child.origins.get(key)
        old = base.get(key)
        if isinstance(value, dict) and isinstance(old, dict) and not value.get("_delete_"):
            merge_into(old, value)
            if origin is not None and key not in base.origins:
                base.origins[key] = origin
            continue
        if isinstance(value, dict) and value.get("_delete_"):
            value = without(value if isinstance(value, Table) else tables(value), "_delete_")
        base.put(key, value, origin)
    return base


def without(table: Table, key: str) -> Table:
    """The table less one key (``_delete_``, or an inheritance key once followed), origins kept."""
    out = Table()
    for name, value in table.items():
        if name != key:
            out.put(name, value, table.origins.get(name))
    return out


def get_path(tree: Any, path: tuple[str, ...]) -> Any:
    """The value at ``path`` (list items by their index as a string); KeyError when absent."""
    node = tree
    for key in path:
        if isinstance(node, dict):
            node = node[key]
        elif isinstance(node, list) and key.lstrip("-").isdigit() and -len(node) <= int(key) < len(node):
            node = node[int(key)]
        else:
            raise KeyError(key)
    return node


def origin_of(tree: Any, path: tuple[str, ...]) -> Origin | None:
    """The origin of the deepest key of ``path`` that has one."""
    node, found = tree, None
    for key in path:
        if isinstance(node, Table) and key in node:
            found = node.origins.get(key, found)
            node = node[key]
        elif isinstance(node, Seq) and key.isdigit() and int(key) < len(node):
            found = node.origins.get(int(key), found)
            node = node[int(key)]
        else:
            break
    return found
