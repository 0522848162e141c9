"""A trial's steady window, read from the hook's records while the user's job runs.

The hook's sampler keeps, at every tick, each loader's counters summed over its epochs (batches,
wait, step, the loop's CPU time in each, the workers' CPU time), this process's CPU time and every
process's busy time on its CPUs (``sampler.CUMULATIVE``, ``CpuLedger.now``). Two samples give a
window: everything between them, measured on one clock. The window opens once the training loader
has drained what its workers buffered during start-up (a full queue flatters the first batches)
and is *settled* when it holds enough batches and its two halves agree on the rate.

The rate is batches over the loop's own time: the waits, the steps, each epoch's first batch
(worker start-up, which persistent workers or fewer workers change) and the call that ended each
epoch (torch shuts non-persistent workers down in it), not what the script does
between epochs (validation, checkpoints), which the training loader's settings do not change and
which would make a window that holds one validation pass slower than one that holds none.

The training loader is the one a framework names "train", else the shuffled one, else the one whose
loop took the most time (:func:`training_key`); it is known across trials by the
line that built it (``site``), else its role, else its number (a loader re-built each epoch at one
line is one loader here); by its role also where one line built loaders of several roles (the
Hugging Face Trainer builds train and eval at one line). Under torchrun each rank writes its own records: every rank's window is
read, and the slowest rank's rate is the trial's. No torch, no textual.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from loaderdoc.watching.apply import chain_matches
from loaderdoc.watching.watched import load_per_batch, wait_share_of

# the sampler's per-loader list (loaderdoc.watching.sampler.CUMULATIVE), by position
FIELDS = ("steps", "wait_s", "step_s", "waits", "steps_timed", "cpu_wait_s", "cpu_step_s", "cpu_wait_wall_s",
          "cpu_step_wall_s", "workers_cpu_s", "workers_runq_s", "first_batch_s", "cpu_wait_loop_s", "cpu_step_loop_s",
          "iter_s", "stop_s", "starts", "workers_cpu_first_s")
WARM_BATCHES = 5  # batches past the start-up queue before the window opens
MIN_WINDOW_S = 3.0  # a window shorter than this is mostly the sampler's tick (0.2 s)
SETTLED_SPREAD = 0.10  # the window's two halves within 10 % of each other: settled
MAX_STEPS_FACTOR = 4  # past 4x the steps asked, a window that never settled is taken as it is ...
MAX_WINDOW_S = 30.0  # ... or past 30 s of the loop's time (a slow loop on a busy machine would take minutes)


def loader_key(raw: dict[str, Any], shared: set[str] | frozenset[str] = frozenset(),
               split: dict[str, set[str]] | None = None) -> str:
    """How a loader is known across runs of the same script: the line that built it, else its role;
    by its role also where that line built loaders of other roles too (``shared``: a framework's one
    construction site, the Hugging Face Trainer's ``_get_dataloader``, builds train and eval); by a
    longer chain of its callers where that line built loaders through different callers (``split``:
    one helper, ``build_loader(split) -> _make(...)``, builds train and val)."""
    if raw.get("site") and not (raw["site"] in shared and raw.get("role")):
        stacks = (split or {}).get(raw["site"])
        if stacks and raw.get("stack"):
            return f"site:{_own_chain(raw['stack'], stacks)}"
        return f"site:{raw['site']}"
    if raw.get("role"):
        return f"role:{raw['role']}"
    return f"loader:{raw.get('loader')}"


def _own_chain(stack: str, stacks: set[str]) -> str:
    """The fewest of ``stack``'s lines (two at least) that no other of ``stacks`` starts with."""
    lines = stack.split(" < ")
    for n in range(2, len(lines) + 1):
        chain = " < ".join(lines[:n])
        if not any(chain_matches(chain, other) for other in stacks if other != stack):
            return chain
    return stack


def shared_sites(records: list[dict[str, Any]]) -> set[str]:
    """Lines that built loaders of more than one role (a site there names no single loader)."""
    roles: dict[str, set] = {}
    for rec in records:
        for raw in rec.get("loaders") or []:
            if raw.get("site"):
                roles.setdefault(raw["site"], set()).add(raw.get("role"))
    return {site for site, seen in roles.items() if len(seen) > 1}


def split_sites(records: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Lines that built loaders through different callers, and the chains of callers seen at each."""
    stacks: dict[str, set[str]] = {}
    for rec in records:
        for raw in rec.get("loaders") or []:
            if raw.get("site") and raw.get("stack"):
                stacks.setdefault(raw["site"], set()).add(raw["stack"])
    return {site: seen for site, seen in stacks.items() if len(seen) > 1}


def matches(raw: dict[str, Any], key: str) -> bool:
    """``raw`` is the loader ``key`` names: by its line (or its first lines of callers), its role or
    its number, as the key says (a role key matches whatever line built the loader)."""
    kind, _, name = key.partition(":")
    if kind == "site":
        return raw.get("site") == name or chain_matches(name, raw.get("stack"))
    if kind == "role":
        return raw.get("role") == name
    return not raw.get("site") and not raw.get("role") and str(raw.get("loader")) == name


EVAL_ROLES = frozenset({"val", "validation", "test", "predict", "eval", "evaluation"})


def training_key(records: list[dict[str, Any]]) -> str | None:
    """The training loop's loader, by what says most about it: the one a framework names "train";
    else, among the loaders that shuffle (the script asked for it; an evaluation loader seldom
    does) or, where none does, those not named for evaluation, the one whose loop took the most
    time (a training step, with its backward pass, outlasts an evaluation step); the most batches
    break ties. Most batches alone took a validation set at batch 1 for the training set at batch
    8 (issue 49)."""
    shared, split = shared_sites(records), split_sites(records)
    seen: dict[str, dict[str, Any]] = {}
    for rec in records:
        for raw in rec.get("loaders") or []:
            key = loader_key(raw, shared, split)
            epochs = raw.get("epochs") or []
            one = seen.setdefault(key, {"role": raw.get("role"), "shuffles": False, "seconds": 0.0, "steps": 0})
            one["shuffles"] = one["shuffles"] or (raw.get("asked") or {}).get("shuffle") is True
            # per process: a rank's own loop (under torchrun each rank iterates the same loader)
            one["seconds"] = max(one["seconds"], sum((e.get("wait_s") or 0.0) + (e.get("step_s") or 0.0) for e in epochs))
            one["steps"] = max(one["steps"], sum(e.get("steps", 0) for e in epochs))
    if not seen:
        return None
    named = [k for k, one in seen.items() if one["role"] == "train"]
    candidates = (named or [k for k, one in seen.items() if one["shuffles"]]
                  or [k for k, one in seen.items() if one["role"] not in EVAL_ROLES] or list(seen))
    return max(candidates, key=lambda k: (seen[k]["seconds"], seen[k]["steps"]))


def loaders_of(rec: dict[str, Any], key: str) -> list[dict[str, Any]]:
    return [raw for raw in rec.get("loaders") or [] if matches(raw, key)]


@dataclass
class Window:
    """One process's training loader between two samples of the hook's sampler."""

    pid: int | None
    rank: int | None
    seconds: float  # the loop's own time in the window (waits, steps, epochs' first batches)
    wall_s: float  # the sampler's clock: what CPU time is divided by
    steps: int
    wait_s: float
    step_s: float
    waits: int
    steps_timed: int
    cpu_wait_s: float
    cpu_step_s: float
    cpu_wait_wall_s: float
    cpu_step_wall_s: float
    cpu_wait_loop_s: float  # the loop thread's own CPU time in the CPU-timed waits and steps
    cpu_step_loop_s: float
    workers_cpu_s: float
    workers_runq_s: float
    first_batch_s: float
    proc_cpu_s: float | None
    busy_s: float | None
    workers_pss_bytes: int | None  # the largest summed worker PSS sampled in the window
    shm_peak_bytes: int | None
    settled: bool
    spread: float | None  # the halves' rates, relative difference
    torch_threads: int | None = None  # torch.get_num_threads() in the process, as its epochs began
    iter_s: float = 0.0  # the window's epochs' iter(loader) calls (starting workers), summed
    stop_s: float = 0.0  # ... and the calls that ended them (shutting workers down)
    starts: int = 0  # epochs whose first batch came in the window
    workers_cpu_first_s: float | None = None  # the workers' CPU time before those first batches

    def restart_share(self, workers: int) -> float | None:
        """What persistent workers would save of the window's time (loaderdoc.policy.restart_cost_s,
        as ``watch`` prices each epoch start, summed over the window's); None without a start."""
        if not self.starts or workers <= 0 or self.seconds <= 0:
            return None
        from loaderdoc.policy.restarts import restart_cost_s, workers_setup_cpu_s

        wait = self.wait_s / self.waits if self.waits else 0.0
        step = self.step_s / self.steps_timed if self.steps_timed else 0.0
        setup = workers_setup_cpu_s(self.workers_cpu_first_s, self.starts * workers, self.workers_cpu_s, self.steps)
        cost = restart_cost_s(self.iter_s, self.first_batch_s, self.stop_s,
                              self.starts * load_per_batch(workers, wait, step), setup)
        return min(1.0, cost / self.seconds)

    @property
    def rate(self) -> float:
        return self.steps / self.seconds if self.seconds > 0 else 0.0

    @property
    def wait_share(self) -> float | None:
        return wait_share_of(self.wait_s, self.step_s)

    @property
    def others_cpu_s(self) -> float | None:
        if self.busy_s is None or self.proc_cpu_s is None:
            return None
        return max(0.0, self.busy_s - self.proc_cpu_s - self.workers_cpu_s)


def _sum_at(sample: dict[str, Any], numbers: list[str]) -> list[float]:
    total = [0.0] * len(FIELDS)
    for number in numbers:
        cum = (sample.get("loaders") or {}).get(number) or []
        for i, value in enumerate(cum[:len(FIELDS)]):
            total[i] += value or 0.0
    return total


LOOP_FIELDS = tuple(FIELDS.index(name) for name in ("wait_s", "step_s", "first_batch_s", "stop_s"))


def _loop_s(cum: list[float]) -> float:
    """The loop's own time in a sum: waits, steps, epochs' first batches, and their ends (shutdowns)."""
    return sum(cum[i] for i in LOOP_FIELDS)


def window_of(rec: dict[str, Any], key: str, *, steps: int, warm: int) -> Window | None:
    """The window of ``rec``'s loader ``key``: from the first sample ``warm`` batches in to the
    latest; None before it has opened. ``steps``: the batches a settled window needs."""
    numbers = [str(raw.get("loader")) for raw in loaders_of(rec, key)]
    samples = [s for s in rec.get("samples") or [] if s.get("t_s") is not None]
    if not numbers or len(samples) < 2:
        return None
    sums = [_sum_at(s, numbers) for s in samples]
    start = next((i for i, cum in enumerate(sums) if cum[0] >= warm), None)
    if start is None or start == len(samples) - 1:
        return None
    a, b = samples[start], samples[-1]
    delta = [y - x for x, y in zip(sums[start], sums[-1], strict=True)]
    values = dict(zip(FIELDS, delta, strict=True))
    seconds = _loop_s(delta)
    done = delta[0]
    # the halves: the sample nearest the middle batch splits the window
    mid = min(range(start + 1, len(samples)), key=lambda i: abs(sums[i][0] - sums[start][0] - done / 2))
    spread = None
    if start < mid < len(samples) - 1:
        r1 = (sums[mid][0] - sums[start][0]) / max(_loop_s(sums[mid]) - _loop_s(sums[start]), 1e-9)
        r2 = (sums[-1][0] - sums[mid][0]) / max(_loop_s(sums[-1]) - _loop_s(sums[mid]), 1e-9)
        spread = abs(r1 - r2) / max(r1, r2) if max(r1, r2) > 0 else None
    enough = done >= steps and seconds >= MIN_WINDOW_S
    settled = enough and (done >= MAX_STEPS_FACTOR * steps or seconds >= MAX_WINDOW_S
                          or (spread is not None and spread <= SETTLED_SPREAD))
    inside = samples[start:]
    pss = [s.get("workers_pss_bytes") for s in inside if s.get("workers_pss_bytes")]
    shm = [s.get("shm_used_bytes") for s in inside if s.get("shm_used_bytes") is not None]
    base = samples[0].get("shm_used_bytes")
    cpu = [a.get("proc_cpu_s"), b.get("proc_cpu_s")]
    busy = [a.get("busy_s"), b.get("busy_s")]
    return Window(
        pid=rec.get("pid"), rank=(rec.get("process") or {}).get("rank"), seconds=seconds, wall_s=b["t_s"] - a["t_s"],
        steps=int(values["steps"]), wait_s=values["wait_s"], step_s=values["step_s"], waits=int(values["waits"]),
        steps_timed=int(values["steps_timed"]), cpu_wait_s=values["cpu_wait_s"], cpu_step_s=values["cpu_step_s"],
        cpu_wait_wall_s=values["cpu_wait_wall_s"], cpu_step_wall_s=values["cpu_step_wall_s"],
        cpu_wait_loop_s=values["cpu_wait_loop_s"], cpu_step_loop_s=values["cpu_step_loop_s"],
        workers_cpu_s=values["workers_cpu_s"], workers_runq_s=values["workers_runq_s"],
        first_batch_s=values["first_batch_s"], proc_cpu_s=cpu[1] - cpu[0] if None not in cpu else None,
        busy_s=busy[1] - busy[0] if None not in busy else None,
        workers_pss_bytes=max(pss) if pss else None,
        shm_peak_bytes=max(0, max(shm) - (base or 0)) if shm else None,
        settled=settled, spread=spread, torch_threads=_threads_of(rec, key), iter_s=values["iter_s"],
        stop_s=values["stop_s"], starts=int(values["starts"]),
        workers_cpu_first_s=values["workers_cpu_first_s"] if values["workers_cpu_first_s"] > 0 else None)


def _threads_of(rec: dict[str, Any], key: str) -> int | None:
    """The intra-op threads the loader's process ran with (the most any of its epochs began with)."""
    seen = [e.get("torch_threads") for raw in loaders_of(rec, key) for e in raw.get("epochs") or []]
    seen = [t for t in seen if isinstance(t, int) and t > 0]
    return max(seen) if seen else None


def windows(records: list[dict[str, Any]], key: str, *, steps: int, warm: int) -> list[Window]:
    """Every process's window of the training loader (the ranks of a job; one otherwise)."""
    out = []
    for rec in records:
        w = window_of(rec, key, steps=steps, warm=warm)
        if w is not None:
            out.append(w)
    return out


def ranks_expected(records: list[dict[str, Any]], key: str) -> int:
    """How many processes of this node will iterate the training loader: torchrun's local world
    size where a process says it (a rank that has not written its records yet still counts), else
    the processes that iterated it so far."""
    sizes = [(rec.get("process") or {}).get("local_world_size") for rec in records]
    known = [n for n in sizes if isinstance(n, int) and n > 0]
    seen = sum(1 for rec in records if loaders_of(rec, key))
    return max([seen, *known]) if known else max(1, seen)


def batches_seen(records: list[dict[str, Any]], key: str | None) -> int:
    """Batches the loader ``key`` (any loader when None) returned so far, in the process with the most."""
    best = 0
    for rec in records:
        for raw in rec.get("loaders") or []:
            if key is None or matches(raw, key):
                best = max(best, sum(e.get("steps", 0) for e in raw.get("epochs") or []))
    return best


def settings_of(records: list[dict[str, Any]], key: str) -> dict[str, Any] | None:
    """The training loader's settings as it ran (and, under --apply, what the script asked)."""
    for rec in records:
        for raw in loaders_of(rec, key):
            return {"settings": dict(raw.get("settings") or {}), "asked": raw.get("asked"), "role": raw.get("role"),
                    "site": raw.get("site"), "class": raw.get("class")}
    return None


def epoch_batches(records: list[dict[str, Any]], key: str) -> int | None:
    """The batches of one finished epoch of the training loader (the most any process saw: every
    rank iterates its own share); None where no epoch finished (an endless stream, a short trial)."""
    ends = [e.get("steps", 0) for rec in records for raw in loaders_of(rec, key)
            for e in raw.get("epochs") or [] if e.get("finished")]
    return max(ends) if ends else None


def replayed(records: list[dict[str, Any]], key: str) -> bool:
    """Whether the hook saw the training loader's workers each yield the whole stream (its first
    epoch's batches, digested: watching/replays.py), which an endless stream's epochs cannot show."""
    return any(raw.get("replays") is True for rec in records for raw in loaders_of(rec, key))


def repeated_stream(written: int | None, tried: int | None, workers: int, replays: bool = False) -> str | None:
    """Why a trial's epochs cannot be compared with the script's own, where they grew with the
    workers or the hook saw its workers replay the stream (``replays``): a dataset that yields every
    sample in each worker (an IterableDataset that does not split its stream with
    ``get_worker_info()``) gives ``workers`` times the batches, so its rate counts every sample
    again (issue 49). None where the epochs match (a worker's partial last batch adds at most one
    batch per worker) and no replay was seen."""
    grew = bool(written and tried and workers >= 2 and tried >= 1.5 * written and tried - written > workers)
    if not grew and not replays:
        return None
    seen = (f"its epochs held {tried} batches against your settings' {written} ({tried / written:.1f}x at "
            f"num_workers={workers})" if grew else
            f"its {workers} workers each returned the same batches (two rounds of its first epoch, digested)")
    return (f"{seen}: the dataset yields every sample in each worker (an IterableDataset "
            "that does not split its stream with torch.utils.data.get_worker_info()); its rate counts "
            "samples again, so it is not a candidate; shard the stream per worker")
