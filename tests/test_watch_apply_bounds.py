"""`watch --apply` with a count no machine runs (issue 49, family 7): `num_workers = 100000` was
applied (100,000 workers forked). Refused in one line before the command runs; the bound is the
one every report reader holds counts to (jsondoc.MEASURED_BOUNDS)."""

from __future__ import annotations

import sys

import pytest
from faults_support import loaderdoc, one_line_error

from loaderdoc.base.jsondoc import MEASURED_BOUNDS


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


@pytest.mark.parametrize("rest", ["batch_size = 32\n", "prefetch_factor = 4\n"], ids=["with-batch-size", "with-prefetch"])
def test_two_keys_that_disagree_on_a_setting_are_said_and_nothing_is_applied(tmp_path, rest):
    """Issue 49, family 6: `num_workers = 4` beside `workers = 8` drew "sets only batch_size=32" (or
    applied the prefetch factor alone, as if the file were whole)."""
    (tmp_path / "two.toml").write_text(f"[dataloader]\nnum_workers = 4\nworkers = 8\n{rest}", encoding="utf-8")
    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    proc = loaderdoc("watch", "--apply", "two.toml", "--", sys.executable, str(script), cwd=tmp_path)
    one_line_error(proc, 3, "watch: --apply two.toml: num_workers: dataloader.num_workers = 4, dataloader.workers = 8 "
                            "disagree; which one a loader uses depends on the code; keep one of them")
    assert not (tmp_path / "ran").exists()
