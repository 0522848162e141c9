"""What was read from a config, and from where: one JSON-ready description, and its text.

``describe(config)`` is the ``config`` part of ``check --json`` and all of ``check --config F
--show-read --json`` (schema ``loaderdoc.config/1``): per loader, every DataLoader setting with the
file, line and key that set it (``set_by``), or ``null`` and the default the DataLoader will use
instead (torch's, or the framework's, named). No machine facts, no torch, no textual.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.config.files import ConfigFile
from loaderdoc.config.layouts import LAYOUTS_UNDERSTOOD
from loaderdoc.config.meaning import MACHINE_COUNTS, SCOPE_WORDS, SETTING_ORDER, FoundLoader

CONFIG_SCHEMA = "loaderdoc.config/1"
TORCH_DEFAULTS = LoaderSettings()


def describe(config: ConfigFile) -> dict[str, Any]:
    return {
        "path": str(config.path),
        "layout": config.layout,
        "files": list(config.files),
        "read": config.read,
        "partial_reasons": config.partial_reasons,
        "notes": list(config.notes),
        "no_settings": config.no_settings_line() if not config.loaders else None,
        "loaders": [describe_loader(config, loader) for loader in config.loaders],
    }


def describe_loader(config: ConfigFile, loader: FoundLoader) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for setting in SETTING_ORDER:
        set_by = config.set_by(loader, setting)
        entry: dict[str, Any] = {"set_by": set_by}
        if setting in loader.unreadable:
            entry.update(value=None, unreadable=loader.unreadable[setting], why=loader.unreadable_why.get(setting))
        elif set_by is not None:
            entry["value"] = loader.values[setting]
        elif setting in loader.defaults:
            value, source = loader.defaults[setting]
            entry.update(value=value, default="framework", default_source=source)
        elif setting in config.code_decides.get(loader.name, ()):  # a training code loaderdoc does not know
            # no value: the run's is the code's; torch's is named for reference only
            entry.update(value=None, default="code", torch_default=getattr(TORCH_DEFAULTS, setting))
        else:
            entry.update(value=getattr(TORCH_DEFAULTS, setting), default="torch")
        if setting in loader.run:  # what the framework makes of it: the run's value and the rule
            run = loader.run[setting]
            entry["run"] = {"value": run.value, "rule": run.rule, "machine": run.machine, "cap": run.cap}
        settings[setting] = entry
    return {
        "name": loader.name,
        "layout": loader.layout,
        "batch_scope": loader.batch_scope if "batch_size" in loader.keys else None,
        "also": list(loader.also),
        "settings": settings,
    }


# ---- text ---------------------------------------------------------------------------------------
def short_file(file: str, config_path: str) -> str:
    """A file named relative to the config's folder (``../_base_/datasets/coco.py``)."""
    try:
        import os

        return os.path.relpath(file, Path(config_path).parent)
    except ValueError:
        return file


def where_text(entry: dict[str, Any], config_path: str, *, with_file: bool) -> str:
    """``batch_size:4`` for the config itself, ``dataloader.train.num_workers (../common/coco.py:12)``
    for a file it inherits."""
    set_by = entry["set_by"]
    line = f":{set_by['line']}" if set_by["line"] else ""
    same = Path(set_by["file"]) == Path(config_path)
    text = f"{set_by['key']}{line}" if same and not with_file else \
        f"{set_by['key']} ({short_file(set_by['file'], config_path)}{line})"
    if set_by.get("via"):
        source = set_by.get("value_from")
        text += f" via {set_by['via']}" + (f" ({short_file(source['file'], config_path)}:{source['line']})"
                                           if source and source.get("line") else "")
    return text


def value_text(setting: str, entry: dict[str, Any], batch_scope: str | None, here: Any = None) -> str:
    """``4``, ``64 (in total over all GPUs) -> 8``, ``-1 -> os.cpu_count() = 2 here`` (``here``: the
    value on this machine, where the machine decides it)."""
    if "unreadable" in entry:
        return f"<{entry['unreadable']}>"
    run = entry.get("run")
    text = repr(entry["value"]) if entry["set_by"] is not None or not run else ""
    if text and setting == "batch_size" and batch_scope in ("per_gpu", "total"):
        text += f" ({SCOPE_WORDS[batch_scope]})"
    if run:  # the framework's: after the file's value, or alone where the file sets none
        text += (" -> " if text else "") + run_text(run) + (
            f" = {here!r} here" if run["machine"] and here is not None else "")
    return text


def run_text(run: dict[str, Any]) -> str:
    """What the run gets by the framework's rule: a value, or the machine's count."""
    if run["machine"]:
        counted = MACHINE_COUNTS.get(run["machine"], run["machine"])
        return counted if run["cap"] is None else f"min({run['cap']}, {counted})"
    return repr(run["value"])


def run_rules(settings: dict[str, dict[str, Any]]) -> str:
    """``batch_size: SlowFast divides TRAIN.BATCH_SIZE by NUM_GPUS ...; ...`` for the settings a
    framework makes something else of."""
    return "; ".join(f"{k}: {v['run']['rule']}" for k, v in settings.items() if v.get("run"))


def default_text(setting: str, entry: dict[str, Any]) -> str:
    """What the DataLoader uses for a setting the file leaves out: ``torch default 0``, or, where a
    training code loaderdoc does not know decides, that (with torch's default for reference)."""
    value = entry["torch_default"] if entry.get("default") == "code" else entry["value"]
    torch = "torch default: 2 per worker" if setting == "prefetch_factor" and value is None else \
        f"torch default {value!r}"
    return f"the training code decides; {torch}" if entry.get("default") == "code" else torch


def not_set_text(settings: dict[str, dict[str, Any]]) -> tuple[str, str]:
    """("num_workers (torch default 0), ...", "pin_memory=True (why), ...") for the settings not set."""
    torch_defaults, framework, code = [], [], []
    no_workers = settings["num_workers"].get("value") == 0 and not settings["num_workers"].get("run")
    for setting, entry in settings.items():
        if entry["set_by"] is not None or "unreadable" in entry or entry.get("run"):
            continue
        if entry.get("default") == "code":
            code.append(setting)
        elif no_workers and setting in ("prefetch_factor", "persistent_workers"):
            continue  # worker settings: nothing without workers
        elif entry.get("default") == "framework":
            framework.append(f"{setting}={entry['value']!r} ({entry['default_source']})")
        elif setting in ("batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor",
                         "shuffle"):
            torch_defaults.append(f"{setting} ({default_text(setting, entry)})")
    if code:  # one line: the training code decides these (said with why in the partial reasons)
        torch_defaults.insert(0, f"{', '.join(code)} (the training code decides)")
    return ", ".join(torch_defaults), ", ".join(framework)


__all__ = ["CONFIG_SCHEMA", "LAYOUTS_UNDERSTOOD", "describe", "not_set_text", "run_rules", "run_text", "value_text",
           "where_text"]
