"""Reading by meaning: settings found under names and at depths no layout lists, grouped into loaders
by their train/val/test words, shared settings given to the loaders below them; what is not a
DataLoader setting (an optimizer's pin_memory, Ray's workers, NCCL's timeout) left alone; what only run
time knows said, never guessed; and inheritance followed the way each framework does it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.base.errors import SettingsError
from loaderdoc.config import read_config
from loaderdoc.config.meaning import meaning_of
from loaderdoc.config.report import describe


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def loaders_of(path: Path) -> dict[str, dict[str, object]]:
    """loader name -> {setting: value} for the settings a key set."""
    return {lo["name"]: {k: v["value"] for k, v in lo["settings"].items() if v["set_by"]}
            for lo in describe(read_config(path))["loaders"]}


@pytest.mark.parametrize("key, setting, split, scope", [
    ("num_workers", "num_workers", None, "loader"), ("NUM_WORKERS", "num_workers", None, "loader"),
    ("numWorkers", "num_workers", None, "loader"), ("workers_per_gpu", "num_workers", None, "loader"),
    ("dataloader_num_workers", "num_workers", None, "loader"), ("data_num_workers", "num_workers", None, "loader"),
    ("n_workers", "num_workers", None, "loader"), ("train_workers", "num_workers", "train", "loader"),
    ("batch", "batch_size", None, "loader"), ("bs", "batch_size", None, "loader"),
    ("batchSize", "batch_size", None, "loader"), ("samples_per_gpu", "batch_size", None, "per_gpu"),
    ("IMS_PER_BATCH", "batch_size", None, "total"), ("total_batch_size", "batch_size", None, "total"),
    ("per_device_eval_batch_size", "batch_size", "eval", "per_gpu"), ("batch_size_per_card", "batch_size", None, "per_gpu"),
    ("train_micro_batch_size_per_gpu", "batch_size", "train", "per_gpu"), ("val_batch_size0", "batch_size", "val", "loader"),
    ("global_batch_size", "batch_size", None, "total"), ("local_batch_size", "batch_size", None, "per_gpu"),
    ("pin_mem", "pin_memory", None, "loader"),
    ("pinMemory", "pin_memory", None, "loader"), ("persistent_workers", "persistent_workers", None, "loader"),
    ("dataloader_prefetch_factor", "prefetch_factor", None, "loader"), ("drop_last", "drop_last", None, "loader"),
])
def test_names_projects_use_mean_a_setting(key, setting, split, scope):
    meaning = meaning_of(key)
    assert (meaning.setting, meaning.split, meaning.scope) == (setting, split, scope)


@pytest.mark.parametrize("key", ["num_samples", "batch_first", "batch_norm", "auto_find_batch_size", "shuffle_n",
                                 "max_workers", "num_gpus", "worker_seeding", "no_prefetcher", "gradient_accumulation_steps",
                                 "pin_memory_device", "batch_sampler", "trainer", "train"])
def test_names_that_are_not_loader_settings(key):
    assert key in ("pin_memory_device", "batch_sampler") or meaning_of(key) is None


def test_unseen_names_at_any_depth_are_grouped_by_their_train_and_eval_words(tmp_path):
    path = write(tmp_path, "exp.yaml", """
experiment:
  name: run1
  pipeline:
    trainLoaderCfg: {numWorkers: 6, batchSize: 32, pinMem: true, persistentWorkers: true, shuffle: true}
    eval_loader_cfg: {n_workers: 2, bs: 64}
  optimizer: {lr: 0.1, batch_norm: true}
""")
    assert loaders_of(path) == {
        "train": {"batch_size": 32, "shuffle": True, "num_workers": 6, "pin_memory": True, "persistent_workers": True},
        "eval": {"batch_size": 64, "num_workers": 2}}


def test_a_shared_setting_reaches_the_loaders_below_it_but_shuffle_stays_with_training(tmp_path):
    path = write(tmp_path, "cfg.json", json.dumps({"data": {
        "num_workers": 4, "pin_memory": True, "shuffle": True,
        "train": {"batch_size": 16}, "validation": {"batch_size": 64}}}))
    assert loaders_of(path) == {"train": {"batch_size": 16, "shuffle": True, "num_workers": 4, "pin_memory": True},
                                "val": {"batch_size": 64, "num_workers": 4, "pin_memory": True}}


def test_other_tools_settings_are_not_a_dataloaders(tmp_path):
    path = write(tmp_path, "job.yaml", """
