"""An IterableDataset that ignores ``get_worker_info()`` yields every sample in each worker (issue
49, family 1): `watch --apply` with 2 workers called the doubled run healthy. The hook now digests
the first epoch's first batches (two rounds of one per worker) and the run is CRITICAL
(watch-stream-replayed), its data wait not judged; a sharded stream is measured as before."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from faults_support import loaderdoc
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from loaderdoc.watching import replays

SCRIPT = """\
import time
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

class Stream(IterableDataset):
    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if SHARDED and info is not None else (0, 1)
        for i in range(start, 240, step):
            yield torch.full((8,), float(i))

for batch in DataLoader(Stream(), batch_size=2):  # 0 workers, as the script was written
    time.sleep(0.002)
"""


@pytest.mark.parametrize("sharded", [False, True], ids=["replayed", "sharded"])
def test_watch_apply_of_workers_over_a_stream_that_ignores_them_is_critical(tmp_path, sharded):
    (tmp_path / "train.py").write_text(SCRIPT.replace("SHARDED", str(sharded)), encoding="utf-8")
    (tmp_path / "two.toml").write_text("[dataloader]\nnum_workers = 2\n", encoding="utf-8")
    proc = loaderdoc("watch", "--apply", "two.toml", "--report", "r.json", "--", sys.executable, "train.py",
                     cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "r.json").read_text())
    (loader,) = report["loaders"]
    rules = [f["rule_id"] for f in report["findings"]]
    assert loader["settings"]["num_workers"] == 2
    if sharded:
        assert loader["replays"] is False and loader["totals"]["steps"] == 120
        assert "watch-stream-replayed" not in rules
    else:
        assert loader["replays"] is True and loader["totals"]["steps"] == 240  # every sample twice
        assert report["status"] == "critical" and "watch-stream-replayed" in rules
        assert "watch-loader-healthy" not in rules and "watch-data-starved" not in rules
        assert "yields every sample 2 times: each of its 2 workers replays the whole stream" in " ".join(proc.stderr.split())


class Counting(IterableDataset):
    def __init__(self, sharded: bool) -> None:
        self.sharded = sharded

    def __iter__(self):
        info = get_worker_info()
        start, step = (info.id, info.num_workers) if self.sharded else (0, 1)
        for i in range(start, 64, step):
            yield torch.full((4,), float(i))


class Watched:
    _look = None


class Record:
    replays = None


@pytest.mark.parametrize("sharded, digested, verdict", [(True, 2, False), (False, 6, True)])
def test_the_look_stops_at_its_verdict(monkeypatch, sharded, digested, verdict):
    """A sharded stream costs two digests; a replayed one two rounds (3 workers: 6)."""
    calls = []
    real = replays.batch_digest
    monkeypatch.setattr(replays, "batch_digest", lambda batch: calls.append(1) or real(batch))
    loader = DataLoader(Counting(sharded), batch_size=2, num_workers=3)
    watched, record = Watched(), Record()
    watched._look = replays.looker(loader, record)
    for batch in loader:
        if watched._look is not None:
            watched._look(watched, batch)
    assert len(calls) == digested and record.replays is verdict


def test_no_look_where_the_question_does_not_arise():
    assert replays.looker(DataLoader(Counting(True), num_workers=1), Record()) is None
    assert replays.looker(DataLoader(list(range(8)), num_workers=2), Record()) is None
