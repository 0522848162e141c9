"""Which loader tune tunes (issue 49, family 1), through the real command: the training loader is
the one a framework names "train", else the one that shuffles, else the one whose loop took the
most time; never the loader with the most batches for that alone (a validation set at batch 1)."""

from __future__ import annotations

import json
import sys

from support.jobs import LIGHTNING_TINY
from test_tune_faults import NOTE_SEEN, PRELUDE, QUICK, TRAIN, env_with_src, read_report, tune, write_script
from test_tune_frameworks import DATASET
from test_watch_frameworks import needs

from loaderdoc.base._compat import tomllib


def test_a_validation_loader_with_more_batches_is_not_taken_for_the_training_loader(tmp_path):
    """Train: 256 samples at batch 8, shuffled (32 batches an epoch); val: 200 at batch 1 (200
    batches). Was: val tuned, and exported as batch_size = 1, shuffle = false."""
    script = write_script(tmp_path, PRELUDE + TRAIN + NOTE_SEEN + """\
val_loader = note("val", DataLoader(Slow(200), batch_size=1))  # built once, iterated after every epoch

def validate():
    for batch in val_loader:
        pass

train(note("train", DataLoader(Slow(256), batch_size=8, shuffle=True)), after_epoch=validate)
""")
    export, report_path = tmp_path / "loader.toml", tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", str(export), "--report", str(report_path), "--",
                sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    lines = script.read_text().splitlines()
    train_line = 1 + next(i for i, line in enumerate(lines) if 'note("train"' in line)
    report = read_report(report_path)
    assert report["loader"]["site"].startswith(f"{script}:{train_line}"), report["loader"]
    assert f"training loader: train.py:{train_line}" in proc.stdout and "batch_size=8)" in proc.stdout
    table = tomllib.loads(export.read_text(encoding="utf-8"))["dataloader"]
    assert table["batch_size"] == 8 and table["shuffle"] is True
    # trial 2 changed the training loader alone
    tried = report["trials"][1]["settings"]["num_workers"]
    seen2 = json.loads((tmp_path / "seen-2.json").read_text())
    assert tried > 0 and seen2["train"] == [tried] and seen2["val"] == [0]


@needs("lightning")
def test_under_lightning_the_train_role_wins_over_a_longer_validation_loader(tmp_path):
    """Lightning names its loaders' roles: the validation loader (200 batches at batch 1) has far
    more batches than the training one (16 at batch 8), and still is not tuned."""
    script = write_script(tmp_path, DATASET + LIGHTNING_TINY + """
train = note("train", DataLoader(Slow(128, item), batch_size=8, num_workers=0))
val = note("val", DataLoader(Slow(200, item), batch_size=1, num_workers=0))
trainer.fit(Tiny(), train, val)
""")
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--", sys.executable, str(script),
                env=env_with_src(), timeout=180)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = read_report(report_path)
    assert report["loader"]["role"] == "train" and report["loader"]["settings"]["batch_size"] == 8, report["loader"]
    tried = report["trials"][1]["settings"]["num_workers"]
    seen2 = json.loads((tmp_path / "seen-2.json").read_text())
    assert tried > 0 and seen2["train"] == [tried] and set(seen2["val"]) == {0}


STREAM = PRELUDE + """\
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

class Stream(IterableDataset):
    def __init__(self, n, sharded):
        self.n, self.sharded = n, sharded
    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if self.sharded and info is not None else (0, 1)
        for i in range(start, self.n, step):
            time.sleep(0.002)
            yield torch.full((8,), float(i))

loader = DataLoader(Stream(160, sharded=SHARDED), batch_size=4)
for _ in range(100000):  # until tune stops it
    for batch in loader:
        time.sleep(0.005)
"""


def test_an_iterable_dataset_that_repeats_in_every_worker_is_no_candidate(tmp_path):
    """Was: "pick 2 workers, 2.50x" while every sample came twice an epoch."""
    script = write_script(tmp_path, STREAM.replace("SHARDED", "False"))
    export, report_path = tmp_path / "loader.toml", tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", str(export), "--report", str(report_path), "--",
                sys.executable, str(script))
    assert proc.returncode == 4, proc.stderr[-3000:]
    first, second = read_report(report_path)["trials"]
    workers = second["settings"]["num_workers"]
    assert first["status"] == "ok" and second["status"] == "failed" and workers >= 2
    assert second["reason"].startswith(f"its epochs held {40 * workers} batches against your settings' 40 "
                                       f"({workers:.1f}x at num_workers={workers}): the dataset yields every sample "
                                       "in each worker")
    assert "no pick: only your own settings were measured (trial 2 failed)" in proc.stdout
    assert not export.exists()


def test_an_endless_stream_repeated_in_every_worker_is_no_candidate(tmp_path):
    """No epoch ends, so no epoch's batches can be counted: the hook's digests of the first batches
    (two rounds, one per worker) show the replay."""
    script = write_script(tmp_path, STREAM.replace("SHARDED", "False").replace("Stream(160", "Stream(10**9"))
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--", sys.executable, str(script))
    assert proc.returncode == 4, proc.stderr[-3000:]
    first, second = read_report(report_path)["trials"]
    workers = second["settings"]["num_workers"]
    assert first["status"] == "ok" and second["status"] == "failed" and workers >= 2
    assert second["reason"].startswith(f"its {workers} workers each returned the same batches (two rounds of its "
                                       "first epoch, digested): the dataset yields every sample in each worker")


def test_an_iterable_dataset_sharded_per_worker_is_measured_as_usual(tmp_path):
    script = write_script(tmp_path, STREAM.replace("SHARDED", "True"))
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--", sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    first, second = read_report(report_path)["trials"]
    assert first["status"] == second["status"] == "ok" and second["settings"]["num_workers"] >= 2


def test_one_helper_that_builds_both_loaders_changes_only_the_training_one(tmp_path):
    """`build_loader(split)` -> `_make(...)` -> `DataLoader`: both loaders are built at one line,
    called from one line. Was: one site, and trials changed the validation loader too. The callers
    above tell them apart (the lines that called build_loader)."""
    script = write_script(tmp_path, PRELUDE + TRAIN + NOTE_SEEN + """\
def _make(dataset, batch_size, shuffle):
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle)

def build_loader(split):
    n, batch_size = {"train": (160, 4), "val": (12, 4)}[split]
    return note(split, _make(Slow(n), batch_size, shuffle=split == "train"))

val = build_loader("val")
def validate():
    for batch in val:
        pass

train(build_loader("train"), after_epoch=validate)
""")
    export, report_path = tmp_path / "loader.toml", tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", str(export), "--report", str(report_path), "--",
                sys.executable, str(script))
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    report = read_report(report_path)
    lines = script.read_text().splitlines()
    train_call = 1 + next(i for i, line in enumerate(lines) if 'train(build_loader("train")' in line)
    # the key: the DataLoader line, _make's call and the call of build_loader for the training set
    assert report["loader"]["key"].endswith(f"{script}:{train_call}"), report["loader"]
    tried = report["trials"][1]["settings"]["num_workers"]
    seen2 = json.loads((tmp_path / "seen-2.json").read_text())
    assert tried > 0 and seen2["train"] == [tried] and seen2["val"] == [0], seen2
    assert report["trials"][1]["applied"] is True
    table = tomllib.loads(export.read_text(encoding="utf-8"))["dataloader"]
    assert table["batch_size"] == 4 and table["shuffle"] is True
