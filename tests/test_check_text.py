"""`check`'s text as a whole, at 80 columns, on recorded machines: every line, in its place.

Other tests assert what a line says; these pin the rendering itself (the typed report printed by
``text/check.render_text``), so a change to any line of it is seen and meant."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loaderdoc.checking.build import build_check
from loaderdoc.system.fixtures import load_machine
from loaderdoc.text.check import render_text

DETECTRON2 = Path(__file__).resolve().parent / "fixtures/configs/projects/detectron2/configs/COCO-InstanceSegmentation"
REJECTED_TOML = "[dataloader]\nnum_workers = 0\nprefetch_factor = 4\n"
TWO_LOADERS_YAML = """data:
  train_dataloader:
    batch_size: 64
    num_workers: 16
    pin_memory: false
  val_dataloader:
    batch_size: 128
    num_workers: 0
"""

NO_CONFIG = """\
loaderdoc check

  CPU       2 logical / 2 physical, affinity 2, cgroup quota none -> budget 2 CPUs (logical); Intel(R) Xeon(R) Processor
  Memory    23.5 GiB total, 23.1 GiB available, cgroup limit none -> budget 23.1 GiB
  Shm       /dev/shm 23.5 GiB, 23.5 GiB free
  Container docker
  Files     open-file limit 20000 (hard 20000), sharing strategy file_descriptor
  GPU       none (no NVIDIA driver: NVML library not found (NVML Shared Library Not Found))
  torch     2.13.0+cpu (CPU-only build)

Findings: none - nothing here will starve or crash a DataLoader

Recommended for this machine (from facts; 'loaderdoc probe' measures):
  batch_size         = 32      32 is a placeholder: GPU memory and the model decide batch size; pass --batch-size
  shuffle            = True    true: a training loader reshuffles every epoch (set false for evaluation)
  num_workers        = 1       1: CPU budget 2 (logical), one CPU left for the training process
  pin_memory         = False   false: no usable GPU (no NVIDIA driver: NVML library not found (NVML Shared Library Not Found)); pinning does nothing without one
  drop_last          = False   false: torch's default; set true with BatchNorm or DDP so every step sees a full batch
  timeout            = 0.0     0 (wait forever): torch's default; a few minutes turns a hung worker into an error
  prefetch_factor    = 2       2: torch's default depth (not sized against /dev/shm: pass --batch-size and --sample-shape)
  persistent_workers = True    true: keeps the workers between epochs instead of paying start-up again

status: ok (exit 0)
"""

REJECTED = """\
loaderdoc check

  CPU       2 logical / 2 physical, affinity 2, cgroup quota none -> budget 2 CPUs (logical); Intel(R) Xeon(R) Processor
  Memory    23.5 GiB total, 23.1 GiB available, cgroup limit none -> budget 23.1 GiB
  Shm       /dev/shm 23.5 GiB, 23.5 GiB free
  Container docker
  Files     open-file limit 20000 (hard 20000), sharing strategy file_descriptor
  GPU       none (no NVIDIA driver: NVML library not found (NVML Shared Library Not Found))
  torch     2.13.0+cpu (CPU-only build)

Config bad.toml ([dataloader] table): 1 loader
  loader [critical]: num_workers=0, prefetch_factor=4
    not set: batch_size (torch default 1), shuffle (torch default False),
      pin_memory (torch default False)
    read from:
      num_workers <- dataloader.num_workers:2
      prefetch_factor <- dataloader.prefetch_factor:3
Findings:
  CRITICAL settings-rejected: DataLoader(...) will raise before the first batch: prefetch_factor
           evidence: prefetch_factor needs num_workers > 0 (torch raises ValueError); remove it or raise num_workers
           cause: These combinations are refused by torch's DataLoader itself (prefetch_factor, persistent_workers and multiprocessing_context only mean something with worker processes).
           fix: Remove the worker-only settings, or give the loader workers.

Recommended for this machine (from facts; 'loaderdoc probe' measures):
  batch_size         = 32      32 is a placeholder: GPU memory and the model decide batch size; pass --batch-size
  shuffle            = True    true: a training loader reshuffles every epoch (set false for evaluation)
  num_workers        = 0       0: as the run gets it from the file (dataloader.num_workers, line 2); no finding says to change it
  pin_memory         = False   false: no usable GPU (no NVIDIA driver: NVML library not found (NVML Shared Library Not Found)); pinning does nothing without one
  drop_last          = False   false: torch's default; set true with BatchNorm or DDP so every step sees a full batch
  timeout            = 0.0     0 (wait forever): torch's default; a few minutes turns a hung worker into an error
  persistent_workers = False   false: there are no workers to keep (torch rejects it with 0 workers)

