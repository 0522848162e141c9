"""``loaderdoc.probe()``: measure real DataLoaders on this machine and recommend settings.

    >>> import loaderdoc
    >>> report = loaderdoc.probe(my_dataset, batch_size=64, step_ms=35, budget_s=30)
    >>> loader = DataLoader(my_dataset, **report.recommended.as_kwargs())
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from loaderdoc.base.errors import UserError
from loaderdoc.probing.result import ConfigResult, ProbeReport, WorkloadInfo, step_note
from loaderdoc.system.facts import MachineFacts

DEFAULT_BATCH_SIZE = 32
DEFAULT_STEP_MS = 20.0  # the training step simulated for a user's dataset when none is given


class ProbeInterrupted(KeyboardInterrupt):
    """Ctrl+C during a probe. Every worker is already gone; ``report`` holds what was measured."""

    def __init__(self, report: ProbeReport) -> None:
        super().__init__("probe interrupted")
        self.report = report


def plan_for_budget(budget_s: float):
    """Measurement windows sized so that about a dozen configurations fit in the budget."""
    from loaderdoc.probing.measure import RunPlan

    window = min(2.5, max(0.25, budget_s / 20.0))
    loader_timeout = min(30.0, max(2.0, budget_s / 3.0))
    return RunPlan(window_s=window, loader_timeout_s=loader_timeout)


class BudgetTooShort(UserError):
    """The budget cannot hold one measured configuration at this training step."""


def check_budget(budget_s: float, step_ms: float) -> None:
    """Refuse, before measuring anything, a budget that one configuration's training steps alone
    exceed: the probe could only stop it half-way, and a cut-off run says nothing about the data."""
    from loaderdoc.probing.measure import STEPS_PER_RUN, RunPlan

    least = RunPlan.least_s(step_ms)
    if least <= budget_s:
        return
    # a configuration also loads batches and starts workers: a quarter more and 2 s leave room for it
    one = math.ceil(least * 1.25 + 2)
    raise BudgetTooShort(
        f"the {budget_s:g} s probe budget is too short for a {step_ms:g} ms training step: measuring one "
        f"DataLoader configuration takes at least {STEPS_PER_RUN} steps ({least:g} s) plus loading; "
        f"--budget {one} measures one (num_workers=0), and each further one needs about {one} s more "
        "(or simulate a shorter --step-ms)")


def in_order_supported() -> bool:
    """Whether this torch's DataLoader takes ``in_order`` (torch >= 2.6)."""
    import inspect

    from torch.utils.data import DataLoader

    return "in_order" in inspect.signature(DataLoader.__init__).parameters


def _limits(facts: MachineFacts, budget_s: float, device: str, plan: Any, step_ms: float, iterable: bool,
            epoch_steps: int | None = None):
    """The search's limits, from the facts alone (loaderdoc.system reads the machine)."""
    from loaderdoc import policy
    from loaderdoc.probing.search import SearchLimits

    room = policy.Room.of(facts)
    return SearchLimits(
        budget_s=budget_s,
        cpu_budget=facts.cpus_per_rank,  # None: no CPU count could be read, no CPU cap
        memory_budget_bytes=room.memory_budget,
        shm_free_bytes=room.shm_free,
        ranks=room.ranks,
        cuda=device.startswith("cuda"),
        iterable=iterable,
        in_order_supported=in_order_supported(),
        epoch_steps=epoch_steps,
        expected_cost_s=plan.window_s * 1.5 + plan.warmup_s + 0.5 + plan.least_s(step_ms),
    )


def _device(facts: MachineFacts) -> str:
    """"cuda" when torch was built with CUDA and a GPU is visible; decided without initialising
    CUDA in this process (the measuring processes are forked, and CUDA does not survive fork)."""
    import torch

    if not torch.backends.cuda.is_built():
        return "cpu"
    if facts.gpu.devices:
        return "cuda" if facts.usable_gpus > 0 else "cpu"
    try:
        return "cuda" if torch.cuda.device_count() > 0 else "cpu"
    except Exception:
        return "cpu"


