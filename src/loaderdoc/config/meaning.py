"""Finding DataLoader settings by what their keys mean, at any depth, in any layout.

A key's name is split into words (``per_device_train_batch_size`` -> per device / train / batch
size, ``NUM_WORKERS``, ``numWorkers``, ``train_batch_size0``); words that only say which loader
(train, val, eval, test), how the batch is counted (per GPU, total, global, micro, local) or
where it sits (data, loader, num, of) are set aside, and what is left names the setting:
``workers`` is ``num_workers``, ``batch size`` / ``batch`` / ``bs`` / ``samples per GPU`` /
``ims per batch`` are ``batch_size``, ``pin mem`` is ``pin_memory``, and so on.

Settings are grouped into loaders by the nearest train/val/test-like word, in the key itself or
in a key above it (``train_ds``, ``train_dataloader``, ``data.val``, ``dataloader.test``); a
setting with no such word (``data.workers_per_gpu``, HF's ``dataloader_num_workers``) is shared by
every loader below the table that holds it. No torch, no textual.
"""

from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field, fields
from typing import Any

from loaderdoc.base.settings import LoaderSettings
from loaderdoc.config.tree import Origin, Seq, Table, Unread

SETTING_ORDER = tuple(f.name for f in fields(LoaderSettings))
# settings that make a table a DataLoader's; the others (shuffle, drop_last, ...) join one only
# beside or just below these, since `shuffle` and `timeout` mean many things in a project's config
STRONG = ("num_workers", "batch_size", "pin_memory", "persistent_workers", "prefetch_factor")

SPLITS = {"train": "train", "training": "train", "val": "val", "valid": "val", "validation": "val", "validate": "val",
          "dev": "val",
          "eval": "eval", "evaluation": "eval", "evaluator": "eval", "evaluators": "eval", "test": "test", "testing": "test", "predict": "predict",
          "prediction": "predict", "inference": "predict"}
FILLER = {"dataloader", "dataloaders", "data", "loader", "loaders", "dl", "cfg"}
COUNT_WORDS = {"num", "n", "nb", "number", "of"}  # "num_workers": filler before the setting's words only
PER_UNITS = {"gpu", "gpus", "device", "devices", "card", "cards", "replica", "rank", "proc", "process", "core"}
PER_GPU_WORDS = {"local", "micro", "device"}  # device_train_batch_size: one process's (OLMo, llm-foundry)
TOTAL_WORDS = {"total", "global"}
SAMPLE_WORDS = {"samples", "imgs", "ims", "images", "sample", "img", "videos", "video", "clips"}
# keys that make the batch a size, not a count: each batch is packed up to so many bins, tokens or
# frames (ESPnet's batch_bins, fairseq's max_tokens, Open-Sora's bucket_config, SpeechBrain's
# dynamic batching), so its sample count is decided batch by batch
PACKED_BATCH = {"batch_bins", "max_tokens", "bucket_config", "max_batch_length", "max_batch_len",
                "dynamic_batching"}
PACKED_WHY = ("batches packed by size, not counted: the framework fills each batch up to this many bins, "
              "tokens or frames, so the samples in one vary batch to batch")
# a `batch_type` beside `batch_size` that makes it a size (FunASR's `length`, WeNet's `dynamic`,
# ESPnet's `numel`); `static` / `example` / `sorted` / `folded` keep it a count of samples
SIZE_BATCH_TYPES = {"length", "token", "tokens", "frame", "frames", "numel", "bin", "bins", "dynamic",
                    "duration", "size", "bucket"}

# what the remaining words name
NAMES: dict[tuple[str, ...], str] = {
    ("workers",): "num_workers", ("worker",): "num_workers",
    ("batch", "size"): "batch_size", ("batch",): "batch_size", ("bs",): "batch_size", ("batchsize",): "batch_size",
    ("pin", "memory"): "pin_memory", ("pin", "mem"): "pin_memory", ("pin",): "pin_memory",
    ("persistent", "workers"): "persistent_workers", ("persistent", "worker"): "persistent_workers",
    ("prefetch", "factor"): "prefetch_factor", ("prefetch",): "prefetch_factor",
    ("shuffle",): "shuffle", ("drop", "last"): "drop_last", ("timeout",): "timeout", ("in", "order"): "in_order",
    ("multiprocessing", "context"): "multiprocessing_context", ("mp", "context"): "multiprocessing_context",
}
# tables whose keys configure something other than a DataLoader (Hydra's launcher, Ray's workers, ...)
OTHER_TOOLS = {"hydra", "ray", "scaling", "launcher", "sweeper", "slurm", "submitit", "deepspeed", "zero",
               "distributed", "cluster", "server", "serving", "callbacks", "logger", "loggers", "profiler"}
