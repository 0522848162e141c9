"""The warm interpreter the fault tests' torch-importing commands run from (support/warm.py): a
command run warm answers as one run fresh, and what it forks carries a tag the leak check finds."""

from __future__ import annotations

import json
import os

import pytest
from faults_support import TAG_VAR, fault_env, loaderdoc
from support import warm

pytestmark = pytest.mark.skipif(not warm.available(), reason="commands do not run warm here")

PROBE = """\
import json, os, sys
import torch  # as a user's dataset module does

def make():
    with open("/proc/self/environ", "rb") as f:  # what a process this one forks shows
        proc = dict(e.split(b"=", 1) for e in f.read().split(b"\\0") if b"=" in e)
    with open(os.environ["LOADERDOC_TEST_OUT"], "w") as f:
        json.dump({"proc_tag": proc.get(b"TAG_VAR").decode(), "tag": os.environ["TAG_VAR"], "argv": sys.argv,
                   "cwd": os.getcwd(), "path0": sys.path[0]}, f)
    return None
""".replace("TAG_VAR", TAG_VAR)


@pytest.mark.parametrize("args", [
    ["probe", "--dataset", "probe_userdata:returns_none", "--budget", "2"],
    ["probe", "--dataset", "no_such_module_xyz:make", "--budget", "2"],
    ["probe", "--dataset", "probe_userdata:make_typo", "--budget", "2"],
])
def test_a_command_run_warm_answers_as_one_run_fresh(monkeypatch, args):
    before = warm.CPU_S[0]
    warm_run = loaderdoc(*args)
    assert warm.CPU_S[0] > before, "the command did not run warm"
    monkeypatch.setenv(warm.FRESH_VAR, "1")
    fresh_run = loaderdoc(*args)
    assert (warm_run.returncode, warm_run.stdout, warm_run.stderr) == (fresh_run.returncode, fresh_run.stdout,
                                                                       fresh_run.stderr)


def test_a_warm_command_has_its_own_environment_path_and_argv_and_its_forks_the_warm_tag(tmp_path):
    (tmp_path / "probe_env.py").write_text(PROBE)
    out = tmp_path / "out.json"
    env, tag = fault_env({"LOADERDOC_TEST_OUT": str(out)}, pythonpath=[str(tmp_path)])
    work = tmp_path / "work"
    work.mkdir()
    proc = loaderdoc("probe", "--dataset", "probe_env:make", "--budget", "2", env=env, cwd=work)
    assert proc.returncode == 3, proc.stderr
    seen = json.loads(out.read_text())
    assert seen["tag"] == tag  # os.environ: what it passes on to a program it executes
    assert seen["proc_tag"] == warm.warm().tag != tag  # /proc/PID/environ: what its forks show
    assert seen["argv"][0].endswith(os.path.join("loaderdoc", "__main__.py")) and seen["argv"][1:4] == [
        "probe", "--dataset", "probe_env:make"]
    assert seen["cwd"] == str(work) == seen["path0"]
