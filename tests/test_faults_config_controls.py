"""A YAML config holding a control character (NUL, BEL, DEL), or a link to `/proc/self/environ`
(issue 49, family 4: exit 70 in `check --config` and `watch --apply`): one line naming the line and
the character, never the file's contents (the environment holds secrets), exit 3."""

from __future__ import annotations

import os
import sys

import pytest
from faults_support import TAG_VAR, fault_env, loaderdoc, one_line_error


@pytest.mark.parametrize("char", ["\x00", "\x07", "\x7f"], ids=["NUL", "BEL", "DEL"])
@pytest.mark.parametrize("command", ["check", "watch"])
def test_a_control_character_in_yaml_is_one_line(tmp_path, char, command):
    (tmp_path / "loader.yaml").write_text(f"dataloader:\n  num_workers: 4\n  name: a{char}b\n", encoding="utf-8")
    (tmp_path / "train.py").write_text("open('ran', 'w').close()\n", encoding="utf-8")
    args = (["check", "--config", "loader.yaml"] if command == "check"
            else ["watch", "--apply", "loader.yaml", "--", sys.executable, "train.py"])
    proc = loaderdoc(*args, cwd=tmp_path)
    one_line_error(proc, 3, f"loader.yaml:3: not valid YAML: it holds the control character U+{ord(char):04X} "
                            "(a config file is text)")
    assert not (tmp_path / "ran").exists()


def test_a_link_to_the_environment_says_nothing_of_it(tmp_path):
    (tmp_path / "env.yaml").symlink_to("/proc/self/environ")
    env = dict(os.environ, LOADERDOC_TEST_SECRET="hunter2-do-not-print")
    env.update({k: v for k, v in fault_env()[0].items() if k in ("PYTHONPATH", TAG_VAR)})
    proc = loaderdoc("check", "--config", "env.yaml", cwd=tmp_path, env=env)
    one_line_error(proc, 3, "env.yaml:1: not valid YAML: it holds the control character U+0000")
    assert "hunter2" not in proc.stdout + proc.stderr
