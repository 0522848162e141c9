"""Configs read for what the framework between them and torch makes of them (issue 50): real files
of OLMo, llm-foundry, mosaicml/examples' BERT, BasicSR, RT-DETR, AudioCraft, axolotl, SlowFast, fast-reid, lightly, kohya sd-scripts, Mozilla TTS and
latent-diffusion (tests/fixtures/configs/projects/, each with its source and commit in SOURCES.md,
each rule read in the framework's code at that commit). Per loader and setting: the file's value
and line, and what the run gets where the framework changes it (``run``) or fills it (``framework``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.checking.build import build_check
from loaderdoc.config import read_config
from loaderdoc.config.report import describe
from loaderdoc.system.fixtures import load_machine

PROJECTS = Path(__file__).parent / "fixtures" / "configs" / "projects"
CPU, WORLD = "machine: os.cpu_count()", "machine: WORLD_SIZE"
# a setting's (file value, its line) or ("framework", value), and what the run gets when it differs
OLMO_EVAL = {"batch_size": ((8, 88), None), "num_workers": ((0, 93), None), "drop_last": ((True, 94), False),
             "shuffle": (("framework", True), None)}
EXPECTED = {
    "olmo/configs/official-0724/OLMo-1B.yaml": ("OLMo", {
        "train": {"batch_size": ((2048, 71), None), "num_workers": ((0, 192), None), "drop_last": ((True, 193), None),
                  "pin_memory": ((True, 194), None), "prefetch_factor": ((16, 195), "None"),
                  "persistent_workers": ((True, 196), False)},
        "eval (v3-small-ppl-validation)": OLMO_EVAL,
        "eval (v2-small-ppl-validation)": {**OLMO_EVAL, "num_workers": ((0, 121), None), "drop_last": ((True, 122), False)},
        "eval (piqa, hellaswag, winogrande, ... 11 in all)": {"batch_size": (("framework", 8), None)}}),
    "olmo/configs/official-0724/OLMo-7B.yaml": ("OLMo", {
        "train": {"num_workers": ((16, 200), None), "prefetch_factor": ((1, 203), None),
                  "persistent_workers": ((True, 204), None)}}),
    "llm-foundry/scripts/train/yamls/pretrain/mpt-125m.yaml": ("llm-foundry", {
        "train": {"batch_size": ((256, 82), None), "num_workers": ((8, 44), None), "shuffle": ((True, 40), False),
                  "pin_memory": (("framework", True), None), "prefetch_factor": (("framework", 2), None),
                  "persistent_workers": (("framework", True), None)},
        "eval": {"batch_size": ((16, 86), None), "num_workers": ((8, 56), None), "drop_last": ((False, 55), None)}}),
    # llm-foundry's layout, but the benchmark's own main.py: its eval loader takes the global batch, not
    # device_eval_batch_size (line 81, read as the eval batch before)
    "mosaicml-examples/examples/benchmarks/bert/yamls/main/mosaic-bert-base-uncased.yaml": ("mosaicml/examples BERT", {
        "train": {"batch_size": ((4096, 77), None), "num_workers": ((8, 42), None), "shuffle": ((True, 39), False),
                  "pin_memory": (("framework", True), None), "persistent_workers": (("framework", True), None)},
        "eval": {"batch_size": ((4096, 77), None), "num_workers": ((8, 55), None), "drop_last": ((False, 54), None),
                 "shuffle": ((False, 52), None), "prefetch_factor": (("framework", 2), None)}}),
    "basicsr/options/train/SRResNet_SRGAN/train_MSRResNet_x4.yml": ("BasicSR", {
        "train": {"batch_size": ((16, 39), None), "num_workers": ((6, 38), None), "shuffle": (("framework", False), None),
                  "drop_last": (("framework", True), None), "pin_memory": (("framework", False), None)},
        "val": {"batch_size": (("framework", 1), None), "num_workers": (("framework", 0), None)}}),
    # Real-ESRGAN trains with BasicSR: its use_shuffle is read nowhere (the sampler shuffles)
    "real-esrgan/options/train_realesrnet_x4plus.yml": ("BasicSR", {
        "train": {"batch_size": ((12, 69), None), "num_workers": ((5, 68), None), "shuffle": ((True, 67), False)}}),
    # RT-DETR's __include__ lists merged in order, the file last: v1's include/dataloader.yml batch 4
    # over coco_detection.yml's 8; v2's total_batch_size a total its solver divides among the GPUs
    "rt-detr/rtdetr_pytorch/configs/rtdetr/rtdetr_r50vd_6x_coco.yml": ("RT-DETR (YAMLConfig)", {
        "train": {"batch_size": ((4, 23), None), "shuffle": ((True, 22), None), "num_workers": ((4, 24), None),
                  "drop_last": ((True, 19), None), "pin_memory": (("torch", False), None)},
        "val": {"batch_size": ((8, 38), None), "shuffle": ((False, 37), None), "drop_last": ((False, 35), None)}}),
    "rt-detr/rtdetrv2_pytorch/configs/rtdetrv2/rtdetrv2_r18vd_120e_coco.yml": ("RT-DETR (YAMLConfig)", {
        "train": {"batch_size": ((16, 27), None), "num_workers": ((4, 28), None)},
        "val": {"batch_size": ((32, 38), None)}}),
    # AudioCraft: a loader per dataset split, the batch a total (train.py divides it by the world size);
    # evaluate.num_workers / generate.num_workers (5) are process pools', no loader's
    "audiocraft/config/solver/musicgen/musicgen_base_32khz.yaml": ("AudioCraft", {
        "train": {"batch_size": ((192, 28), None), "num_workers": ((10, 40), None), "shuffle": ((True, 36), None),
                  "pin_memory": (("torch", False), None)},
        "val": {"batch_size": ((192, 28), None), "num_workers": ((10, 40), None), "shuffle": ((False, 30), None)}, "evaluate": {"batch_size": ((192, 28), None), "num_workers": ((10, 40), None), "shuffle": ((False, 30), None)}, "generate": {"batch_size": ((192, 28), None), "num_workers": ((10, 40), None), "shuffle": ((False, 30), None)}}),
    "axolotl/examples/llama-3/lora-8b.yml": ("axolotl", {
        "train": {"batch_size": ((2, 41), None), "num_workers": (("torch", 0), WORLD),
                  "pin_memory": (("framework", True), None), "prefetch_factor": (("framework", 256), None),
                  "drop_last": (("framework", True), None)},
        "eval": {"batch_size": ((2, 41), None)}}),
    "slowfast/configs/Kinetics/SLOWFAST_8x8_R50.yaml": ("SlowFast (yacs)", {
        "train": {"batch_size": ((64, 5), 8), "num_workers": ((8, 58), None), "pin_memory": ((True, 59), None),
                  "shuffle": (("framework", True), None), "drop_last": (("framework", True), None)},
        "val": {"batch_size": ((64, 5), 8)},
        "test": {"batch_size": ((64, 56), 8)}}),
    "fast-reid/configs/Market1501/bagtricks_R50.yml": ("fast-reid (yacs)", {
        "train": {"batch_size": ((64, 62), None), "num_workers": ((8, 52), None), "pin_memory": (("framework", True), None),
                  "drop_last": (("framework", True), None)},
        "test": {"batch_size": ((128, 75), None), "num_workers": ((8, 52), 4)}}),
    "lightly/lightly/cli/config/config.yaml": ("lightly (CLI)", {
        "train": {"batch_size": ((16, 63), None), "num_workers": ((-1, 65), CPU), "shuffle": ((True, 64), None),
                  "drop_last": ((True, 67), None)},
        "embed": {"num_workers": ((-1, 65), CPU), "shuffle": (("framework", False), None),
                  "drop_last": (("framework", False), None)}}),
    "kohya-sd-scripts/core/config/base_diffusion_sdxl.toml": ("kohya sd-scripts", {
        "train": {"batch_size": ((4, 56), None), "num_workers": ((0, 28), CPU), "shuffle": (("framework", True), None)}}),
    "kohya-sd-scripts/docs/train_lllite_README.toml": ("kohya sd-scripts", {
        "train": {"num_workers": ((4, 4), CPU), "persistent_workers": ((True, 5), None)}}),
    "kohya-sd-scripts/docs/config_README-en.toml": ("kohya sd-scripts", {
        "train": {"batch_size": ((4, 10), None), "num_workers": (("torch", 0), CPU)}}),
    "mozilla-tts/TTS/tts/configs/config.json": ("Mozilla TTS", {
        "train": {"batch_size": ((32, 65), 64), "num_workers": ((4, 130), None), "shuffle": (("framework", False), None)},
        "val": {"batch_size": ((16, 66), None), "num_workers": ((4, 131), None)}}),
    "mozilla-tts/TTS/vocoder/configs/multiband_melgan_config.json": ("Mozilla TTS", {
        "train": {"batch_size": ((64, 102), None), "num_workers": ((4, 135), None), "shuffle": (("framework", True), None)},
        "val": {"batch_size": ((64, 102), 1), "num_workers": ((4, 136), None)}}),
    "latent-diffusion/configs/autoencoder/autoencoder_kl_32x32x4.yaml": ("latent-diffusion (main.DataModuleFromConfig)", {
        "train": {"batch_size": ((12, 30), None), "num_workers": (("framework", 24), None)},
        "val": {"batch_size": ((12, 30), None), "num_workers": (("framework", 24), None)}}),
    "latent-diffusion/configs/latent-diffusion/lsun_churches-ldm-kl-8.yaml": ("latent-diffusion (main.DataModuleFromConfig)", {
        "train": {"batch_size": ((96, 69), None), "num_workers": ((5, 70), None)}}),
}


def _run(entry: dict) -> object:
    run = entry.get("run")
    if run is None:
        return None
    if run["machine"]:
        return {"cpu_count": CPU, "world_size": WORLD}[run["machine"]]
    return "None" if run["value"] is None else run["value"]


@pytest.mark.parametrize("relative", sorted(EXPECTED))
def test_each_framework_config_is_read_as_its_run_gets_it(relative):
    layout, loaders = EXPECTED[relative]
    got = describe(read_config(PROJECTS / relative))
    assert got["layout"] == layout
    by_name = {lo["name"]: lo for lo in got["loaders"]}
    assert list(loaders) == [name for name in by_name if name in loaders] and set(loaders) <= set(by_name), list(by_name)
    for name, settings in loaders.items():
        for setting, (stated, run) in settings.items():
            entry = by_name[name]["settings"][setting]
            if stated[0] in ("framework", "torch"):
                assert entry["set_by"] is None and entry.get("default") == stated[0] and entry["value"] == stated[1], (
                    name, setting, entry)
            else:
                assert (entry["value"], entry["set_by"]["line"]) == stated, (name, setting, entry)
            assert _run(entry) == run, (name, setting, entry)


def test_the_bert_benchmark_s_eval_batch_is_a_total_and_its_device_eval_batch_size_is_said_unused():
    got = describe(read_config(PROJECTS / "mosaicml-examples/examples/benchmarks/bert/yamls/main/"
                                          "mosaic-bert-base-uncased.yaml"))
    (evaluation,) = [lo for lo in got["loaders"] if lo["name"] == "eval"]
    assert evaluation["batch_scope"] == "total", evaluation
    assert "device_eval_batch_size = 128 (not the eval loader's" in " ".join(evaluation["also"]), evaluation
    # llm-foundry's own file keeps device_eval_batch_size as its eval loader's, per process
    foundry = describe(read_config(PROJECTS / "llm-foundry/scripts/train/yamls/pretrain/mpt-125m.yaml"))
    (evaluation,) = [lo for lo in foundry["loaders"] if lo["name"] == "eval"]
    assert evaluation["batch_scope"] == "per_gpu" and evaluation["settings"]["batch_size"]["value"] == 16


def test_basicsr_s_batch_is_one_process_s_and_the_gpus_multiply_it_when_not_distributed():
    got = describe(read_config(PROJECTS / "real-esrgan/options/train_realesrnet_x4plus.yml"))
    (train,) = got["loaders"]
    assert train["batch_scope"] == "per_gpu" and got["read"] == "complete"
    assert train["also"] == ["batch_size_per_gpu and num_worker_per_gpu times num_gpu: 4 in one process when not "
                             "launched distributed (--launcher none: basicsr/data/__init__.py build_dataloader)"]


def test_audiocraft_s_stage_worker_counts_are_no_loader_s_and_its_batch_is_a_total():
    """Was: "num_workers: dataset.num_workers = 10, generate.num_workers = 5, evaluate.num_workers = 5
    disagree", the train loader's workers unread, and one loader where the solver builds four."""
    got = describe(read_config(PROJECTS / "audiocraft/config/solver/musicgen/musicgen_base_32khz.yaml"))
    assert not any("disagree" in r for r in got["partial_reasons"]), got["partial_reasons"]
    assert {lo["name"]: lo["batch_scope"] for lo in got["loaders"]} == {
        "train": "total", "val": "total", "evaluate": "total", "generate": "total"}


