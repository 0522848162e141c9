"""What each knob would cost or buy *on this machine*, in numbers where they are known.

``tradeoffs(facts, settings, batch_bytes=..., probe=...)`` returns one :class:`KnobTradeoff` per
knob (num_workers, prefetch_factor, pin_memory, persistent_workers, batch_size): what raising and
lowering it does here, the evidence, and a small table (columns + rows) the TUI renders as is.
Numbers come from the probe when it measured them ("measured"), or are computed from machine
facts and the batch size ("computed", e.g. workers x prefetch x batch bytes of /dev/shm). Nothing
is estimated beyond that: without a probe there is no throughput column.

No torch, no textual.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from loaderdoc import policy
from loaderdoc.advice.rules import batch_bytes_from_probe, gpu_absence_known
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.base.units import cpus_text, fmt_bytes, fmt_cpus
from loaderdoc.policy import worker_target, workers_text
from loaderdoc.probing.result import ConfigResult, ProbeReport
from loaderdoc.system.facts import MachineFacts

KNOB_ORDER = ("num_workers", "prefetch_factor", "pin_memory", "persistent_workers", "batch_size")
BOOLEAN_KNOBS = ("pin_memory", "persistent_workers")  # "raising" = turning on


@dataclass
class TradeoffRow:
    value: Any  # the knob's value on this row
    cells: dict[str, str]  # column -> text, for display
    data: dict[str, Any] = field(default_factory=dict)  # the raw numbers behind the cells
    current: bool = False  # the value in the settings being judged
    measured: bool = False  # the probe measured this value (else computed from facts only)
    fits: bool | None = None  # fits /dev/shm and RAM (None: not known)


@dataclass
class KnobTradeoff:
    knob: str
    current: Any
    raising: str  # what raising it (a boolean: turning it on) does here
    lowering: str  # what lowering it (a boolean: turning it off) does here
    evidence: list[str] = field(default_factory=list)  # the numbers, each saying measured / computed
    columns: list[str] = field(default_factory=list)
    rows: list[TradeoffRow] = field(default_factory=list)
    note: str = ""  # e.g. "no effect: num_workers=0"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> list[list[str]]:
        """Header + rows as strings: what a TUI DataTable or a text table shows."""
        out = [list(self.columns)]
        for r in self.rows:
            out.append([r.cells.get(c, "") for c in self.columns])
        return out


@dataclass
class _Here:
    """The machine numbers every knob's arithmetic uses."""

    facts: MachineFacts
    settings: LoaderSettings
    batch_bytes: int | None
    probe: ProbeReport | None

    @property
    def ranks(self) -> int:
        return max(1, self.facts.distributed.ranks_on_this_node)

    @property
    def shm_free(self) -> int | None:
        return self.facts.shm.free.get(self.facts.shm.total.get())

    def shm_need(self, workers: int, prefetch: int, batch: int | None = None) -> int | None:
        return policy.in_flight_bytes(workers, prefetch, batch if batch is not None else self.batch_bytes,
                                      self.ranks)

    def shm_text(self, workers: int, prefetch: int, batch: int | None = None) -> str:
        """``4 x 6 x 19 MiB = 456 MiB`` (prefetch x workers x batch, x ranks when > 1)."""
        b = batch if batch is not None else self.batch_bytes
        if not b:
            return "unknown (no batch size)"
        ranks = f" x {self.ranks} ranks" if self.ranks > 1 else ""
        return f"{prefetch} x {workers} x {fmt_bytes(b)}{ranks} = {fmt_bytes(prefetch * workers * b * self.ranks)}"

    def fits(self, need: int | None) -> bool | None:
        level = policy.shm_level(need, self.shm_free)
        return None if level is None else level != "over"

    def fit_text(self, need: int | None) -> str:
        return {None: "?", "over": "no", "tight": "tight", "fits": "yes"}[policy.shm_level(need, self.shm_free)]

    def ok_results(self) -> list[ConfigResult]:
        return [r for r in (self.probe.ok_results if self.probe else []) if r.batches_per_s]

    def by_workers(self) -> dict[int, ConfigResult]:
        """For each probed worker count, the result closest to the user's other settings (else fastest)."""
        out: dict[int, ConfigResult] = {}
        for r in self.ok_results():
            n = r.settings.num_workers
            mine = policy.same_stream(r.settings, self.settings.replace(
                num_workers=n, prefetch_factor=self.settings.prefetch_factor if n else None,
                persistent_workers=self.settings.persistent_workers and n > 0))
            prev = out.get(n)
            if prev is None:
                out[n] = r
                continue
            prev_mine = policy.same_stream(prev.settings, self.settings.replace(
                num_workers=n, prefetch_factor=self.settings.prefetch_factor if n else None,
                persistent_workers=self.settings.persistent_workers and n > 0))
            if (mine, r.batches_per_s) > (prev_mine, prev.batches_per_s):
                out[n] = r
        return dict(sorted(out.items()))