zero_optimization: {stage: 2, offload_optimizer: {device: cpu, pin_memory: true}}
ray: {scaling_config: {num_workers: 16, use_gpu: true}}
hydra: {launcher: {n_jobs: 8, num_workers: 3}}
dist: {backend: nccl, timeout: 1800}
dataset: {shuffle_n: 2048, num_samples: 1000}
""")
    config = read_config(path)
    assert config.loaders == [] and config.read == "none"


def test_custom_yaml_tags_are_read_as_plain_values_and_ref_is_followed(tmp_path):
    """SpeechBrain's HyperPyYAML: !ref <name> refers to another key, !new:/!name: build objects."""
    path = write(tmp_path, "hparams.yaml", """
batch_size: 8
num_workers: 4
sorting: ascending
train_dataloader_opts:
  batch_size: !ref <batch_size>
  num_workers: !ref <num_workers>
valid_dataloader_opts:
  batch_size: !ref <batch_size> // 2
epoch_counter: !new:speechbrain.utils.epoch_loop.EpochCounter
  limit: 10
compute_cost: !name:speechbrain.nnet.losses.ctc_loss
  blank_index: 0
""")
    config = read_config(path)
    got = describe(config)
    train, valid = got["loaders"]
    assert (train["name"], train["settings"]["batch_size"]["value"], train["settings"]["num_workers"]["value"]) == (
        "train", 8, 4)
    assert train["settings"]["batch_size"]["set_by"]["via"] == "batch_size"
    assert valid["settings"]["batch_size"]["unreadable"] == "!ref <batch_size> // 2"  # arithmetic: not worked out
    # num_workers is a variable the train options refer to, not every loader's (issue 50: SpeechBrain
    # gives the valid loader its own options, 0 workers where they say none)
    assert valid["settings"]["num_workers"]["set_by"] is None
    assert got["read"] == "partial"


def test_two_keys_that_disagree_are_said_and_neither_is_picked(tmp_path):
    path = write(tmp_path, "c.yaml", "data:\n  num_workers: 4\n  batch_size: 8\nloader_opts:\n  num_workers: 16\n")
    config = read_config(path)
    assert config.read == "partial"
    assert any("data.num_workers = 4, loader_opts.num_workers = 16 disagree" in r for r in config.partial_reasons)
    assert "num_workers" not in config.loaders[0].values and config.loaders[0].values["batch_size"] == 8


def test_auto_is_unread_with_its_reason(tmp_path):
    """Issue 50: "auto" was not read at all ("no DataLoader settings"); it is decided when the job starts."""
    path = write(tmp_path, "ds.json", json.dumps({"train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto",
                                                  "zero_optimization": {"stage": 3}}))
    config = read_config(path)
    (loader,) = config.loaders
    assert loader.unreadable == {"batch_size": "auto"} and config.read == "partial"
    assert any("'auto': the framework decides it when the job starts" in r for r in config.partial_reasons)


def test_a_negative_count_is_unread_outside_loaderdoc_s_own_table(tmp_path):
    """Issue 50: `num_workers: -1` in a framework's file drew exit 3, "num_workers must be >= 0";
    loaderdoc's own [dataloader] still refuses it."""
    config = read_config(write(tmp_path, "run.yaml", "model:\n  name: x\ndata:\n  batch_size: 32\n  num_workers: -1\n"))
    assert config.loaders[0].unreadable == {"num_workers": "-1"} and config.read == "partial"
    assert config.settings(config.loaders[0]).num_workers == 0  # not judged as -1
    own = read_config(write(tmp_path, "own.toml", "[dataloader]\nnum_workers = -1\n"))
    with pytest.raises(SettingsError, match="num_workers must be >= 0"):
        own.settings(own.loaders[0])