def test_olmo_s_prefetch_factor_with_no_workers_is_no_crash_and_its_file_values_stay_recommended(monkeypatch):
    """Was: a false CRITICAL (exit 2, 'torch refuses prefetch_factor with 0 workers'), and the
    Recommended block proposed drop_last = False, "torch's default", where the file sets true."""
    monkeypatch.chdir(PROJECTS / "olmo/configs/official-0724")
    report = build_check(load_machine("ci-2core"), config_path="OLMo-1B.yaml")
    assert report.exit_code != 2 and not any(f.rule_id == "settings-rejected" for f in report.findings)
    train = report.first.settings
    assert (train.num_workers, train.prefetch_factor, train.persistent_workers) == (0, None, False)
    rec = report.recommendation
    assert rec.settings.drop_last is True and "as the run gets it from the file (data.drop_last, line 193)" in \
        rec.reasons["drop_last"]
    assert rec.settings.pin_memory is False and rec.reasons["pin_memory"].startswith("False: pin-memory-without-gpu")


def test_a_value_the_machine_decides_is_judged_as_this_machine_s(monkeypatch):
    """lightly's num_workers: -1 was refused ("num_workers must be >= 0", exit 3): it is os.cpu_count()."""
    monkeypatch.chdir(PROJECTS / "lightly/lightly/cli/config")
    for machine, cpus in (("ci-2core", 2), ("h100x8-node", None)):
        facts = load_machine(machine)
        report = build_check(facts, config_path="config.yaml")
        assert report.first.settings.num_workers == (cpus or facts.cpu.logical.get())
    kohya = build_check(load_machine("h100x8-node"), config_path=str(
        PROJECTS / "kohya-sd-scripts/docs/train_lllite_README.toml"))
    assert kohya.first.settings.num_workers == 4  # min(4, os.cpu_count())


