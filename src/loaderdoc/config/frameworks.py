"""Frameworks that stand between a config and torch (issue 50): what each makes of the loader
settings its file states, and which loaders it builds from them. Each layout here is recognised
by evidence only that framework's files hold (keys, ``_target_`` paths, structure), and its rules
are quoted from its source, named in each rule's text (tests/fixtures/configs/projects/SOURCES.md
names the commit read):

- SlowFast (yacs): ``TRAIN.BATCH_SIZE`` / ``TEST.BATCH_SIZE`` are totals over the ``NUM_GPUS``
  processes the file itself starts; val is built from TRAIN's settings.
- fast-reid (yacs): ``IMS_PER_BATCH`` totals; the test loader never reads ``NUM_WORKERS``.
- lightly (its CLI's ``loader:``): ``num_workers: -1`` is the machine's ``os.cpu_count()``.

No torch, no textual.
"""

from __future__ import annotations

from typing import Any

from loaderdoc.config.meaning import FoundLoader, RunValue
from loaderdoc.config.tree import Table


def table(tree: Any, *path: str) -> Table | None:
    node = tree
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, Table) else None


def value_at(tree: Table, *path: str) -> tuple[Any, str]:
    """The value at ``path`` and how to name it (``NUM_GPUS: 8, line 60``); (None, "") when absent."""
    parent = table(tree, *path[:-1]) if len(path) > 1 else tree
    if parent is None or path[-1] not in parent:
        return None, ""
    origin = parent.origins.get(path[-1])
    where = f", line {origin.line}" if origin is not None and origin.line else ""
    return parent[path[-1]], f"{'.'.join(path)}: {parent[path[-1]]!r}{where}"


def count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def named(loaders: list[FoundLoader], name: str) -> FoundLoader | None:
    return next((lo for lo in loaders if lo.name == name), None)


def restore_read(loader: FoundLoader, setting: str) -> None:
    """Put back a value the generic reading left unread (a negative count, whose meaning this
    framework's rule defines), as read from its key."""
    source = loader.unreadable.get(setting)
    if source is None or not source.lstrip("-").isdigit():
        return
    del loader.unreadable[setting]
    loader.unreadable_why.pop(setting, None)
    loader.put(setting, int(source), loader.unread_keys.pop(setting, (setting,)), loader.origins.get(setting))


def copy_loader(source: FoundLoader, name: str, settings: tuple[str, ...]) -> FoundLoader:
    """A loader the framework builds from another's keys (SlowFast's val from TRAIN's)."""
    out = FoundLoader(name, layout=source.layout, batch_scope=source.batch_scope)
    for setting in settings:
        if setting in source.keys:
            out.put(setting, source.values[setting], source.keys[setting], source.origins.get(setting))
        if setting in source.defaults:
            out.defaults[setting] = source.defaults[setting]
        if setting in source.run:
            out.run[setting] = source.run[setting]
    return out


# ---- SlowFast -------------------------------------------------------------------------------------
SLOWFAST = "SlowFast (yacs)"
SLOWFAST_LOADER = "slowfast/datasets/loader.py construct_loader"