# keys a DataLoader (or a framework's loader dict) takes that loaderdoc does not tune: never an error
OTHER_LOADER_KEYS = {
    "sampler", "batch_sampler", "dataset", "collate_fn", "worker_init_fn", "generator", "pin_memory_device",
    "snapshot_every_n_steps", "_target_", "_partial_", "type", "class_path", "init_args",
}
INHERITANCE_KEYS = {"_base_", "_BASE_", "defaults"}
SCOPE_ORDER = ("per_gpu", "loader", "total")  # the loader's own batch first when a file states several
SCOPE_WORDS = {"per_gpu": "per GPU", "total": "in total over all GPUs", "loader": "per loader"}


def words(key: str) -> list[str]:
    """``per_device_train_batch_size0`` -> [per, device, train, batch, size]; camelCase split too."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)
    spaced = re.sub(r"\d+$", "", spaced)
    return [w for w in re.split(r"[^A-Za-z0-9]+", spaced.lower()) if w]


@dataclass(frozen=True)
class Meaning:
    setting: str
    split: str | None  # "train", "val", ... when the key's own name says
    scope: str  # batch sizes: "per_gpu", "total" (across all GPUs) or "loader" (the loader's own)
    full: bool = False  # the key holds the setting's whole name (``dataloader_pin_memory``), not a short one


def meaning_of(key: str) -> Meaning | None:
    """What a key names, or None when it is not a DataLoader setting."""
    split, scope, rest, per_unit = None, "loader", [], False
    ws = words(key)
    i = 0
    while i < len(ws):
        w = ws[i]
        if w in SPLITS and split is None:
            split = SPLITS[w]
        elif w == "per" and i + 1 < len(ws) and ws[i + 1] in PER_UNITS:
            scope, per_unit = "per_gpu", True
            i += 1
        elif w in PER_GPU_WORDS:
            scope = "per_gpu"
        elif w in TOTAL_WORDS:
            scope = "total"
        elif (w in COUNT_WORDS or w == "use") and not rest:
            pass  # num_workers, use_shuffle (ClassyVision), use_pin_memory: the setting's words follow
        elif w not in FILLER:
            rest.append(w)
        i += 1
    names = tuple(rest)
    if len(names) == 3 and names[0] in SAMPLE_WORDS and names[1:] == ("per", "batch"):
        return Meaning("batch_size", split, "total")  # detectron2's IMS_PER_BATCH: over all GPUs
    if len(names) == 1 and names[0] in SAMPLE_WORDS and per_unit:
        return Meaning("batch_size", split, "per_gpu")  # MMCV's samples_per_gpu
    setting = NAMES.get(names)
    if setting is None:
        return None
    return Meaning(setting, split, scope if setting == "batch_size" else "loader",
                   full=names == tuple(setting.split("_")))


def split_of_key(key: str) -> str | None:
    for w in words(key):
        if w in SPLITS:
            return SPLITS[w]
    return None


@dataclass
class Hit:
    """One key that states a DataLoader setting."""

    setting: str
    path: tuple[str, ...]  # in the merged config
    value: Any
    origin: Origin | None
    split: str | None
    scope: str
    # in an entry of a list of loaders (OLMo's ``evaluators:``): (the list's path, the entry's index,
    # its label); each entry is a loader of its own
    item: tuple[tuple[str, ...], int, str] | None = None

    @property
    def key(self) -> str:
        return self.path[-1]

    @property
    def owner(self) -> tuple[str, ...]:
        return self.path[:-1]


# what a machine-decided value counts, as ``RunValue.on`` reads it from the machine's counts
MACHINE_COUNTS = {"cpu_count": "os.cpu_count()", "world_size": "the job's process count (WORLD_SIZE)"}


@dataclass(frozen=True)
class RunValue:
    """What the run gets for a setting where a framework stands between the file and torch: a value
    its rule works out from the file (SlowFast's TRAIN.BATCH_SIZE / NUM_GPUS), or, with ``machine``
    (a key of MACHINE_COUNTS), a count of the machine it runs on (lightly's ``num_workers: -1`` is
    its ``os.cpu_count()``; at most ``cap``: kohya's ``min(max_data_loader_n_workers,
    os.cpu_count())``). ``rule`` names the framework's rule and where it is."""

    value: Any
    rule: str
    machine: str | None = None
    cap: int | None = None

    def on(self, counts: dict[str, int | None] | None) -> Any:
        """The value on a machine of these ``counts`` (None where the machine decides and its count is unknown)."""
        if self.machine is None:
            return self.value
        got = (counts or {}).get(self.machine)
        if got is None:
            return None
        return min(got, self.cap) if self.cap is not None else got


