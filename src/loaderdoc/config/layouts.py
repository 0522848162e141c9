"""Where each framework keeps its DataLoader settings, and what it calls them.

A parsed config (a mapping) is searched for every layout below; each loader found becomes a
:class:`FoundLoader`: DataLoader setting -> raw value, and -> the key path it came from, so an error
or a finding can say ``train_dataloader.num_workers`` rather than ``num_workers``. Keys that are not
DataLoader settings (``trainer``, ``_target_``, ``model_name_or_path``, ``sampler``, ``dataset``)
are ignored: these files configure whole projects. No torch, no textual.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field, fields
from typing import Any

from loaderdoc.errors import SettingsError
from loaderdoc.settings import SETTING_NAMES, LoaderSettings

SETTING_ORDER = tuple(f.name for f in fields(LoaderSettings))  # a set's order changes from run to run

TABLE_NAMES = ("dataloader", "data_loader", "loader")

# keys a DataLoader (or a framework's loader dict) takes that loaderdoc does not tune: never an error
OTHER_LOADER_KEYS = {
    "sampler", "batch_sampler", "dataset", "collate_fn", "worker_init_fn", "generator", "pin_memory_device",
    "snapshot_every_n_steps", "_target_", "_partial_", "type", "class_path", "init_args",
}

LAYOUTS_UNDERSTOOD = (
    "a [dataloader] table or top-level DataLoader keys; mmengine train_dataloader = dict(...) (.py/.yaml); "
    "LightningCLI data.init_args / class_path + init_args; a Hydra _target_ config; Hugging Face "
    "TrainingArguments (dataloader_num_workers, ...); timm args.yaml (workers, pin_mem); ml-cvnets dataset.workers"
)


@dataclass
class FoundLoader:
    """One DataLoader's settings as a config file states them."""

    name: str  # "train", "val", "test", "eval"; "" when the file has one loader
    layout: str  # which layout it was found in, for the report: "mmengine", "LightningCLI", ...
    values: dict[str, Any] = field(default_factory=dict)  # DataLoader setting -> raw value
    keys: dict[str, tuple[str, ...]] = field(default_factory=dict)  # setting -> key path in the file
    # settings the file computes at run time (a .py config's `os.cpu_count()`): setting -> its source
    unreadable: dict[str, str] = field(default_factory=dict)

    def where(self, setting: str) -> str:
        """``train_dataloader.num_workers``, or why the value is there without a key."""
        path = self.keys.get(setting)
        return ".".join(path) if path else f"{self.layout} default"

    def put(self, setting: str, value: Any, path: tuple[str, ...]) -> None:
        self.values[setting] = value
        self.keys[setting] = path


def find_loaders(document: dict[str, Any], where: str) -> list[FoundLoader]:
    """Every DataLoader the document configures, in the order of the layouts above."""
    found: list[FoundLoader] = []
    found += _mmengine(document)
    found += _lightning(document)
    found += _hydra(document)
    found += _hugging_face(document)
    found += _timm(document)
    found += _cvnets(document)
    if not found:
        native = _native(document, where)
        if native is not None:
            found.append(native)
    return found


# ---- loaderdoc's own layout ---------------------------------------------------------------------
def _native(document: dict[str, Any], where: str) -> FoundLoader | None:
    tables = [name for name in TABLE_NAMES if name in document]
    if len(tables) > 1:  # which one would the script use? the file contradicts itself
        raise SettingsError(f"{where}: loader settings in both [{tables[0]}] and [{tables[1]}]; keep one table")
    if tables:
        name = tables[0]
        table = document[name]
        if not isinstance(table, dict):
            raise SettingsError(f"{where}: [{name}] must be a table of settings")
        both = sorted(k for k in document if k in SETTING_NAMES)
        if both:
            raise SettingsError(f"{where}: {', '.join(both)} set both in [{name}] and at the top level; keep one")
        loader = FoundLoader("", f"[{name}] table")
        for key, value in table.items():
            if key not in OTHER_LOADER_KEYS:  # our own table: a stray key is a typo, and is refused
                loader.put(key, value, (name, key))
        return loader
    top = {k: v for k, v in document.items() if k in SETTING_NAMES}
    for key in document:
        if key not in SETTING_NAMES and _near_miss(key):  # "num_worker": a typo, not an unrelated key
            top[key] = document[key]
    if not top:
        return None
    loader = FoundLoader("", "top-level keys")
    for key, value in top.items():
        loader.put(key, value, (key,))
    return loader


def _near_miss(key: Any) -> bool:
    return isinstance(key, str) and bool(difflib.get_close_matches(key, sorted(SETTING_NAMES), n=1, cutoff=0.88))


def _same_names(loader: FoundLoader, table: dict[str, Any], path: tuple[str, ...]) -> FoundLoader:
    for key in SETTING_ORDER:
        if key in table:
            loader.put(key, table[key], (*path, key))
    return loader


