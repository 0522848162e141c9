"""``loaderdoc watch --fixes FILE``: the settings a watched run's findings propose, per loader, as a
file the next ``loaderdoc watch --apply FILE`` reads, so a fix is tried on the real job without a
code change and the loop watch -> apply -> watch can run until nothing more is proposed.

Each loader's table holds what ``--apply`` set on it in this run (kept) and the change its findings
propose (``LoaderReport.proposed``). Loaders are tables by their role: ``[dataloader]``
(every loader) where the run's loaders have no role, ``[train_dataloader]``, ``[val_dataloader]``,
``[test_dataloader]`` (mmengine's names, which ``--apply`` reads) where a framework built them. Of
several loaders of one role (the ranks of a job, or two unnamed loaders) the one with the most
waited batches speaks: the training loop's. A change's ``torch_threads`` (the training process's
intra-op threads) is per process: it goes to a ``[process]`` table, never a loader's, with what
``--apply`` set there kept. No torch, no textual.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from loaderdoc.base.settings import PROCESS_KEYS, PROCESS_TABLE, split_process
from loaderdoc.watching.apply import WORKER_ONLY, table_key

if TYPE_CHECKING:
    from loaderdoc.watching.report import WatchReport

TABLE_OF_ROLE = {"": "dataloader", "train": "train_dataloader", "val": "val_dataloader",
                 "test": "test_dataloader"}


def fix_tables(report: WatchReport) -> tuple[dict[str, dict[str, Any]], list[str]]:
    """(table name -> settings) for the next run, and notes on what could not be put in a table."""
    tables: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    proposed_any = False
    # the process's own knobs (torch_threads): one [process] table, what --apply set kept, the
    # proposal of the loader with the most waited batches (the training loop's) winning
    process = dict(((report.apply or {}).get("process") or {}) if isinstance(report.apply, dict) else {})
    process = {k: v for k, v in process.items() if k in PROCESS_KEYS}
    process_proposed: dict[str, Any] = {}
    for entry in sorted(report.loaders, key=lambda e: -e.waits):
        role = table_key(entry.role) or ""
        name = TABLE_OF_ROLE.get(role)
        change, proposed_here = split_process((entry.proposed or {}).get("change") or {})
        for key, value in proposed_here.items():
            if value is not None:
                process_proposed.setdefault(key, value)
        proposed_any = proposed_any or bool(change) or bool(proposed_here)
        if name is None:
            if change:
                notes.append(f"the {role} loader's change ({_kv(change)}) has no table --apply reads; set it in the code")
            continue
        if name in tables:
            continue  # another rank's loader of this role, or a second unnamed loader
        ran = entry.settings or {}
        table = {k: ran[k] for k in entry.applied.get("applied") or [] if ran.get(k) is not None}
        table.update({k: v for k, v in change.items() if v is not None})
        if not table.get("num_workers"):
            for key in WORKER_ONLY:
                table.pop(key, None)
        if table:
            tables[name] = table
    if "dataloader" in tables and len(tables) > 1:  # --apply reads either layout, never both in one file
        notes.append(f"the unnamed loaders' settings ({_kv(tables.pop('dataloader'))}) are left out beside "
                     "the named loaders' tables")
    process.update(process_proposed)
    if process:  # per process, not a loader's: after the loader tables, as --export writes it
        tables[PROCESS_TABLE] = process
    if not proposed_any:
        notes.insert(0, "no finding proposes a change")
    return tables, notes


def fixes_toml(report: WatchReport, tables: dict[str, dict[str, Any]], notes: list[str]) -> str:
    """The tables as TOML, with a header saying where they came from and how to use them."""
    import shlex

    import tomli_w

    command = shlex.join(report.command or ["python", "train.py"])
    head = ["loaderdoc watch --fixes: the DataLoader settings to try next, from the run of",
            f"  {command}",
            "what --apply set in that run, plus the changes its findings propose; try them with",
            f"  loaderdoc watch --apply THIS_FILE --fixes NEXT_FILE -- {command}"]
    for entry in report.loaders:
        proposed = entry.proposed
        if proposed:
            gain = proposed.get("expected_gain")
            head.append(f"{entry.role or 'loader ' + str(entry.number)}: {_kv(proposed['change'])} "
                        f"({', '.join(proposed['rules'])}"
                        + (f"; expected {gain:.2f}x the steps/s measured)" if gain is not None else ")"))
    threads = tables.get(PROCESS_TABLE, {}).get("torch_threads")
    if threads is not None:
        head.append(f"[{PROCESS_TABLE}] torch_threads = {threads}: the training process's intra-op threads (--apply sets "
                    f"OMP_NUM_THREADS={threads} and torch.set_num_threads({threads}))")
    head += notes
    return "".join(f"# {line}\n" for line in head) + "\n" + tomli_w.dumps(tables)


def _kv(change: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in change.items())