def _pct(x: float | None) -> str:
    return "" if x is None else f"{x:.0f}%"


def _bps(x: float | None) -> str:
    return "" if x is None else f"{x:.1f}"


# ---- num_workers ----------------------------------------------------------------------------
def _num_workers(h: _Here) -> KnobTradeoff:
    s = h.settings
    n = s.num_workers
    pf = s.effective_prefetch_factor or 2  # what a worker would hold if there were workers
    cpus = h.facts.cpus_per_rank
    measured = h.by_workers()
    evidence: list[str] = []
    cols = ["num_workers", "CPUs used / per rank", "/dev/shm in flight", "fits /dev/shm"]
    if measured:
        cols = ["num_workers", "batches/s", "step waits", "worker PSS", "CPUs used / per rank",
                "/dev/shm in flight", "fits /dev/shm"]
    # unmeasured: around what this budget allows (unknown CPUs: torch's range, 0 to 2)
    reach = 2 if cpus is None else max(2 * math.ceil(cpus), 2)
    values = sorted(set(measured) | {n} | ({worker_target(cpus)} if not measured and cpus is not None else set())
                    | ({v for v in (0, 1, 2, 4, 8, 16, 32, 64) if v <= reach} if not measured else set()))
    rows = []
    for v in values:
        r = measured.get(v)
        need = h.shm_need(v, pf) if v else 0
        cells = {"num_workers": str(v), "CPUs used / per rank": f"{v + 1} / {fmt_cpus(cpus)}",
                 "/dev/shm in flight": h.shm_text(v, pf) if v else "0 (main process loads)",
                 "fits /dev/shm": h.fit_text(need) if v else "yes"}
        data: dict[str, Any] = {"processes": v + 1, "cpus_per_rank": cpus, "shm_bytes": need}
        if r is not None:
            cells |= {"batches/s": _bps(r.batches_per_s), "step waits": _pct(r.starvation_pct),
                      "worker PSS": fmt_bytes(r.worker_pss_bytes) if r.worker_pss_bytes else ("0" if v == 0 else "")}
            data |= {"batches_per_s": r.batches_per_s, "starvation_pct": r.starvation_pct,
                     "worker_pss_bytes": r.worker_pss_bytes}
        rows.append(TradeoffRow(v, cells, data, current=(v == n), measured=r is not None,
                                fits=h.fits(need) if v else True))

    # raising
    up: list[str] = []
    pss = policy.per_worker_pss(h.probe.results) if h.probe else None
    if pss:
        budget = h.facts.memory.budget
        up.append(f"+1 worker ≈ +{fmt_bytes(pss)} PSS (measured"
                  + (f"; memory budget {fmt_bytes(budget)})" if budget is not None else ")"))
        counts = [str(k) for k, r in measured.items() if k and r.worker_pss_bytes]
        how = f"slope over {', '.join(counts)} workers" if len(counts) > 1 else f"with {workers_text(int(counts[0]))}"
        evidence.append(f"worker memory: each worker adds ≈ {fmt_bytes(pss)} PSS (measured, {how})")
    if measured:
        best_bps = max(r.batches_per_s for r in measured.values())
        flat = 1 - policy.tolerance(h.probe.results)  # "flat" is the policy's "as fast as"
        flat_from = min(k for k, r in measured.items() if r.batches_per_s >= flat * best_bps)
        beyond = [k for k in measured if k > flat_from]
        if flat_from == 0 and beyond:
            top = max(beyond, key=lambda k: measured[k].batches_per_s)
            up.append(f"no worker count measured beats num_workers=0 ({measured[0].batches_per_s:.1f} batches/s; "
                      f"best with workers {measured[top].batches_per_s:.1f} at {top}, measured)")
        elif beyond:
            top = max(beyond)
            up.append(f"throughput flat beyond {flat_from} workers ({measured[flat_from].batches_per_s:.1f} "
                      f"batches/s at {flat_from}, {measured[top].batches_per_s:.1f} at {top}, measured)")
        else:
            up.append(f"throughput still rising at {flat_from} workers, the most measured "
                      f"({measured[flat_from].batches_per_s:.1f} batches/s)")
        evidence.append("throughput per worker count: " + ", ".join(
            f"{k}: {r.batches_per_s:.1f}/s" for k, r in measured.items()) + " (measured)")
    if h.batch_bytes:
        per = pf * h.batch_bytes * h.ranks
        up.append(f"+{fmt_bytes(per)} of /dev/shm per worker ({pf} x {fmt_bytes(h.batch_bytes)}"
                  + (f" x {h.ranks} ranks" if h.ranks > 1 else "") + f"; {fmt_bytes(h.shm_free)} free, computed)")
    scaling = policy.beyond_cpus_evidence(h.probe.results, cpus) if h.probe else None
    if scaling is not None:
        up.append("the CPU count is not the limit here: " + scaling.text(cpus))
    elif cpus is None:
        up.append("CPU room unknown: no CPU count could be read")
    elif n + 1 > cpus:
        up.append(f"already {workers_text(n)} for {cpus_text(cpus)} per rank: more only take turns")
    else:
        up.append(f"CPU room: {cpus_text(cpus)} per rank, {workers_text(n)} + the training process use {n + 1}")
    # lowering
    down: list[str] = []
    if n == 0:
        down.append("already 0: the training process loads every batch itself")
    else:
        lower = [k for k in measured if k < n]
        if lower:
            k = max(lower)
            r = measured[k]
            down.append(f"at {workers_text(k)}: {r.batches_per_s:.1f} batches/s, the step waits "
                        f"{_pct(r.starvation_pct) or '?'} (measured)")
        if pss:
            down.append(f"-1 worker frees ≈ {fmt_bytes(pss)} PSS")
        if h.batch_bytes:
            down.append(f"-{fmt_bytes(pf * h.batch_bytes * h.ranks)} of /dev/shm per worker")
        if not lower:
            down.append("fewer batches prepared in parallel (throughput not measured: run `loaderdoc probe`)")
    return KnobTradeoff("num_workers", n, "; ".join(up), "; ".join(down), evidence, cols, rows)


