"""Every output format of chosen settings (TOML, a Python DataLoader snippet, JSON).

Writing goes through :mod:`loaderdoc.base.safe_write`: atomic for files, never replacing a device or a
pipe, never overwriting without ``force``.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from loaderdoc._version import __version__
from loaderdoc.advice.findings import Finding
from loaderdoc.base.errors import ExportError
from loaderdoc.base.safe_write import write_text
from loaderdoc.base.settings import PROCESS_TABLE, LoaderSettings, coerce_torch_threads
from loaderdoc.base.summary import machine_line
from loaderdoc.system.facts import MachineFacts

# toml/yaml/json: loaderdoc's own layout (what `check --config` reads back); py: a DataLoader snippet;
# lightning: a LightningCLI `data.init_args` fragment; hydra: a `_target_: torch.utils.data.DataLoader`
# node; hf: Hugging Face TrainingArguments keys
FORMATS = ("toml", "yaml", "json", "py", "lightning", "hydra", "hf")
_SUFFIXES = {".toml": "toml", ".py": "py", ".json": "json", ".yaml": "yaml", ".yml": "yaml"}


def hf_fields() -> dict[str, str]:
    """DataLoader setting -> TrainingArguments field, the reverse of what the config reader maps
    (shuffle, timeout, the context and in_order have none). Read when an hf export is written:
    the CLI imports this module to build its parser, and ``check`` reads no config by default."""
    from loaderdoc.config.layouts import HF_NAMES

    return {"batch_size": "per_device_train_batch_size", **{setting: hf for hf, setting in HF_NAMES.items()}}


def format_for(path: str, fmt: str | None) -> str:
    """The export format: ``fmt`` if given, else from the path's suffix."""
    if not path.strip():
        raise ExportError("--export needs a file name (or '-' for stdout), got an empty one")
    if fmt:
        if fmt not in FORMATS:
            raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")
        return fmt
    if path == "-":
        return "toml"
    suffix = Path(path).suffix.lower()
    if suffix not in _SUFFIXES:
        raise ExportError(
            f"cannot tell the format of {path!r} from its suffix; name it .toml, .yaml, .json or .py, "
            f"or pass --format ({', '.join(FORMATS)})"
        )
    return _SUFFIXES[suffix]


def _threads_meaning(k: int) -> str:
    """What ``[process] torch_threads = k`` means, on one comment line."""
    return (f"the training process's intra-op threads: OMP_NUM_THREADS={k} in the job's environment or "
            f"torch.set_num_threads({k})")


def to_toml(settings: LoaderSettings, header: list[str] | None = None, torch_threads: int | None = None) -> str:
    """A ``[dataloader]`` table (then ``[process]``, with ``torch_threads``), with the header as comments."""
    import tomli_w  # small; only the export path needs it

    # TOML has no null: an unset batch_size (automatic batching off) is written as "none"
    table = {k: ("none" if v is None else v) for k, v in settings.as_kwargs().items()}
    text = _comment_block(header) + tomli_w.dumps({"dataloader": table})
    if torch_threads is None:
        return text
    process = tomli_w.dumps({PROCESS_TABLE: {"torch_threads": torch_threads}})
    return text + f"\n# {_threads_meaning(torch_threads)}\n" + process


def to_python(settings: LoaderSettings, header: list[str] | None = None, torch_threads: int | None = None) -> str:
    """A runnable ``make_loader(dataset, **overrides)`` with the settings (and, with ``torch_threads``,
    the process's intra-op threads set when the snippet runs)."""
    args = "".join(f"        {k}={v!r},\n" for k, v in settings.as_kwargs().items())
    threads = "" if torch_threads is None else (
        "import torch\n"
        "from torch.utils.data import DataLoader\n\n"
        "# the training process's intra-op threads; OMP_NUM_THREADS="
        f"{torch_threads} in the job's environment before it starts\n"
        "# does the same and also sizes OpenMP's pool from the start\n"
        f"torch.set_num_threads({torch_threads})\n\n\n")
    return (
        _comment_block(header)
        + (threads or "from torch.utils.data import DataLoader\n\n\n")
        + "def make_loader(dataset, **overrides):\n"
        + '    """Build the DataLoader with the settings loaderdoc chose for this machine."""\n'
        + "    kwargs = dict(\n"
        + args
        + "    )\n"
        + "    kwargs.update(overrides)\n"
        + "    return DataLoader(dataset, **kwargs)\n"
    )


def _yaml_document(settings: LoaderSettings, fmt: str) -> dict:
    kwargs = settings.as_kwargs()
    if fmt == "yaml":
        return {"dataloader": kwargs}
    if fmt == "lightning":
        return {"data": {"init_args": kwargs}}
    if fmt == "hydra":
        return {"_target_": "torch.utils.data.DataLoader", "_partial_": True, **kwargs}
    return {field: kwargs[key] for key, field in hf_fields().items() if key in kwargs}


def _paste_note(fmt: str, settings: LoaderSettings, torch_threads: int | None = None) -> list[str]:
    threads = [] if torch_threads is None else [
        "not written (this fragment has no place for it): the training process's intra-op threads,",
        f"OMP_NUM_THREADS={torch_threads} (torch.set_num_threads({torch_threads})); set it in the job's environment"]
    return {
        "lightning": ["paste under your LightningCLI config's data: init_args (your DataModule must take these",
                      "arguments and pass them to its DataLoaders)"],
        "hydra": ["a Hydra node: instantiate(cfg)(dataset) builds the DataLoader (_partial_: the dataset comes later)"],
        "hf": ["Hugging Face TrainingArguments fields (YAML for HfArgumentParser.parse_yaml_file, or the same",
               "names as --flags); shuffle and timeout have no TrainingArguments field: the Trainer shuffles"]
        + _hf_unwritten(settings),
    }.get(fmt, []) + threads


