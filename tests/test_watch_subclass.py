"""A DataLoader subclass with an ``__iter__`` of its own (issue 49, family 1): torchdata's
``StatefulDataLoader`` builds its iterator itself and never calls ``DataLoader.__iter__``, so watch
said "no torch DataLoader was iterated" and tune exited 4. The subclass's ``__iter__`` is watched
too, and one that calls ``DataLoader.__iter__`` inside is still one epoch per ``iter()``."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from faults_support import fault_env, loaderdoc
from test_tune_faults import QUICK, env_with_src, read_report, tune, write_script

SCRIPT = """\
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.dataloader import _MultiProcessingDataLoaderIter, _SingleProcessDataLoaderIter

class Slow(Dataset):
    def __len__(self):
        return 64
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(8)

class BuildsItsOwn(DataLoader):  # as torchdata's StatefulDataLoader: its own iterator, never DataLoader's
    def __iter__(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        return _MultiProcessingDataLoaderIter(self)

class CallsUp(DataLoader):  # a subclass that adds to DataLoader's own iterator
    def __iter__(self):
        return iter(super().__iter__())

KIND = {"own": BuildsItsOwn, "up": CallsUp}[sys.argv[1]]
EPOCHS = int(sys.argv[2])
loader = KIND(Slow(), batch_size=4, num_workers=int(os.environ.get("WORKERS", "0")))
for epoch in range(EPOCHS):
    for batch in loader:
        time.sleep(0.005)
"""


@pytest.mark.parametrize("kind", ["own", "up"])
def test_a_subclass_with_its_own_iter_is_watched_once_per_epoch(tmp_path, kind):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(SCRIPT), encoding="utf-8")
    env, _ = fault_env()
    proc = loaderdoc("watch", "--report", str(tmp_path / "run.json"), "--", sys.executable, str(script), kind, "3",
                     env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "no torch DataLoader was iterated" not in proc.stderr + proc.stdout
    (loader,) = json.loads((tmp_path / "run.json").read_text())["loaders"]
    assert loader["class"] == {"own": "BuildsItsOwn", "up": "CallsUp"}[kind]
    assert [e["steps"] for e in loader["epochs"]] == [16, 16, 16]  # 64 samples at batch 4, once each


def test_tune_measures_a_loader_that_builds_its_own_iterator(tmp_path):
    script = write_script(tmp_path, SCRIPT)
    report_path = tmp_path / "tune.json"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--report", str(report_path), "--", sys.executable, str(script),
                "own", "100000", env=env_with_src())
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    first, second = read_report(report_path)["trials"]
    assert first["status"] == second["status"] == "ok"
    assert second["settings"]["num_workers"] > 0 and second["applied"] is True
