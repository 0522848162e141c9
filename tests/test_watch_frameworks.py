"""`loaderdoc watch` under the frameworks people train with: a real Lightning ``Trainer.fit`` and a
real Hugging Face ``Trainer.train``, each on a tiny CPU model, each a real child process.

Both frameworks drive the DataLoader one batch ahead (Lightning's prefetching fetcher, accelerate's
``DataLoaderShard`` that looks for the end); each ``next()`` still runs between two steps, so the
waits and steps the hook sums keep their meaning. The dataset times its own loading (a sleep per
sample, ``num_workers=0``): the hook's wait must cover it and not much more. Skipped where a
framework is not installed (the test extra installs both).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.jobs import HUGGING_FACE_TINY, LIGHTNING_TINY
from support.paths import pythonpath

from loaderdoc.watching.build import STARVED_RULE

SAMPLE_S = 0.005  # the load of one sample; a batch of 4 takes 20 ms against a step of a few ms
BATCH, TRAIN_BATCHES, EPOCHS = 4, 16, 2

# The training dataset: every sample sleeps SAMPLE_S and its load time is kept in order, so the
# script can print the load of every batch after each epoch's first (the batches the hook's wait
# covers: an epoch's first batch is timed apart, as its start-up).
DATASET = f"""\
import json, time
import torch
from torch.utils.data import Dataset

SAMPLE_S, BATCH, TRAIN_BATCHES, EPOCHS = {SAMPLE_S}, {BATCH}, {TRAIN_BATCHES}, {EPOCHS}

class Slow(Dataset):
    def __init__(self, n, item):
        self.n, self.item, self.loads = n, item, []
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        t = time.perf_counter()
        time.sleep(SAMPLE_S)
        self.loads.append(time.perf_counter() - t)
        return self.item(i)

def print_truth(dataset):
    per_epoch = dataset.n
    after_first = [s for k, s in enumerate(dataset.loads) if k % per_epoch >= BATCH]
    print(json.dumps({{"loads": len(dataset.loads), "load_after_first_s": sum(after_first)}}))
"""

LIGHTNING = DATASET + LIGHTNING_TINY + """
train = Slow(TRAIN_BATCHES * BATCH, item)
val = Slow(12, item)  # batch_size 3 below: 4 batches, and a batch size that tells it from train
trainer.fit(Tiny(), torch.utils.data.DataLoader(train, batch_size=BATCH, num_workers=0),
            torch.utils.data.DataLoader(val, batch_size=3, num_workers=0))
print_truth(train)
"""

HUGGING_FACE = DATASET + HUGGING_FACE_TINY + """

train = Slow(TRAIN_BATCHES * BATCH, item)
args = TrainingArguments(output_dir="out", num_train_epochs=EPOCHS, per_device_train_batch_size=BATCH,
                         report_to=[], use_cpu=True, dataloader_num_workers=0, save_strategy="no",
                         logging_strategy="no", disable_tqdm=True)
result = Trainer(model=Tiny(), args=args, train_dataset=train).train()
assert result.global_step == EPOCHS * TRAIN_BATCHES, result.global_step
print_truth(train)
"""


def needs(module: str):
    # find_spec, not importorskip: importing lightning or transformers here would cost seconds
    return pytest.mark.skipif(importlib.util.find_spec(module) is None,
                              reason=f"{module} is not installed (pip install '.[test]')")


def watch_script(tmp_path: Path, source: str, *watch_args: str) -> tuple[dict, dict]:
    """Run the script under ``loaderdoc watch --json [watch_args]``; (the script's truth line, the report)."""
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(source), encoding="utf-8")
    env = dict(os.environ)
    env["PYTHONPATH"] = pythonpath()
    # no network here: nothing may be fetched from a hub, and nothing cached outside tmp_path
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
               TOKENIZERS_PARALLELISM="false")
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "watch", "--json", *watch_args, "--", sys.executable,
                           str(script)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    start = proc.stdout.index("{\n")  # the report follows the child's own output
    truth = json.loads(proc.stdout[:start].splitlines()[-1])
    report = json.loads(proc.stdout[start:])
    assert report["schema"] == "loaderdoc.watch/1" and report["exit_code"] == 0
    return truth, report