def _hf_unwritten(settings: LoaderSettings) -> list[str]:
    """The chosen values TrainingArguments cannot carry (other than shuffle, which the Trainer decides),
    named so that they are not lost without a word: ``in_order=False``, a timeout, a start method."""
    default, fields = LoaderSettings().as_kwargs(), hf_fields()
    lost = [f"{key}={value!r}" for key, value in settings.as_kwargs().items()
            if key not in fields and key != "shuffle" and default.get(key) != value]
    if not lost:
        return []
    which = "it" if len(lost) == 1 else "them"
    return [f"not written, TrainingArguments has no field for {which}: {', '.join(lost)}",
            f"(the Trainer's DataLoader goes without {which}: pass {which} yourself, e.g. in get_train_dataloader)"]


def _yaml(document: dict) -> str:
    import yaml

    return yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


# characters that end a comment line (or are refused in one) in TOML, YAML or Python: a header line
# quotes finding texts and file names, so each becomes a space and the comment stays one line
_LINE_BREAKERS = re.compile("[\x00-\x1f\x7f\x85\u2028\u2029]")
_FIX_WIDTH = 98  # a finding's fix in the header: the comment's "# " makes 100 columns


def _comment_block(lines: list[str] | None) -> str:
    if not lines:
        return ""
    return "".join(f"# {_LINE_BREAKERS.sub(' ', line)}".rstrip() + "\n" for line in lines) + "\n"


def render(settings: LoaderSettings, fmt: str, header: Iterable[str] = (), torch_threads: int | None = None) -> str:
    """``settings`` in ``fmt``; ``torch_threads``: the training process's intra-op threads too (a
    ``[process]`` table in loaderdoc's own layout, a call in the snippet, a named line elsewhere)."""
    header = list(header)
    if torch_threads is not None:
        torch_threads = coerce_torch_threads(torch_threads)
    process = {PROCESS_TABLE: {"torch_threads": torch_threads}} if torch_threads is not None else {}
    if fmt == "toml":
        return to_toml(settings, header, torch_threads)
    if fmt == "py":
        return to_python(settings, header, torch_threads)
    if fmt == "json":
        notes = header + ([f"process.torch_threads: {_threads_meaning(torch_threads)}"] if process else [])
        doc = {"generated_by": f"loaderdoc {__version__}", "notes": notes, "dataloader": settings.as_kwargs(),
               **process}
        return json.dumps(doc, indent=2) + "\n"
    if fmt in ("yaml", "lightning", "hydra", "hf"):
        note = _paste_note(fmt, settings, torch_threads if fmt != "yaml" else None)
        text = _comment_block(header + note) + _yaml(_yaml_document(settings, fmt))
        if fmt == "yaml" and process:
            text += f"# {_threads_meaning(torch_threads)}\n" + _yaml(process)
        return text
    raise ExportError(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")


def write_export(
    path: str | os.PathLike,
    settings: LoaderSettings,
    *,
    fmt: str | None = None,
    force: bool = False,
    header: Iterable[str] = (),
    torch_threads: int | None = None,
) -> Path | None:
    """Write ``settings`` (and ``torch_threads``, the process's intra-op threads) to ``path`` ('-' =
    stdout). Returns the path written (None for stdout)."""
    path_str = os.fspath(path)
    fmt = format_for(path_str, fmt)
    text = render(settings, fmt, header, torch_threads)
    if path_str == "-":
        sys.stdout.write(text)
        sys.stdout.flush()
        return None
    target = Path(path_str).expanduser()
    write_text(target, text, force=force)
    return target


def export_header(facts: MachineFacts, recommendation=None, findings=()) -> list[str]:
    """Comment lines for an export: the machine it was made for, and why each value was chosen."""
    when = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    lines = [f"DataLoader settings by loaderdoc {__version__}, {when}", f"for {machine_line(facts)}"]
    if recommendation is not None:
        lines.append(f"source: {'measured by a probe' if recommendation.source == 'probe' else 'machine facts (no probe)'}")
        lines.append("why:")
        lines += [f"  {key}: {reason}" for key, reason in recommendation.reasons.items()]
    return lines + findings_header(findings)


def findings_header(findings: Iterable[Finding], *, with_fix: bool = True) -> list[str]:
    """An export header's findings: one line each, then (``with_fix``) its fix, wrapped."""
    findings = list(findings)
    lines = ["findings on this machine:"] if findings else []
    for f in findings:
        lines.append(f"  [{f.severity}] {f.rule_id}: {f.symptom}")
        if with_fix and f.fix:
            # the file is all a reader of it gets: a fix outside the DataLoader (an environment
            # variable, a docker flag) is otherwise lost between the report and the job
            # long words stay whole: a command or a path cut in two would be pasted wrong
            lines += textwrap.wrap(f.fix, width=_FIX_WIDTH, initial_indent="    fix: ",
                                   subsequent_indent="         ", break_on_hyphens=False,
                                   break_long_words=False)
    return lines

