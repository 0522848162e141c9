"""The installed torch build, read *without importing torch* (importing it takes seconds).

* where: ``importlib.util.find_spec("torch")`` locates the package without executing it;
* version and CUDA build: ``torch/version.py`` is parsed with :mod:`ast` (``__version__ =
  '2.8.0+cu128'``, ``cuda: Optional[str] = '12.8'`` or ``None`` for a CPU build) — it is the file
  ``torch.__version__`` and ``torch.version.cuda`` come from; when it has no version the
  distribution's ``METADATA`` is used;
* cuDNN: the version of an installed ``nvidia-cudnn-cu*`` wheel (how pip CUDA builds ship it),
  else the major version of a ``libcudnn.so.N`` bundled in ``torch/lib``; ``None`` for a CPU build.

Dist-info directories are found by listing the import path, which is much cheaper than
``importlib.metadata`` (whose import alone costs ~40 ms).
"""

from __future__ import annotations

import ast
import importlib.machinery
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any

from loaderdoc.system.facts import Reading, TorchFacts

_DIST_INFO = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)\.dist-info$")
CUDNN_DISTS = ("nvidia_cudnn_cu13", "nvidia_cudnn_cu12", "nvidia_cudnn_cu11")


def parse_version_py(text: str) -> dict[str, Any]:
    """Top-level constant assignments of torch/version.py (``cuda``, ``__version__``, ...)."""
    out: dict[str, Any] = {}
    tree = ast.parse(text)
    for node in tree.body:
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(node, ast.Assign):
            targets, value = list(node.targets), node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        if value is None:
            continue
        try:
            constant = ast.literal_eval(value)
        except (ValueError, SyntaxError, TypeError):
            continue
        for target in targets:
            if isinstance(target, ast.Name):
                out[target.id] = constant
    return out


def _find_dists(prefix: str, paths: Sequence[str]) -> list[tuple[str, str, str]]:
    """(normalized name, version, directory) of ``*.dist-info`` dirs whose name starts with prefix."""
    found: list[tuple[str, str, str]] = []
    prefix_l = prefix.lower()
    for entry in paths:
        if not entry or not os.path.isdir(entry):
            continue
        try:
            names = os.listdir(entry)
        except OSError:
            continue
        for name in names:
            if not name.endswith(".dist-info") or not name.lower().startswith(prefix_l):
                continue
            m = _DIST_INFO.match(name)
            if m:
                norm = re.sub(r"[-_.]+", "_", m.group("name")).lower()
                found.append((norm, m.group("version"), os.path.join(entry, name)))
    return found


def _metadata_version(dist_dir: str) -> str | None:
    try:
        with open(os.path.join(dist_dir, "METADATA"), encoding="utf-8", errors="replace") as fh:
            for _ in range(40):
                line = fh.readline()
                if not line:
                    break
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip() or None
    except OSError:
        return None
    return None


def read_torch(
    paths: Sequence[str] | None = None,
    find_spec: Callable[[str], Any] | None = None,
) -> TorchFacts:
    """What ``import torch`` would give, without importing it.

    ``paths`` replaces ``sys.path`` (tests point it at a fake site-packages); ``find_spec``
    replaces ``importlib.util.find_spec``.
    """
    facts = TorchFacts()
    search = list(sys.path if paths is None else paths)
    spec_source = "importlib.util.find_spec('torch')"
    try:
        if find_spec is not None:
            spec = find_spec("torch")
        elif paths is not None:
            spec = importlib.machinery.PathFinder.find_spec("torch", search)
        else:
            spec = importlib.util.find_spec("torch")
    except (ImportError, ValueError, AttributeError) as exc:
        facts.installed = Reading.missing(f"find_spec('torch') failed: {exc}", spec_source)
        _unknown_rest(facts, "torch could not be located")
        return facts
    if spec is None:
        facts.installed = Reading.of(False, spec_source)
        for name in ("version", "cuda_build", "cudnn"):
            setattr(facts, name, Reading.of(None, f"{spec_source}: torch is not installed"))
        return facts
    facts.installed = Reading.of(True, f"{spec_source}: {spec.origin or 'namespace package'}")

    locations = list(spec.submodule_search_locations or [])
    pkg_dir = locations[0] if locations else (os.path.dirname(spec.origin) if spec.origin else None)
    version_file = os.path.join(pkg_dir, "version.py") if pkg_dir else None
    fields: dict[str, Any] = {}
    version_error = None
    if version_file:
        try:
            with open(version_file, encoding="utf-8") as fh:
                fields = parse_version_py(fh.read())
        except (OSError, SyntaxError, ValueError) as exc:
            version_error = f"{version_file}: {type(exc).__name__}: {exc}"
    else:
        version_error = "torch has no package directory"

    # version: torch/version.py, else the distribution metadata next to the package
    if isinstance(fields.get("__version__"), str):
        facts.version = Reading.of(fields["__version__"], f"{version_file}: __version__")
    else:
        site = [os.path.dirname(pkg_dir)] if pkg_dir else []
        dists = [d for d in _find_dists("torch-", site + search) if d[0] == "torch"]
        if dists:
            version = _metadata_version(dists[0][2]) or dists[0][1]
            facts.version = Reading.of(version, f"{dists[0][2]}/METADATA: Version")
        else:
            facts.version = Reading.missing(
                version_error or "no __version__ in torch/version.py", version_file or ""
            )

    # CUDA build
    if "cuda" in fields:
        cuda = fields["cuda"]
        facts.cuda_build = Reading.of(cuda if cuda is None else str(cuda), f"{version_file}: cuda")
    else:
        facts.cuda_build = Reading.missing(
            version_error or "torch/version.py has no 'cuda'", version_file or ""
        )

    # cuDNN
    if facts.cuda_build.known and facts.cuda_build.value is None:
        facts.cudnn = Reading.of(None, f"{version_file}: cuda = None (CPU build ships no cuDNN)")
    else:
        facts.cudnn = _cudnn(pkg_dir, search, facts.cuda_build.get())
    return facts


def _cudnn(pkg_dir: str | None, search: list[str], cuda: str | None) -> Reading:
    site = [os.path.dirname(pkg_dir)] if pkg_dir else []
    dists = [d for d in _find_dists("nvidia_cudnn_cu", site + search) if d[0] in CUDNN_DISTS]
    if dists:
        want = f"nvidia_cudnn_cu{cuda.split('.')[0]}" if cuda else None
        dists.sort(key=lambda d: (d[0] != want, CUDNN_DISTS.index(d[0])))
        name, version, path = dists[0]
        return Reading.of(version, f"{name.replace('_', '-')} distribution ({os.path.basename(path)})")
    if pkg_dir:
        lib = os.path.join(pkg_dir, "lib")
        try:
            libs = sorted(n for n in os.listdir(lib) if re.match(r"^libcudnn\.so\.\d+", n))
        except OSError:
            libs = []
        if libs:
            major = libs[0].split(".so.", 1)[1].split(".")[0]
            return Reading.of(major, f"{lib}/{libs[0]} (major version only)")
    return Reading.missing(
        "no nvidia-cudnn-cu* wheel and no libcudnn in torch/lib; cuDNN (if any) is only known "
        "to torch at run time",
        "nvidia-cudnn-cu* distributions",
    )


def _unknown_rest(facts: TorchFacts, reason: str) -> None:
    for name in ("version", "cuda_build", "cudnn"):
        setattr(facts, name, Reading.missing(reason))
