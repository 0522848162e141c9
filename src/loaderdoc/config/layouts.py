"""What a known layout adds to reading by key names: its name, its loaders' names, and the
settings its framework sets itself when the file says nothing.

:mod:`.meaning` finds the settings in any layout; a layout recognised here only refines that
(TrainingArguments pins memory unless told not to, detectron2's ``SOLVER.IMS_PER_BATCH`` is the
training loader's batch over all GPUs, a timm ``args.yaml`` is its training loader). loaderdoc's
own layout (a ``[dataloader]`` table or top-level DataLoader keys) is strict: a misspelt key there
is a typo, and is refused. No torch, no textual.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import PROCESS_KEYS, PROCESS_TABLE, SETTING_NAMES, coerce_torch_threads, location
from loaderdoc.config import frameworks
from loaderdoc.config.meaning import OTHER_LOADER_KEYS, FoundLoader
from loaderdoc.config.tree import Origin, Table, Unread

TABLE_NAMES = ("dataloader", "data_loader", "loader")
HF_LAYOUT = "Hugging Face TrainingArguments"
HF_NAMES = {  # TrainingArguments' own fields (the export writes them)
    "dataloader_num_workers": "num_workers",
    "dataloader_pin_memory": "pin_memory",
    "dataloader_prefetch_factor": "prefetch_factor",
    "dataloader_persistent_workers": "persistent_workers",
    "dataloader_drop_last": "drop_last",
}


def _top(tree: Table, *keys: str) -> bool:
    return any(key in tree for key in keys)


def _table(tree: Table, key: str) -> Table | None:
    value = tree.get(key)
    return value if isinstance(value, Table) else None


def _has_target(tree: Table, loaders: list[FoundLoader]) -> bool:
    """A ``_target_`` key the file writes above a loader setting: not the one the Python reader
    records for a call (``config = VitsConfig(batch_size=32)`` in a script is no Hydra node)."""
    for loader in loaders:
        for path in loader.keys.values():
            node: Any = tree
            for key in path[:-1]:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, Table) and "_target_" in node and node.origins.get("_target_") is not None:
                return True
    return False


def _bundle_refs(tree: Any) -> bool:
    """A MONAI bundle's references: ``"@train#dataset"`` (another node) or ``"$@..."`` / ``"$expr"``
    (Python it evaluates), where Hydra writes ``${...}`` interpolations."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str) and (node.startswith("@") or (node.startswith("$") and not node.startswith("${"))):
            return True
    return False


@dataclass(frozen=True)
class Layout:
    name: str
    matches: Callable[[Table, list[FoundLoader], set[str]], bool]
    refine: Callable[[list[FoundLoader]], None] = lambda loaders: None
    # a framework's refinement that reads the tree too (frameworks.py: SlowFast's NUM_GPUS)
    refine_with: Callable[[list[FoundLoader], Table], None] | None = None


def _rename_shared(name: str) -> Callable[[list[FoundLoader]], None]:
    """The one loader a file configures without naming it is this framework's training loader."""
    def refine(loaders: list[FoundLoader]) -> None:
        for loader in loaders:
            if loader.name == "":
                loader.name = name
    return refine


def _train_shuffles(framework: str, rename: bool = True) -> Callable[[list[FoundLoader]], None]:
    def refine(loaders: list[FoundLoader]) -> None:
        for loader in loaders:
            if rename and loader.name == "":
                loader.name = "train"
            if loader.name == "train" and "shuffle" not in loader.keys:
                loader.defaults["shuffle"] = (True, f"{framework} shuffles its training set")
    return refine


def _hugging_face(loaders: list[FoundLoader]) -> None:
    for loader in loaders:
        if "pin_memory" not in loader.keys:
            loader.defaults["pin_memory"] = (True, f"{HF_LAYOUT} default")  # unlike torch's
        if loader.name in ("train", "") and "shuffle" not in loader.keys:
            loader.defaults["shuffle"] = (True, "the Trainer samples training data at random")


def _yolo(loaders: list[FoundLoader]) -> None:
    _train_shuffles("YOLO's train.py")(loaders)
    for loader in loaders:
        if loader.values.get("batch_size") == -1:  # YOLO's AutoBatch: sized from free GPU memory at start
            del loader.values["batch_size"]
            loader.unreadable["batch_size"] = "-1"
            loader.unreadable_why["batch_size"] = "AutoBatch picks it from free GPU memory when training starts"
        if "batch_size" in loader.keys:
            loader.batch_scope = "total"  # YOLO's batch is over all GPUs; each rank takes batch / WORLD_SIZE


def _detectron2(loaders: list[FoundLoader]) -> None:
    _rename_shared("train")(loaders)
    for loader in loaders:
        if "num_workers" not in loader.keys and "num_workers" not in loader.unreadable:
            loader.defaults["num_workers"] = (4, "detectron2's defaults.py: DATALOADER.NUM_WORKERS = 4")


def _is_deepspeed(tree: Table, loaders: list[FoundLoader], seen: set[str]) -> bool:
    """DeepSpeed's own keys, or ``train_batch_size`` beside sections shaped as DeepSpeed writes them
    (``fp16: {enabled: ...}``, ``optimizer: {type: ...}``): another trainer's ``train_batch_size`` and
    ``gradient_accumulation_steps`` alone are not evidence (kohya's were labelled DeepSpeed, issue 50)."""
    if _top(tree, "zero_optimization", "train_micro_batch_size_per_gpu"):
        return True
    shaped = any(isinstance(tree.get(k), Table) and "enabled" in tree[k] for k in ("fp16", "bf16")) or \
        isinstance(tree.get("optimizer"), Table) and "type" in tree["optimizer"]
    return "train_batch_size" in tree and shaped


def _deepspeed(loaders: list[FoundLoader]) -> None:
    for loader in loaders:
        if loader.keys.get("batch_size", ("",))[-1] == "train_batch_size":
            loader.batch_scope = "total"  # DeepSpeed's train_batch_size: micro batch x accumulation x GPUs


RTDETR = "RT-DETR (YAMLConfig)"  # unset settings: torch's (its DataLoader takes the table's keys, nothing more)
LAYOUTS = (
    Layout(frameworks.SLOWFAST, frameworks.is_slowfast, refine_with=frameworks.slowfast),
    Layout(frameworks.FAST_REID, frameworks.is_fast_reid, refine_with=frameworks.fast_reid),
    Layout(frameworks.LIGHTLY, frameworks.is_lightly, refine_with=frameworks.lightly),
    Layout(frameworks.OLMO, frameworks.is_olmo, refine_with=frameworks.olmo),
    Layout(frameworks.MOSAIC_BERT, frameworks.is_mosaic_bert, refine_with=frameworks.mosaic_bert),
    Layout(frameworks.LLM_FOUNDRY, frameworks.is_llm_foundry, refine_with=frameworks.llm_foundry),
    Layout(frameworks.KOHYA, frameworks.is_kohya, refine_with=frameworks.kohya),
    Layout(frameworks.AXOLOTL, frameworks.is_axolotl, refine_with=frameworks.axolotl),
    Layout(frameworks.MOZILLA_TTS, frameworks.is_mozilla_tts, refine_with=frameworks.mozilla_tts),
    Layout(frameworks.LDM, frameworks.is_latent_diffusion, refine_with=frameworks.latent_diffusion),
    Layout(frameworks.BASICSR, frameworks.is_basicsr, refine_with=frameworks.basicsr),
    Layout(frameworks.AUDIOCRAFT, frameworks.is_audiocraft, refine_with=frameworks.audiocraft),
    Layout("DeepSpeed", _is_deepspeed, _deepspeed),
    Layout("YOLO (ultralytics / YOLOv5)", lambda t, lo, f: "workers" in t and _top(t, "imgsz", "img_size"), _yolo),
    # RT-DETR's YAMLConfig (D-FINE, DEIM) has mmengine's *_dataloader tables but builds its own loaders
    Layout(RTDETR, lambda t, lo, f: "RT-DETR __include__" in f),
    # the Runner's own keys: a `_base_` chain alone is mmengine's Config, which other projects use with
    # loader builders of their own (Open-Sora), so it is no evidence of how the loaders are built
    Layout("mmengine", lambda t, lo, f: any(isinstance(t.get(f"{s}_dataloader"), Table) for s in ("train", "val", "test"))),
    Layout("MMCV 1.x (MMDetection 2 / MMSegmentation 0.x)",
           lambda t, lo, f: bool(_table(t, "data")) and _top(_table(t, "data"), "samples_per_gpu", "workers_per_gpu",
                                                             "imgs_per_gpu", "videos_per_gpu"),
           _rename_shared("train")),
    Layout("detectron2 (yacs)", lambda t, lo, f: "DATALOADER" in t or (bool(_table(t, "SOLVER"))
                                                                     and "IMS_PER_BATCH" in _table(t, "SOLVER")),
           _detectron2),
    Layout("detectron2 LazyConfig", lambda t, lo, f: bool(_table(t, "dataloader")) and any(
        "build_detection" in str(v.get("_target_", "")) for v in _table(t, "dataloader").values()
        if isinstance(v, Table))),
    Layout("NeMo", lambda t, lo, f: bool(_table(t, "model")) and _top(_table(t, "model"), "train_ds", "validation_ds")),
    Layout("LightningCLI", lambda t, lo, f: (bool(_table(t, "data")) and "init_args" in _table(t, "data"))
           or ("class_path" in t and "init_args" in t)),
    Layout(HF_LAYOUT, lambda t, lo, f: any(isinstance(k, str) and k.startswith(("dataloader_", "per_device_"))
                                            for k in t), _hugging_face),
    Layout("timm", lambda t, lo, f: "workers" in t and _top(t, "pin_mem", "model"), _train_shuffles("timm")),
    Layout("ml-cvnets", lambda t, lo, f: bool(_table(t, "dataset")) and "workers" in _table(t, "dataset"),
           _train_shuffles("ml-cvnets", rename=False)),
    Layout("MONAI bundle", lambda t, lo, f: "Hydra defaults" not in f and _has_target(t, lo) and _bundle_refs(t)),
    Layout("Hydra", lambda t, lo, f: "Hydra defaults" in f or _has_target(t, lo)),
)
BY_NAMES = "read by key names"
# layouts whose loaders loaderdoc knows to be built with torch's defaults for what the file leaves
# unset (or the framework's, which refine() sets): loaderdoc's own, mmengine (its Runner passes the
# table to DataLoader), Hugging Face TrainingArguments and the frameworks of frameworks.py. In any
# other layout the training code decides an unset setting (issue 50: fairseq passes pin_memory=True,
# timm persistent_workers=True), so the read says so and is partial.
KNOWN_BUILDERS = {"mmengine", RTDETR, HF_LAYOUT, frameworks.SLOWFAST, frameworks.FAST_REID, frameworks.LIGHTLY,
                  frameworks.OLMO, frameworks.LLM_FOUNDRY, frameworks.MOSAIC_BERT, frameworks.KOHYA, frameworks.AXOLOTL,
                  frameworks.MOZILLA_TTS, frameworks.LDM, frameworks.BASICSR,
                  frameworks.AUDIOCRAFT}
# layouts whose rule names the key each loader takes: another key that disagrees is no loader's
# (AudioCraft's generate.num_workers is a process pool's, beside dataset.num_workers)
RULE_PICKS_KEYS = {frameworks.AUDIOCRAFT}
DECIDED_BY_CODE = ("batch_size", "shuffle", "num_workers", "pin_memory", "drop_last", "persistent_workers",
                   "prefetch_factor")  # the settings a builder commonly passes: said when a file leaves them


def builder_known(layout: str) -> bool:
    """Whether loaderdoc knows what this layout's loader builder passes for a setting the file leaves out."""
    return layout in KNOWN_BUILDERS or layout.endswith("] table") or layout == "top-level keys"
LAYOUTS_UNDERSTOOD = (
    "keys naming DataLoader settings at any depth (num_workers, workers, workers_per_gpu, batch_size, batch, "
    "samples_per_gpu, IMS_PER_BATCH, pin_mem, ...), refined for loaderdoc's [dataloader], DeepSpeed, YOLO, "
    "mmengine, MMCV 1.x, detectron2, NeMo, LightningCLI, Hugging Face, timm, ml-cvnets, MONAI bundles and Hydra"
)


def refine(tree: Table, loaders: list[FoundLoader], seen: set[str]) -> str:
    """Name the layout and apply what it adds; the layout's name (``seen``: the inheritance kinds read)."""
    table = native_table(tree)
    name = f"[{table}] table" if table else "top-level keys" if _all_native(tree) else BY_NAMES
    for layout in LAYOUTS:
        if loaders and layout.matches(tree, loaders, seen):
            layout.refine(loaders)
            if layout.refine_with is not None:
                layout.refine_with(loaders, tree)
            name = layout.name
            break
    for loader in loaders:
        loader.layout = name
    return name


# ---- loaderdoc's own layout: strict -----------------------------------------------------------------
def native_table(tree: Table) -> str | None:
    """The ``[dataloader]`` (or ``[data_loader]``, ``[loader]``) table that holds settings directly."""
    names = [name for name in TABLE_NAMES if isinstance(tree.get(name), Table)
             and any(key in SETTING_NAMES for key in tree[name])]
    if len(names) > 1:  # which one would the script use? the file contradicts itself
        raise SettingsError(f"{_where(tree)}: loader settings in both [{names[0]}] and [{names[1]}]; keep one table")
    return names[0] if names else None


def native_owners(tree: Table) -> set[tuple[str, ...]]:
    """The tables where every DataLoader keyword is a setting, ``shuffle`` and ``timeout`` too."""
    table = native_table(tree)
    return ({(table,)} if table else set()) | ({()} if _all_native(tree) else set())


def is_loaderdoc_shaped(tree: Table) -> bool:
    """Nothing but loaderdoc's own tables and keys: [dataloader] (or top-level settings), [training], [process]."""
    return all(key in ("training", PROCESS_TABLE, *TABLE_NAMES) or key in SETTING_NAMES or _near_miss(key)
               for key in tree)


def _all_native(tree: Table) -> bool:
    """A file of nothing but DataLoader keys (and [training], [process]): loaderdoc's own top-level layout."""
    keys = [k for k in tree if k not in ("training", PROCESS_TABLE)]
    return bool(keys) and all(k in SETTING_NAMES or _near_miss(k) for k in keys) \
        and any(k in SETTING_NAMES for k in keys)


def check_native(tree: Table, line_of: Callable[[Origin | None], int | None]) -> None:
    """loaderdoc's own layout refuses what would silently do nothing: a misspelt key, a setting given
    both in the table and at the top level, a ``dataloader = 4``."""
    for name in TABLE_NAMES[:2]:
        value = tree.get(name)
        if isinstance(value, (int, float)) and not isinstance(value, Unread):
            raise SettingsError(f"{location(_where(tree), line_of(tree.origins.get(name)))}[{name}] must be a table of settings, "
                                f"got {value!r}")
    table_name = native_table(tree)
    if table_name is not None:
        table = tree[table_name]
        both = sorted(k for k in tree if k in SETTING_NAMES)
        if both:
            raise SettingsError(f"{_where(tree)}: {', '.join(both)} set both in [{table_name}] and at the top level; "
                                "keep one")
        _refuse_typos(table, (table_name,), line_of)
    if _all_native(tree):
        _refuse_typos(tree, (), line_of)


def _refuse_typos(table: Table, path: tuple[str, ...], line_of: Callable[[Origin | None], int | None]) -> None:
    for key in table:
        if key in SETTING_NAMES or key in OTHER_LOADER_KEYS or not _near_miss(key):
            continue
        hint = difflib.get_close_matches(key, sorted(SETTING_NAMES), n=1)
        shown = ".".join((*path, key))
        origin = table.origins.get(key)
        loc = location(origin.file, line_of(origin)) if origin else ""
        raise SettingsError(f"{loc}{shown + ': ' if path else ''}unknown setting {key!r} (did you mean {hint[0]!r}?); "
                            f"known: {', '.join(sorted(SETTING_NAMES))}")


def process_settings(tree: Table, line_of: Callable[[Origin | None], int | None]) -> dict[str, int]:
    """loaderdoc's ``[process]`` table (``torch_threads``: the training process's intra-op threads),
    every key and value checked with its line. Read where the file is loaderdoc's own layout or the
    table names torch_threads; a project's own ``process:`` section beside other layouts is not it ({})."""
    table = tree.get(PROCESS_TABLE)
    if table is None:
        return {}
    named = isinstance(table, Table) and any(key in PROCESS_KEYS for key in table)
    if not (named or native_table(tree) or _all_native(tree) or is_loaderdoc_shaped(tree)):
        return {}
    if not isinstance(table, Table):
        loc = location(_where(tree), line_of(tree.origins.get(PROCESS_TABLE)))
        raise SettingsError(f"{loc}[{PROCESS_TABLE}] must be a table (torch_threads = N), got {table!r}")
    out: dict[str, int] = {}
    for key, raw in table.items():
        origin = table.origins.get(key)
        loc = location(origin.file, line_of(origin)) if origin else location(_where(tree), None)
        if key not in PROCESS_KEYS:
            hint = difflib.get_close_matches(str(key), PROCESS_KEYS, n=1)
            suggestion = f" (did you mean {hint[0]!r}?)" if hint else ""
            raise SettingsError(f"{loc}{PROCESS_TABLE}.{key}: unknown setting {key!r}{suggestion}; known: "
                                f"{', '.join(PROCESS_KEYS)}")
        out[key] = coerce_torch_threads(raw, f"{loc}{PROCESS_TABLE}.{key}: ")
    return out


def _near_miss(key: Any) -> bool:
    return isinstance(key, str) and bool(difflib.get_close_matches(key, sorted(SETTING_NAMES), n=1, cutoff=0.88))


def _where(tree: Table) -> str:
    for origin in tree.origins.values():
        return origin.file
    return ""
