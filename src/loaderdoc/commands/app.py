"""``loaderdoc`` with no command: the interactive app. Textual is imported here, not at load."""

from __future__ import annotations

import argparse

from loaderdoc.commands.common import sample_bytes
from loaderdoc.errors import EXIT_OK


def workload_from_args(args: argparse.Namespace):
    """The app's starting workload from the command line's workload options."""
    from loaderdoc.tui.model import Workload

    batch = getattr(args, "batch_size", None) or 32
    w = Workload(
        preset=getattr(args, "preset", None),
        dataset=getattr(args, "dataset", None),
        batch_size=batch,
        batch_size_given=getattr(args, "batch_size", None) is not None,
        sample_bytes=sample_bytes(getattr(args, "sample_shape", None), getattr(args, "dtype", None) or "uint8"),
    )
    if getattr(args, "step_ms", None) is not None:
        w.step_ms = float(args.step_ms)
    if getattr(args, "budget", None) is not None:
        w.budget_s = float(args.budget)
    return w


def run_app(args: argparse.Namespace) -> int:
    if getattr(args, "preset", None):
        from loaderdoc.probe.workloads import get_preset

        get_preset(args.preset)  # an unknown name exits with the CLI's usage error, like `probe`
    # read the fast machine facts while textual imports: the machine view paints sooner
    from concurrent.futures import ThreadPoolExecutor

    from loaderdoc.system.detect import detect

    pool = ThreadPoolExecutor(1, thread_name_prefix="loaderdoc-facts")
    early = pool.submit(detect, cpu_info=False)
    pool.shutdown(wait=False)

    from loaderdoc.tui.app import make_app

    app = make_app(workload=workload_from_args(args), early_facts=early)
    result = app.run()
    return EXIT_OK if result is None else int(result)