# ---- prefetch_factor ------------------------------------------------------------------------
def _prefetch(h: _Here) -> KnobTradeoff:
    s = h.settings
    n = s.num_workers
    cur = s.effective_prefetch_factor
    cols = ["prefetch_factor", "batches in flight", "/dev/shm", "fits /dev/shm"]
    if n == 0:
        return KnobTradeoff("prefetch_factor", None, "no effect with num_workers=0 (torch refuses the setting)",
                            "no effect with num_workers=0", [], cols, [],
                            note="prefetch_factor only applies to worker processes; num_workers is 0")
    measured = {r.settings.effective_prefetch_factor: r for r in h.ok_results() if r.settings.num_workers == n}
    if measured:
        cols = cols + ["step waits", "wait p95"]
    rows = []
    for v in sorted({1, 2, 4, 8, cur} | set(measured)):
        need = h.shm_need(n, v)
        cells = {"prefetch_factor": str(v), "batches in flight": f"{n} x {v} = {n * v}",
                 "/dev/shm": h.shm_text(n, v), "fits /dev/shm": h.fit_text(need)}
        r = measured.get(v)
        if r is not None:
            cells |= {"step waits": _pct(r.starvation_pct),
                      "wait p95": f"{r.wait.p95_ms:.1f} ms" if r.wait.p95_ms is not None else ""}
        rows.append(TradeoffRow(v, cells, {"batches_in_flight": n * v, "shm_bytes": need,
                                           "starvation_pct": r.starvation_pct if r else None,
                                           "wait_p95_ms": r.wait.p95_ms if r else None},
                                current=(v == cur), measured=r is not None, fits=h.fits(need)))
    free = f", {fmt_bytes(h.shm_free)} free" if h.shm_free is not None else ""
    hi, lo = cur * 2, max(1, cur // 2)
    evidence = []
    if h.batch_bytes:
        raising = f"prefetch_factor {hi} holds {h.shm_text(n, hi)} of /dev/shm{free} (computed)"
        lowering = (f"prefetch_factor {lo} holds {h.shm_text(n, lo)}{free} (computed); a smaller buffer "
                    "against slow batches" if cur > 1 else "already 1: one batch per worker, the smallest buffer")
        evidence.append(f"now: {h.shm_text(n, cur)} of /dev/shm{free} (computed)")
    else:
        raising = (f"each extra batch per worker holds one more batch in /dev/shm ({fmt_bytes(h.shm_free)} free); "
                   "give the batch size and sample shape for numbers")
        lowering = "a smaller buffer against slow batches; less /dev/shm"
    if measured.get(cur) and measured[cur].wait.p95_ms is not None:
        r = measured[cur]
        evidence.append(f"wait per batch now: p50 {r.wait.p50_ms:.1f} ms, p95 {r.wait.p95_ms:.1f} ms (measured)")
        if hi in measured and measured[hi].wait.p95_ms is not None:
            raising += f"; measured wait p95 at {hi}: {measured[hi].wait.p95_ms:.1f} ms"
    return KnobTradeoff("prefetch_factor", cur, raising, lowering, evidence, cols, rows)


# ---- pin_memory -----------------------------------------------------------------------------
def _pin(h: _Here) -> KnobTradeoff:
    s = h.settings
    cols = ["pin_memory", "copy to GPU per batch", "batches/s"]
    gpus = h.facts.usable_gpus
    if gpu_absence_known(h.facts):
        rows = [TradeoffRow(v, {"pin_memory": str(v), "copy to GPU per batch": "no GPU", "batches/s": ""},
                            current=(v == s.pin_memory)) for v in (False, True)]
        return KnobTradeoff("pin_memory", s.pin_memory, "no effect here: no usable GPU (torch only warns)",
                            "no effect here", [f"usable GPUs: {gpus}"], cols, rows,
                            note="pin_memory only speeds up copies to a GPU; this machine has none usable")
    pairs = [(r.h2d_pageable_ms, r.h2d_pinned_ms) for r in h.ok_results()
             if r.h2d_pageable_ms is not None and r.h2d_pinned_ms is not None]
    pageable = sorted(p for p, _ in pairs)[len(pairs) // 2] if pairs else None
    pinned = sorted(q for _, q in pairs)[len(pairs) // 2] if pairs else None
    bps = {}
    for r in h.ok_results():
        if r.settings.num_workers == s.num_workers:
            bps[r.settings.pin_memory] = max(bps.get(r.settings.pin_memory, 0.0), r.batches_per_s)
    rows = []
    for v, ms in ((False, pageable), (True, pinned)):
        rows.append(TradeoffRow(v, {"pin_memory": str(v),
                                    "copy to GPU per batch": f"{ms:.1f} ms" if ms is not None else "not measured",
                                    "batches/s": _bps(bps.get(v))},
                                {"h2d_ms": ms, "batches_per_s": bps.get(v)}, current=(v == s.pin_memory),
                                measured=ms is not None or v in bps))
    evidence = []
    cost = f"a page-locked copy of each batch ({fmt_bytes(h.batch_bytes)})" if h.batch_bytes else \
        "a page-locked copy of each batch"
    if pageable is not None:
        evidence.append(f"copy of one batch to the GPU: {pageable:.1f} ms pageable, {pinned:.1f} ms pinned (measured)")
        on = f"copies {pageable - pinned:.1f} ms faster per batch ({pageable:.1f} -> {pinned:.1f} ms, measured); costs {cost}"
        off = f"copies take {pageable:.1f} ms instead of {pinned:.1f} ms per batch (measured)"
    else:
        on = f"faster, asynchronous copies to the GPU (not measured here: run `loaderdoc probe`); costs {cost}"
        off = "copies go through a staging buffer and block the step (not measured here)"
    return KnobTradeoff("pin_memory", s.pin_memory, on if not s.pin_memory else f"already on: {on}",
                        off if s.pin_memory else f"already off: {off}", evidence, cols, rows)


# ---- persistent_workers ---------------------------------------------------------------------
def _persistent(h: _Here) -> KnobTradeoff:
    s = h.settings
    cols = ["persistent_workers", "start-up per epoch", "memory held between epochs"]
    if s.num_workers == 0:
        return KnobTradeoff("persistent_workers", False, "no effect with num_workers=0 (torch refuses it)",
                            "no effect with num_workers=0", [], cols, [],
                            note="there are no workers to keep alive; num_workers is 0")
    same = [r for r in h.ok_results() if r.settings.num_workers == s.num_workers]
    # what restarting costs, as the probe weighs it (a timed restart, else the start-up less one
    # batch's loading): these settings' prefetch depth if probed, else another with as many workers
    keys = [policy.stream_key(s)] + sorted({policy.stream_key(r.settings) for r in same} - {policy.stream_key(s)})
    saved = next((x for k in keys if h.probe and (x := policy.restart_saving(h.probe.results, k))), None)
    startup = saved.saving_s if saved is not None else None
    pss = next((r.worker_pss_bytes for r in same if r.worker_pss_bytes), None)
    evidence = []
    epoch_s = None
    dataset_len = h.probe.workload.dataset_len if h.probe else None
    batch = s.batch_size or (h.probe.workload.batch_size if h.probe else None)
    fastest = max((r.batches_per_s for r in same), default=None)
    if dataset_len and batch and fastest:
        n_batches = math.ceil(dataset_len / batch)
        epoch_s = n_batches / fastest
        evidence.append(f"epoch: {n_batches} batches / {fastest:.1f} batches/s = {epoch_s:.1f} s (computed from "
                        "measured throughput)")
    if saved is not None:
        evidence.append(f"measured with {workers_text(s.num_workers)}: {saved.text()}")
    held = f"{workers_text(s.num_workers)}, {fmt_bytes(pss)} PSS (measured)" if pss else workers_text(s.num_workers)
    start_txt = f"{startup:.2f} s" if startup is not None else "not measured"
    rows = [TradeoffRow(False, {"persistent_workers": "False", "start-up per epoch": start_txt,
                                "memory held between epochs": "none"},
                        {"startup_s": startup}, current=not s.persistent_workers, measured=startup is not None),
            TradeoffRow(True, {"persistent_workers": "True", "start-up per epoch": "once, first epoch only",
                               "memory held between epochs": held},
                        {"startup_s": 0.0, "worker_pss_bytes": pss}, current=s.persistent_workers,
                        measured=pss is not None)]
    if startup is not None and epoch_s:
        share = policy.restart_share(startup, epoch_s)
        saves = f"saves {startup:.2f} s per epoch ({share:.{0 if share >= 0.1 else 1}%} of a {epoch_s:.1f} s epoch)"
    elif startup is not None:
        saves = f"saves {startup:.2f} s of worker start-up per epoch (measured)"
    else:
        saves = "saves the worker start-up at every epoch (not measured here)"
    on = f"{saves}; keeps {held} alive between epochs, e.g. during validation"
    off = f"every epoch restarts the workers: {saves.replace('saves', 'costs')}"
    return KnobTradeoff("persistent_workers", s.persistent_workers,
                        on if not s.persistent_workers else f"already on: {on}",
                        off if s.persistent_workers else f"already off: {off}", evidence, cols, rows)


# ---- batch_size -----------------------------------------------------------------------------
def _batch_size(h: _Here) -> KnobTradeoff:
    s = h.settings
    bs = s.batch_size or (h.probe.workload.batch_size if h.probe else None)
    cols = ["batch_size", "batch bytes", "/dev/shm in flight", "fits /dev/shm"]
    evidence = []
    gpu_mem = h.facts.gpu.devices[0].memory_total.get() if h.facts.gpu.devices else None
    gpu_note = (f"activations must also fit the GPU's {fmt_bytes(gpu_mem)} (not measured by loaderdoc)"
                if gpu_mem else "GPU memory for activations is not measured by loaderdoc")
    if not bs or not h.batch_bytes:
        return KnobTradeoff("batch_size", bs, f"bigger batches hold more /dev/shm and RAM per batch in flight; {gpu_note}",
                            "smaller batches: more steps per epoch, less memory per batch", [], cols, [],
                            note="give the batch size and sample shape (or probe) for numbers")
    per_sample = h.batch_bytes / bs
    evidence.append(f"one sample: {fmt_bytes(per_sample)}; one batch of {bs}: {fmt_bytes(h.batch_bytes)}")
    n, pf = s.num_workers, s.effective_prefetch_factor
    rows = []
    for v in sorted({max(1, bs // 2), bs, bs * 2, bs * 4}):
        b = int(per_sample * v)
        need = h.shm_need(n, pf, b) if n else 0
        rows.append(TradeoffRow(v, {"batch_size": str(v), "batch bytes": fmt_bytes(b),
                                    "/dev/shm in flight": h.shm_text(n, pf, b) if n else "0 (no workers)",
                                    "fits /dev/shm": h.fit_text(need) if n else "yes"},
                                {"batch_bytes": b, "shm_bytes": need}, current=(v == bs), fits=h.fits(need) if n else True))
    if h.probe is not None and h.probe.best is not None and h.probe.best.samples_per_s:
        evidence.append(f"best measured: {h.probe.best.samples_per_s:.0f} samples/s at batch_size "
                        f"{h.probe.workload.batch_size} (measured)")
    if n:
        raising = (f"batch_size {bs * 2}: {h.shm_text(n, pf, int(per_sample * bs * 2))} of /dev/shm"
                   f" ({fmt_bytes(h.shm_free)} free, computed); {gpu_note}")
        lowering = (f"batch_size {max(1, bs // 2)}: {h.shm_text(n, pf, int(per_sample * max(1, bs // 2)))} of "
                    "/dev/shm; twice the steps per epoch")
    else:
        raising = f"batch_size {bs * 2}: {fmt_bytes(per_sample * bs * 2)} per batch (no workers, no /dev/shm); {gpu_note}"
        lowering = f"batch_size {max(1, bs // 2)}: {fmt_bytes(per_sample * max(1, bs // 2))} per batch; more steps per epoch"
    return KnobTradeoff("batch_size", bs, raising, lowering, evidence, cols, rows)


_BUILDERS = {"num_workers": _num_workers, "prefetch_factor": _prefetch, "pin_memory": _pin,
             "persistent_workers": _persistent, "batch_size": _batch_size}


def tradeoffs(facts: MachineFacts, settings: LoaderSettings | None = None, *, batch_bytes: int | None = None,
              probe: ProbeReport | None = None) -> list[KnobTradeoff]:
    """The trade-off of each knob for these settings on this machine (knobs in KNOB_ORDER)."""
    if settings is None:
        settings = (probe.recommended if probe is not None and probe.recommended else None) or LoaderSettings()
    if batch_bytes is None:
        batch_bytes = batch_bytes_from_probe(probe, settings)
    here = _Here(facts, settings, batch_bytes, probe)
    items = [_BUILDERS[k](here) for k in KNOB_ORDER]
    measured_bs = probe.workload.batch_size if probe is not None else None
    if measured_bs and settings.batch_size and settings.batch_size != measured_bs:
        # measurements stay what they were: say which batch size they belong to
        for t in items:
            if any(r.measured for r in t.rows):
                t.evidence.append(f"measured at batch_size {measured_bs}; these settings use {settings.batch_size}")
    return items


def to_dict(items: list[KnobTradeoff]) -> list[dict[str, Any]]:
    return [t.to_dict() for t in items]