@dataclass
class FoundLoader:
    """One DataLoader's settings as a config states them, each with the key and file that set it."""

    name: str  # "train", "val", "test", "eval"; "" when the file has one loader
    layout: str = ""  # which layout it was read in, for the report: "mmengine", "Hydra", ... (layouts.refine)
    values: dict[str, Any] = field(default_factory=dict)  # DataLoader setting -> raw value
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # setting -> key path in the merged config
    origins: dict[str, Origin] = field(default_factory=dict)  # setting -> the file and line that set it
    # settings the file leaves to run time (a `.py` config's `os.cpu_count()`, `${oc.env:...}`): setting -> its text
    unreadable: dict[str, str] = field(default_factory=dict)
    unreadable_why: dict[str, str] = field(default_factory=dict)
    unread_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # setting -> the key left to run time
    # settings not in the file that the framework sets itself (TrainingArguments' pin_memory=True)
    defaults: dict[str, tuple[Any, str]] = field(default_factory=dict)
    batch_scope: str = "loader"  # how the file counts batch_size: "loader", "per_gpu" or "total"
    entry: bool = False  # one entry of a list of loaders (``evaluators:``): takes no shared setting
    # what the framework makes of a setting the file states (layouts.refine): setting -> what the run gets
    run: dict[str, RunValue] = field(default_factory=dict)
    also: list[str] = field(default_factory=list)  # other batch sizes the file states (a global batch)

    def where(self, setting: str) -> str:
        """``train_dataloader.num_workers``, or why the value is there without a key."""
        path = self.keys.get(setting)
        if path:
            return ".".join(path)
        if setting in self.defaults:
            return self.defaults[setting][1]
        return f"{self.layout} default"

    def put(self, setting: str, value: Any, path: tuple[str, ...], origin: Origin | None = None) -> None:
        self.values[setting] = value
        self.keys[setting] = path
        if origin is not None:
            self.origins[setting] = origin

    def raw_settings(self, counts: dict[str, int | None] | None = None) -> dict[str, Any]:
        """What the DataLoader gets: the file's values over the framework's own defaults, and over
        them what the framework makes of them (a machine's count from ``counts``; left out, torch's
        default, where that is not known)."""
        out = {**{k: v for k, (v, _) in self.defaults.items()}, **self.values}
        for setting, run in self.run.items():
            value = run.on(counts)
            if value is None and run.machine is not None:
                out.pop(setting, None)
            else:
                out[setting] = value
        return out


@dataclass
class Found:
    loaders: list[FoundLoader]
    unattributed: list[str] = field(default_factory=list)  # settings found that no loader could take
    disagreeing: dict[str, str] = field(default_factory=dict)  # setting -> its note in unattributed


LOADER_WORDS = {"dataloader", "dataloaders", "loader", "loaders"}
AUTO_WHY = ("'auto': the framework decides it when the job starts (DeepSpeed's Hugging Face integration fills it "
            "from TrainingArguments; Lightning and others from the machine)")
NEGATIVE_WHY = ("a negative count the framework turns into a number when the job runs (-1 is often every CPU, or "
                "as many as fit); loaderdoc does not know the rule of this file's framework")
COUNTS = ("num_workers", "batch_size", "prefetch_factor")


