"""`loaderdoc tune` on the frameworks people train with: a real Lightning ``Trainer.fit`` and a real
Hugging Face ``Trainer.train`` (tiny CPU models, a dataset that sleeps 2 ms a sample), each trial a
real child process stopped by tune. Each builds a training and a validation loader at lines of their
own: only the training one (role ``train``) gets a trial's settings. Skipped where a framework is
not installed (the test extra installs both).
"""

from __future__ import annotations

import json
import sys

from support.jobs import HUGGING_FACE_TINY, LIGHTNING_TINY
from test_tune_faults import NOTE_SEEN, QUICK, read_report, tune, write_script
from test_watch_frameworks import needs

DATASET = """\
import json, os, time
import torch
from torch.utils.data import Dataset

TRIAL = os.environ.get("LOADERDOC_TUNE_TRIAL", "none")
EPOCHS = 100000  # until tune stops it

class Slow(Dataset):
    def __init__(self, n, item):
        self.n, self.item = n, item
    def __len__(self):
        return self.n
    def __getitem__(self, i):
        time.sleep(0.002)
        return self.item(i)

""" + NOTE_SEEN

LIGHTNING = DATASET + LIGHTNING_TINY + """
train = note("train", DataLoader(Slow(128, item), batch_size=4, num_workers=0))
val = note("val", DataLoader(Slow(9, item), batch_size=3, num_workers=0))
trainer.fit(Tiny(), train, val)
"""

HUGGING_FACE = DATASET + HUGGING_FACE_TINY + """

class Noted(Trainer):  # what the script's Trainer sees of the loaders it builds
    def get_train_dataloader(self):
        return note("train", super().get_train_dataloader())
    def get_eval_dataloader(self, eval_dataset=None):
        return note("val", super().get_eval_dataloader(eval_dataset))

args = TrainingArguments(output_dir="out", num_train_epochs=EPOCHS, per_device_train_batch_size=4,
                         per_device_eval_batch_size=3, eval_strategy="epoch", report_to=[], use_cpu=True,
                         dataloader_num_workers=0, save_strategy="no", logging_strategy="no", disable_tqdm=True)
Noted(model=Tiny(), args=args, train_dataset=Slow(128, item), eval_dataset=Slow(9, item)).train()
"""


def tune_framework(tmp_path, source: str) -> tuple[dict, dict, dict]:
    """Two trials of the script; (the report, what trial 1's loaders were built with, trial 2's)."""
    from test_tune_faults import env_with_src

    script = write_script(tmp_path, source)
    env = env_with_src(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(tmp_path / "hf"),
                       TOKENIZERS_PARALLELISM="false")
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--", sys.executable, str(script),
                env=env, timeout=180)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = read_report(report_path)
    assert report["exit_code"] == proc.returncode
    assert len(report["trials"]) == 2 and all(t["status"] == "ok" for t in report["trials"]), proc.stderr[-3000:]
    assert report["loader"]["role"] == "train", report["loader"]
    first, second = report["trials"]
    assert first["settings"]["num_workers"] == 0 and first["steps_per_s"] > 0
    assert second["settings"]["num_workers"] > 0 and second["applied"] is True and second["steps_per_s"] > 0
    pick = report["pick"]
    assert pick is not None and pick["trial"] in (1, 2) and pick["steps_per_s"] > 0
    assert "pick: num_workers=" in proc.stdout
    seen = [json.loads((tmp_path / f"seen-{n}.json").read_text()) for n in (1, 2)]
    return report, seen[0], seen[1]


@needs("lightning")
def test_lightning_fit_trials_change_the_train_loader_only(tmp_path):
    report, seen1, seen2 = tune_framework(tmp_path, LIGHTNING)
    assert report["loader"]["site"].endswith("train.py:" + str(LIGHTNING.splitlines().index(
        next(line for line in LIGHTNING.splitlines() if line.startswith('train = note("train"'))) + 1))
    workers = report["trials"][1]["settings"]["num_workers"]
    assert seen1 == {"train": [0], "val": [0]}
    assert seen2 == {"train": [workers], "val": [0]}


@needs("transformers")
@needs("accelerate")
def test_hugging_face_trainer_trials_change_the_train_loader_only(tmp_path):
    report, seen1, seen2 = tune_framework(tmp_path, HUGGING_FACE)
    workers = report["trials"][1]["settings"]["num_workers"]
    # the Trainer builds its loaders itself; the evaluation loader, built after every epoch, is never changed
    assert seen1["train"] == [0] and set(seen1.get("val", [0])) == {0}
    assert seen2["train"] == [workers] and set(seen2.get("val", [0])) == {0}
    assert any(seen.get("val") for seen in (seen1, seen2)), (seen1, seen2)
