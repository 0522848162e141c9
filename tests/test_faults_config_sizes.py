"""Config files whose values no printer or memory can hold (issue 49, family 4, left from the last
round), through `check --config` and `watch --apply`: `num_workers = 0x` and 4000 hex digits (TOML
and `.py`: a power-of-two base has no digit limit, then printing it was exit 70), and a 443-byte
`.py` whose names nest lists ten deep (10^10 values: 2.4 GB and a hang). One line, exit 3."""

from __future__ import annotations

import sys

import pytest
from faults_support import loaderdoc, one_line_error

HEX = "0x" + "f" * 4000
NESTED = "\n".join(["a0 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
                   + [f"a{i} = [{', '.join([f'a{i - 1}'] * 10)}]" for i in range(1, 10)]
                   + ["loader = DataLoader(ds, num_workers=4, batch_size=len(a9))", ""])


@pytest.mark.parametrize("name, text, says", [
    ("hex.toml", f"[dataloader]\nnum_workers = {HEX}\n", "holds a number of thousands of digits"),
    ("hex.py", f"loader = DataLoader(ds, num_workers={HEX})\n", "holds a number of thousands of digits"),
    ("nested.py", NESTED, "its names copied into one another make over 100,000 values"),
], ids=["hex-toml", "hex-py", "nested-names"])
@pytest.mark.parametrize("command", ["check", "watch"])
def test_a_config_too_large_to_hold_is_one_line(tmp_path, name, text, says, command):
    (tmp_path / name).write_text(text, encoding="utf-8")
    if command == "check":
        proc = loaderdoc("check", "--config", name, cwd=tmp_path, timeout=60)
    else:
        (tmp_path / "train.py").write_text("open('ran', 'w').close()\n", encoding="utf-8")
        proc = loaderdoc("watch", "--apply", name, "--", sys.executable, "train.py", cwd=tmp_path, timeout=60)
    one_line_error(proc, 3, name, says)
    assert not (tmp_path / "ran").exists()
