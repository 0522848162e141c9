"""Order of checks and messages: whatever will be refused is refused before any work, in words that
name the real problem.

- An export onto a dangling symbolic link is refused before a probe or a trial runs.
- ``watch --report -`` is stdout, as ``--export -`` is (never a file named ``-``).
- A command that cannot start says why: a missing ``#!`` interpreter is not "command not found".
- No writable temporary directory, or a deleted working directory: one line, exit 3, for every
  command that starts processes (`check` works in both).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from faults_support import fault_env, loaderdoc, namespaces_usable, one_line_error

from loaderdoc.base.errors import EXIT_OK, EXIT_USAGE

TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

print("the command's own output")
for _ in DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8):
    pass
"""


# ---- an export onto a dangling symbolic link ---------------------------------------------------
@pytest.mark.parametrize("points_to", ["missing.toml", "no/such/dir/x.toml", "/nonexistent/x.toml"])
@pytest.mark.parametrize("args", [
    ["probe", "tensor", "--budget", "30", "--no-progress", "--export", "out.toml"],
    ["--preset", "tensor", "--budget", "30", "--export", "out.toml"],
    ["--export", "out.toml"],
    ["tune", "--export", "out.toml", "--", sys.executable, "train.py"],
])
def test_an_export_onto_a_dangling_link_is_refused_before_any_work(tmp_path, points_to, args):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "out.toml").symlink_to(points_to)
    started = time.monotonic()
    proc = loaderdoc(*args, cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, "out.toml is a symbolic link to", "which does not exist", "--force")
    assert proc.stdout == ""  # no table: nothing was probed, no trial ran
    assert time.monotonic() - started < 20  # the 30 s budget never began
    assert os.readlink(tmp_path / "out.toml") == points_to  # the link is as it was
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.toml", "train.py"]


