"""Real configs of well-known projects (tests/fixtures/configs/projects/, copied from the projects with
their inheritance chains at the same relative paths; SOURCES.md names each source and what the
framework does with it), read to the settings their framework would pass, each from the file and
line that set it, and nothing else: a setting no key sets is never reported as given."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.base.errors import SettingsError
from loaderdoc.config import read_config
from loaderdoc.config.report import describe

FIXTURES = Path(__file__).parent / "fixtures" / "configs"
PROJECTS = FIXTURES / "projects"

# config -> (layout, {loader: {setting: (value, file the key is in, its line)}}); settings not listed are not set
D2 = "detectron2/configs/"
MMDET3_VAL = {"batch_size": (1, "coco_detection.py", 53), "num_workers": (2, "coco_detection.py", 54),
              "persistent_workers": (True, "coco_detection.py", 55), "drop_last": (False, "coco_detection.py", 56),
              "shuffle": (False, "coco_detection.py", 57)}
LSJ_VAL = {k: (v, "lsj-100e_coco-detection.py", line + 4) for k, (v, _, line) in MMDET3_VAL.items()}
CONVNEXT_VAL = {"batch_size": (64, "imagenet_bs64_swin_224.py", 61), "num_workers": (5, "imagenet_bs64_swin_224.py", 62),
                "shuffle": (False, "imagenet_bs64_swin_224.py", 68)}
NEMO = {split: {"batch_size": (16, "conformer_ctc_bpe.yaml", first), "shuffle": (split == "train", "conformer_ctc_bpe.yaml",
                                                                                first + 1),
                "num_workers": (8, "conformer_ctc_bpe.yaml", first + (2 if split == "train" else 3)),
                "pin_memory": (True, "conformer_ctc_bpe.yaml", first + (3 if split == "train" else 4))}
        for split, first in (("train", 21), ("val", 38), ("test", 47))}
EXPECTED = {
    "yolov5/runs/train/exp/opt.yaml": ("YOLO (ultralytics / YOLOv5)", {
        "train": {"batch_size": (16, "opt.yaml", 35), "num_workers": (8, "opt.yaml", 54)}}),
    "ultralytics/ultralytics/cfg/default.yaml": ("YOLO (ultralytics / YOLOv5)", {
        "train": {"batch_size": (16, "default.yaml", 14), "num_workers": (8, "default.yaml", 20)}}),
    # detectron2 yacs: the child sets nothing; IMS_PER_BATCH comes from _BASE_, NUM_WORKERS is defaults.py's
    D2 + "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml": ("detectron2 (yacs)", {
        "train": {"batch_size": (16, "Base-RCNN-FPN.yaml", 37)}}),
    D2 + "quick_schedules/mask_rcnn_R_50_FPN_instant_test.yaml": ("detectron2 (yacs)", {
        "train": {"batch_size": (4, "mask_rcnn_R_50_FPN_instant_test.yaml", 13),
                  "num_workers": (2, "mask_rcnn_R_50_FPN_instant_test.yaml", 15)}}),
    D2 + "COCO-Detection/fast_rcnn_R_50_FPN_1x.yaml": ("detectron2 (yacs)", {
        "train": {"batch_size": (16, "Base-RCNN-FPN.yaml", 37), "num_workers": (2, "fast_rcnn_R_50_FPN_1x.yaml", 18)}}),
    D2 + "common/data/coco.py": ("detectron2 LazyConfig", {
        "train": {"batch_size": (16, "coco.py", 31), "num_workers": (4, "coco.py", 32)},
        "test": {"num_workers": (4, "coco.py", 44)}}),
    # LazyConfig children: imports, then `dataloader.train.total_batch_size = 64`; the 200ep imports the 100ep
    D2 + "new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py": ("detectron2 LazyConfig", {
        "train": {"batch_size": (64, "mask_rcnn_R_50_FPN_100ep_LSJ.py", 56), "num_workers": (4, "coco.py", 32)},
        "test": {"num_workers": (4, "coco.py", 44)}}),
    D2 + "new_baselines/mask_rcnn_R_50_FPN_200ep_LSJ.py": ("detectron2 LazyConfig", {
        "train": {"batch_size": (64, "mask_rcnn_R_50_FPN_100ep_LSJ.py", 56), "num_workers": (4, "coco.py", 32)},
        "test": {"num_workers": (4, "coco.py", 44)}}),
    "nemo/examples/asr/conf/conformer/conformer_ctc_bpe.yaml": ("NeMo", NEMO),
    # MMCV 1.x: data = dict(samples_per_gpu=..., workers_per_gpu=...) over _base_ chains of 2-3 files
    "mmdet2/configs/retinanet/retinanet_r18_fpn_1x8_1x_coco.py": ("MMCV 1.x (MMDetection 2 / MMSegmentation 0.x)", {
        "train": {"batch_size": (8, "retinanet_r18_fpn_1x8_1x_coco.py", 9), "num_workers": (2, "coco_detection.py", 34)}}),
    "mmdet2/configs/fcos/fcos_r50_caffe_fpn_gn-head_4x4_1x_coco.py": ("MMCV 1.x (MMDetection 2 / MMSegmentation 0.x)", {
        "train": {"batch_size": (4, "fcos_r50_caffe_fpn_gn-head_4x4_1x_coco.py", 5),
                  "num_workers": (4, "fcos_r50_caffe_fpn_gn-head_4x4_1x_coco.py", 5)}}),
    "mmseg0/configs/segformer/segformer_mit-b0_8x1_1024x1024_160k_cityscapes.py": (
        "MMCV 1.x (MMDetection 2 / MMSegmentation 0.x)", {
            "train": {"batch_size": (1, "segformer_mit-b0_8x1_1024x1024_160k_cityscapes.py", 38),
                      "num_workers": (1, "segformer_mit-b0_8x1_1024x1024_160k_cityscapes.py", 38)}}),
    "mmseg0/configs/pspnet/pspnet_r50-d8_512x1024_40k_cityscapes.py": ("MMCV 1.x (MMDetection 2 / MMSegmentation 0.x)", {
        "train": {"batch_size": (2, "cityscapes.py", 36), "num_workers": (2, "cityscapes.py", 37)}}),
    # mmengine: list _base_, a string _base_ chain of three, and pure-Python read_base() children
    "mmdet3/configs/retinanet/retinanet_r18_fpn_1xb8-1x_coco.py": ("mmengine", {
        "train": {"batch_size": (8, "retinanet_r18_fpn_1xb8-1x_coco.py", 9), "num_workers": (2, "coco_detection.py", 40),
                  "persistent_workers": (True, "coco_detection.py", 41), "shuffle": (True, "coco_detection.py", 42)},
        "val": MMDET3_VAL, "test": MMDET3_VAL}),
    "mmdet3/configs/retinanet/retinanet_r50_fpn_8xb8-amp-lsj-200e_coco.py": ("mmengine", {
        "train": {"batch_size": (8, "retinanet_r50_fpn_8xb8-amp-lsj-200e_coco.py", 12),
                  "num_workers": (4, "retinanet_r50_fpn_8xb8-amp-lsj-200e_coco.py", 12),
                  "persistent_workers": (True, "lsj-100e_coco-detection.py", 43),
                  "shuffle": (True, "lsj-100e_coco-detection.py", 44)},
        "val": LSJ_VAL, "test": LSJ_VAL}),
    "mmpretrain/mmpretrain/configs/convnext/convnext-tiny_32xb128_in1k.py": ("mmengine", {
        "train": {"batch_size": (128, "convnext-tiny_32xb128_in1k.py", 14),
                  "num_workers": (5, "imagenet_bs64_swin_224.py", 51), "shuffle": (True, "imagenet_bs64_swin_224.py", 57)},
        "val": CONVNEXT_VAL, "test": CONVNEXT_VAL}),
    "mmpretrain/mmpretrain/configs/eva/eva_mae_style_vit_base_p16_16xb256_coslr_400e_in1k.py": ("mmengine", {
        "train": {"batch_size": (256, "eva_mae_style_vit_base_p16_16xb256_coslr_400e_in1k.py", 20),
                  "num_workers": (8, "imagenet_bs512_mae.py", 33), "persistent_workers": (True, "imagenet_bs512_mae.py", 34),
                  "shuffle": (True, "imagenet_bs512_mae.py", 35)}}),
    # Hydra: a defaults list of groups, and an experiment that overrides /data and sets data.batch_size
    "lightning-hydra-template/configs/train.yaml": ("Hydra", {
        "": {"batch_size": (128, "mnist.yaml", 4), "num_workers": (0, "mnist.yaml", 6),
             "pin_memory": (False, "mnist.yaml", 7)}}),
    "lightning-hydra-template/configs/experiment/example.yaml": ("Hydra", {
        "": {"batch_size": (64, "example.yaml", 35), "num_workers": (0, "mnist.yaml", 6),
             "pin_memory": (False, "mnist.yaml", 7)}}),
}


def read(relative: str) -> dict:
    return describe(read_config(PROJECTS / relative))


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_each_project_config_is_read_as_its_framework_reads_it(relative):
    layout, loaders = EXPECTED[relative]
    got = read(relative)
    assert got["layout"] == layout
    assert [lo["name"] for lo in got["loaders"]] == list(loaders)
    for loader in got["loaders"]:
        want = loaders[loader["name"]]
        for setting, entry in loader["settings"].items():
            if setting in want:
                value, file, line = want[setting]
                assert (entry["value"], Path(entry["set_by"]["file"]).name, entry["set_by"]["line"]) == (
                    value, file, line), (loader["name"], setting, entry)
            else:  # never given: the file does not set it, whatever the DataLoader then uses
                assert entry["set_by"] is None, (loader["name"], setting, entry)
                assert entry["default"] in ("torch", "framework", "code")


def test_batch_sizes_say_whether_they_count_per_gpu_or_over_all_gpus():
    scope = {rel: read(rel)["loaders"][0]["batch_scope"] for rel in (
        D2 + "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml", D2 + "new_baselines/mask_rcnn_R_50_FPN_100ep_LSJ.py",
        "mmdet2/configs/retinanet/retinanet_r18_fpn_1x8_1x_coco.py", "yolov5/runs/train/exp/opt.yaml",
        "mmdet3/configs/retinanet/retinanet_r18_fpn_1xb8-1x_coco.py")}
    assert list(scope.values()) == ["total", "total", "per_gpu", "total", "loader"]


def test_what_the_framework_sets_itself_is_named_as_its_default_not_as_given():
    (loader,) = read(D2 + "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml")["loaders"]
    workers = loader["settings"]["num_workers"]
    assert workers["set_by"] is None and workers["value"] == 4 and "NUM_WORKERS = 4" in workers["default_source"]


def test_an_interpolation_and_an_environment_variable():
    got = read("hydra-interpolation/disent/experiment/config/config.yaml")
    (loader,) = got["loaders"]
    batch = loader["settings"]["batch_size"]
    assert batch["value"] == 256 and batch["set_by"]["via"] == "settings.dataset.batch_size"
    assert Path(batch["set_by"]["file"]).name == "local.yaml" and batch["set_by"]["value_from"]["line"] == 42
    # most of disent's defaults groups were not copied: named, one line each, and the read is partial
    assert got["read"] == "partial" and any("dataset: xyobject, not found" in r for r in got["partial_reasons"])
    env = read("lightning-hydra-template/configs/data/mnist_env.yaml")
    (loader,) = env["loaders"]
    assert env["read"] == "partial"
    for setting, variable in (("batch_size", "BATCH_SIZE"), ("num_workers", "NUM_WORKERS"), ("pin_memory", "PIN_MEMORY")):
        entry = loader["settings"][setting]
        assert entry["value"] is None and f"environment variable {variable}" in entry["why"], entry


def test_a_loader_only_running_the_config_fills_is_partial_not_empty():
    got = read("detectron2/projects/Rethinking-BatchNorm/configs/mask_rcnn_BNhead.py")
    assert got["loaders"] == [] and got["read"] == "partial"
    assert any("get_config('common/data/coco.py').dataloader" in r for r in got["partial_reasons"])


def config_files() -> list[Path]:
    return sorted(p for p in FIXTURES.rglob("*") if p.suffix in (".yaml", ".yml", ".json", ".py", ".toml"))


def test_no_setting_is_reported_as_given_unless_a_key_in_a_file_set_it():
    """Every config fixture, bases and Hydra group files included: each setting with a set_by names a
    file whose line holds that key; each without one is a default, named as such."""
    checked = 0
    for path in config_files():
        try:
            got = describe(read_config(path))
        except SettingsError as err:  # a Hydra group's option that is a list: part of a config, not one alone
            assert str(err).endswith("expected a mapping of settings, got list"), err
            continue
        for loader in got["loaders"]:
            for setting, entry in loader["settings"].items():
                set_by = entry["set_by"]
                if set_by is None:
                    assert entry.get("default") in ("torch", "framework", "code"), (path, setting, entry)
                    continue
                key = set_by["key"].split(".")[-1]
                text = Path(set_by["file"]).read_text().splitlines()[set_by["line"] - 1]
                assert key in text, (path, setting, set_by, text)
                checked += 1
    assert checked > 150


def test_check_json_and_text_never_show_an_unset_setting_as_read(tmp_path):
    """YOLOv5's opt.yaml sets batch_size and workers only: check says so, and judges num_workers=8."""
    path = PROJECTS / "yolov5/runs/train/exp/opt.yaml"
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core", "--json", "--config",
                           str(path)], capture_output=True, text=True, timeout=60)
    (loader,) = json.loads(proc.stdout)["config"]["loaders"]
    assert loader["settings"]["num_workers"] == 8 and loader["batch_per_process"] == 16
    assert {k for k, v in loader["set_by"].items() if v} == {"batch_size", "num_workers"}
    text = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core", "--config", str(path)],
                          capture_output=True, text=True, timeout=60).stdout
    assert "train [" in text and "batch_size=16 (in total over all GPUs), num_workers=8" in text
    # YOLO's code builds its loaders (ultralytics' build_dataloader): what the file leaves out is its to decide
    assert "not set: pin_memory, drop_last, prefetch_factor, persistent_workers (the training code decides)" \
        in " ".join(text.split())
    assert "num_workers <- workers:54" in text and "pin_memory <-" not in text


