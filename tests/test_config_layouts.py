"""Config files in the layouts of well-known projects (tests/fixtures/configs/, written in their
shapes), each read to the right DataLoader settings with where in the file each was found."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.base.errors import SettingsError
from loaderdoc.config import read_config

CONFIGS = Path(__file__).parent / "fixtures" / "configs"


def loaders(name: str) -> dict[str, tuple[dict, dict]]:
    """loader name -> (settings as DataLoader kwargs, setting -> 'key.path:line')."""
    config = read_config(CONFIGS / name)
    out = {}
    for loader in config.loaders:
        settings = config.settings(loader, strict=False).as_kwargs()
        found = {k: f"{loader.where(k)}:{config.line_of(p)}" for k, p in loader.keys.items()}
        out[loader.name] = (settings, found)
    return out


def test_mmdetection_python_config_is_read_without_running_it():
    got = loaders("mmdet_retinanet.py")
    assert list(got) == ["train", "val", "test"]
    train, found = got["train"]
    assert (train["batch_size"], train["num_workers"], train["persistent_workers"], train["shuffle"]) == (2, 2, True, True)
    assert found["num_workers"] == "train_dataloader.num_workers:20"
    assert found["shuffle"] == "train_dataloader.sampler.shuffle:22"
    val, found = got["val"]
    assert (val["batch_size"], val["num_workers"], val["shuffle"], val["drop_last"]) == (1, 2, False, False)
    assert found["batch_size"] == "val_dataloader.batch_size:33"
    assert got["test"][0] == val  # test_dataloader = val_dataloader


def test_lightning_cli_config():
    (settings, found), = loaders("lightning_cli.yaml").values()
    assert (settings["batch_size"], settings["num_workers"], settings["pin_memory"]) == (64, 4, True)
    assert found["num_workers"] == "data.init_args.num_workers:17"


def test_class_path_init_args_data_file():
    (settings, found), = loaders("lightning_data.yaml").values()
    assert (settings["batch_size"], settings["num_workers"], settings["persistent_workers"]) == (256, 12, True)
    assert found["num_workers"] == "init_args.num_workers:6"


def test_hydra_data_config_with_target():
    (settings, found), = loaders("hydra_data_mnist.yaml").values()
    assert (settings["batch_size"], settings["num_workers"], settings["pin_memory"]) == (128, 0, False)
    assert found == {"batch_size": "batch_size:4", "num_workers": "num_workers:6", "pin_memory": "pin_memory:7"}


def test_hugging_face_training_arguments_yaml():
    got = loaders("hf_training_args.yaml")
    assert list(got) == ["train", "eval"]
    train, found = got["train"]
    assert (train["batch_size"], train["num_workers"], train["pin_memory"], train["prefetch_factor"],
            train["persistent_workers"]) == (32, 4, True, 2, True)
    assert found["num_workers"] == "dataloader_num_workers:11"
    assert got["eval"][0]["batch_size"] == 64


def test_hugging_face_training_arguments_json_with_its_defaults():
    (settings, found), = loaders("hf_training_args.json").values()
    assert (settings["batch_size"], settings["num_workers"], settings["pin_memory"], settings["drop_last"]) == (
        16, 8, False, True)
    assert found["num_workers"] == "dataloader_num_workers:6"  # found by scanning the JSON text
    config = read_config(CONFIGS / "hf_training_args.json")
    assert config.loaders[0].where("pin_memory") == "dataloader_pin_memory"


def test_hugging_face_pin_memory_default_is_true_and_says_so(tmp_path):
    path = tmp_path / "args.json"
    path.write_text('{"output_dir": "o", "dataloader_num_workers": 2}')
    config = read_config(path)
    loader = config.loaders[0]
    assert config.settings(loader).pin_memory is True
    assert loader.where("pin_memory") == "Hugging Face TrainingArguments default"


def test_timm_args_yaml():
    (settings, found), = loaders("timm_args.yaml").values()
    assert (settings["batch_size"], settings["num_workers"], settings["pin_memory"]) == (128, 6, False)
    assert found["num_workers"] == "workers:16" and found["pin_memory"] == "pin_mem:13"


def test_ml_cvnets_yaml():
    got = loaders("cvnets_mobilevit.yaml")
    assert list(got) == ["train", "val", "eval"]
    train, found = got["train"]
    assert (train["batch_size"], train["num_workers"], train["persistent_workers"], train["pin_memory"]) == (
        128, 8, False, True)
    assert found["num_workers"] == "dataset.workers:16" and found["batch_size"] == "dataset.train_batch_size0:13"
    assert got["val"][0]["batch_size"] == 100


# ---- in_order (torch >= 2.6) in every layout that holds DataLoader keyword arguments ------------------
# (file name, text with {v} for the value, where the key is, its line); Hugging Face TrainingArguments,
# timm and ml-cvnets have no such option
IN_ORDER_LAYOUTS = [
    ("native.toml", "[dataloader]\nnum_workers = 2\nin_order = {v}\n", "dataloader.in_order", 3),
    ("native.json", '{{"dataloader": {{"num_workers": 2,\n "in_order": {v}}}}}\n', "dataloader.in_order", 2),
    ("top.yaml", "num_workers: 2\nin_order: {v}\n", "in_order", 2),
    ("mmengine.py", "train_dataloader = dict(\n    num_workers=2,\n    in_order={V},\n"
                    "    sampler=dict(type='DefaultSampler', shuffle=True))\n", "train_dataloader.in_order", 3),
    ("mmengine.yaml", "train_dataloader:\n  num_workers: 2\n  in_order: {v}\n", "train_dataloader.in_order", 3),
    ("lightning.yaml", "trainer: {{max_epochs: 1}}\ndata:\n  class_path: my.DataModule\n  init_args:\n"
                       "    num_workers: 2\n    in_order: {v}\n", "data.init_args.in_order", 6),
    ("lightning_data.yaml", "class_path: my.DataModule\ninit_args:\n  num_workers: 2\n  in_order: {v}\n",
     "init_args.in_order", 4),
    ("hydra.yaml", "_target_: torch.utils.data.DataLoader\n_partial_: true\nnum_workers: 2\nin_order: {v}\n",
     "in_order", 4),
    ("hydra_nested.yaml", "loader:\n  _target_: torch.utils.data.DataLoader\n  num_workers: 2\n  in_order: {v}\n",
     "loader.in_order", 4),
]


@pytest.mark.parametrize("name, text, key, line", IN_ORDER_LAYOUTS, ids=[c[0] for c in IN_ORDER_LAYOUTS])
def test_in_order_is_read_from_every_layout_with_its_key_and_line(tmp_path, name, text, key, line):
    path = tmp_path / name
    path.write_text(text.format(v="false", V="False"))
    config = read_config(path)
    (loader,) = config.loaders
    settings = config.settings(loader)
    assert settings.in_order is False and settings.as_kwargs()["in_order"] is False
    assert (loader.where("in_order"), config.line_of(loader.keys["in_order"])) == (key, line)
    path.write_text(text.format(v="true", V="True"))
    config = read_config(path)
    assert config.settings(config.loaders[0]).in_order is True


@pytest.mark.parametrize("name, text, key, line", IN_ORDER_LAYOUTS, ids=[c[0] for c in IN_ORDER_LAYOUTS])
def test_in_order_of_the_wrong_type_names_file_line_and_key(tmp_path, name, text, key, line):
    path = tmp_path / name
    path.write_text(text.format(v='"no"', V='"no"'))
    config = read_config(path)
    shown = f"{key}: " if key != "in_order" else ""  # a key path is named when it differs from the setting
    with pytest.raises(SettingsError, match=rf"{name}:{line}: {shown}in_order must be true/false \(or 1/0\), got 'no'"):
        config.settings(config.loaders[0])


def test_a_misspelt_in_order_in_the_loader_table_is_refused_with_the_right_name(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text("[dataloader]\nnum_workers = 2\nin_ordr = false\n")
    with pytest.raises(SettingsError, match=r"c\.toml:3: dataloader.in_ordr: unknown setting 'in_ordr' \(did you mean "
                                            r"'in_order'\?\)"):
        read_config(path).settings(read_config(path).loaders[0])


# ---- what is ignored, what is still an error ------------------------------------------------------
def test_unrelated_keys_are_ignored_and_a_sampler_in_the_loader_table_is_accepted(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("trainer: {max_epochs: 3}\nmodel_name_or_path: bert\n_target_: x.DataLoader\n"
                    "dataloader:\n  num_workers: 2\n  sampler: {type: DistributedSampler}\n")
    config = read_config(path)
    assert [config.settings(loader).num_workers for loader in config.loaders] == [2]


def test_a_wrong_value_in_a_project_config_names_file_line_and_key(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("train_dataloader = dict(\n    batch_size=2,\n    num_workers='4',\n)\n")
    config = read_config(path)
    with pytest.raises(SettingsError, match=r"cfg\.py:3: train_dataloader\.num_workers: num_workers must be a whole"):
        config.settings(config.loaders[0])
    hf = tmp_path / "args.yaml"
    hf.write_text("output_dir: o\ndataloader_pin_memory: maybe\n")
    config = read_config(hf)
    with pytest.raises(SettingsError, match=r"args\.yaml:2: dataloader_pin_memory: pin_memory must be true/false"):
        config.settings(config.loaders[0])


def test_a_python_config_is_never_run(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "cfg.py"
    path.write_text(f"open({str(marker)!r}, 'w').write('x')\nimport os\n"
                    "train_dataloader = dict(batch_size=8, num_workers=os.cpu_count())\n")
    config = read_config(path)
    assert not marker.exists()
    loader = config.loaders[0]
    assert loader.unreadable == {"num_workers": "os.cpu_count()"} and "num_workers" not in loader.values


def test_a_python_syntax_error_names_its_line(tmp_path):
    path = tmp_path / "cfg.py"
    path.write_text("train_dataloader = dict(\n    batch_size=2\n    num_workers=2)\n")
    with pytest.raises(SettingsError, match=r"cfg\.py:\d: not valid Python"):
        read_config(path)


def test_a_file_without_loader_settings_is_read_and_says_which_layouts_are_understood(tmp_path):
    path = tmp_path / "model.yaml"
    path.write_text("model: {depth: 50}\noptimizer: {lr: 0.1}\n")
    config = read_config(path)
    assert config.loaders == [] and config.read == "none"
    assert "no DataLoader settings in" in config.no_settings_line() and "IMS_PER_BATCH" in config.no_settings_line()
    base_only = tmp_path / "child.py"
    base_only.write_text("_base_ = ['./base.py']\nmodel = dict(type='RetinaNet')\n")
    config = read_config(base_only)
    assert config.read == "partial" and "base.py" in config.missing[0] and "could not be read" in config.missing[0]


# ---- through the command, as a user runs it -------------------------------------------------------
@pytest.mark.parametrize("name", sorted(p.name for p in CONFIGS.iterdir() if p.is_file()))
def test_check_reads_every_project_config(name):
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core", "--json",
                           "--config", str(CONFIGS / name)], capture_output=True, text=True, timeout=60)
    assert proc.returncode in (0, 1, 2), proc.stderr
    report = json.loads(proc.stdout)
    assert report["config"]["loaders"], report["config"]
    for loader in report["config"]["loaders"]:
        assert "num_workers" in loader["found"] and loader["found"]["num_workers"]["line"], loader


def test_check_text_names_each_loader_and_where_its_settings_were_read():
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core",
                           "--config", str(CONFIGS / "mmdet_retinanet.py")], capture_output=True, text=True,
                          timeout=60)
    assert "mmdet_retinanet.py (mmengine): 3 loaders" in proc.stdout, proc.stdout
    assert "num_workers <- train_dataloader.num_workers:20" in proc.stdout
    assert "  val [" in proc.stdout and "  test [" in proc.stdout


def test_check_reads_in_order_and_refuses_it_on_a_torch_older_than_2_6(tmp_path):
    path = tmp_path / "train.yaml"
    path.write_text("dataloader:\n  batch_size: 32\n  num_workers: 4\n  in_order: false\n")
    runs = {}
    for machine in ("laptop-rtx3050", "h100x8-node"):  # recorded with torch 2.5.1 and 2.8.0
        proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", machine, "--json",
                               "--config", str(path)], capture_output=True, text=True, timeout=60)
        runs[machine] = (proc.returncode, json.loads(proc.stdout))
    code, report = runs["laptop-rtx3050"]
    (loader,) = report["config"]["loaders"]
    assert loader["settings"]["in_order"] is False and loader["found"]["in_order"] == {"key": "dataloader.in_order",
                                                                                        "line": 4}
    rejected = [f for f in report["findings"] if f["rule_id"] == "settings-rejected"]
    assert code == 2 and rejected and rejected[0]["settings_change"] == {"in_order": True}
    code, report = runs["h100x8-node"]
    assert report["config"]["settings"]["in_order"] is False
    assert "settings-rejected" not in [f["rule_id"] for f in report["findings"]]


def test_the_config_section_fits_80_columns():
    env = {**os.environ, "COLUMNS": "80"}
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core",
                           "--config", str(CONFIGS / "cvnets_mobilevit.yaml")], capture_output=True, text=True,
                          timeout=60, env=env)
    section = proc.stdout.split("Config ", 1)[1].split("\nFindings", 1)[0].splitlines()[1:]
    assert len(section) >= 6 and all(len(line) <= 80 for line in section), "\n".join(section)
    assert "      persistent_workers <- dataset.persistent_workers:17" in section  # a pair is never cut