# ---- mmengine / MMDetection / MMPretrain: train_dataloader = dict(...) ----------------------------
def _mmengine(document: dict[str, Any]) -> list[FoundLoader]:
    out = []
    for split in ("train", "val", "test"):
        table = document.get(f"{split}_dataloader")
        if not isinstance(table, dict):
            continue
        loader = _same_names(FoundLoader(split, "mmengine"), table, (f"{split}_dataloader",))
        sampler = table.get("sampler")
        if isinstance(sampler, dict) and "shuffle" in sampler:  # mmengine shuffles in its sampler
            loader.put("shuffle", sampler["shuffle"], (f"{split}_dataloader", "sampler", "shuffle"))
        out.append(loader)
    return out


# ---- LightningCLI: data: {class_path, init_args: {...}}, or a class_path/init_args file ---------
def _lightning(document: dict[str, Any]) -> list[FoundLoader]:
    out = []
    data = document.get("data")
    if isinstance(data, dict) and isinstance(data.get("init_args"), dict):
        out.append(_same_names(FoundLoader("", "LightningCLI"), data["init_args"], ("data", "init_args")))
    elif "class_path" in document and isinstance(document.get("init_args"), dict):
        out.append(_same_names(FoundLoader("", "LightningCLI"), document["init_args"], ("init_args",)))
    return [loader for loader in out if loader.values]


# ---- Hydra: a config with _target_ (a DataModule or torch's DataLoader) ----------------------------
def _hydra(document: dict[str, Any]) -> list[FoundLoader]:
    candidates: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    if "_target_" in document:
        candidates.append(((), document))
    for key, value in document.items():
        if isinstance(value, dict) and "_target_" in value:
            candidates.append(((key,), value))
    out = []
    for path, table in candidates:
        loader = _same_names(FoundLoader(path[-1] if path else "", "Hydra"), table, path)
        if loader.values:
            out.append(loader)
    return out


# ---- Hugging Face TrainingArguments ---------------------------------------------------------------
HF_LAYOUT = "Hugging Face TrainingArguments"
HF_NAMES = {
    "dataloader_num_workers": "num_workers",
    "dataloader_pin_memory": "pin_memory",
    "dataloader_prefetch_factor": "prefetch_factor",
    "dataloader_persistent_workers": "persistent_workers",
    "dataloader_drop_last": "drop_last",
}


def _hugging_face(document: dict[str, Any]) -> list[FoundLoader]:
    batch_keys = ("per_device_train_batch_size", "per_device_eval_batch_size")
    if not any(k in document for k in (*HF_NAMES, *batch_keys)):
        return []
    out = []
    for split, batch_key in (("train", "per_device_train_batch_size"), ("eval", "per_device_eval_batch_size")):
        if split == "eval" and batch_key not in document:
            continue
        loader = FoundLoader(split, HF_LAYOUT)
        loader.values["pin_memory"] = True  # TrainingArguments' default, unlike torch's
        loader.values["shuffle"] = split == "train"  # the Trainer samples training data at random
        for hf_name, setting in HF_NAMES.items():
            if hf_name in document:
                loader.put(setting, document[hf_name], (hf_name,))
        if batch_key in document:
            loader.put("batch_size", document[batch_key], (batch_key,))
        out.append(loader)
    return out


# ---- timm's args.yaml (train.py's argparse names) --------------------------------------------------
def _timm(document: dict[str, Any]) -> list[FoundLoader]:
    if "workers" not in document or not ("pin_mem" in document or "model" in document):
        return []
    loader = FoundLoader("train", "timm")
    loader.values["shuffle"] = True  # timm's create_loader shuffles the training set (no key for it)
    loader.put("num_workers", document["workers"], ("workers",))
    if "pin_mem" in document:
        loader.put("pin_memory", document["pin_mem"], ("pin_mem",))
    if "batch_size" in document:
        loader.put("batch_size", document["batch_size"], ("batch_size",))
    return [loader]


# ---- Apple ml-cvnets: dataset: {workers, train_batch_size0, ...} -------------------------------------
def _cvnets(document: dict[str, Any]) -> list[FoundLoader]:
    dataset = document.get("dataset")
    if not isinstance(dataset, dict) or "workers" not in dataset:
        return []
    out = []
    for split in ("train", "val", "eval"):
        batch_key = f"{split}_batch_size0"
        if split != "train" and batch_key not in dataset:
            continue
        loader = FoundLoader(split, "ml-cvnets")
        loader.values["shuffle"] = split == "train"  # its samplers shuffle the training set (no key for it)
        loader.put("num_workers", dataset["workers"], ("dataset", "workers"))
        for key in ("persistent_workers", "pin_memory", "prefetch_factor"):
            if key in dataset:
                loader.put(key, dataset[key], ("dataset", key))
        if batch_key in dataset:
            loader.put("batch_size", dataset[batch_key], ("dataset", batch_key))
        out.append(loader)
    return out
