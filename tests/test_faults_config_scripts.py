"""A dataclass config, and a training script whose settings are argparse defaults with the
DataLoader built in main() (issue 49, family 6): both read as "no DataLoader settings", with
nothing said of what was not read. Through the real command: the dataclass's fields are read with
their lines; the script's argparse defaults are read as ``args.*`` and the read is partial, each
thing its run decides named in one line."""

from __future__ import annotations

from faults_support import loaderdoc

DATACLASS = """\
from dataclasses import dataclass, field

@dataclass
class DataConfig:
    batch_size: int = 64
    num_workers: int = field(default=6)
    pin_memory: bool = True

@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    lr: float = 3e-4
"""

SCRIPT = """\
import argparse
import torch
from torch.utils.data import DataLoader

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-j", "--workers", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("data", help="a positional argument: no default")
    args = parser.parse_args()
    loader = DataLoader(torch.arange(10), batch_size=args.batch_size, num_workers=args.workers)

if __name__ == "__main__":
    main()
"""


def one(text: str) -> str:
    return " ".join(text.split())


def test_a_dataclass_config_is_read_field_by_field(tmp_path):
    (tmp_path / "conf.py").write_text(DATACLASS, encoding="utf-8")
    proc = loaderdoc("check", "--config", "conf.py", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    out = one(proc.stdout)
    assert "batch_size=64, num_workers=6, pin_memory=True" in out
    # partial only for what the code that reads the dataclass decides (loaderdoc does not know that code):
    # what it leaves unset, and whether its batch_size is each process's or a total
    assert out.count("partial: ") == 2 and "partial: not set in the file, so the training code decides" in out
    assert "partial: batch_size (loader): each process's, or a total the training code divides" in out
    for line in ("batch_size <- DataConfig.batch_size:5", "num_workers <- DataConfig.num_workers:6",
                 "pin_memory <- DataConfig.pin_memory:7"):
        assert line in out, out


def test_a_script_s_argparse_defaults_are_read_and_its_run_named(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT, encoding="utf-8")
    proc = loaderdoc("check", "--config", "train.py", cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    out = one(proc.stdout)
    assert "1 loader; read PARTIAL" in out and "batch_size=32, num_workers=8" in out
    # read from the DataLoader call that builds the loader, its args.X the argparse defaults
    assert "batch_size <- main.loader.batch_size:11" in out and "num_workers <- main.loader.num_workers:11" in out
    assert ("partial: train.py: argparse defaults read as args.* (--workers=8, --batch-size=32): a command line "
            "that passes them runs with its own values") in out
    assert ("partial: train.py:11: DataLoader(...) is built in main() with batch_size=args.batch_size, "
            "num_workers=args.workers computed when it runs (argparse defaults as read; anything else left "
            "unread); 'loaderdoc watch' measures the settings the run uses") in out
    # the call is read: what it leaves out is torch's default, not a framework's
    assert "not set: shuffle (torch default False), pin_memory (torch default False)" in out


def test_a_script_with_nothing_literal_says_what_its_run_decides(tmp_path):
    """argparse defaults of None: the DataLoader call's arguments are the run's, each said unread."""
    script = SCRIPT.replace('default=8', 'default=None').replace('default=32', 'default=None')
    (tmp_path / "train.py").write_text(script, encoding="utf-8")
    proc = loaderdoc("check", "--config", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = one(proc.stdout)
    assert "loader [ok]: batch_size=<args.batch_size>, num_workers=<args.workers>" in out
    assert "partial: batch_size = args.batch_size: computed when the script runs" in out
    assert "partial: train.py:11: DataLoader(...) is built in main() with batch_size=args.batch_size" in out
