"""Runs inside the user's process: names each DataLoader by its role, and under ``--apply`` builds
it with the settings of the user's file.

Standard library only, loaded by path beside :mod:`hook` (``hook._sibling("apply")``). The hook's
``patch()`` wraps ``DataLoader.__init__`` with :func:`wrap_init`; construction is rare (a few
loaders per run), so what it costs there (a bounded walk up the call stack) never reaches a batch.

The role: the nearest caller that is a framework's loader hook (Lightning's ``train_dataloader`` ...
``predict_dataloader``, Hugging Face Trainer's ``get_train_dataloader`` / ``get_eval_dataloader``
/ ``get_test_dataloader``) names it; a loader re-built from another one (Lightning's
``_update_dataloader``, accelerate's ``prepare_data_loader``, both holding it as ``dataloader``)
inherits the role and what the script asked from that one.

``--apply``: the launcher passes per-role tables in ``LOADERDOC_WATCH_APPLY`` (JSON: ``{"file": ...,
"tables": {"": {...}, "train": {...}}, "process": {"torch_threads": k}}``; "" is every loader, a
role's table wins over it; ``process`` only where the file has a ``[process]`` table: the hook calls
``torch.set_num_threads(k)`` as it patches torch, beside the launcher's ``OMP_NUM_THREADS=k``). Only
settings that leave the training unchanged are in them (:data:`APPLIED`). The merged arguments are
made consistent (no worker-only setting without workers); if torch still refuses them, one line
says so and the loader is built with the script's own arguments. Nothing here raises into the
user's program that the script's own arguments would not raise.
"""

from __future__ import annotations

import contextlib
import functools
import operator
import os
import sys

ENV_APPLY = "LOADERDOC_WATCH_APPLY"
# what --apply may change: how batches are made, never which batches (batch_size, shuffle, drop_last)
APPLIED = ("num_workers", "prefetch_factor", "persistent_workers", "pin_memory", "in_order", "timeout",
           "multiprocessing_context")
WORKER_ONLY = {"prefetch_factor": None, "persistent_workers": False, "multiprocessing_context": None}
# what the script asked, kept for the report (shuffle too: a DataLoader keeps no attribute of it, and
# an export of the loader, `loaderdoc tune --export`, must say what the script said)
RECORDED = ("num_workers", "batch_size", "shuffle", "prefetch_factor", "persistent_workers", "pin_memory",
            "drop_last", "in_order", "timeout", "multiprocessing_context")
ROLE_OF_FUNCTION = {
    # Lightning's hooks (a LightningModule's or a LightningDataModule's)
    "train_dataloader": "train", "val_dataloader": "val", "test_dataloader": "test",
    "predict_dataloader": "predict",
    # Hugging Face Trainer (transformers 4 and 5: each calls _get_dataloader, which builds it)
    "get_train_dataloader": "train", "get_eval_dataloader": "eval", "get_test_dataloader": "test",
}
MAX_FRAMES = 40  # accelerate's re-build sits ~8 frames below get_train_dataloader
SOURCE_LOCAL = "dataloader"  # the loader a re-build copies, in Lightning's and accelerate's frames
ROLE = "_loaderdoc_role"
ASKED = "_loaderdoc_asked"
APPLIED_KEYS = "_loaderdoc_applied"
TABLES_USED = "_loaderdoc_tables"
SITE = "_loaderdoc_site"  # where the script built it ("data.py:12 < train.py:42"): a table "site:" + that is its own
# ... and the callers above those two lines ("data.py:12 < data.py:20 < train.py:42"): where one helper
# builds every loader, "site:" + a longer chain names one (issue 49: build_loader(split) -> _make)
STACK = "_loaderdoc_stack"
STACK_DEPTH = 8
SITE_PREFIX = "site:"
_MARK = "_loaderdoc_watch"


def table_key(role: str | None) -> str | None:
    """The table a role reads: val and eval are one (Lightning says val, Hugging Face eval)."""
    return "val" if role == "eval" else role