def collect_hits(tree: Table, opaque: list[str] | None = None) -> list[Hit]:
    """Every key that states a DataLoader setting; ``opaque`` gets the loader tables that only
    running the config would fill (``dataloader = get_config(...).dataloader``)."""
    hits: list[Hit] = []

    def walk(node: Any, path: tuple[str, ...], item: tuple[tuple[str, ...], int, str] | None) -> None:
        if isinstance(node, Table):
            for key, value in node.items():
                if not isinstance(key, str) or key in INHERITANCE_KEYS:
                    continue
                if key in PACKED_BATCH and value not in (None, False, 0):
                    hits.append(Hit("batch_size", (*path, key), Unread(f"{key}: {_shown(value)}", PACKED_WHY),
                                    node.origins.get(key), split_of_key(key), "total", item))
                    continue
                if key == "batch_size" and value is not None and \
                        str(node.get("batch_type", "")).strip().lower() in SIZE_BATCH_TYPES:
                    hits.append(Hit("batch_size", (*path, key), Unread(f"{key}: {_shown(value)} (batch_type: "
                                    f"{node['batch_type']})", PACKED_WHY), node.origins.get(key), None, "loader", item))
                    continue
                if isinstance(value, Table) and any(value.get(k) is False for k in ("enable", "enabled")):
                    continue  # a loader the file switches off (torchtitan's [validation] enable = false)
                if isinstance(value, Table) and builds_a_dataset(value):
                    continue  # its keys are the dataset class's arguments (MONAI CacheDataset's cache-filling num_workers)
                if isinstance(value, (Table, Seq)):
                    # a YAML template outside any split is read where it is merged, never as every loader's
                    template = isinstance(value, Table) and value.template and \
                        not any(split_of_key(k) for k in (*path, key))
                    if not (set(words(key)) & OTHER_TOOLS) and not template:
                        walk(value, (*path, key), item)
                    continue
                meaning = meaning_of(key) if key not in OTHER_LOADER_KEYS else None
                if meaning is not None and isinstance(value, str) and value.strip().lower() == "auto":
                    value = Unread(value, AUTO_WHY)
                if meaning is None and isinstance(value, Unread) and opaque is not None \
                        and set(words(key)) & LOADER_WORDS:
                    opaque.append(f"{'.'.join((*path, key))} = {value.source}: only running the config tells "
                                  "this loader's settings")
                if meaning is None or not _fits(meaning, key, value):
                    continue
                hits.append(Hit(meaning.setting, (*path, key), value, node.origins.get(key), meaning.split,
                                meaning.scope, item))
        elif isinstance(node, Seq):
            for i, value in enumerate(node):
                if isinstance(value, (Table, Seq)):
                    walk(value, (*path, str(i)), item or ((path, i, _label_of(value, i))))

    walk(tree, (), None)
    return hits


def target_name(node: Table) -> str:
    """The class a ``_target_`` node builds (Hydra's instantiate, a MONAI bundle, LazyConfig), its last
    dotted name: ``torch.utils.data.DataLoader`` -> ``DataLoader``; "" where it names none."""
    target = node.get("_target_")
    return target.strip().rsplit(".", 1)[-1].split("(")[0] if isinstance(target, str) else ""


def builds_a_dataset(node: Table) -> bool:
    return target_name(node).endswith("Dataset")


def builds_a_loader(node: Table) -> bool:
    """A node that is the DataLoader call itself: its keys are the call's arguments, and what it leaves
    out is the class's default (torch's, for torch's DataLoader and its subclasses that keep them)."""
    return target_name(node).endswith("DataLoader")


def _shown(value: Any) -> str:
    text = "{...}" if isinstance(value, Table) else "[...]" if isinstance(value, Seq) else repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _label_of(entry: Any, index: int) -> str:
    """How an entry of a list of loaders is named: its ``label`` or ``name``, else its place."""
    if isinstance(entry, Table):
        for key in ("label", "name"):
            if isinstance(entry.get(key), str) and entry[key].strip():
                return entry[key].strip()[:60]
    return f"#{index}"


def _fits(meaning: Meaning, key: str, value: Any) -> bool:
    """Whether the value can be that setting's (``auto``, DeepSpeed's and Hugging Face's, comes as an
    Unread: decided when the job starts). A key holding the setting's whole name (``num_workers``,
    ``dataloader_pin_memory``) is always taken, a wrong value then the user's to hear about; a
    short name must also carry a value of the setting's kind (``prefetch: true`` is no factor).
    ``null`` is a value only for ``batch_size`` itself: elsewhere configs write it for "the default"."""
    setting = meaning.setting
    if value is None:
        return key == "batch_size"  # the DataLoader's own keyword: None turns batching off
    if isinstance(value, str) and value.strip().lower() == "auto":
        return False
    if key == setting or (meaning.full and setting != "timeout") or isinstance(value, Unread):
        return True
    if setting in ("num_workers", "batch_size", "prefetch_factor"):
        return isinstance(value, int) and not isinstance(value, bool)
    if setting in ("pin_memory", "persistent_workers", "shuffle", "drop_last", "in_order"):
        return isinstance(value, bool) or (isinstance(value, int) and value in (0, 1))
    if setting == "timeout":
        return False  # `timeout` is read only under its own name: NCCL and HTTP have timeouts too
    if setting == "multiprocessing_context":
        return isinstance(value, str)
    return False


