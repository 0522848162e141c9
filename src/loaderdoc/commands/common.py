"""Argument types and workload options shared by `check`, `probe` and `--export`.

No torch here: these are parsed before anything slow is imported.
"""

from __future__ import annotations

import argparse
import math
import re

from loaderdoc.base.units import DTYPE_BYTES


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    if value > 1_000_000:  # as in config files
        raise argparse.ArgumentTypeError(f"{value} is absurd; use a value below 1,000,000")
    return value


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text}")
    return value


def positive_float(text: str) -> float:
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be > 0")
    return value


def sample_shape(text: str) -> tuple[int, ...]:
    """'3x224x224', '3,224,224', '3 224 224' or '(3, 224, 224)' -> (3, 224, 224).

    Every separator must sit between two numbers: '3x224x' is refused, not read as 3x224."""
    body = text.strip().lower()
    if body[:1] in "([" and body[-1:] in ")]" and body:
        body = body[1:-1].strip()
    parts = re.split(r"\s*[x,]\s*|\s+", body)
    if not body or any(not (p.isascii() and p.isdigit()) for p in parts):
        raise argparse.ArgumentTypeError(f"expected dimensions like 3x224x224, got {text!r}")
    dims = tuple(int(p) for p in parts)
    if any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"dimensions must be positive, got {text!r}")
    if math.prod(dims) > 2**40:
        raise argparse.ArgumentTypeError(f"{text!r} is over a trillion elements per sample; check the shape")
    return dims


def sample_bytes(shape: tuple[int, ...] | None, dtype: str) -> int | None:
    return None if shape is None else math.prod(shape) * DTYPE_BYTES[dtype]


def add_workload_arguments(parser: argparse.ArgumentParser, *, with_probe: bool) -> None:
    """Options that describe the data: batch size and sample size; and for probing, the dataset."""
    g = parser.add_argument_group("workload")
    g.add_argument("--batch-size", type=positive_int, metavar="N", help="samples per batch")
    g.add_argument(
        "--sample-shape", type=sample_shape, metavar="SHAPE",
        help="shape of one sample, e.g. 3x224x224 (sizes shared-memory and RAM checks)",
    )
    g.add_argument("--dtype", choices=sorted(DTYPE_BYTES), default="uint8", help="sample dtype (default uint8)")
    if with_probe:
        g.add_argument("--preset", metavar="NAME", help="probe a synthetic workload preset before exporting")
        g.add_argument("--dataset", metavar="MOD:FACTORY", help="probe your own Dataset: a callable returning it")
        g.add_argument("--step-ms", type=non_negative_float, metavar="MS", help="simulated training step (ms)")
        g.add_argument("--budget", type=positive_float, metavar="SECONDS", help="probe time budget (default 30)")
        g.add_argument("--epoch-steps", type=positive_int, metavar="N",
                       help="training steps per epoch, to weigh worker start-up against (default: dataset length "
                       "/ batch size)")
        g.add_argument("--torch-threads", type=positive_int, metavar="K",
                       help="the training process's intra-op threads (OMP_NUM_THREADS, torch.set_num_threads), which "
                       "the measuring process runs; exported with the settings (default: torch's count here)")


def command_after_dashes(words: list[str] | None, verb: str) -> list[str]:
    """The user's command after ``--`` (``loaderdoc watch -- python train.py``); one line where there is none."""
    from loaderdoc.base.errors import UserError

    command = list(words or [])
    if command[:1] == ["--"]:
        command = command[1:]
    if not command or not command[0]:
        raise UserError(f"{verb}: no command given; run it as: loaderdoc {verb} -- python train.py [ARGS...]")
    return command
