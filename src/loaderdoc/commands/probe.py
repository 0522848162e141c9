"""`loaderdoc probe [PRESET | --dataset MOD:FACTORY]`: measure, show the table, recommend.

Importing this module does not import torch (``loaderdoc --help`` stays fast); the probe
imports it when it runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from loaderdoc.base.errors import EXIT_INTERRUPTED, EXIT_OK, EXIT_PROBE_FAILED, UserError
from loaderdoc.base.torchload import import_torch
from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.probing.workloads import PRESETS


class NothingMeasured(UserError):
    """The probe ran but not one configuration could be measured."""

    exit_code = EXIT_PROBE_FAILED


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from loaderdoc.commands.common import add_workload_arguments
    from loaderdoc.export import FORMATS as EXPORT_FORMATS

    presets = ", ".join(PRESETS)
    parser.add_argument(
        "preset_positional", nargs="?", metavar="PRESET",
        help=f"synthetic workload to probe: {presets} (or use --dataset)",
    )
    add_workload_arguments(parser, with_probe=True)
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON document (every configuration + recommended)")
    out.add_argument("--export", metavar="PATH", help="also write the recommended settings to PATH ('-' = stdout)")
    out.add_argument("--format", choices=EXPORT_FORMATS,
                      help="export format (default: from PATH's suffix): toml, yaml, json, py (a DataLoader snippet), "
                      "lightning (data.init_args), hydra (a _target_ node), hf (TrainingArguments keys)")
    out.add_argument("--force", action="store_true", help="overwrite an existing export file")
    out.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    parser.epilog = (parser.epilog or "") + (
        "\npresets:\n" + "".join(f"  {name:12s} {spec.description}\n" for name, spec in PRESETS.items())
        + "\n--dataset MOD:FACTORY imports MOD from the current directory or PYTHONPATH and calls FACTORY()\n"
        "with no arguments; it returns a Dataset or (dataset, collate_fn).\n"
    )


def _preset_name(args: argparse.Namespace) -> str | None:
    positional = getattr(args, "preset_positional", None)
    option = getattr(args, "preset", None)
    if positional and option and positional != option:
        raise UserError(f"two presets given ({positional!r} and --preset {option!r}); name one")
    return positional or option


TORCH_INSTALL = ("pip install torch (CPU-only: pip install torch --index-url "
                 "https://download.pytorch.org/whl/cpu)")


def require_torch() -> None:
    """The probe measures real DataLoaders: without an importable torch, say what to install."""
    try:
        import_torch()
    except Exception as exc:  # ImportError, or OSError from a broken shared library
        text = str(exc).strip()
        why = f"{type(exc).__name__}: {text.splitlines()[0]}" if text else type(exc).__name__
        raise UserError(f"the probe runs real DataLoaders and needs PyTorch, which does not import here ({why}); "
                        f"install it in this environment: {TORCH_INSTALL}") from None


def probe_from_args(args: argparse.Namespace, *, progress: bool, facts: Any = None) -> ProbeReport:
    """Run the probe the command line describes. Ctrl+C raises ProbeInterrupted (a KeyboardInterrupt).

    ``facts`` (MachineFacts) are the machine the probe sizes its search for; None detects them."""
    from loaderdoc.probing.workloads import find_dataset_module, get_preset, load_user_dataset

    preset = _preset_name(args)
    dataset_spec = getattr(args, "dataset", None)
    if preset and dataset_spec:
        raise UserError(f"give a preset ({preset!r}) or --dataset, not both")
    if not preset and not dataset_spec:
        raise UserError(f"name a preset to probe ({', '.join(PRESETS)}) or your own data with --dataset MOD:FACTORY")
    if preset:
        get_preset(preset)  # an unknown name is the first thing to hear about
    else:
        find_dataset_module(dataset_spec)  # so is a malformed or missing MOD:FACTORY: before the seconds torch takes
    kwargs: dict[str, Any] = dict(
        batch_size=getattr(args, "batch_size", None),
        step_ms=getattr(args, "step_ms", None),
        budget_s=getattr(args, "budget", None) or 30.0,
        epoch_steps=getattr(args, "epoch_steps", None),
    )
    from loaderdoc.probing.probe import DEFAULT_STEP_MS, check_budget

    step = kwargs["step_ms"] if kwargs["step_ms"] is not None else (
        get_preset(preset).step_ms if preset else DEFAULT_STEP_MS)
    check_budget(kwargs["budget_s"], step)  # and a budget too short for the step: before loading anything
    require_torch()
    from loaderdoc.probing.probe import probe

    kwargs["torch_threads"], kwargs["torch_threads_source"] = job_threads(getattr(args, "torch_threads", None), facts)
    if facts is not None:
        kwargs["facts"] = facts
    if preset:
        get_preset(preset)  # unknown names fail here, before anything slow
        overrides: dict[str, Any] = {}
        if getattr(args, "sample_shape", None):
            overrides["sample_shape"] = args.sample_shape
            overrides["dtype"] = getattr(args, "dtype", None)
        elif getattr(args, "dtype", "uint8") not in (None, "uint8"):
            overrides["dtype"] = args.dtype
        kwargs.update(preset=preset, overrides=overrides or None)  # step_ms None: the preset's typical step
        return _probe(probe, kwargs, progress)
    from loaderdoc.base.usercode import running_user_code

    # the factory, the Dataset and its workers print, exit, start threads: none of it is our output
    with running_user_code():
        dataset, collate_fn = load_user_dataset(dataset_spec)
        kwargs.update(dataset=dataset, collate_fn=collate_fn, name=dataset_spec, factory=dataset_spec)
        if kwargs["step_ms"] is None:
            kwargs["step_ms"] = DEFAULT_STEP_MS
        return _probe(probe, kwargs, progress)


def job_threads(given: int | None, facts: Any) -> tuple[int, str]:
    """The training job's intra-op threads (``--torch-threads``, else torch's count in this
    environment) and where the count comes from. This process then keeps torch at one thread: it
    only builds the dataset, and a pool started here could not be used by the measuring processes
    forked from it (probing/isolate.py)."""
    torch = import_torch()
    if given:
        threads, source = given, f"--torch-threads {given}"
    else:
        threads = torch.get_num_threads()
        reading = facts.torch.intra_op_threads if facts is not None else None
        source = reading.source if reading is not None and reading.get() == threads else "torch's count here"
    torch.set_num_threads(1)
    return threads, source


def _probe(probe, kwargs: dict[str, Any], progress: bool) -> ProbeReport:
    if not progress:
        return probe(**kwargs)
    with _Progress(kwargs["budget_s"]) as bar:
        return probe(**kwargs, on_progress=bar.update, on_result=bar.result)


class _Progress:
    """A rich progress bar on stderr, plus one line per configuration as it finishes."""

    def __init__(self, budget_s: float) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        from loaderdoc.base.output import raw_stderr

        # the bar moves the cursor: it writes past the escaping of control characters, so the data
        # it shows (a dataset's error) is made visible here, and never read as rich markup
        self.console = Console(file=raw_stderr())
        self.progress = Progress(
            TextColumn("probe"), BarColumn(), TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(),
            TextColumn("{task.description}", markup=False), console=self.console, transient=True,
        )
        self.task = self.progress.add_task("starting", total=1.0)

    def __enter__(self) -> _Progress:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def update(self, fraction: float, message: str) -> None:
        from loaderdoc.base.visible import visible

        self.progress.update(self.task, completed=fraction, description=visible(message))

    def result(self, r: ConfigResult) -> None:
        from loaderdoc.base.visible import visible
        from loaderdoc.text.probe import config_label

        self.progress.console.print(visible(f"  {config_label(r)}: {_outcome_text(r)}"), highlight=False,
                                    markup=False)


def _outcome_text(r: ConfigResult) -> str:
    if not r.ok:
        return f"{r.status}: {r.error}"
    if r.batches_per_s is None and r.epoch_restart_s is not None:  # a run that only timed the restart
        kept = (f", {r.epoch_restart_persistent_s:.2f} s with persistent workers"
                if r.epoch_restart_persistent_s is not None else "")
        return f"epoch restart {r.epoch_restart_s:.2f} s{kept}"
    return f"{r.batches_per_s or 0:.1f} steps/s, step starved {r.starvation_pct or 0:.0f}% of the time"


def probe_findings(report: ProbeReport, facts: Any) -> list[Any]:
    """The diagnoses `check` runs, fed with what the probe measured, judged for the recommendation."""
    from loaderdoc.advice.rules import evaluate

    return evaluate(facts, report.recommended, probe=report)


def _print(report: ProbeReport, as_json: bool, findings: list[Any]) -> None:
    if as_json:
        import json

        from loaderdoc.base._serde import to_dict

        doc = report.to_dict()
        doc["findings"] = [to_dict(f) for f in findings]
        print(json.dumps(doc, indent=2))
    else:
        from loaderdoc.text.layout import output_width
        from loaderdoc.text.probe import render_text

        sys.stdout.write(render_text(report, findings, output_width()))


def run(args: argparse.Namespace) -> int:
    progress = not args.no_progress and sys.stderr.isatty()
    if args.json and args.export == "-":
        raise UserError("--json and --export - both write to stdout; export to a file instead")
    if args.export is not None and args.export != "-":
        from pathlib import Path

        from loaderdoc.base.safe_write import check_writable
        from loaderdoc.export import format_for

        format_for(args.export, args.format)  # a bad path or format fails now, not after 30 s
        check_writable(Path(args.export).expanduser(), force=args.force)
    from loaderdoc.base.preflight import check_workplace
    from loaderdoc.probing.probe import ProbeInterrupted
    from loaderdoc.system.detect import detect

    check_workplace("probe")
    facts = detect()
    try:
        report = probe_from_args(args, progress=progress, facts=facts)
    except ProbeInterrupted as interrupted:
        _print(interrupted.report, args.json, probe_findings(interrupted.report, facts))
        print("loaderdoc: interrupted; the table shows what was measured, no worker is left running",
              file=sys.stderr)
        return EXIT_INTERRUPTED
    findings = probe_findings(report, facts)
    _print(report, args.json, findings)
    if report.recommended is None:
        print("loaderdoc: error: no DataLoader configuration could be measured (see the failures above)",
              file=sys.stderr)
        return EXIT_PROBE_FAILED
    if args.export is not None:
        from loaderdoc.export import findings_header, write_export

        header = [f"DataLoader settings measured by `loaderdoc probe` on {report.workload.name}",
                  f"batch_size={report.workload.batch_size}, step {report.workload.step_ms:g} ms, "
                  f"{len(report.results)} configurations in {report.elapsed_s:.0f} s"]
        header += [f"  {reason}" for reason in report.reasons]
        header += findings_header(findings, with_fix=False)
        # threads given to the probe are the job's choice, measured as such: the export keeps them
        threads = report.workload.torch_threads if getattr(args, "torch_threads", None) else None
        written = write_export(args.export, report.recommended, fmt=args.format, force=args.force, header=header,
                               torch_threads=threads)
        if written is not None:
            print(f"wrote {written}", file=sys.stderr)
    return EXIT_OK