def check_train_loader(train: dict, truth: dict) -> None:
    assert train["settings"]["num_workers"] == 0
    assert train["totals"]["epochs"] == EPOCHS
    assert train["totals"]["steps"] == EPOCHS * TRAIN_BATCHES
    assert truth["loads"] == EPOCHS * TRAIN_BATCHES * BATCH
    # every load after an epoch's first batch happens inside a timed next(): the wait covers it,
    # and adds little to it (the sampler and collate, about a ms of a 20 ms batch). A batch counted
    # twice (a wrapper's next() and the wrapped loader's) would double it; the bound leaves room
    # for a loaded machine, where preemption inside next() once stretched it to 1.28x (six test
    # workers beside a burning core)
    wait = train["totals"]["wait_s"]
    assert truth["load_after_first_s"] <= wait < 1.5 * truth["load_after_first_s"], (wait, truth)
    assert train["totals"]["wait_share"] > 0.5


def check_starved(report: dict) -> None:
    assert report["wait_share"] > 0.5
    (finding,) = [f for f in report["findings"] if f["rule_id"] == STARVED_RULE]
    assert finding["severity"] in ("warning", "critical")


@needs("lightning")
def test_lightning_fit_is_watched_train_and_val_loaders_apart(tmp_path):
    truth, report = watch_script(tmp_path, LIGHTNING)
    by_batch = {entry["settings"]["batch_size"]: entry for entry in report["loaders"]}
    assert sorted(by_batch) == [3, BATCH], report["loaders"]
    train, val = by_batch[BATCH], by_batch[3]
    # built by the script and passed to fit(): named by the Lightning loop that iterates them
    assert (train["role"], val["role"]) == ("train", "val")
    check_train_loader(train, truth)
    # the sanity check (2 batches, then abandoned) and the two validation runs (4 batches each) are
    # epochs of one val loader; with 7 waits it is too short to judge, so the finding is train's
    assert val["totals"]["epochs"] == 1 + EPOCHS and val["totals"]["steps"] == 2 + EPOCHS * 4
    assert report["steps"] == train["totals"]["steps"] + val["totals"]["steps"]
    # Lightning stops at len(loader) and never asks for StopIteration: an epoch ends when the
    # loader's next one begins (its end is known, its records written), the last one at exit
    assert [e["end_s"] is not None for e in train["epochs"]] == [True] * (EPOCHS - 1) + [False]
    check_starved(report)


@needs("transformers")
@needs("accelerate")
def test_hugging_face_trainer_is_watched_through_accelerates_wrapper(tmp_path):
    truth, report = watch_script(tmp_path, HUGGING_FACE)
    # accelerate's DataLoaderShard is no DataLoader subclass (it only fakes __class__): what the
    # hook sees is the DataLoader it wraps, once, so no batch is counted twice
    (train,) = report["loaders"]
    assert train["role"] == "train"  # built in Trainer.get_train_dataloader
    check_train_loader(train, truth)
    # built with batch_sampler= (torch then sets batch_size None): read off the batch sampler
    assert train["settings"]["batch_size"] == BATCH
    assert report["steps"] == EPOCHS * TRAIN_BATCHES
    check_starved(report)


@needs("transformers")
@needs("accelerate")
def test_hugging_face_trainer_takes_a_training_arguments_file_through_apply(tmp_path):
    # the file a user already has: TrainingArguments keys; its dataloader_num_workers reaches the
    # DataLoader the Trainer builds (and accelerate re-builds), its batch size never does
    args = tmp_path / "args.yaml"
    args.write_text("per_device_train_batch_size: 64\ndataloader_num_workers: 1\n", encoding="utf-8")
    truth, report = watch_script(tmp_path, HUGGING_FACE, "--apply", str(args))
    (train,) = report["loaders"]
    assert train["role"] == "train" and train["asked"]["num_workers"] == 0
    assert train["settings"]["num_workers"] == 1 and train["applied"] == ["num_workers"]
    assert train["settings"]["batch_size"] == BATCH and train["totals"]["steps"] == EPOCHS * TRAIN_BATCHES
    assert report["apply"]["loaders_matched"] == 1 and report["apply"]["unmatched"] == []