def build_workload(
    dataset: Any = None,
    *,
    preset: str | None = None,
    collate_fn: Callable | None = None,
    overrides: dict[str, Any] | None = None,
) -> tuple[Any, Callable | None, WorkloadInfo, int | None, float | None]:
    """(dataset, collate_fn, info, preset batch size, preset step) from a Dataset or a preset name."""
    from loaderdoc.probing.workloads import get_preset

    if dataset is not None and preset is not None:
        raise UserError("give either a dataset or a preset, not both")
    if dataset is None:
        spec = get_preset(preset or "image")
        if overrides:
            spec = spec.with_overrides(**overrides)
        dataset, preset_collate = spec.build()
        info = WorkloadInfo(name=spec.name, description=f"{spec.description} ({spec.describe_costs()})")
        return dataset, collate_fn or preset_collate, info, spec.batch_size, spec.step_ms
    from torch.utils.data import IterableDataset

    info = WorkloadInfo(name=getattr(dataset, "__loaderdoc_name__", type(dataset).__name__),
                        description=f"user dataset {type(dataset).__module__}.{type(dataset).__qualname__}",
                        iterable=isinstance(dataset, IterableDataset))
    return dataset, collate_fn, info, None, None


def probe(
    dataset: Any = None,
    *,
    preset: str | None = None,
    collate_fn: Callable | None = None,
    batch_size: int | None = None,
    step_ms: float | None = DEFAULT_STEP_MS,
    budget_s: float = 30.0,
    facts: MachineFacts | None = None,
    on_result: Callable[[ConfigResult], None] | None = None,
    on_progress: Callable[[float, str], None] | None = None,
    cancel: threading.Event | None = None,
    overrides: dict[str, Any] | None = None,
    name: str | None = None,
    epoch_steps: int | None = None,
    torch_threads: int | None = None,
    torch_threads_source: str = "",
    factory: str | None = None,
) -> ProbeReport:
    """Measure DataLoader configurations for ``dataset`` (or a synthetic ``preset``) and recommend one.

    ``batch_size`` None means the preset's own (32 for a user dataset); ``step_ms`` None means the
    preset's typical step. ``epoch_steps`` (default: the dataset's length / batch size) is what
    the workers' start-up is weighed against for ``persistent_workers``. ``torch_threads`` is the
    training process's intra-op thread count, which the measuring processes run (default: this
    process's ``torch.get_num_threads()``), ``torch_threads_source`` where that count comes from.
    ``factory`` (``MOD:FACTORY``) built ``dataset``: where this process has initialised CUDA, the
    measuring processes start as new interpreters and call it again (else they unpickle the dataset). ``on_result`` is called as each configuration finishes, ``on_progress``
    with (fraction of the budget used, message). Setting ``cancel`` stops within ~0.1 s: the
    report then holds what was measured and ``stopped == "cancelled"``. Ctrl+C raises
    :class:`ProbeInterrupted` (a KeyboardInterrupt) carrying the partial report. Either way no
    worker process is left running.
    """
    from loaderdoc.base.settings import LoaderSettings
    from loaderdoc.probing.consumer import SleepConsumer
    from loaderdoc.probing.isolate import run_config
    from loaderdoc.probing.measure import LoadJob
    from loaderdoc.probing.search import Search

    if budget_s <= 0:
        raise UserError(f"the probe budget must be > 0 seconds, got {budget_s:g}")
    started = time.monotonic()
    if facts is None:
        from loaderdoc.system.detect import detect

        facts = detect()  # never raises: a fact that can't be read is unknown
    dataset_given, collate_given = dataset, collate_fn
    dataset, collate_fn, info, preset_batch, preset_step = build_workload(
        dataset, preset=preset, collate_fn=collate_fn, overrides=overrides)
    if name:
        info.name = name
    batch_size = batch_size or preset_batch or DEFAULT_BATCH_SIZE
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1, got {batch_size}")
    step = step_ms if step_ms is not None else (preset_step if preset_step is not None else DEFAULT_STEP_MS)
    if step < 0:
        raise UserError(f"step_ms must be >= 0, got {step:g}")
    check_budget(budget_s, step)
    device = _device(facts)
    info.batch_size = batch_size
    info.step_ms = step
    info.consumer = "cuda-kernel" if device.startswith("cuda") else SleepConsumer.kind
    try:
        info.dataset_len = len(dataset)
    except TypeError:
        info.dataset_len = None

    if epoch_steps is not None and epoch_steps < 1:
        raise UserError(f"epoch_steps must be >= 1, got {epoch_steps}")
    if epoch_steps is None and info.dataset_len:
        epoch_steps = math.ceil(info.dataset_len / batch_size)
    plan = plan_for_budget(budget_s)
    remaining = budget_s - (time.monotonic() - started)
    limits = _limits(facts, max(remaining, 0.1), device, plan, step, info.iterable, epoch_steps)
    info.torch_threads, info.torch_threads_source = measuring_threads(torch_threads, torch_threads_source)
    from loaderdoc.probing.fresh import Recipe

    recipe = (Recipe(preset=preset or "image", overrides=overrides) if dataset_given is None and collate_given is None
              else Recipe(factory=factory) if factory else None)
    workload = LoadJob(dataset=dataset, collate_fn=collate_fn, step_ms=step, device=device,
                       torch_threads=info.torch_threads, recipe=recipe)
    report = ProbeReport(workload=info, budget_s=budget_s, device=device, epoch_steps=epoch_steps)

    streams_known = False  # an IterableDataset: whether its workers repeat the stream, once answered

    def measure(settings: LoaderSettings, purpose: str, restart: bool) -> ConfigResult:
        nonlocal streams_known
        # a restart run times the epoch restart of a size already measured: no steady window again
        run_plan = dataclasses.replace(plan, steady=False) if restart else _without_restart(plan)
        if info.iterable and settings.num_workers >= 2 and not streams_known:
            run_plan = dataclasses.replace(run_plan, check_worker_streams=True)
        result = run_config(workload, settings, run_plan, cancel=cancel, purpose=purpose)
        streams_known = streams_known or result.workers_repeat is not None
        return result

    def record(result: ConfigResult) -> None:
        report.results.append(result)
        if info.batch_bytes is None and result.batch_bytes:
            info.batch_bytes = result.batch_bytes
            info.sample_bytes = result.batch_bytes // batch_size
        if on_result is not None:
            on_result(result)

    search = Search(
        measure,
        # torch refuses shuffle (and a sampler) for an IterableDataset: the stream decides the order
        LoaderSettings(batch_size=batch_size, shuffle=not info.iterable),
        limits,
        cancel=cancel,
        on_result=record,
        on_progress=on_progress,
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # torch's "suggested max workers" warning
            outcome = search.run()
    except KeyboardInterrupt:
        outcome = search._outcome()
        outcome.stopped = "interrupted"
        _fill(report, outcome, started)
        raise ProbeInterrupted(report) from None
    _fill(report, outcome, started)
    if on_progress is not None:
        on_progress(1.0, f"done: {report.stopped}")
    return report


def measuring_threads(requested: int | None, source: str = "") -> tuple[int, str]:
    """The intra-op threads the measuring processes run, and the words saying why that many."""
    import torch

    from loaderdoc.probing.isolate import forked_pool_works

    if requested is not None and requested < 1:
        raise UserError(f"torch_threads must be >= 1, got {requested}")
    threads = requested or torch.get_num_threads()
    source = source or ("as given" if requested else "torch.get_num_threads() in this process")
    if forked_pool_works(threads):
        return threads, source
    return 1, (f"1, not the job's {threads} ({source}): this process had already run torch's thread pool, "
               "which a forked measuring process cannot use; call loaderdoc.probe before other torch work, "
               "or run `loaderdoc probe`")


def _without_restart(plan: Any) -> Any:
    return dataclasses.replace(plan, measure_restart=False)


def _fill(report: ProbeReport, outcome: Any, started: float) -> None:
    report.recommended = outcome.recommended
    report.reasons = outcome.reasons
    report.stopped = outcome.stopped
    report.breakdown = outcome.breakdown
    report.prediction = outcome.prediction
    if report.prediction is not None:
        report.prediction.step_note = step_note(report.workload.consumer)
    report.elapsed_s = time.monotonic() - started