# ---- inheritance ------------------------------------------------------------------------------------
def test_mmengine_base_merge_delete_update_and_item_assignment(tmp_path):
    write(tmp_path, "_base_/data.py", "train_dataloader = dict(batch_size=2, num_workers=2, persistent_workers=True,\n"
          "    sampler=dict(type='DefaultSampler', shuffle=True), dataset=dict(type='Coco'))\n")
    write(tmp_path, "mid.py", "_base_ = './_base_/data.py'\ntrain_dataloader = dict(num_workers=8)\n")
    child = write(tmp_path, "child.py", "_base_ = ['./mid.py']\n"
                  "train_dataloader = dict(_delete_=True, batch_size=16, num_workers=4)\n")
    (loader,) = read_config(child).loaders
    assert loader.values == {"batch_size": 16, "num_workers": 4}  # _delete_: the base's table replaced
    merged = write(tmp_path, "merged.py", "_base_ = ['./mid.py']\ntrain_dataloader = dict(batch_size=4)\n")
    got = describe(read_config(merged))["loaders"][0]["settings"]
    assert [(got[k]["value"], Path(got[k]["set_by"]["file"]).name) for k in ("batch_size", "num_workers",
                                                                            "persistent_workers")] == [
        (4, "merged.py"), (8, "mid.py"), (True, "data.py")]
    pure = write(tmp_path, "pure.py", "from mmengine.config import read_base\nwith read_base():\n"
                 "    from ._base_.data import *\ntrain_dataloader.update(batch_size=128)\n"
                 "train_dataloader['num_workers'] = 2 * 3\n")
    assert read_config(pure).loaders[0].values == {"batch_size": 128, "num_workers": 6, "shuffle": True,
                                                   "persistent_workers": True}


def test_a_missing_base_is_one_clear_line_and_the_read_is_partial(tmp_path):
    child = write(tmp_path, "configs/child.py", "_base_ = ['../_base_/datasets/coco.py']\n"
                  "train_dataloader = dict(batch_size=4)\n")
    config = read_config(child)
    assert config.read == "partial" and config.loaders[0].values == {"batch_size": 4}
    (line,) = config.missing
    assert "_base_/datasets/coco.py" in line and "could not be read" in line and "\n" not in line
    lazy = write(tmp_path, "lazy.py", "from .common.data.coco import dataloader\n"
                 "dataloader.train.total_batch_size = 64\n")
    config = read_config(lazy)
    assert any("imports .common.data.coco, not found beside it" in m for m in config.missing)


def test_a_config_that_inherits_itself_is_refused(tmp_path):
    write(tmp_path, "a.py", "_base_ = ['./b.py']\ntrain_dataloader = dict(num_workers=2)\n")
    write(tmp_path, "b.py", "_base_ = ['./a.py']\n")
    with pytest.raises(SettingsError, match="inherits from itself"):
        read_config(tmp_path / "a.py")


def test_yacs_base_and_hydra_defaults_with_override_package_and_self(tmp_path):
    write(tmp_path, "Base.yaml", "DATALOADER:\n  NUM_WORKERS: 2\nSOLVER:\n  IMS_PER_BATCH: 16\n")
    child = write(tmp_path, "det/child.yaml", '_BASE_: "../Base.yaml"\nSOLVER:\n  IMS_PER_BATCH: 8\n')
    (loader,) = read_config(child).loaders
    assert (loader.name, loader.values, loader.batch_scope) == ("train", {"batch_size": 8, "num_workers": 2}, "total")
    write(tmp_path, "conf/data/small.yaml", "_target_: my.DataModule\nbatch_size: 32\nnum_workers: 2\n")
    write(tmp_path, "conf/data/big.yaml", "_target_: my.DataModule\nbatch_size: 256\nnum_workers: 12\n")
    write(tmp_path, "conf/loader/fast.yaml", "# @package _global_\ndata:\n  pin_memory: true\n")
    main = write(tmp_path, "conf/train.yaml", "defaults:\n  - data: small\n  - loader: fast\n  - override data: big\n"
                 "  - optional local: none\n  - _self_\ndata:\n  num_workers: 6\n  batch_size: ${.per_gpu}\n"
                 "  per_gpu: 64\n")
    got = describe(read_config(main))
    (loader,) = got["loaders"]
    values = {k: v["value"] for k, v in loader["settings"].items() if v["set_by"]}
    assert values == {"batch_size": 64, "num_workers": 6, "pin_memory": True}
    assert got["layout"] == "Hydra" and got["read"] == "partial"  # the datamodule's code decides what is unset
    assert [r.split(":")[0] for r in got["partial_reasons"]] == ["not set in the file, so the training code decides (loader",
                                                                  "batch_size (loader)"]
    assert Path(loader["settings"]["pin_memory"]["set_by"]["file"]).name == "fast.yaml"


# ---- through the command ------------------------------------------------------------------------
def run(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loaderdoc", *args], capture_output=True, text=True, timeout=60,
                          cwd=cwd)


