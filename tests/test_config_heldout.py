"""The reading generalises (issue 50): real configs of projects loaderdoc has no rule for
(tests/fixtures/configs/heldout/, each with its source and commit on its first line), read by
general rules only. An evaluation of 17 such files found 15 wrong; each general rule below fixes a
kind of mistake, and none is a special case of its file. What a human reads in each is the test."""

from __future__ import annotations

from pathlib import Path

from loaderdoc.config import read_config
from loaderdoc.config.report import describe

HELDOUT = Path(__file__).parent / "fixtures" / "configs" / "heldout"


def read(relative: str) -> dict:
    return describe(read_config(HELDOUT / relative))


def by_name(got: dict) -> dict:
    return {lo["name"]: lo["settings"] for lo in got["loaders"]}


def test_what_an_unknown_framework_leaves_unset_is_its_code_s_never_torch_s():
    """fairseq passes pin_memory=True and persistent_workers=True itself: unset here is not False."""
    got = read("fairseq/examples/roberta/config/pretraining/base.yaml")
    (loader,) = got["loaders"]
    assert loader["settings"]["batch_size"]["value"] == 16
    for setting in ("num_workers", "pin_memory", "persistent_workers", "shuffle"):
        assert loader["settings"][setting]["default"] == "code", setting
    assert got["read"] == "partial" and got["partial_reasons"][0].startswith(
        "not set in the file, so the training code decides (loader: shuffle, num_workers, pin_memory")


def test_a_script_s_dataloader_call_is_read_literal_arguments_and_argparse_defaults():
    """DINO: DataLoader(..., batch_size=args.batch_size_per_gpu, num_workers=args.num_workers,
    pin_memory=True, drop_last=True): the literals were reported as torch's False."""
    got = read("dino/main_dino.py")
    train = by_name(got)["train"]
    assert (train["pin_memory"]["value"], train["pin_memory"]["set_by"]["line"]) == (True, 153)
    assert (train["drop_last"]["value"], train["drop_last"]["set_by"]["line"]) == (True, 154)
    assert train["batch_size"]["value"] == 64 and train["num_workers"]["value"] == 10  # argparse defaults
    assert train["shuffle"]["default"] == "torch"  # the call is read: what it leaves out is torch's
    assert any("argparse defaults read as args.*" in r for r in got["partial_reasons"])


def test_a_referred_variable_reaches_only_the_loaders_that_refer_to_it():
    """SpeechBrain: num_workers: 4 is used by train_dataloader_opts only; val and test were given it."""
    loaders = by_name(read("speechbrain/recipes/LibriSpeech/ASR/transformer/hparams/conformer_small.yaml"))
    assert loaders["train"]["num_workers"]["value"] == 4 and loaders["train"]["num_workers"]["set_by"]["via"]
    assert loaders["val"]["num_workers"]["set_by"] is None and loaders["test"]["num_workers"]["set_by"] is None


def test_batches_packed_by_size_are_unread_with_why():
    """ESPnet's batch_bins: a batch of so many bins, not a count (was "torch default 1")."""
    got = read("espnet/egs2/librispeech_100/asr1/conf/tuning/"
               "train_asr_conformer_lr2e-3_warmup15k_amp_nondeterministic.yaml")
    (loader,) = got["loaders"]
    assert loader["settings"]["batch_size"]["unreadable"] == "batch_bins: 16000000"
    assert any("batches packed by size, not counted" in r for r in got["partial_reasons"])


def test_a_switched_off_loader_is_not_reported():
    """torchtitan's [validation] enable = false: no val loader."""
    assert "val" not in by_name(read("torchtitan/torchtitan/models/flux/train_configs/debug_model.toml"))


def test_videos_per_gpu_is_the_per_gpu_batch_and_a_test_dataloader_dict_a_loader():
    """mmaction2 0.x: data = dict(videos_per_gpu=8, ..., test_dataloader=dict(videos_per_gpu=1))."""
    got = read("mmaction2/configs/recognition/slowfast/slowfast_r50_4x16x1_256e_kinetics400_rgb.py")
    loaders = by_name(got)
    assert loaders["train"]["batch_size"]["value"] == 8 and loaders["test"]["batch_size"]["value"] == 1
    assert got["loaders"][0]["batch_scope"] == "per_gpu"


def test_bases_not_read_make_the_read_partial_and_are_named():
    """YOLOX's `class Exp(MyExp)` from the installed yolox, OpenPCDet's _BASE_CONFIG_ resolved from its
    tools folder: both were "complete"."""
    yolox = read("yolox/exps/example/custom/yolox_s.py")
    assert yolox["read"] == "partial" and any(
        "class Exp inherits yolox.exp.Exp, an installed package's, not read" in r for r in yolox["partial_reasons"])
    pcdet = read("openpcdet/tools/cfgs/kitti_models/pointpillar.yaml")
    assert any(r.startswith("DATA_CONFIG._BASE_CONFIG_ = cfgs/dataset_configs/kitti_dataset.yaml: a base config "
                            "this file names, not read") for r in pcdet["partial_reasons"])
