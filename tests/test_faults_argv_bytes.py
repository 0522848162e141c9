"""A byte that is not UTF-8 in the watched or tuned command line (issue 49, family 4): `watch
--fixes` and `tune --export` exited 70 with nothing written (UTF-8 cannot hold the byte Python keeps
as a lone surrogate). Through the real commands: the files are written, the byte shown as the shell
shows it (`caf\\xe9`), the report keeps the argument as given."""

from __future__ import annotations

import json
import sys

from test_tune_faults import PRELUDE, QUICK, TRAIN, env_with_src, read_report, tune, write_script

RUN_NAME = "caf\udce9"  # the byte 0xe9 (Latin-1 é) in an argument, as Python reads it from argv


def test_watch_fixes_and_report_with_a_non_utf8_argument(tmp_path):
    import subprocess

    script = write_script(tmp_path, """\
import time, torch
from torch.utils.data import DataLoader, Dataset
class Slow(Dataset):
    def __len__(self):
        return 160
    def __getitem__(self, i):
        time.sleep(0.002)
        return torch.zeros(8)
for _ in range(3):  # starved: loading (8 ms a batch) outlasts the step, so --fixes proposes workers
    for batch in DataLoader(Slow(), batch_size=4):
        time.sleep(0.005)
""")
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "watch", "--fixes", "next.toml", "--report", "run.json",
                           "--", sys.executable, str(script), "--run-name", RUN_NAME],
                          capture_output=True, env=env_with_src(), cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-3000:]
    fixes = (tmp_path / "next.toml").read_text(encoding="utf-8")
    assert f"{script} --run-name 'caf\\xe9'" in fixes
    assert json.loads((tmp_path / "run.json").read_text(encoding="utf-8"))["command"][-1] == RUN_NAME


def test_tune_export_with_a_non_utf8_argument(tmp_path):
    script = write_script(tmp_path, PRELUDE + TRAIN + "train(DataLoader(Slow(160), batch_size=4))\n")
    export = tmp_path / "loader.toml"
    proc = tune(tmp_path, *QUICK, "--trials", "2", "--export", str(export), "--report", str(tmp_path / "tune.json"),
                "--", sys.executable, str(script), "--run-name", RUN_NAME)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    assert "--run-name 'caf\\xe9'" in export.read_text(encoding="utf-8")
    assert read_report(tmp_path / "tune.json")["command"][-1] == RUN_NAME
    assert "caf\\xe9" in proc.stdout