def test_a_file_without_loader_settings_is_not_an_input_error(tmp_path):
    """An accelerate config: check says so in one line, checks the machine, and --json still prints."""
    path = write(tmp_path, "accelerate.yaml", "compute_environment: LOCAL_MACHINE\ndistributed_type: DEEPSPEED\n"
                 "deepspeed_config:\n  zero_stage: 3\nnum_machines: 1\nnum_processes: 8\nmixed_precision: bf16\n")
    proc = run("check", "--machine", "ci-2core", "--config", path.name, cwd=tmp_path)
    assert proc.returncode in (0, 1, 2) and not proc.stderr, proc.stderr
    assert "Config accelerate.yaml (read by key names): no DataLoader settings\n" in proc.stdout
    assert "no DataLoader settings in accelerate.yaml; layouts understood:" in " ".join(proc.stdout.split())
    proc = run("check", "--machine", "ci-2core", "--config", str(path), "--json")
    report = json.loads(proc.stdout)
    assert report["config"]["read"] == "none" and report["config"]["loaders"] == [] and report["config"]["no_settings"]


def test_show_read_prints_what_was_read_from_where_without_the_machine(tmp_path):
    write(tmp_path, "_base_/d.py", "train_dataloader = dict(batch_size=2, num_workers=2)\n")
    child = write(tmp_path, "c.py", "_base_ = './_base_/d.py'\ntrain_dataloader = dict(batch_size=8)\n")
    proc = run("check", "--config", str(child), "--show-read")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"{child}: mmengine; 2 files read, complete" and lines[1] == "  + _base_/d.py"
    assert any(line.split() == ["batch_size", "8", "<-", "train_dataloader.batch_size", "(c.py:2)"] for line in lines)
    assert any(line.split() == ["num_workers", "2", "<-", "train_dataloader.num_workers", "(_base_/d.py:1)"]
               for line in lines)
    assert any(line.split()[:4] == ["pin_memory", "not", "set", "(torch"] for line in lines)
    assert "cpu" not in proc.stdout.lower()  # no machine checks
    report = json.loads(run("check", "--config", str(child), "--show-read", "--json").stdout)
    assert report["schema"] == "loaderdoc.config/1" and report["loaders"][0]["settings"]["pin_memory"]["set_by"] is None
    bad = run("check", "--show-read")
    assert bad.returncode == 3 and bad.stderr.count("\n") == 1 and "--show-read needs --config" in bad.stderr


def test_the_apps_config_option_checks_the_config_without_a_terminal_and_goes_with_no_other_command(tmp_path):
    write(tmp_path, "opt.yaml", "weights: yolov5s.pt\nimgsz: 640\nbatch_size: 16\nworkers: 8\n")
    proc = run("--config", "opt.yaml", "--machine", "ci-2core", cwd=tmp_path)
    assert "no terminal; running 'loaderdoc check'" in proc.stderr
    assert "Config opt.yaml (YOLO (ultralytics / YOLOv5)): 1 loader" in proc.stdout
    assert "num_workers <- workers:4" in proc.stdout
    wrong = run("--config", "opt.yaml", "probe", cwd=tmp_path)
    assert wrong.returncode == 3 and wrong.stderr.count("\n") == 1
    assert "--config FILE goes with the app, 'check' or 'tradeoffs', not 'probe'" in wrong.stderr
    before = run("--config", "opt.yaml", "check", "--machine", "ci-2core", "--json", cwd=tmp_path)
    assert json.loads(before.stdout)["config"]["loaders"][0]["settings"]["num_workers"] == 8
    bad = write(tmp_path, "bad.yaml", "num_workers: -2\n")
    proc = run("--config", str(bad), "--machine", "ci-2core", cwd=tmp_path)
    assert proc.returncode == 3 and "num_workers must be >= 0" in proc.stderr


def test_hostile_bases_are_said_and_deep_nesting_is_refused(tmp_path):
    (tmp_path / "a.py").symlink_to(tmp_path / "b.py")
    (tmp_path / "b.py").symlink_to(tmp_path / "a.py")
    child = write(tmp_path, "c.py", "_base_ = ['./a.py', './folder', './none.yaml']\n"
                  "train_dataloader = dict(num_workers=2)\n")
    (tmp_path / "folder").mkdir()
    config = read_config(child)
    assert config.loaders[0].values == {"num_workers": 2} and config.read == "partial"
    assert [m.split(" could not be read: ")[1] for m in config.missing] == [
        "cannot read it (Too many levels of symbolic links)", "is a directory, not a config file", "no such file"]
    deep = write(tmp_path, "deep.yaml", "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 3000))
                 + "  " * 3000 + "num_workers: 1\n")
    with pytest.raises(SettingsError, match="nested too deeply"):
        read_config(deep)