# how torch uses each setting: a count goes through range() and arithmetic (np.int64(2) workers are
# 2 workers, True is 1), a flag through truth tests (np.True_ pins memory), timeout through comparisons
COUNTS = ("num_workers", "batch_size", "prefetch_factor")
FLAGS = ("shuffle", "persistent_workers", "pin_memory", "drop_last", "in_order")
SECONDS = ("timeout",)


def as_torch_reads(name: str, value):
    """``value`` of setting ``name`` as torch reads it (a numpy or enum number as the plain int or
    float it stands for, a flag as True/False); None stays None (not given); a value torch refuses
    is kept as :func:`plain` writes it."""
    if value is not None:
        with contextlib.suppress(Exception):  # a __bool__ or __index__ that raises: torch refuses it too
            if name in FLAGS:
                return bool(value)
            if name in COUNTS:
                return operator.index(value)
            if name in SECONDS and not isinstance(value, bool):
                return operator.index(value) if hasattr(type(value), "__index__") else float(value)
    return plain(value)


def plain(value):
    """A value as the records keep it: JSON's scalars, a start method's name, else its repr."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    name = getattr(value, "_name", None)  # a multiprocessing context object
    return name if isinstance(name, str) else repr(value)


def site_of(frame, loader) -> str | None:
    """Where ``loader`` was built: the nearest caller of ``DataLoader.__init__`` that is not a
    subclass's ``__init__`` of the same object, and that line's own caller ("train.py:12 <
    train.py:40"): one helper that builds the train and the val loader is two sites. The same
    lines in the next run of the script build the same loader, which is how ``loaderdoc tune``
    changes one loader and leaves the others."""
    return site_in(stack_of(frame, loader))


def site_in(stack: str | None) -> str | None:
    """The site a chain of lines starts with: its first two."""
    return None if not stack else " < ".join(stack.split(" < ")[:2])


def stack_of(frame, loader) -> str | None:
    """The site and its callers above, up to STACK_DEPTH lines ("a.py:12 < a.py:20 < train.py:42")."""
    try:
        for _ in range(MAX_FRAMES):
            if frame is None:
                return None
            if frame.f_code.co_name != "__init__" or frame.f_locals.get("self") is not loader:
                lines = []
                while frame is not None and len(lines) < STACK_DEPTH:
                    lines.append(f"{frame.f_code.co_filename}:{frame.f_lineno}")
                    frame = frame.f_back
                return " < ".join(lines)
            frame = frame.f_back
        return None
    finally:
        del frame


def chain_matches(chain: str, stack: str | None) -> bool:
    """``chain`` (a site table's) names the loader built at ``stack``: the same lines, or its first ones."""
    return stack is not None and (stack == chain or stack.startswith(chain + " < "))


def role_from_stack(frame, loader) -> tuple[str | None, object | None]:
    """(role, the loader this one is re-built from) from the callers of ``DataLoader.__init__``."""
    try:
        for _ in range(MAX_FRAMES):
            if frame is None:
                break
            code = frame.f_code
            role = ROLE_OF_FUNCTION.get(code.co_name)
            if role is not None:
                return role, None
            if SOURCE_LOCAL in code.co_varnames:
                source = frame.f_locals.get(SOURCE_LOCAL)
                if source is not None and source is not loader and hasattr(source, ASKED):
                    return getattr(source, ROLE, None), source
            frame = frame.f_back
        return None, None
    finally:
        del frame


class Applier:
    """The tables of ``--apply`` (None: only names the loaders), and the lines said once each."""

    def __init__(self, plan: dict | None) -> None:
        plan = plan if isinstance(plan, dict) else {}
        tables = plan.get("tables")
        self.tables: dict[str, dict] | None = (
            {k: {s: v for s, v in t.items() if s in APPLIED} for k, t in tables.items() if isinstance(t, dict)}
            if isinstance(tables, dict) else None)
        self.file = plan.get("file") or "the --apply file"
        self._said: set[str] = set()
        process = plan.get("process")
        threads = process.get("torch_threads") if isinstance(process, dict) else None
        self.torch_threads = threads if type(threads) is int and threads >= 1 else None

    def set_torch_threads(self) -> None:
        """``[process] torch_threads``: torch.set_num_threads(k) once torch is imported (the hook calls it
        as it patches torch's dataloader module), so a script whose environment its own launcher
        replaced (OMP_NUM_THREADS lost) still runs with k. Never raises."""
        torch = sys.modules.get("torch")
        if self.torch_threads is None or torch is None:
            return
        try:
            torch.set_num_threads(self.torch_threads)
        except Exception as exc:
            self.say(f"torch_threads={self.torch_threads} not applied: torch.set_num_threads failed ({exc})")

    @classmethod
    def from_env(cls) -> Applier:
        raw = os.environ.get(ENV_APPLY)
        if not raw:
            return cls(None)
        try:
            import json

            return cls(json.loads(raw))
        except ValueError as exc:
            _say(f"{ENV_APPLY} is not JSON ({exc}); nothing applied")
            return cls(None)

    def say(self, message: str) -> None:
        if message not in self._said:
            self._said.add(message)
            _say(f"--apply {self.file}: {message}")

    def table_for(self, role: str | None, site: str | None = None, stack: str | None = None) -> tuple[dict, list[str]]:
        """The settings for a loader of ``role`` built at ``site`` (``stack``: with its callers) and
        the tables they came from ("" first, then the role's, then the site's: the more particular
        one wins; of the site tables, the one naming the longest chain of the loader's lines)."""
        out: dict = {}
        used = []
        sites = [k for k in self.tables or {} if k.startswith(SITE_PREFIX)
                 and chain_matches(k[len(SITE_PREFIX):], stack or site)]
        for key in ("", table_key(role), max(sites, key=len) if sites else None):
            table = (self.tables or {}).get(key) if key is not None else None
            if table:
                out.update(table)
                used.append(key)
        return out, used


def wrap_init(cls, applier: Applier, on_class=None, on_refused=None) -> bool:
    """Wrap ``cls.__init__`` once; True when it is (now) wrapped. The hook's ``patch()`` calls it as
    torch's dataloader module is imported: torch is there, so --apply's ``torch_threads`` is set first.
    ``on_class(type(loader))`` runs at each construction (the hook wraps a subclass's own ``__iter__``);
    ``on_refused(loader, error, role, site, stack, asked)`` where the construction raised (torch refused
    the settings: ``persistent_workers=True`` with ``num_workers=0``), before the error goes on."""
    applier.set_torch_threads()
    original = cls.__dict__.get("__init__")
    if original is None:
        return False
    if getattr(original, _MARK, False):
        return True
    signature = None
    if applier.tables is not None:
        import inspect

        signature = inspect.signature(original)

    @functools.wraps(original)  # __wrapped__: inspect.signature (Lightning reads it) sees torch's
    def __init__(self, *args, **kwargs):
        if on_class is not None and type(self) is not cls:
            with contextlib.suppress(Exception):
                on_class(type(self))
        try:
            role, source = role_from_stack(sys._getframe(1), self)
            stack = getattr(source, STACK, None) if source is not None else stack_of(sys._getframe(1), self)
            site = getattr(source, SITE, None) if source is not None else site_in(stack)
        except Exception:  # naming is a nicety: never a reason to fail a construction
            role, source, site, stack = None, None, None, None
        try:
            if signature is None:
                original(self, *args, **kwargs)
                _set(self, ROLE, role)
                _set(self, SITE, site)
                _set(self, STACK, stack)
                return
            _construct(applier, signature, original, self, role, source, args, kwargs, site, stack)
        except Exception as error:
            if on_refused is not None:
                with contextlib.suppress(Exception):
                    on_refused(self, error, role, site, stack, _asked(original, self, args, kwargs))
            raise

    setattr(__init__, _MARK, True)
    cls.__init__ = __init__
    return True


def _asked(original, loader, args, kwargs) -> dict:
    """The settings a construction was called with (torch's defaults filled in), as the records hold them."""
    import inspect

    bound = inspect.signature(original).bind(loader, *args, **kwargs)
    bound.apply_defaults()
    return {k: as_torch_reads(k, bound.arguments[k]) for k in RECORDED if k in bound.arguments}


def hide_own_frames(tb):
    """A traceback without the frames of this module's wrapper (``DataLoader.__init__`` as the hook
    wraps it): an error torch raised at construction reads as it does without loaderdoc."""
    kept = []
    while tb is not None:
        if tb.tb_frame.f_code.co_filename != __file__:
            kept.append(tb)
        tb = tb.tb_next
    for this, after in zip(kept, kept[1:] + [None], strict=True):
        this.tb_next = after
    return kept[0] if kept else None


def _construct(applier: Applier, signature, original, loader, role, source, args, kwargs, site=None,
               stack=None) -> None:
    try:
        bound = signature.bind(loader, *args, **kwargs)
    except TypeError:  # the script's own call is wrong: torch says how, as it would without us
        original(loader, *args, **kwargs)
        return
    bound.apply_defaults()
    received = bound.arguments
    asked = dict(getattr(source, ASKED, None) or {k: as_torch_reads(k, received[k]) for k in RECORDED if k in received})
    table, used = applier.table_for(role, site, stack)
    name = f"the {role} loader" if role else "a loader"
    final = {k: received[k] for k in APPLIED if k in received}
    for key, value in table.items():
        if key not in received:  # in_order on a torch before 2.6
            applier.say(f"{key}={value!r} not applied: this torch's DataLoader has no {key}")
        else:
            final[key] = value
    # torch refuses worker-only settings without workers: off where the table brought them, or took
    # the workers away (a script's own contradiction stays its own: torch says it, as without us)
    workers_changed = final.get("num_workers") != received.get("num_workers")
    if not final.get("num_workers"):
        for key, off in WORKER_ONLY.items():
            if key in final and final[key] != off and (key in table or workers_changed):
                if key in table and table[key] != off:
                    applier.say(f"{key}={table[key]!r} not applied to {name}: it needs num_workers > 0")
                final[key] = off
    changes = {k: v for k, v in final.items() if v != received[k]}
    if not changes:
        original(loader, *args, **kwargs)
    else:
        bound.arguments.update(changes)
        try:
            original(*bound.args, **bound.kwargs)
        except (ValueError, TypeError) as exc:
            original(loader, *args, **kwargs)  # the script's own settings: what it ran before
            applier.say(f"could not build {name} with {_list(changes)} ({exc}); it runs with the "
                        "script's own settings")
            changes = {}
    _set(loader, ROLE, role)
    _set(loader, SITE, site)
    _set(loader, STACK, stack)
    _set(loader, ASKED, asked)
    _set(loader, TABLES_USED, used)
    # a re-build copies its source's values (accelerate passes prefetch_factor=2 where the script
    # left torch's default): what --apply changed is what it changed on the source, and here
    inherited = getattr(source, APPLIED_KEYS, None) or []
    _set(loader, APPLIED_KEYS, [k for k in APPLIED if k in changes or k in inherited])


# a loader built outside any framework hook (passed to trainer.fit(model, train, val)) is known by
# the loop that iterates it: the nearest caller of iter(loader) that is a method of one of these
LOOP_ROLE = {"_FitLoop": "train", "_TrainingEpochLoop": "train", "_EvaluationLoop": "val",
             "_PredictionLoop": "predict", "_inner_training_loop": "train", "evaluation_loop": "eval"}
LIGHTNING_TEST_STAGE = "test"  # _EvaluationLoop._stage under trainer.test()


def role_at_iteration(frame) -> str | None:
    """The role of a loader from the callers of ``iter(loader)``: Lightning's fit, training-epoch,
    evaluation and prediction loops, the Hugging Face Trainer's training and evaluation loops."""
    try:
        for _ in range(MAX_FRAMES):
            if frame is None:
                return None
            code = frame.f_code
            owner = getattr(code, "co_qualname", code.co_name).split(".")[0]  # Python 3.10: no qualname
            role = LOOP_ROLE.get(owner) or LOOP_ROLE.get(code.co_name)
            if role is None and "self" in code.co_varnames:
                role = LOOP_ROLE.get(type(frame.f_locals.get("self")).__name__)
            if role == "val":
                stage = getattr(frame.f_locals.get("self"), "_stage", None)
                if getattr(stage, "value", stage) == LIGHTNING_TEST_STAGE:
                    role = "test"
            if role is not None:
                return role
            frame = frame.f_back
        return None
    finally:
        del frame


def at_iteration(loader, applier: Applier, frame) -> None:
    """Before ``iter(loader)``: a loader its construction did not name is named by the loop that
    iterates it, and under --apply gets its role's table now (the settings torch lets change on a
    built DataLoader; before its first workers exist where they persist)."""
    if getattr(loader, ROLE, None) is not None or getattr(loader, "_iterator", None) is not None:
        return
    role = role_at_iteration(frame)
    if role is None:
        return
    _set(loader, ROLE, role)
    key = table_key(role)
    table = (applier.tables or {}).get(key)
    used = list(getattr(loader, TABLES_USED, None) or [])
    if not table or key in used:
        return
    asked = getattr(loader, ASKED, None) or {k: as_torch_reads(k, getattr(loader, k, None)) for k in RECORDED}
    changes = {k: v for k, v in table.items() if hasattr(loader, k) and getattr(loader, k) != v}
    workers = changes.get("num_workers", getattr(loader, "num_workers", 0))
    implied = {}
    if workers and getattr(loader, "prefetch_factor", None) is None and "prefetch_factor" not in changes:
        implied["prefetch_factor"] = 2  # torch's default with workers (its constructor sets it; None without)
    if not workers:
        for k in WORKER_ONLY:
            changes.pop(k, None)
    # num_workers first: multiprocessing_context's setter refuses a loader without workers
    ordered = sorted({**changes, **implied}.items(), key=lambda kv: kv[0] != "num_workers")
    before = {k: getattr(loader, k, None) for k, _ in ordered}
    done = []
    try:
        for k, v in ordered:
            object.__setattr__(loader, k, v)  # past DataLoader's guard on persistent_workers
            done.append(k)
    except Exception as exc:
        for k in reversed(done):  # all or nothing: the loader runs as the script built it
            with contextlib.suppress(Exception):
                object.__setattr__(loader, k, before[k])
        applier.say(f"could not set {_list(changes)} on the {role} loader ({exc}); it runs with the "
                    "script's own settings")
        return
    _set(loader, ASKED, asked)
    _set(loader, TABLES_USED, [*used, key])
    _set(loader, APPLIED_KEYS, sorted({*(getattr(loader, APPLIED_KEYS, None) or []), *changes}))


def _list(changes: dict) -> str:
    return ", ".join(f"{k}={plain(v)!r}" for k, v in changes.items())


def _set(loader, name: str, value) -> None:
    # object.__setattr__: past DataLoader's guard and Lightning's recording of the script's setattrs
    with contextlib.suppress(Exception):
        object.__setattr__(loader, name, value)


def _say(message: str) -> None:
    with contextlib.suppress(Exception):
        sys.stderr.write(f"loaderdoc watch: {message}\n")


# the knobs every loader's record holds
SETTINGS = ("num_workers", "batch_size", "prefetch_factor", "persistent_workers", "pin_memory", "drop_last")


def loader_settings(loader, extra=()) -> dict:
    """The knobs read off the DataLoader object (None where it has no such attribute); ``extra``:
    more attributes to read (the ones --apply changed beyond SETTINGS)."""
    out = {}
    for name in (*SETTINGS, *extra):
        value = getattr(loader, name, None)
        if name == "batch_size" and value is None:  # built with batch_sampler= (accelerate does)
            value = getattr(getattr(loader, "batch_sampler", None), "batch_size", None)
        out[name] = as_torch_reads(name, value)
    return out
