"""What a watched loader read, and from where (issue 34): ``/proc/<pid>/io`` of the training
process and its workers, on real loaders over real files.

The files live in ``tmp_path`` and are dropped from the page cache with
``posix_fadvise(DONTNEED)``; where that file system counts no device reads (tmpfs, some overlays)
the tests that need them skip with the reason. The verdicts are the report's, computed from the
figures: nothing here tells the product which loader is which.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from faults_support import fault_env, loaderdoc, namespaces_usable

from loaderdoc.system import procio

torch = pytest.importorskip("torch")

LOOP = str(Path(__file__).resolve().parent / "watch_loops" / "read_files.py")
FILES, SIZE = 200, 64 * 1024
DATA = FILES * SIZE


def _drop(paths) -> None:
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _device_reads_unseen(path: Path) -> str | None:
    """None where reading ``path`` after dropping it from the page cache shows in read_bytes."""
    _drop([path])
    before = procio.reads("self")
    path.read_bytes()
    after = procio.reads("self")
    if before is None or after is None:
        return "/proc/self/io is not readable here"
    if after[2] - before[2] < SIZE // 2:
        return (f"{path.parent} is on a file system whose reads no block device counts (read_bytes grew "
                f"{after[2] - before[2]} B for a {SIZE} B file dropped from the page cache)")
    return None


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("samples")
    for i in range(FILES):
        path = folder / f"sample-{i:03d}.bin"
        with open(path, "wb") as fh:
            fh.write(os.urandom(SIZE))
            fh.flush()
            os.fsync(fh.fileno())  # written back: DONTNEED drops only clean pages
    reason = _device_reads_unseen(folder / "sample-000.bin")
    if reason:
        pytest.skip(reason)
    return folder


def _watched(folder: Path, *args: str, watch_args: tuple[str, ...] = ()) -> tuple[dict, str]:
    env, _ = fault_env()
    proc = loaderdoc("watch", "--json", *watch_args, "--", sys.executable, LOOP, str(folder), *args, env=env)
    assert proc.returncode == 0, proc.stderr
    start = proc.stdout.index("{\n")
    return json.loads(proc.stdout[start:]), proc.stderr


def test_three_loaders_three_verdicts_from_their_reads(files):
    # the same loop, loading in the training process: the files from the disk, the same files
    # from the page cache, and no files at all (each sample sleeps, as a wait on the network would)
    cold, cold_text = _watched(files, "--mode", "cold")
    cached, cached_text = _watched(files, "--mode", "cached")
    asleep, asleep_text = _watched(files, "--mode", "sleep")
    (c,), (w,), (s,) = cold["loaders"], cached["loaders"], asleep["loaders"]
    io = {"cold": c["io"], "cached": w["io"], "sleep": s["io"]}
    assert {k: v["reads_from"] for k, v in io.items()} == {"cold": "disk", "cached": "page-cache", "sleep": "little"}
    # this VM's disk is fast (its host caches it): a cold read's CPU time (the kernel's I/O path)
    # is 30-55 % of its wall time, so the CPU accounting calls the loading CPU work in some runs;
    # the verdict follows it
    assert io["cold"]["verdict"] == ("reads from the disk" if c["cpu"]["load_is_cpu"] else "waiting on the disk")
    assert io["cached"]["verdict"] == "served from the page cache (or a network file system)"
    assert io["sleep"]["verdict"] == "waiting on something other than reads: the network, a lock, a sleep"
    # the figures behind them: the whole data set came from the device once, and not at all when cached
    # (whole epochs: the pages of torch's libraries the loop first runs fault in from the disk too,
    # a few MiB where the page cache had evicted them)
    assert c["io"]["main"]["read_bytes"] >= 0.9 * DATA
    assert w["io"]["main"]["read_bytes"] < 0.25 * DATA
    assert w["io"]["main"]["rchar_bytes"] >= DATA
    assert s["io"]["rchar_per_batch_bytes"] < 16 * 1024 and s["io"]["read_bytes_per_batch"] < 4096
    rules = {name: {f["rule_id"] for f in r["findings"]} for name, r in (("cold", cold), ("cached", cached),
                                                                          ("sleep", asleep))}
    assert ("watch-waits-on-disk" in rules["cold"]) == (io["cold"]["verdict"] == "waiting on the disk")
    assert "watch-waits-on-disk" not in rules["cached"] | rules["sleep"]
    assert f"{io['cold']['verdict']}" in " ".join(cold_text.split())
    assert "served from the page cache" in " ".join(cached_text.split())
    assert "waiting on something other than reads" in " ".join(asleep_text.split())


def test_reaped_workers_reads_are_theirs_through_the_real_command(files):
    # 2 workers started and reaped every epoch: what they read after the sampler's last look is
    # found in the parent's whole-process file, not lost and not given to the training process
    report, _ = _watched(files, "--mode", "cold", "--workers", "2", "--epochs", "2")
    (loader,) = report["loaders"]
    io = loader["io"]
    assert io["workers"]["read_bytes"] >= 0.9 * 2 * DATA, io
    assert io["main"]["read_bytes"] < 0.25 * DATA, io
    assert all(b >= 0.9 * DATA for b in io["epoch_read_bytes"]), io["epoch_read_bytes"]
    assert io["reads_from"] == "disk"


@pytest.mark.parametrize("workers, persistent", [(0, False), (2, False), (2, True)],
                         ids=["in-the-loop", "reaped-workers", "persistent-workers"])
@pytest.mark.parametrize("cold", [True, False], ids=["cold", "cached"])
def test_every_epoch_counts_what_it_read_whoever_read_it(files, workers, persistent, cold):
    from loaderdoc.api import watch

    paths = sorted(files.iterdir())
    loader = torch.utils.data.DataLoader(_Reading(paths), batch_size=4, num_workers=workers,
                                         persistent_workers=persistent)
    if not cold:
        for p in paths:
            p.read_bytes()
    watched = watch(loader)
    for _ in range(2):
        if cold:
            _drop(paths)
        for _batch in watched:
            pass
    for e in watched.records()["loaders"][0]["epochs"]:
        total = [a + b for a, b in zip(e["io_main"], e["io_workers"] or [0, 0, 0], strict=True)]
        assert total[0] >= DATA, e  # rchar: every byte of the data set, whoever read it
        assert total[1] >= FILES  # a read call a file at least
        if cold:
            assert 0.9 * DATA <= total[2] <= 1.5 * DATA, e  # read_bytes: from the device, once
        else:
            assert total[2] < 0.25 * DATA, e  # (library pages faulted in, as above)
        if workers:
            assert e["io_main"][2] < 0.25 * DATA, e  # the workers read the files, not the loop


class _Reading(torch.utils.data.Dataset):
    def __init__(self, paths) -> None:
        self.paths = paths

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int):
        return torch.tensor([len(self.paths[i].read_bytes())])


NS_REASON = namespaces_usable()


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_an_unreadable_proc_io_is_said_not_guessed(files, tmp_path):
    # /dev/null bound over the child's own /proc/<pid>/io (a private mount namespace): the file
    # opens and holds nothing, as on a kernel without task I/O accounting
    env, tag = fault_env()
    inner = f'mount --bind /dev/null /proc/$$/io && exec {sys.executable} {LOOP} {files} --mode sleep'
    proc = loaderdoc("watch", "--json", "--", "sh", "-c", inner, env=env,
                     prefix=["unshare", "--mount", "--propagation", "private"])
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    report = json.loads(proc.stdout[proc.stdout.index("{\n"):])
    (loader,) = report["loaders"]
    assert loader["io"] == {"readable": False, "reason": "/proc/self/io holds no rchar, syscr and read_bytes "
                                                         "counters"}
    assert "reads: not measured: /proc/self/io holds no rchar" in " ".join(proc.stderr.split())
    assert loader["cpu"] is not None  # the rest of the run is measured as before


def test_a_trace_leaves_the_profilers_own_reads_out_of_the_loaders(files, tmp_path):
    # torch.profiler's start reads megabytes of its own files and its threads go on reading; the
    # traced steps' reads are set aside with their batches: the figures stay the data's
    report, _ = _watched(files, "--mode", "cold", "--epochs", "2", watch_args=("--trace", str(tmp_path)))
    (loader,) = report["loaders"]
    io, batch = loader["io"], 4 * SIZE
    assert report["traces"][0]["state"] == "written"
    assert loader["epochs"][0]["io_traced"]["batches"] == 10
    assert io["steady_batches"] == 2 * 49 - 10
    assert batch <= io["rchar_per_batch_bytes"] < 1.05 * batch, io
    assert 0.9 * batch <= io["read_bytes_per_batch"] < 1.05 * batch, io
    assert all(0.9 * DATA <= b < 1.1 * DATA for b in io["epoch_read_bytes"]), io["epoch_read_bytes"]