status: critical (exit 2)
"""

TWO_LOADERS = """\
loaderdoc check

  CPU       16 logical / 8 physical, affinity 16, cgroup quota none -> budget 16 CPUs (logical); AMD Ryzen 7 5800X 8-Core Processor
  Memory    62.7 GiB total, 56.2 GiB available, cgroup limit none -> budget 56.2 GiB
  Shm       /dev/shm 64 MiB, 64 MiB free (Docker's 64 MiB default)
  Container docker
  Files     open-file limit 1048576 (hard 1048576), sharing strategy file_descriptor
  GPU       1x NVIDIA GeForce RTX 3090, 24 GiB each, PCIe gen 4/4 x16/16, driver 535.183.01, CUDA 12.2
  torch     2.3.1+cu121 (CUDA 12.1 build, cuDNN 8.9.2.26)

Config train.yaml (read by key names): 2 loaders; read PARTIAL
  train [critical]: batch_size=64, num_workers=16, pin_memory=False
    not set: shuffle, drop_last, prefetch_factor, persistent_workers (the
      training code decides)
    read from:
      batch_size <- data.train_dataloader.batch_size:3
      num_workers <- data.train_dataloader.num_workers:4
      pin_memory <- data.train_dataloader.pin_memory:5
  val [ok]: batch_size=128, num_workers=0
    not set: shuffle, pin_memory, drop_last, prefetch_factor, persistent_workers
      (the training code decides)
    read from:
      batch_size <- data.val_dataloader.batch_size:7
      num_workers <- data.val_dataloader.num_workers:8
  partial: not set in the file, so the training code decides (train: shuffle,
    drop_last, persistent_workers, prefetch_factor; val: shuffle,
    pin_memory, drop_last, persistent_workers, prefetch_factor): this
    file's framework is not one loaderdoc knows (it may build more
    loaders than these, and pass its own values); 'loaderdoc watch'
    measures what the run gets
  partial: batch_size (train, val): each process's, or a total the training code
    divides among the GPUs, is its framework's rule, which loaderdoc does
    not know; judged as each process's
