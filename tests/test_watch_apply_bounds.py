"""`watch --apply` with a count no machine runs (issue 49, family 7): `num_workers = 100000` was
applied (100,000 workers forked). Refused in one line before the command runs; the bound is the
one every report reader holds counts to (jsondoc.MEASURED_BOUNDS)."""

from __future__ import annotations

import sys

import pytest
from faults_support import loaderdoc, one_line_error

from loaderdoc.jsondoc import MEASURED_BOUNDS


@pytest.mark.parametrize("table, key, value", [
    ("[dataloader]", "num_workers", 100_000),
    ("[train]", "num_workers", 4097),
    ("[dataloader]", "prefetch_factor", 1_000_000),
])
def test_a_count_beyond_any_machine_is_refused_before_the_command_runs(tmp_path, table, key, value):
    (tmp_path / "big.toml").write_text(f"{table}\n{key} = {value}\n", encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    proc = loaderdoc("watch", "--apply", "big.toml", "--", sys.executable, str(script), cwd=tmp_path)
    where = "[train] " if table == "[train]" else ""
    one_line_error(proc, 3, f"watch: --apply big.toml: {where}{key}={value:,} is beyond any machine's "
                            f"(at most {MEASURED_BOUNDS[key]:,}); nothing was started")
    assert not (tmp_path / "ran").exists()


def test_a_count_at_the_bound_is_applied_as_asked(tmp_path):
    (tmp_path / "edge.toml").write_text("[dataloader]\nnum_workers = 4096\n", encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    proc = loaderdoc("watch", "--apply", "edge.toml", "--", sys.executable, str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "ran").exists()
