"""Recorded machines (``MachineFacts`` JSON) shipped as package data.

The TUI, the advice rules and the tests render and reason about these without the hardware:

    >>> from loaderdoc.system.fixtures import load_machine, machine_names
    >>> facts = load_machine("k8s-4cpu-quota")
    >>> facts.cpu.budget
    4.0

Record a real machine with ``loaderdoc facts --json > my-box.json`` (or
``python -c "from loaderdoc.system.detect import detect; print(detect().to_json())"``) and
load it by path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from loaderdoc.base.textfile import InputTooLarge, NoWriter, read_bounded
from loaderdoc.system.facts import MachineFacts
from loaderdoc.system.machine_schema import MachineFileError, validate_machine

MACHINES_DIR = Path(__file__).with_name("machines")


def machine_names() -> list[str]:
    """Names of the recorded machines shipped with loaderdoc (without ``.json``)."""
    return sorted(p.stem for p in MACHINES_DIR.glob("*.json"))


def machine_path(name_or_path: str | os.PathLike[str]) -> Path:
    """The JSON file for a shipped machine name (``"ci-2core"``) or an explicit path."""
    text = os.fspath(name_or_path)
    candidate = Path(text)
    if candidate.suffix == ".json" and (candidate.exists() or os.sep in text or "/" in text):
        return candidate
    shipped = MACHINES_DIR / f"{candidate.stem if candidate.suffix == '.json' else text}.json"
    if shipped.exists():
        return shipped
    if candidate.exists():
        return candidate
    raise FileNotFoundError(
        f"no recorded machine {text!r}; shipped machines: {', '.join(machine_names()) or 'none'}"
    )


def load_machine(name_or_path: str | os.PathLike[str]) -> MachineFacts:
    """Load a recorded machine by shipped name or by path to a ``MachineFacts`` JSON file.

    Raises FileNotFoundError for a name that is neither, MachineFileError (a ValueError) for a
    file that cannot be read or is not a recorded machine."""
    path = machine_path(name_or_path)
    if path.is_dir():
        raise MachineFileError(f"{path} is a directory, not a JSON file")
    try:
        data = json.loads(read_bounded(path))
    except (OSError, UnicodeDecodeError) as exc:
        raise MachineFileError(f"cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise MachineFileError(f"line {exc.lineno}: not valid JSON: {exc.msg}") from None
    except (InputTooLarge, NoWriter) as exc:
        raise MachineFileError(str(exc)) from None
    except RecursionError:
        raise MachineFileError("nested too deeply to be machine facts") from None
    validate_machine(data)
    return MachineFacts.from_dict(data)


def load_all() -> dict[str, MachineFacts]:
    """Every shipped machine, by name."""
    return {name: load_machine(name) for name in machine_names()}