def test_a_total_over_the_file_s_own_gpus_is_judged_per_process():
    """SlowFast's TRAIN.BATCH_SIZE 64 over its NUM_GPUS 8: 8 a process, whatever this machine has."""
    for machine in ("ci-2core", "h100x8-node"):
        report = build_check(load_machine(machine), config_path=str(
            PROJECTS / "slowfast/configs/Kinetics/SLOWFAST_8x8_R50.yaml"))
        assert [(c.name, c.batch) for c in report.loaders] == [("train", 8), ("val", 8), ("test", 8)]


def test_the_layout_label_comes_from_evidence():
    """kohya's train_batch_size beside gradient_accumulation_steps was labelled DeepSpeed (a total),
    fast-reid's yacs file detectron2: each now by keys only its framework has."""
    kohya = read_config(PROJECTS / "kohya-sd-scripts/core/config/base_diffusion_sdxl.toml")
    assert kohya.layout == "kohya sd-scripts" and kohya.loaders[0].batch_scope == "per_gpu"
    assert read_config(PROJECTS / "fast-reid/configs/Base-bagtricks.yml").layout == "fast-reid (yacs)"
    d2 = PROJECTS / "detectron2/configs/COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml"
    assert read_config(d2).layout == "detectron2 (yacs)"


