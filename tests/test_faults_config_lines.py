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
