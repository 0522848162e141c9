"""Issue 49, family 5 (cost): what watching costs per epoch must not grow with the epochs recorded.

A 1-batch loader iterated 1000 times took 11 s watched, 2000 times 40 s, against 1.3 s bare: each
epoch's end rewrote the records file with every epoch so far (serialized afresh), and each
sampler tick summed every epoch so far. The records still hold every epoch; an epoch nothing can
change any more is frozen, serialized and summed once (``hook.Recorder.freeze``).

No assertion on a duration: the work is counted (epochs serialized, epochs summed by the
sampler, bytes the hook writes), through the real hook: torch's DataLoader patched by
``hook.patch`` in this process, or the hook's ``sitecustomize`` in a real one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.watching import epochs, hook, sampler

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, TensorDataset  # noqa: E402

SITEDIR = str(Path(hook.__file__).resolve().parent / "sitedir")


@pytest.fixture
def hooked(monkeypatch):
    """``hook.patch`` on torch's DataLoader with a recorder of the test's, undone after the test."""
    import torch.utils.data.dataloader as dl

    monkeypatch.setattr(dl.DataLoader, "__iter__", dl.DataLoader.__iter__)
    monkeypatch.setattr(dl.DataLoader, "__init__", dl.DataLoader.__init__)

    def install(recorder: hook.Recorder) -> None:
        assert hook.patch(dl, recorder)

    return install


def quiet_sampler(recorder: hook.Recorder, monkeypatch) -> sampler.Sampler:
    """The recorder's sampler, ticked by the test (no thread); its memory read stubbed (a torch
    process's PSS takes ~10 ms to read: hundreds of ticks would cost seconds)."""
    smp = sampler.Sampler(recorder, interval=1.0, write_s=None, max_busy=1.0)
    monkeypatch.setattr(smp, "_read_memory", lambda: {
        "main_pss_bytes": 1, "workers": 1, "workers_pss_bytes": 7, "workers_heap_grown_bytes": 0,
        "shm_used_bytes": 0, "shm_total_bytes": 1})
    recorder.sampler = smp
    return smp


def written_and_fresh(recorder: hook.Recorder) -> tuple[dict, dict]:
    """The records file as the last write left it, and the recorder's records serialized afresh."""
    written = json.loads(Path(recorder.path).read_text())
    fresh = json.loads(json.dumps(recorder.to_dict()))
    for records in (written, fresh):
        records.pop("written_at")
    return written, fresh


def test_each_epoch_is_serialized_and_summed_once_however_many_were_recorded_before(tmp_path, monkeypatch, hooked):
    """A loop of many 1-batch epochs, each followed by a sampler tick and a write (a loop whose
    epochs last longer than LOADERDOC_WATCH_WRITE_S is written at each end): before, epoch k's
    write serialized k epochs and its tick summed k (N^2/2 in all); now each epoch once."""
    n = 300
    recorder = hook.Recorder(str(tmp_path), sample=False, write_s=3600)
    smp = quiet_sampler(recorder, monkeypatch)
    hooked(recorder)
    serialized, summed = [0], [0]
    to_dict, cumulative = epochs.EpochRecord.to_dict, sampler.cumulative

    def counted_to_dict(self, t0):
        serialized[0] += 1
        return to_dict(self, t0)

    def counted_cumulative(epoch_list, *rest):
        epoch_list = list(epoch_list)
        summed[0] += len(epoch_list)
        return cumulative(epoch_list, *rest)

    monkeypatch.setattr(epochs.EpochRecord, "to_dict", counted_to_dict)
    monkeypatch.setattr(sampler, "cumulative", counted_cumulative)
    loader = DataLoader(TensorDataset(torch.zeros(1, 4)), batch_size=1, num_workers=0)
    for _ in range(n):
        for _batch in loader:
            pass
        smp.tick()  # as the sampler's thread does between two epochs
        recorder.write()
    assert serialized[0] <= 2 * n, f"{serialized[0]} epochs serialized for {n} epochs"  # was 45,450+
    assert summed[0] <= 2 * n, f"{summed[0]} epochs summed by {n} ticks"  # was 45,150
    # nothing lost: every epoch in the file, as a full serialization has it; the sums are all epochs'
    written, fresh = written_and_fresh(recorder)
    assert written == fresh
    assert [e["epoch"] for e in written["loaders"][0]["epochs"]] == list(range(n))
    sums = dict(zip(sampler.CUMULATIVE, smp.samples[-1]["loaders"]["1"], strict=True))
    run = recorder.loaders[0].epochs
    assert sums["steps"] == n and sums["starts"] == n
    assert sums["wait_s"] == sum(e.wait_s for e in run) and sums["step_s"] == sum(e.step_s for e in run)