def group(hits: list[Hit], native: set[tuple[str, ...]] = frozenset(),
          referenced: dict[tuple[str, ...], list[tuple[str, ...]]] | None = None) -> Found:
    """Hits into loaders: by split, shared settings given to every loader below their table.
    In ``native`` tables (loaderdoc's own layout) every DataLoader keyword counts on its own. A key
    another setting refers to (``num_workers: 4`` used as ``!ref <num_workers>``; ``referenced``:
    target -> users) is a variable, not a shared setting: it reaches only the loaders that refer to
    it (issue 50: SpeechBrain's val and test loaders were given the train loader's 4 workers).
    ``shuffle`` is never shared: a training loader's shuffle is not its validation loader's."""
    referenced = referenced or {}
    for hit in hits:  # a -1 outside loaderdoc's own table is a framework's run-time value, never torch's
        if hit.owner not in native and hit.setting in COUNTS and isinstance(hit.value, int) \
                and not isinstance(hit.value, bool) and hit.value < 0:
            hit.value = Unread(str(hit.value), NEGATIVE_WHY)
    splits = {h.path: h.split or _enclosing_split(h.owner) for h in hits}
    hits = [h for h in hits if h.path not in referenced]  # a variable: it reaches loaders only where referenced
    strong_owners = {h.owner for h in hits if h.setting in STRONG} | set(native)
    kept: list[Hit] = []
    for hit in hits:
        if hit.setting in STRONG or hit.owner in native:
            kept.append(hit)
            continue
        for up in range(3):  # beside a strong setting, or up to two tables below one (mmengine's sampler)
            owner = hit.owner[:len(hit.owner) - up] if up else hit.owner
            if owner in strong_owners:
                kept.append(hit)
                break
    by_split: dict[str | None, list[Hit]] = {}
    entries: dict[tuple[tuple[str, ...], int, str], list[Hit]] = {}
    for hit in kept:
        if hit.item is not None:
            entries.setdefault(hit.item, []).append(hit)
        else:
            by_split.setdefault(splits[hit.path], []).append(hit)
    if "val" in by_split and "eval" in by_split and not (
            {h.setting for h in by_split["val"]} & {h.setting for h in by_split["eval"]}):
        # one evaluation loader named both ways (Mozilla TTS: eval_batch_size, num_val_loader_workers)
        by_split["val"] += by_split.pop("eval")
        splits.update((h.path, "val") for h in by_split["val"])
    unattributed: list[str] = []
    disagreeing: dict[str, str] = {}
    shared = _settle(by_split.pop(None, []), unattributed, disagreeing)
    loaders: list[FoundLoader] = []
    owners: dict[str | None, list[tuple[str, ...]]] = {}
    for split, split_hits in by_split.items():
        loader = FoundLoader(split or "")
        _fill(loader, _settle(split_hits, unattributed, disagreeing))
        owners[loader.name] = [h.owner for h in split_hits]
        loaders.append(loader)
    _entry_loaders(entries, splits, loaders, unattributed, disagreeing)
    for setting, hit_list in shared.items():
        def below(loader: FoundLoader, hits: list[Hit] = hit_list) -> list[Hit]:
            return [h for h in hits if any(o[:len(h.owner)] == h.owner for o in owners.get(loader.name, ()))]

        # a table of settings beside the loaders' own (yacs' DATA_LOADER next to TRAIN and TEST)
        # is every loader's; one above some of them is theirs
        reached = [lo for lo in loaders if not lo.entry and below(lo)]
        for loader in loaders:
            if setting in loader.keys or setting in loader.unreadable or setting == "shuffle" and loader.name != "train" \
                    or loader.entry:
                continue
            if reached and loader not in reached:
                continue
            _fill(loader, {setting: below(loader) or hit_list})
    if shared and not any(lo.name == "train" for lo in loaders):
        loader = FoundLoader("train" if loaders else "")  # beside named loaders: the training one
        _fill(loader, shared)
        loaders.insert(0, loader)
    return Found(loaders=loaders, unattributed=unattributed, disagreeing=disagreeing)