SHOW_READ_R18 = """\
retinanet_r18_fpn_1xb8-1x_coco.py: mmengine; 5 files read, complete
  + ../_base_/models/retinanet_r50_fpn.py
  + ../_base_/datasets/coco_detection.py
  + ../_base_/schedules/schedule_1x.py
  + ../_base_/default_runtime.py
  train:
    batch_size              8 <- train_dataloader.batch_size
                            (retinanet_r18_fpn_1xb8-1x_coco.py:9)
    shuffle                 True <- train_dataloader.sampler.shuffle
                            (../_base_/datasets/coco_detection.py:42)
    num_workers             2 <- train_dataloader.num_workers
                            (../_base_/datasets/coco_detection.py:40)
    pin_memory              not set (torch default False)
    drop_last               not set (torch default False)
    timeout                 not set (torch default 0.0)
    prefetch_factor         not set (torch default: 2 per worker)
    persistent_workers      True <- train_dataloader.persistent_workers
                            (../_base_/datasets/coco_detection.py:41)
    multiprocessing_context not set (torch default None)
    in_order                not set (torch default True)
"""
CHECK_R18_TRAIN = """\
Config retinanet_r18_fpn_1xb8-1x_coco.py (mmengine; 5 files): 3 loaders
  train [ok]: batch_size=8, shuffle=True, num_workers=2, persistent_workers=True
    not set: pin_memory (torch default False), prefetch_factor (torch default: 2
      per worker)
    read from:
      batch_size <- train_dataloader.batch_size:9
      shuffle <- train_dataloader.sampler.shuffle
          (../_base_/datasets/coco_detection.py:42)
      num_workers <- train_dataloader.num_workers
          (../_base_/datasets/coco_detection.py:40)
      persistent_workers <- train_dataloader.persistent_workers
          (../_base_/datasets/coco_detection.py:41)
"""


