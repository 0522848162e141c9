"""Settings under a dotted TOML header (`[tool.myproj.data]`, as in a pyproject.toml) lost their
line (issue 49, family 6): `check --config` said `num_workers <- tool.myproj.data.num_workers`
without it. Through the real command: each setting with its line."""

from __future__ import annotations

from faults_support import loaderdoc

PYPROJECT = """\
[project]
name = "myproj"

[tool.myproj]
seed = 1

[tool.myproj.data]
num_workers = 4
batch_size = 64
"""


def test_settings_under_a_dotted_header_keep_their_lines(tmp_path):
    (tmp_path / "pyproject.toml").write_text(PYPROJECT, encoding="utf-8")
    proc = loaderdoc("check", "--config", "pyproject.toml", cwd=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "num_workers <- tool.myproj.data.num_workers:8" in proc.stdout, proc.stdout
    assert "batch_size <- tool.myproj.data.batch_size:9" in proc.stdout


MERGED = """\
defaults: &loader
  num_workers: 4
  pin_memory: true
extra: &late
  drop_last: true
  num_workers: 8
data:
  train:
    <<: [*loader, *late]
    batch_size: 32
  val:
    <<: *loader
    batch_size: 64
    num_workers: 2
"""


def test_yaml_merge_keys_credit_the_line_the_value_is_written_on(tmp_path):
    """Was: train's inherited num_workers credited to val's own num_workers line (14), its
    pin_memory to the line of `train:`, and `extra`'s drop_last (a template only train merges)
    given to val. The values are PyYAML's, which programs load with: the mapping's own keys, then
    the merged mappings, the last in the list winning (`*late`'s num_workers, 8)."""
    (tmp_path / "cfg.yaml").write_text(MERGED, encoding="utf-8")
    proc = loaderdoc("check", "--config", "cfg.yaml", cwd=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr
    for line in ("num_workers <- data.train.num_workers:6", "pin_memory <- data.train.pin_memory:3",
                 "drop_last <- data.train.drop_last:5", "batch_size <- data.train.batch_size:10",
                 "num_workers <- data.val.num_workers:14", "pin_memory <- data.val.pin_memory:3"):
        assert line in proc.stdout, (line, proc.stdout)
    train, val = proc.stdout.split("Findings:")[0].split("  val [")
    assert "batch_size=32, num_workers=8, pin_memory=True, drop_last=True" in train
    assert "batch_size=64, num_workers=2, pin_memory=True\n" in val and "drop_last <-" not in val