def _entry_loaders(entries: dict[tuple[tuple[str, ...], int, str], list[Hit]], splits: dict[tuple[str, ...], str | None],
                   loaders: list[FoundLoader], unattributed: list[str], disagreeing: dict[str, str]) -> None:
    """A loader per entry of a list of loaders, never merged with another (issue 50: OLMo's two
    evaluators were folded into its training loader). An entry takes what it does not set from a
    loader of its split stated outside the list (``device_eval_batch_size`` beside ``evaluators:``),
    which it then replaces; nothing from the shared settings, which are the other loaders'."""
    for (seq_path, _, label), entry_hits in entries.items():
        split = next((splits[h.path] for h in entry_hits if splits[h.path]), None) or _enclosing_split(seq_path)
        loader = FoundLoader(f"{split or (seq_path[-1] if seq_path else 'loader')} ({label})", entry=True)
        _fill(loader, _settle(entry_hits, unattributed, disagreeing))
        outside = next((lo for lo in loaders if lo.name == split), None) if split else None
        if outside is not None:
            for setting in SETTING_ORDER:
                if setting in outside.keys and setting not in loader.keys and setting not in loader.unreadable:
                    loader.put(setting, outside.values[setting], outside.keys[setting], outside.origins.get(setting))
                    if setting == "batch_size":
                        loader.batch_scope, loader.also = outside.batch_scope, list(outside.also)
        loaders.append(loader)
    replaced = {lo.name.split(" (")[0] for lo in loaders if lo.entry}
    loaders[:] = [lo for lo in loaders if lo.entry or lo.name not in replaced]


def _enclosing_split(owner: tuple[str, ...]) -> str | None:
    for key in reversed(owner):
        split = split_of_key(key)
        if split is not None:
            return split
    return None


def _settle(hits: list[Hit], unattributed: list[str], disagreeing: dict[str, str]) -> dict[str, list[Hit]]:
    """Setting -> the hits that state it, one value each; two keys that disagree (in the same scope)
    are said (in ``unattributed``, and by setting in ``disagreeing``) and left out, never one picked
    at random."""
    out: dict[str, list[Hit]] = {}
    per_owner = collections.Counter(h.owner for h in hits)
    # where keys agree, the one in the table holding most of the loader's settings is named (its
    # DataLoader arguments: super-gradients' val_dataloader_params.batch_size over a legacy val_batch_size)
    for hit in sorted(hits, key=lambda h: -per_owner[h.owner]):
        out.setdefault(hit.setting, []).append(hit)
    for setting, hit_list in list(out.items()):
        if setting == "batch_size":
            if any(h.value is not None for h in hit_list):  # a null beside a number is "not set here"
                hit_list = [h for h in hit_list if h.value is not None]  # (super-gradients' empty shortcut)
            best = min(SCOPE_ORDER.index(h.scope) for h in hit_list)
            chosen = [h for h in hit_list if SCOPE_ORDER.index(h.scope) == best]
            others = [h for h in hit_list if h not in chosen]
            hit_list = chosen + others
            out[setting] = hit_list
        else:
            chosen = hit_list
        values = {repr(h.value) for h in chosen}
        if len(values) > 1:
            where = ", ".join(f"{'.'.join(h.path)} = {h.value!r}" for h in chosen)
            note = f"{setting}: {where} disagree; which one a loader uses depends on the code"
            unattributed.append(note)
            disagreeing.setdefault(setting, note)
            del out[setting]
    return out


def _fill(loader: FoundLoader, settled: dict[str, list[Hit]]) -> None:
    for setting in SETTING_ORDER:
        hit_list = settled.get(setting)
        if not hit_list:
            continue
        hit = hit_list[0]
        if isinstance(hit.value, Unread):
            loader.unreadable[setting] = hit.value.source
            loader.unreadable_why[setting] = hit.value.why
            loader.unread_keys[setting] = hit.path
            if hit.origin is not None:
                loader.origins[setting] = hit.origin
        else:
            loader.put(setting, hit.value, hit.path, hit.origin)
        if setting == "batch_size":
            loader.batch_scope = hit.scope
            loader.also = [f"{'.'.join(h.path)} = {h.value!r} ({SCOPE_WORDS[h.scope]})" for h in hit_list[1:]
                           if not isinstance(h.value, Unread)]