def test_the_read_and_the_config_section_as_a_user_sees_them_at_80_columns():
    """Whole rendered text, compared at a fixed width: an mmengine child and its four bases."""
    folder = PROJECTS / "mmdet3/configs/retinanet"
    env = {**os.environ, "COLUMNS": "80"}
    shown = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--config", "retinanet_r18_fpn_1xb8-1x_coco.py",
                            "--show-read"], capture_output=True, text=True, timeout=60, cwd=folder, env=env).stdout
    assert shown.split("  val:\n")[0] == SHOW_READ_R18
    checked = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core", "--config",
                              "retinanet_r18_fpn_1xb8-1x_coco.py"], capture_output=True, text=True, timeout=60,
                             cwd=folder, env=env).stdout
    section = "Config " + checked.split("\nConfig ", 1)[1].split("  val [", 1)[0]
    assert section == CHECK_R18_TRAIN
    assert all(len(line) <= 80 for line in checked.split("\nConfig ", 1)[1].split("\nFindings", 1)[0].splitlines())


@pytest.mark.parametrize("relative", [D2 + "new_baselines/mask_rcnn_R_50_FPN_200ep_LSJ.py",
                                      "lightning-hydra-template/configs/experiment/example.yaml",
                                      "mmdet3/configs/retinanet/retinanet_r50_fpn_8xb8-amp-lsj-200e_coco.py"])
def test_a_config_named_from_its_own_folder_reads_what_it_inherits(relative, monkeypatch):
    """`cd configs/new_baselines && loaderdoc check --config x.py`: `..` imports and bases from there."""
    path = PROJECTS / relative
    monkeypatch.chdir(path.parent)
    got = describe(read_config(path.name))
    layout, loaders = EXPECTED[relative]
    # complete but for what the training code decides where loaderdoc does not know its builder (issue 50)
    assert got["read"] == ("complete" if layout == "mmengine" else "partial"), got["partial_reasons"]
    assert all(r.startswith(("not set in the file, so the training code decides", "batch_size (")) for r in got["partial_reasons"])
    assert [lo["name"] for lo in got["loaders"]] == list(loaders)
    for loader in got["loaders"]:
        for setting, (value, file, line) in loaders[loader["name"]].items():
            entry = loader["settings"][setting]
            assert (entry["value"], Path(entry["set_by"]["file"]).name, entry["set_by"]["line"]) == (value, file, line)