def test_force_replaces_a_dangling_link_with_the_file(tmp_path):
    (tmp_path / "out.toml").symlink_to("missing.toml")
    proc = loaderdoc("--export", "out.toml", "--force", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert not (tmp_path / "out.toml").is_symlink()
    assert "[dataloader]" in (tmp_path / "out.toml").read_text()


# ---- '-' is stdout -----------------------------------------------------------------------------
def test_watch_report_dash_is_stdout_after_the_commands_output(tmp_path):
    (tmp_path / "train.py").write_text(TRAIN)
    proc = loaderdoc("watch", "--report", "-", "--", sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    own, _, report = proc.stdout.partition("\n")
    assert own == "the command's own output"
    assert json.loads(report)["schema"] == "loaderdoc.watch/1"
    assert not (tmp_path / "-").exists()
    # the merged report too
    (tmp_path / "a.json").write_text(report)
    merged = loaderdoc("watch", "--merge", "a.json", "--report", "-", cwd=tmp_path)
    assert merged.returncode == EXIT_OK, merged.stderr
    assert json.loads(merged.stdout)["schema"] == "loaderdoc.watch/1"
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("args, needles", [
    (["watch", "--report", "-", "--json", "--"], ["--report - and --json both print the report on stdout"]),
    (["watch", "--report", "", "--"], ["--report needs a file name"]),
    (["watch", "--fixes", "-", "--"], ["--fixes needs a file name"]),
    (["tune", "--report", "-", "--"], ["tune: --report needs a file name ('-' given)"]),
])
def test_a_report_to_stdout_that_would_mix_or_an_empty_name_is_one_line(tmp_path, args, needles):
    (tmp_path / "train.py").write_text(TRAIN)
    proc = loaderdoc(*args, sys.executable, "train.py", cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, *needles)
    assert proc.stdout == ""  # the command never ran
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train.py"]


# ---- a command that cannot start ---------------------------------------------------------------
PROGRAMS = [  # (file name, content, mode, the words expected after "watch: " / "tune: ")
    ("t.py", "#!/usr/bin/nope\nprint(1)\n", 0o755,
     "./t.py: its interpreter /usr/bin/nope (from the #! line) was not found"),
    ("u.py", "#!/opt/no python/bin/python3 -u\nprint(1)\n", 0o755,
     "./u.py: its interpreter /opt/no (from the #! line) was not found"),
    ("e.sh", "#!\necho 1\n", 0o755, "./e.sh: its #! line names no interpreter"),
    ("d.py", "#!/tmp\nprint(1)\n", 0o755, "./d.py: its interpreter /tmp (from the #! line) cannot be run"),
    ("n.py", "print(1)\n", 0o644, "cannot run ./n.py: permission denied (not executable"),
    ("b.txt", "just words\n", 0o755, "cannot run ./b.txt: not a program and no #! line"),
]


@pytest.mark.parametrize("verb", ["watch", "tune"])
@pytest.mark.parametrize("name, content, mode, words", PROGRAMS)
def test_a_command_that_cannot_start_says_why(tmp_path, verb, name, content, mode, words):
    program = tmp_path / name
    program.write_text(content)
    program.chmod(mode)
    proc = loaderdoc(verb, "--", f"./{name}", cwd=tmp_path)
    line = one_line_error(proc, EXIT_USAGE, f"{verb}: {words}")
    assert "command not found" not in line
    assert proc.stdout == ""


@pytest.mark.parametrize("verb", ["watch", "tune"])
@pytest.mark.parametrize("program, words", [("no-such-command-x", "command not found: no-such-command-x"),
                                            ("./missing.py", "command not found: ./missing.py"),
                                            ("./sub", "cannot run ./sub: it is a directory")])
def test_a_command_that_is_not_there_is_command_not_found(tmp_path, verb, program, words):
    (tmp_path / "sub").mkdir()
    proc = loaderdoc(verb, "--", program, cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, f"{verb}: {words}")


# ---- no temporary directory, no working directory ----------------------------------------------
STARTING = [
    ["probe", "tensor", "--budget", "5", "--no-progress"],
    ["--preset", "tensor", "--budget", "5", "--export", "-"],
    ["watch", "--", sys.executable, "-c", "print(1)"],
    ["tune", "--budget", "5", "--", sys.executable, "-c", "print(1)"],
]
NS_REASON = namespaces_usable()
# every place tempfile looks is read-only, and so is the working directory: each bound onto itself
# read-only, not covered by an empty tmpfs (the interpreter may live under /tmp: a clone's venv)
NO_TEMP = ["unshare", "--mount", "sh", "-c",
           "for d in /tmp /var/tmp /usr/tmp /mnt; do [ -d $d ] && mount --bind $d $d && mount -o remount,bind,ro $d; "
           'done; cd /mnt && exec "$@"', "sh"]


@pytest.mark.skipif(NS_REASON is not None, reason=str(NS_REASON))
@pytest.mark.parametrize("args", STARTING, ids=lambda a: a[0])
def test_no_writable_temporary_directory_is_one_line(args):
    env, _ = fault_env({"TMPDIR": "/nonexistent"})
    proc = loaderdoc(*args, env=env, prefix=NO_TEMP)
    verb = args[0] if not args[0].startswith("-") else "--export"
    one_line_error(proc, EXIT_USAGE, f"{verb}: no writable temporary directory", "TMPDIR=/nonexistent",
                   "set TMPDIR to a writable directory")
    assert proc.stdout == ""


@pytest.mark.skipif(NS_REASON is not None, reason=str(NS_REASON))
def test_check_needs_no_temporary_directory():
    env, _ = fault_env({"TMPDIR": "/nonexistent"})
    proc = loaderdoc("check", env=env, prefix=NO_TEMP)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr and "status:" in proc.stdout


IN_A_DELETED_DIRECTORY = ["sh", "-c", 'mkdir gone && cd gone && rmdir ../gone && exec "$@"', "sh"]


@pytest.mark.parametrize("args", STARTING, ids=lambda a: a[0])
def test_a_deleted_working_directory_is_one_line(tmp_path, args):
    proc = loaderdoc(*args, cwd=tmp_path, prefix=IN_A_DELETED_DIRECTORY)
    verb = args[0] if not args[0].startswith("-") else "--export"
    one_line_error(proc, EXIT_USAGE, f"{verb}: the working directory cannot be used (it was deleted)",
                   "cd to an existing directory")
    assert proc.stdout == ""


def test_check_works_in_a_deleted_working_directory(tmp_path):
    proc = loaderdoc("check", cwd=tmp_path, prefix=IN_A_DELETED_DIRECTORY)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "Traceback" not in proc.stderr and "status:" in proc.stdout


HEALTHY = Path(__file__).parent / "fixtures" / "watch" / "healthy.json"


@pytest.mark.parametrize("args, named", [
    (["--export", "loader.toml", "--machine", "ci-2core"], "loader.toml"),
    (["watch", "--merge", str(HEALTHY), "--report", "merged.json"], "merged.json"),
], ids=["--export", "watch --merge --report"])
def test_a_relative_output_in_a_deleted_working_directory_is_one_line(tmp_path, args, named):
    # before: a traceback from getcwd (exit 70) where the relative path was checked
    proc = loaderdoc(*args, cwd=tmp_path, prefix=IN_A_DELETED_DIRECTORY)
    one_line_error(proc, EXIT_USAGE, f"{named}: the working directory cannot be used (it was deleted)",
                   "give an absolute path, or cd to an existing directory")
    assert proc.stdout == ""