def is_slowfast(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """``DATA_LOADER`` (detectron2 writes ``DATALOADER``) beside ``NUM_GPUS`` or ``TRAIN.BATCH_SIZE``."""
    return table(tree, "DATA_LOADER") is not None and ("NUM_GPUS" in tree or "BATCH_SIZE" in (table(tree, "TRAIN") or {}))


def slowfast(loaders: list[FoundLoader], tree: Table) -> None:
    gpus_value, gpus_where = value_at(tree, "NUM_GPUS")
    gpus = count(gpus_value)
    gpus_text = gpus_where if gpus is not None else "NUM_GPUS: 1, its default"
    gpus = gpus if gpus is not None else 1
    for split, key in (("train", "TRAIN"), ("test", "TEST")):
        loader = named(loaders, split)
        if loader is None:
            continue
        total = count(loader.values.get("batch_size"))
        if total is not None and loader.keys.get("batch_size") == (key, "BATCH_SIZE"):
            loader.batch_scope = "total"
            loader.run["batch_size"] = RunValue(
                int(total / max(1, gpus)), f"SlowFast starts one process per GPU and gives each {key}.BATCH_SIZE / "
                f"NUM_GPUS = {total} / {gpus} ({gpus_text}; {SLOWFAST_LOADER})")
        for setting, value, source in (("num_workers", 8, "DATA_LOADER.NUM_WORKERS = 8"),
                                       ("pin_memory", True, "DATA_LOADER.PIN_MEMORY = True")):
            if setting not in loader.keys:
                loader.defaults[setting] = (value, f"SlowFast's defaults.py: {source}")
    train = named(loaders, "train")
    if train is not None:
        for setting in ("shuffle", "drop_last"):
            if setting not in train.keys:
                train.defaults[setting] = (True, f"{SLOWFAST_LOADER}: the train split")
        if named(loaders, "val") is None:  # val is built with TRAIN.BATCH_SIZE and the same DATA_LOADER
            val = copy_loader(train, "val", ("batch_size", "num_workers", "pin_memory"))
            loaders.insert(loaders.index(train) + 1, val)


# ---- fast-reid ------------------------------------------------------------------------------------
FAST_REID = "fast-reid (yacs)"
REID_BUILD = "fastreid/data/build.py"
REID_SAMPLERS = {"NaiveIdentitySampler", "BalancedIdentitySampler", "SetReWeightSampler"}


def is_fast_reid(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """Keys only fast-reid has: ``DATALOADER.NUM_INSTANCE``, an identity sampler, ``DATASETS.NAMES``
    / ``TESTS``, ``MODEL.META_ARCHITECTURE: Baseline`` (detectron2: ``DATASETS.TRAIN``, R-CNNs)."""
    data = table(tree, "DATALOADER") or {}
    datasets = table(tree, "DATASETS") or {}
    return "NUM_INSTANCE" in data or data.get("SAMPLER_TRAIN") in REID_SAMPLERS or \
        ("NAMES" in datasets or "TESTS" in datasets) and "TRAIN" not in datasets or \
        (table(tree, "MODEL") or {}).get("META_ARCHITECTURE") in ("Baseline", "MGN", "Distiller")


def fast_reid(loaders: list[FoundLoader], tree: Table) -> None:
    for loader in loaders:
        if loader.name == "":
            loader.name = "train"
        if "pin_memory" not in loader.keys:
            loader.defaults["pin_memory"] = (True, f"fast-reid passes pin_memory=True, {REID_BUILD}")
    train, test = named(loaders, "train"), named(loaders, "test")
    if train is not None:
        train.defaults.setdefault("drop_last", (True, f"fast-reid's training BatchSampler drops the last batch, {REID_BUILD}"))
        train.defaults.setdefault("shuffle", (True, "fast-reid's training samplers draw at random"))
        if "num_workers" not in train.keys:
            train.defaults["num_workers"] = (8, "fast-reid's defaults.py: DATALOADER.NUM_WORKERS = 8")
    if test is not None:
        told = test.values.get("num_workers")
        test.run["num_workers"] = RunValue(4, "fast-reid's test loader never reads DATALOADER.NUM_WORKERS: "
                                              f"build_reid_test_loader(num_workers=4) ({REID_BUILD})")
        if told is None:
            test.defaults["num_workers"] = (4, f"fast-reid's build_reid_test_loader(num_workers=4), {REID_BUILD}")
            del test.run["num_workers"]


# ---- lightly --------------------------------------------------------------------------------------
LIGHTLY = "lightly (CLI)"
LIGHTLY_CLI = "lightly/cli/train_cli.py and embed_cli.py"


def is_lightly(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """The lightly CLI's config: its ``loader:`` beside ``collate:`` (the SimCLR augmentations) and ``criterion:``."""
    return table(tree, "loader") is not None and table(tree, "collate") is not None and \
        ("criterion" in tree or "checkpoint_callback" in tree or "pre_trained" in tree)


def lightly(loaders: list[FoundLoader], tree: Table) -> None:
    for loader in loaders:
        if loader.name in ("", "loader"):
            loader.name = "train"
    train = named(loaders, "train")
    if train is None:
        return
    restore_read(train, "num_workers")
    workers = count(train.values.get("num_workers"))
    if workers is not None and workers < 0:
        train.run["num_workers"] = RunValue(None, f"lightly's CLI turns a negative num_workers into os.cpu_count(), "
                                                  f"every CPU of the machine ({LIGHTLY_CLI})", machine="cpu_count")
    embed = copy_loader(train, "embed", ("batch_size", "num_workers", "pin_memory"))
    for setting in ("shuffle", "drop_last"):  # lightly-embed: inference over every sample, in order
        embed.defaults[setting] = (False, "lightly-embed sets it False, lightly/cli/embed_cli.py")
    loaders.append(embed)


# ---- OLMo -----------------------------------------------------------------------------------------
OLMO = "OLMo"
OLMO_DATA = "olmo/data/__init__.py"


def is_olmo(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """OLMo's TrainConfig: ``global_train_batch_size`` and ``device_train_microbatch_size`` beside
    its ``data:`` section and its ``evaluators:`` list (llm-foundry names ``train_loader`` instead)."""
    return "global_train_batch_size" in tree and "device_train_microbatch_size" in tree and \
        table(tree, "data") is not None and "train_loader" not in tree


def olmo(loaders: list[FoundLoader], tree: Table) -> None:
    for loader in loaders:
        if loader.name == "":
            loader.name = "train"
        workers = loader.raw_settings().get("num_workers") or 0
        if workers == 0:  # OLMo passes these only with workers; torch would refuse them without
            for setting, value in (("prefetch_factor", None), ("persistent_workers", False)):
                if loader.values.get(setting) not in (None, False):
                    loader.run[setting] = RunValue(value, f"OLMo passes {setting}={value} when num_workers is 0 "
                                                          f"({OLMO_DATA})")
        if loader.entry:
            if loader.values.get("drop_last"):  # handed to the DistributedSampler, not the DataLoader
                loader.run["drop_last"] = RunValue(False, "OLMo gives an evaluator's drop_last to its "
                                                          f"DistributedSampler, not the DataLoader ({OLMO_DATA})")
            loader.defaults.setdefault("shuffle", (True, f"OLMo's evaluator DistributedSampler shuffles, {OLMO_DATA}"))
    evaluators = tree.get("evaluators")
    if not isinstance(evaluators, list):
        return
    batch, where = value_at(tree, "device_eval_batch_size")
    plain = [e.get("label", f"#{i}") for i, e in enumerate(evaluators)
             if isinstance(e, dict) and not isinstance(e.get("data"), dict) and "device_eval_batch_size" not in e]
    if plain:  # evaluators without a data: section (downstream tasks): one loader each, all alike
        shown = ", ".join(map(str, plain[:3])) + (f", ... {len(plain)} in all" if len(plain) > 3 else "")
        group = FoundLoader(f"eval ({shown})", layout=OLMO, entry=True, batch_scope="per_gpu")
        size = count(batch) if batch is not None else 16
        source = where if batch is not None else "device_eval_batch_size: 16, TrainConfig's default"
        group.defaults["batch_size"] = (size, f"each evaluator's loader takes {source}, olmo/eval/__init__.py")
        loaders.append(group)


# ---- llm-foundry ----------------------------------------------------------------------------------
LLM_FOUNDRY = "llm-foundry"
FOUNDRY_BUILDERS = {"text": "llmfoundry/data/text_data.py build_text_dataloader",
                    "finetuning": "llmfoundry/data/finetuning/dataloader.py build_finetuning_dataloader"}


def is_llm_foundry(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """A ``train_loader:`` naming one of llm-foundry's registered builders (``name: text``, ``finetuning``)."""
    return (table(tree, "train_loader") or {}).get("name") in FOUNDRY_BUILDERS


def llm_foundry(loaders: list[FoundLoader], tree: Table, *, who: str = LLM_FOUNDRY,
                builders: dict[str, str] = FOUNDRY_BUILDERS) -> None:
    for loader in loaders:
        key = "train_loader" if loader.name == "train" else "eval_loader"
        builder = builders.get((table(tree, key) or {}).get("name"), "its dataloader builder")
        for setting, value in (("pin_memory", True), ("prefetch_factor", 2), ("persistent_workers", True)):
            if setting not in loader.keys:
                loader.defaults[setting] = (value, f"{who}'s default in {builder}")
        if loader.values.get("shuffle") is True:  # dataset.shuffle: the streaming dataset (or the sampler) shuffles
            loader.run["shuffle"] = RunValue(False, f"{who} gives {'.'.join(loader.keys['shuffle'])} to the "
                                                    "dataset (a StreamingDataset shuffles itself) or the sampler, "
                                                    "never to the DataLoader")


# ---- mosaicml/examples' BERT benchmark ------------------------------------------------------------
MOSAIC_BERT = "mosaicml/examples BERT"
MOSAIC_BERT_MODELS = ("mosaic_bert", "hf_bert")  # the benchmark's models; llm-foundry registers no BERT
MOSAIC_BERT_MAIN = "examples/benchmarks/bert/main.py"


def is_mosaic_bert(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """llm-foundry's layout for a BERT of mosaicml/examples' benchmark, whose own main.py builds the loaders."""
    return is_llm_foundry(tree, loaders, frameworks) and (table(tree, "model") or {}).get("name") in MOSAIC_BERT_MODELS


def mosaic_bert(loaders: list[FoundLoader], tree: Table) -> None:
    """llm-foundry's builder defaults (its src/text_data.py is llm-foundry's ancestor), but the eval
    loader takes global_eval_batch_size, else global_train_batch_size, over the world size: main.py
    never passes device_eval_batch_size on (it was read as the eval loader's batch)."""
    llm_foundry(loaders, tree, who=MOSAIC_BERT, builders={"text": "src/text_data.py build_text_dataloader"})
    key = "global_eval_batch_size" if "global_eval_batch_size" in tree else "global_train_batch_size"
    total, _ = value_at(tree, key)
    if count(total) is None:
        return
    for loader in loaders:
        if loader.name == "train":
            continue
        stated = [f"{'.'.join(loader.keys['batch_size'])} = {loader.values['batch_size']!r} (not the eval "
                  f"loader's: {MOSAIC_BERT_MAIN} gives it {key} over the GPUs)"] if "batch_size" in loader.keys else []
        loader.put("batch_size", total, (key,), tree.origins.get(key))
        loader.batch_scope = "total"
        loader.also = stated


# ---- kohya sd-scripts -----------------------------------------------------------------------------
KOHYA = "kohya sd-scripts"
KOHYA_TRAIN = "train_network.py"
KOHYA_ARGS = ("pretrained_model_name_or_path", "network_module", "save_model_as", "output_name", "network_dim")


def is_kohya(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """A ``--config_file`` (sd-scripts' own argument names) or a ``--dataset_config`` (``[[datasets]]``
    whose entries hold ``[[datasets.subsets]]``)."""
    if "max_data_loader_n_workers" in tree or "train_batch_size" in tree and any(k in tree for k in KOHYA_ARGS):
        return True
    datasets = tree.get("datasets")
    return isinstance(datasets, list) and any(isinstance(d, dict) and isinstance(d.get("subsets"), list)
                                              for d in datasets)


def kohya(loaders: list[FoundLoader], tree: Table) -> None:
    """One training loader: sd-scripts concatenates every dataset into one; its DataLoader takes
    batch_size=1 and each item is a whole batch of the dataset's batch_size images, one process's."""
    train = FoundLoader("train", batch_scope="per_gpu")
    sizes = [lo for lo in loaders if "batch_size" in lo.keys]
    if sizes:  # the largest dataset batch sizes the memory; the others are said
        biggest = max(sizes, key=lambda lo: count(lo.values["batch_size"]) or 0)
        train.put("batch_size", biggest.values["batch_size"], biggest.keys["batch_size"],
                  biggest.origins.get("batch_size"))
        train.also = [f"{'.'.join(lo.keys['batch_size'])} = {lo.values['batch_size']!r} (another dataset's batch)"
                      for lo in sizes if lo is not biggest]
    for loader in loaders:
        for setting in ("persistent_workers",):
            if setting in loader.keys and setting not in train.keys:
                train.put(setting, loader.values[setting], loader.keys[setting], loader.origins.get(setting))
    cap, where = value_at(tree, "max_data_loader_n_workers")
    if count(cap) is not None:
        origin = tree.origins.get("max_data_loader_n_workers")
        train.put("num_workers", cap, ("max_data_loader_n_workers",), origin)
    cap = count(cap) if count(cap) is not None else 8
    train.run["num_workers"] = RunValue(None, f"sd-scripts starts min(max_data_loader_n_workers, os.cpu_count()) "
                                              f"workers ({KOHYA_TRAIN}; the argument's default is 8)",
                                        machine="cpu_count", cap=cap)
    train.defaults["shuffle"] = (True, f"sd-scripts shuffles the training batches, {KOHYA_TRAIN}")
    if "dataset_config" in tree and train.keys.get("batch_size", ("train_batch_size",)) == ("train_batch_size",):
        # the --dataset_config file's batch_size, if it sets one, wins over train_batch_size (default 1)
        train.unreadable["batch_size"], train.unreadable_why["batch_size"] = (
            f"{tree['dataset_config']}", "the --dataset_config file's [[datasets]] or [general] batch_size, where it "
            "sets one, wins over train_batch_size (default 1) (library/config_util.py)")
        train.unread_keys["batch_size"] = ("dataset_config",)
        train.origins.setdefault("batch_size", tree.origins.get("dataset_config"))
        train.values.pop("batch_size", None)
        train.keys.pop("batch_size", None)
    loaders[:] = [train]


# ---- axolotl --------------------------------------------------------------------------------------
AXOLOTL = "axolotl"
AXOLOTL_SCHEMA = "src/axolotl/utils/schemas/config.py"
AXOLOTL_LOADER_KEYS = ("dataloader_num_workers", "dataloader_pin_memory", "dataloader_prefetch_factor")


def is_axolotl(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """``micro_batch_size`` beside axolotl's own keys (``base_model``, ``sequence_len``, ``adapter``)."""
    return "micro_batch_size" in tree and any(k in tree for k in ("base_model", "sequence_len", "adapter"))


def axolotl(loaders: list[FoundLoader], tree: Table) -> None:
    for loader in loaders:
        if loader.name == "":
            loader.name = "train"
    train = named(loaders, "train")
    if train is None:
        return
    train.batch_scope = "per_gpu"  # micro_batch_size is per_device_train_batch_size
    train.defaults.setdefault("shuffle", (True, "the Hugging Face Trainer samples training data at random"))
    if not any(k in tree for k in AXOLOTL_LOADER_KEYS):  # none set: axolotl fills all three
        train.run["num_workers"] = RunValue(None, f"axolotl sets dataloader_num_workers to WORLD_SIZE when none of "
                                                  f"{', '.join(AXOLOTL_LOADER_KEYS)} is set ({AXOLOTL_SCHEMA})",
                                            machine="world_size")
        train.defaults["pin_memory"] = (True, f"axolotl sets dataloader_pin_memory=True, {AXOLOTL_SCHEMA}")
        train.defaults["prefetch_factor"] = (256, f"axolotl sets dataloader_prefetch_factor=256, {AXOLOTL_SCHEMA}")
    else:
        train.defaults.setdefault("pin_memory", (True, "Hugging Face TrainingArguments default"))
    if tree.get("sample_packing") is True and tree.get("eval_sample_packing") is False:
        train.defaults.setdefault("drop_last", (True, "axolotl sets dataloader_drop_last with sample_packing and "
                                                      "eval_sample_packing: false, src/axolotl/core/builders/causal.py"))
    val_size = tree.get("val_set_size")
    if isinstance(val_size, (int, float)) and not isinstance(val_size, bool) and val_size > 0 \
            and named(loaders, "eval") is None:
        evaluation = copy_loader(train, "eval", ("batch_size", "num_workers", "pin_memory", "prefetch_factor",
                                                 "drop_last"))
        evaluation.batch_scope = "per_gpu"
        loaders.append(evaluation)


# ---- Mozilla TTS ----------------------------------------------------------------------------------
MOZILLA_TTS = "Mozilla TTS"


def is_mozilla_tts(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """``num_loader_workers`` beside an ``audio`` section (its config.json)."""
    return "num_loader_workers" in tree and table(tree, "audio") is not None


def mozilla_tts(loaders: list[FoundLoader], tree: Table) -> None:
    vocoder = "generator_model" in tree
    trainer = "TTS/bin/train_vocoder_gan.py" if vocoder else "TTS/bin/train_tacotron.py"
    for loader in loaders:
        for setting, value in ((("shuffle", True),) if vocoder else (("shuffle", False), ("drop_last", False),
                                                                      ("pin_memory", False))):
            if setting not in loader.keys:
                loader.defaults[setting] = (value, f"fixed in {trainer}'s setup_loader")
    train, val = named(loaders, "train"), named(loaders, "val")
    schedule = tree.get("gradual_training")
    if train is not None and isinstance(schedule, list) and schedule:
        sizes = [count(step[2]) for step in schedule if isinstance(step, list) and len(step) > 2]
        sizes = [s for s in sizes if s is not None]
        if sizes:
            origin = tree.origins.get("gradual_training")
            where = f" (line {origin.line})" if origin is not None and origin.line else ""
            train.run["batch_size"] = RunValue(max(sizes), f"gradual_training{where} sets the training batch each "
                                                           f"epoch ({', '.join(map(str, sizes))}); judged at its "
                                                           f"largest ({trainer})")
    if vocoder and val is not None:
        val.run["batch_size"] = RunValue(1, f"the vocoder's eval loader takes batch_size=1 ({trainer})")


# ---- latent-diffusion -----------------------------------------------------------------------------
LDM = "latent-diffusion (main.DataModuleFromConfig)"


def is_latent_diffusion(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    return str((table(tree, "data") or {}).get("target", "")).endswith("DataModuleFromConfig")


def latent_diffusion(loaders: list[FoundLoader], tree: Table) -> None:
    params = table(tree, "data", "params") or Table()
    builds = [split for split, key in (("train", "train"), ("val", "validation"), ("test", "test"))
              if key in params] or ["train"]
    source = next((lo for lo in loaders if lo.name in ("", "train")), None)
    if source is None:
        return
    source.name = "train"
    source.batch_scope = "per_gpu"  # Lightning's DDP: one loader per GPU (main.py scales lr by ngpu * batch)
    batch = count(source.values.get("batch_size"))
    if "num_workers" not in source.keys and batch is not None:
        source.defaults["num_workers"] = (2 * batch, f"main.py: num_workers = batch_size * 2 = {2 * batch} when unset")
    source.defaults.setdefault("shuffle", (True, "main.py's DataModuleFromConfig shuffles the training set"))
    for split in builds:
        if split != "train" and named(loaders, split) is None:
            other = copy_loader(source, split, ("batch_size", "num_workers"))
            other.batch_scope = "per_gpu"
            loaders.append(other)


# ---- BasicSR (and the projects built on it: Real-ESRGAN, GFPGAN, ...) -----------------------------
BASICSR = "BasicSR"
BASICSR_BUILDER = "basicsr/data/__init__.py build_dataloader"


def is_basicsr(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """``datasets.train`` holding BasicSR's per-GPU keys, beside its ``model_type`` / ``network_g``."""
    train = table(tree, "datasets", "train") or Table()
    return bool({"batch_size_per_gpu", "num_worker_per_gpu"} & set(train)) and bool({"model_type", "network_g"} & set(tree))


def basicsr(loaders: list[FoundLoader], tree: Table) -> None:
    """The train loader: the per-GPU keys, an EnlargedSampler that shuffles every epoch (so the
    DataLoader's shuffle=False; ``use_shuffle`` is read nowhere), drop_last=True, pin_memory and
    persistent_workers from the file else False. Not launched distributed, one process takes
    num_gpu times both. Every val/test dataset's loader: batch 1, 0 workers, no shuffle."""
    train = named(loaders, "train")
    if train is not None:
        sampler = f"{BASICSR_BUILDER} passes shuffle=False beside its EnlargedSampler, which shuffles every epoch"
        if "shuffle" in train.keys:
            train.run["shuffle"] = RunValue(False, f"{sampler}; {'.'.join(train.keys['shuffle'])} is read nowhere")
        for setting, value, why in (("shuffle", False, sampler), ("drop_last", True, f"fixed in {BASICSR_BUILDER}"),
                                    ("pin_memory", False, f"{BASICSR_BUILDER}'s default"),
                                    ("persistent_workers", False, f"{BASICSR_BUILDER}'s default")):
            if setting not in train.keys:
                train.defaults[setting] = (value, why)
        gpus, where = value_at(tree, "num_gpu")
        if gpus == "auto" or (count(gpus) or 0) > 1:
            train.also = [f"batch_size_per_gpu and num_worker_per_gpu times {where.split(',')[0]} in one process "
                          f"when not launched distributed (--launcher none: {BASICSR_BUILDER})"]
    phases = sorted({str(key).split("_")[0] for key in table(tree, "datasets") or () if str(key).startswith(("val", "test"))})
    for phase in phases:
        if named(loaders, phase) is None:
            loader = FoundLoader(phase, layout=BASICSR, batch_scope="per_gpu")
            for setting, value in (("batch_size", 1), ("num_workers", 0), ("shuffle", False)):
                loader.defaults[setting] = (value, f"fixed for every {phase} dataset in {BASICSR_BUILDER}")
            loaders.append(loader)


# ---- AudioCraft (MusicGen, AudioGen, EnCodec solvers) -------------------------------------------
AUDIOCRAFT = "AudioCraft"
AUDIO_DATASET_KEYS = {"segment_duration", "sample_on_duration", "sample_on_weight", "min_segment_ratio"}
AUDIOCRAFT_SPLITS = {"train": "train", "valid": "val", "evaluate": "evaluate", "generate": "generate"}


def is_audiocraft(tree: Table, loaders: list[FoundLoader], frameworks: set[str]) -> bool:
    """A ``dataset:`` table holding a batch_size beside AudioCraft's AudioDataset keys."""
    dataset = table(tree, "dataset") or Table()
    return "batch_size" in dataset and bool(AUDIO_DATASET_KEYS & set(dataset))


def audiocraft(loaders: list[FoundLoader], tree: Table) -> None:
    """A loader per split table under ``dataset`` (builders.get_audio_datasets): the split's own
    batch_size, num_workers and shuffle over the dataset's; batch_size a total train.py divides by
    the world size. ``evaluate.num_workers`` / ``generate.num_workers`` are no loader's."""
    dataset = table(tree, "dataset")
    if dataset is None:
        return
    loaders.clear()
    for key, name in AUDIOCRAFT_SPLITS.items():
        split = table(dataset, key)
        if split is None:
            continue  # `generate: null`: no loader
        loader = FoundLoader(name, layout=AUDIOCRAFT, batch_scope="total")
        for setting in ("batch_size", "num_workers", "shuffle"):
            source, prefix = (split, ("dataset", key)) if setting in split else (dataset, ("dataset",))
            if setting in source and source[setting] is not None:
                loader.put(setting, source[setting], (*prefix, setting), source.origins.get(setting))
        loaders.append(loader)