LOOP = """\
import json, os, sys
import torch
from torch.utils.data import DataLoader, TensorDataset

written = []
replace = os.replace
def counting_replace(src, dst):  # the hook's atomic write ends with os.replace(tmp, records-<pid>.json)
    if os.path.basename(dst).startswith("records-"):
        written.append(os.path.getsize(src))
    return replace(src, dst)
os.replace = counting_replace

loader = DataLoader(TensorDataset(torch.zeros(1, 4)), batch_size=1, num_workers=0)
for _ in range(int(sys.argv[1])):
    for _batch in loader:
        pass
print(json.dumps({"writes": len(written), "bytes": sum(written)}))
"""


def test_an_epochs_end_does_not_rewrite_the_records_in_a_real_process(tmp_path):
    """Through the hook's sitecustomize: 200 epochs of a 1-batch loader wrote the records file 200
    times, 26 MB in all for a 0.3 MB file; now the first epoch's end writes, the next ends wait for
    LOADERDOC_WATCH_WRITE_S (an hour here: no periodic write in the loop), exit writes every epoch."""
    n = 200
    script = tmp_path / "loop.py"
    script.write_text(LOOP)
    out = tmp_path / "records"
    out.mkdir()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (SITEDIR, env.get("PYTHONPATH")) if p)
    env.update({"LOADERDOC_WATCH_DIR": str(out), "LOADERDOC_WATCH_INTERVAL": "3600",
                "LOADERDOC_WATCH_WRITE_S": "3600"})
    proc = subprocess.run([sys.executable, str(script), str(n)], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    in_loop = json.loads(proc.stdout)
    (path,) = out.glob("records-*.json")
    records = json.loads(path.read_text())
    assert [e["epoch"] for e in records["loaders"][0]["epochs"]] == list(range(n))  # every epoch kept
    assert all(e["finished"] and e["steps"] == 1 for e in records["loaders"][0]["epochs"])
    assert in_loop["writes"] == 1, in_loop  # was 200
    assert in_loop["bytes"] < path.stat().st_size / 10, in_loop  # was 100x the final file


@pytest.mark.parametrize("persistent", [False, True], ids=["workers-per-epoch", "persistent-workers"])
def test_epochs_with_workers_freeze_once_their_workers_were_accounted(tmp_path, monkeypatch, hooked, persistent):
    """A worker's CPU time and reads are settled into the epoch it serves: a persistent worker
    serves its epoch until the next begins, so that epoch stays open (serialized afresh); the
    frozen ones' texts are what a full serialization writes."""
    recorder = hook.Recorder(str(tmp_path), sample=False, write_s=3600)
    quiet_sampler(recorder, monkeypatch)
    hooked(recorder)
    loader = DataLoader(TensorDataset(torch.arange(8.0)), batch_size=2, num_workers=1,
                        persistent_workers=persistent)
    for _ in range(4):
        for _batch in loader:
            pass
        recorder.write()
    written, fresh = written_and_fresh(recorder)
    assert written == fresh
    frozen = recorder.loaders[0].frozen[0]
    if persistent:
        assert frozen == 3  # the last epoch's worker still serves it
    else:
        assert frozen >= 3
    assert all(e["workers_cpu_s"] is not None for e in written["loaders"][0]["epochs"])


def test_an_epoch_left_before_its_end_freezes_once_its_iterator_is_gone_and_the_memory_was_read(
        tmp_path, monkeypatch):
    """Lightning never asks for StopIteration: an epoch is closed when its loader's next one begins.
    Its iterator may still count batches (two alive at once), and the sampler may attribute the
    workers' memory to it at its next memory read: it stays open until both are over."""
    recorder = hook.Recorder(str(tmp_path), sample=False, write_s=3600)
    smp = quiet_sampler(recorder, monkeypatch)
    items = list(range(3))
    alive = []
    for _ in range(4):
        it = recorder.wrap(items, iter(items), hook.clock())
        for _ in items:
            next(it)
        alive.append(it)
    rec = recorder.loaders[0]
    smp.tick()
    smp.tick()
    assert rec.frozen[0] == 0  # three closed epochs, each iterator alive: none frozen
    del alive[:3], it
    recorder.freeze()
    assert rec.frozen[0] == 3  # the memory was read after their last batches, their iterators gone
    assert all(e.workers_pss_max == 7 for e in rec.epochs)  # attributed before they froze, as ever
    recorder.write()
    written, fresh = written_and_fresh(recorder)
    assert written == fresh and [e["finished"] for e in written["loaders"][0]["epochs"]] == [False] * 4


def test_a_closed_epoch_waits_for_a_memory_read_after_its_last_batch(tmp_path, monkeypatch):
    recorder = hook.Recorder(str(tmp_path), sample=False, write_s=3600)
    smp = quiet_sampler(recorder, monkeypatch)
    items = list(range(3))
    for _ in range(3):
        it = recorder.wrap(items, iter(items), hook.clock())
        next(it)
    del it
    rec = recorder.loaders[0]
    recorder.freeze()
    assert rec.frozen[0] == 0  # no memory read yet: the first may still attribute to them
    smp.tick()  # attributes to every epoch since the start, then records when it read
    recorder.freeze()
    assert rec.frozen[0] == 2 and [e.workers_pss_max for e in rec.epochs] == [7, 7, 7]