Batch size in memory: 9.2 MiB
Findings:
  CRITICAL shm-too-small: The batches in flight (294 MiB) don't fit in /dev/shm (64 MiB free): expect 'Bus error' / 'unable to allocate shared memory'
           evidence: 16 workers x prefetch 2 x 9.2 MiB = 294 MiB
           evidence: /dev/shm: 64 MiB total, 64 MiB free (Docker's 64 MiB default)
           cause: Every batch a worker has prepared waits in /dev/shm until the training loop takes it; the batch being consumed (and other programs) need room too.
           fix: Give the container more shared memory: docker run --shm-size=1g ... (or --ipc=host to share the host's /dev/shm); or hold fewer batches in flight: num_workers=3, prefetch_factor=1 fits 50% of the free space.

Recommended for this machine (from facts; 'loaderdoc probe' measures):
  batch_size         = 64      64: as given
  shuffle            = True    true: a training loader reshuffles every epoch (set false for evaluation)
  num_workers        = 3       3: shm-too-small (the run gets 16 from the file, data.train_dataloader.num_workers, line 4)
  pin_memory         = False   False: as the run gets it from the file (data.train_dataloader.pin_memory, line 5); no finding says to change it
  drop_last          = False   false: torch's default; set true with BatchNorm or DDP so every step sees a full batch
  timeout            = 0.0     0 (wait forever): torch's default; a few minutes turns a hung worker into an error
  prefetch_factor    = 1       1: memory-bound, see num_workers
  persistent_workers = True    true: keeps the workers between epochs instead of paying start-up again

status: critical (exit 2)
"""

TOTAL_BATCH = """\
loaderdoc check

  CPU       224 logical / 112 physical, affinity 224, cgroup quota none -> budget 224 CPUs (logical); Intel(R) Xeon(R) Platinum 8480C
  Memory    2.0 TiB total, 1.9 TiB available, cgroup limit none -> budget 1.9 TiB
  Shm       /dev/shm 1008 GiB, 1008 GiB free
  Files     open-file limit 1048576 (hard 1048576), sharing strategy file_descriptor
  GPU       8x NVIDIA H100 80GB HBM3, 79.6 GiB each, PCIe gen 5/5 x16/16, driver 580.95.05, CUDA 13.0
  torch     2.8.0+cu128 (CUDA 12.8 build, cuDNN 9.10.2.21)

Config mask_rcnn_R_50_FPN_1x.yaml (detectron2 (yacs); 2 files): 1 loader; read PARTIAL
  train [ok]: batch_size=16 (in total over all GPUs); judged as 2 per process on
      this machine
    not set: shuffle, pin_memory, drop_last, prefetch_factor, persistent_workers
      (the training code decides)
    framework: num_workers=4 (detectron2's defaults.py: DATALOADER.NUM_WORKERS =
      4)
    read from: batch_size <- SOLVER.IMS_PER_BATCH (../Base-RCNN-FPN.yaml:37)
  partial: not set in the file, so the training code decides (train: shuffle,
    pin_memory, drop_last, persistent_workers, prefetch_factor):
    loaderdoc knows no rule of how detectron2 (yacs) builds its
    DataLoaders (it may build more loaders than these, and pass its own
    values); 'loaderdoc watch' measures what the run gets
Findings: none - nothing here will starve or crash a DataLoader

Recommended for this machine (from facts; 'loaderdoc probe' measures):
  batch_size         = 2       2: as given
  shuffle            = True    true: a training loader reshuffles every epoch (set false for evaluation)
  num_workers        = 16      16: CPU budget 224 (logical); capped at 16 until a probe shows more helps
  pin_memory         = True    true: 8 usable CUDA GPU(s); pinned pages copy to the GPU faster and asynchronously
  drop_last          = False   false: torch's default; set true with BatchNorm or DDP so every step sees a full batch
  timeout            = 0.0     0 (wait forever): torch's default; a few minutes turns a hung worker into an error
  prefetch_factor    = 2       2: torch's default depth (not sized against /dev/shm: pass --batch-size and --sample-shape)
  persistent_workers = True    true: keeps the workers between epochs instead of paying start-up again

status: ok (exit 0)
"""


@pytest.fixture
def at_80(monkeypatch):
    monkeypatch.setenv("COLUMNS", "80")


def check_text(machine: str, config: str | None = None, **kw) -> str:
    return render_text(build_check(load_machine(machine), config_path=config, **kw))


def test_check_without_a_config(at_80):
    assert check_text("ci-2core") == NO_CONFIG


def test_check_of_settings_torch_rejects(at_80, tmp_path, monkeypatch):
    (tmp_path / "bad.toml").write_text(REJECTED_TOML)
    monkeypatch.chdir(tmp_path)
    assert check_text("ci-2core", "bad.toml") == REJECTED


def test_check_of_two_loaders_with_a_sample_size(at_80, tmp_path, monkeypatch):
    (tmp_path / "train.yaml").write_text(TWO_LOADERS_YAML)
    monkeypatch.chdir(tmp_path)
    assert check_text("docker-64m-shm", "train.yaml", sample_bytes=3 * 224 * 224) == TWO_LOADERS


def test_check_of_a_total_batch_split_over_eight_gpus(at_80, monkeypatch):
    monkeypatch.chdir(DETECTRON2)
    assert check_text("h100x8-node", "mask_rcnn_R_50_FPN_1x.yaml") == TOTAL_BATCH


def test_the_command_prints_that_text_and_its_json_is_the_reports(tmp_path):
    (tmp_path / "train.yaml").write_text(TWO_LOADERS_YAML)
    env = {**os.environ, "COLUMNS": "80"}
    argv = [sys.executable, "-m", "loaderdoc", "check", "--machine", "docker-64m-shm", "--config", "train.yaml",
            "--sample-shape", "3x224x224"]
    text = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert (text.returncode, text.stdout) == (2, TWO_LOADERS), text.stderr
    doc = json.loads(subprocess.run(argv + ["--json"], capture_output=True, text=True, cwd=tmp_path, env=env,
                                    timeout=120).stdout)
    cwd = os.getcwd()
    try:
        os.chdir(tmp_path)
        report = build_check(load_machine("docker-64m-shm"), config_path="train.yaml", sample_bytes=3 * 224 * 224)
    finally:
        os.chdir(cwd)
    assert doc == json.loads(json.dumps(report.to_json()))
    assert (doc["status"], doc["exit_code"], len(doc["config"]["loaders"])) == ("critical", 2, 2)