def test_check_shows_what_the_run_gets_and_the_rule(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core", "--config",
                           str(PROJECTS / "lightly/lightly/cli/config/config.yaml")],
                          capture_output=True, text=True, timeout=120, env={"COLUMNS": "100", "PATH": "/usr/bin"})
    assert proc.returncode in (0, 1), proc.stderr
    out = " ".join(proc.stdout.split())
    assert "num_workers=-1 -> os.cpu_count() = 2 here" in out
    assert "the run gets: num_workers: lightly's CLI turns a negative num_workers into os.cpu_count()" in out
    doc = json.loads(subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--machine", "ci-2core", "--config",
                                     str(PROJECTS / "lightly/lightly/cli/config/config.yaml"), "--json"],
                                    capture_output=True, text=True, timeout=120).stdout)
    loader = doc["config"]["loaders"][0]
    assert loader["settings"]["num_workers"] == 2  # as judged: this machine's os.cpu_count()
    assert loader["read"]["num_workers"]["value"] == -1 and loader["read"]["num_workers"]["run"]["machine"] == "cpu_count"


def test_a_list_of_loaders_is_a_loader_per_entry_never_merged(tmp_path):
    """Any list whose entries hold loader settings, in a file of no known framework: each entry its own
    loader, named by its label, taking its split's batch stated outside the list, nothing shared."""
    path = tmp_path / "run.yaml"
    path.write_text("data:\n  num_workers: 4\n  pin_memory: true\neval_batch_size: 32\nevaluators:\n"
                    "  - name: squad\n    loader:\n      num_workers: 1\n  - name: glue\n    loader:\n"
                    "      num_workers: 2\n      drop_last: true\n", encoding="utf-8")
    loaders = {lo["name"]: {k: v["value"] for k, v in lo["settings"].items() if v["set_by"]}
               for lo in describe(read_config(path))["loaders"]}
    assert loaders == {"train": {"num_workers": 4, "pin_memory": True},
                       "eval (squad)": {"batch_size": 32, "num_workers": 1},
                       "eval (glue)": {"batch_size": 32, "num_workers": 2, "drop_last": True}}