def test_a_table_of_settings_beside_the_loaders_tables_is_every_loaders(tmp_path):
    """SlowFast's yacs layout: TRAIN and TEST hold the batch sizes, DATA_LOADER beside them the workers;
    SlowFast builds its val loader from TRAIN's (issue 50: its own layout, frameworks.py)."""
    path = write(tmp_path, "SLOWFAST_8x8_R50.yaml", "TRAIN:\n  ENABLE: True\n  BATCH_SIZE: 64\nSOLVER:\n"
                 "  BASE_LR: 0.8\nTEST:\n  BATCH_SIZE: 32\nDATA_LOADER:\n  NUM_WORKERS: 8\n  PIN_MEMORY: True\n"
                 "NUM_GPUS: 8\n")
    assert loaders_of(path) == {"train": {"batch_size": 64, "num_workers": 8, "pin_memory": True},
                                "val": {"batch_size": 64, "num_workers": 8, "pin_memory": True},
                                "test": {"batch_size": 32, "num_workers": 8, "pin_memory": True}}
    assert read_config(path).layout == "SlowFast (yacs)"  # not detectron2: no DATALOADER, no IMS_PER_BATCH


def test_omegaconfs_mandatory_values_are_left_to_the_command_line(tmp_path):
    path = write(tmp_path, "defaults.yaml", "defaults:\n  - config: ???\nconfig:\n  DATA:\n    NUM_DATALOADER_WORKERS: 4\n"
                 "    TRAIN:\n      BATCHSIZE_PER_REPLICA: ???\n")
    got = describe(read_config(path))
    (loader,) = got["loaders"]
    assert loader["settings"]["num_workers"]["value"] == 4
    assert loader["settings"]["batch_size"]["unreadable"] == "???"
    assert got["read"] == "partial" and any("leaves config to the command line" in r for r in got["partial_reasons"])


# ---- inputs at the limits ------------------------------------------------------------------------
@pytest.mark.parametrize("name, text", [
    ("big.yaml", "num_workers: " + "9" * 5000 + "\n"),
    ("big.toml", "num_workers = " + "9" * 5000 + "\n"),
    ("big.json", '{"num_workers": ' + "9" * 5000 + "}"),
    ("big.py", "train_dataloader = dict(num_workers=" + "9" * 5000 + ")\n"),
])
def test_a_number_of_thousands_of_digits_is_one_clear_line(tmp_path, name, text):
    proc = run("check", "--config", str(write(tmp_path, name, text)), "--show-read")
    assert proc.returncode == 3 and proc.stderr.count("\n") == 1, proc.stderr
    assert "holds a number of thousands of digits; no DataLoader setting is that large" in proc.stderr


def test_a_long_list_written_out_is_read_and_a_multiplied_list_is_not_built(tmp_path):
    long = write(tmp_path, "long.yaml", "num_workers: 2\nitems:\n" + "".join(f"  - {i}\n" for i in range(120_000)))
    assert loaders_of(long) == {"": {"num_workers": 2}}
    huge = write(tmp_path, "huge.py", "items = [0] * 10**9\ntrain_dataloader = dict(num_workers=2, ids=items)\n")
    assert loaders_of(huge) == {"train": {"num_workers": 2}}


def test_a_named_pipe_nobody_writes_to_is_refused_at_once_and_a_pipe_with_a_writer_is_read(tmp_path):
    """`--config FIFO` with no writer would block for ever in open(); `--config <(cmd)` is a pipe
    whose writer is there: it is read to its end."""
    import os

    fifo = tmp_path / "cfg.yaml"
    os.mkfifo(fifo)
    proc = run("check", "--config", str(fifo), "--show-read")
    assert proc.returncode == 3 and "a named pipe with nothing written to it (no writer)" in proc.stderr
    read_end, write_end = os.pipe()
    os.write(write_end, b"num_workers: 3\n")
    os.close(write_end)
    try:
        proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--config", f"/dev/fd/{read_end}",
                               "--show-read", "--json"], capture_output=True, text=True, timeout=60,
                              pass_fds=(read_end,))
    finally:
        os.close(read_end)
    assert json.loads(proc.stdout)["loaders"][0]["settings"]["num_workers"]["value"] == 3, proc.stderr
