"""torchload: the program freezes torch's objects once imported; a library caller and the app's
worker threads keep their collector as it was. A stand-in ``torch`` package (20 000 objects) keeps
each process cheap; the real import's saving is measured in torchload's docstring."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from support.paths import LOADERDOC_PATH

FAKE_TORCH = "OBJECTS = [[i] for i in range(20_000)]\n"

PROBE = """\
import gc, json, sys, threading
from loaderdoc.base import torchload
if sys.argv[1] == "program":
    torchload.freeze_torch_once_imported()
if sys.argv[2] == "thread":
    worker = threading.Thread(target=torchload.import_torch)
    worker.start()
    worker.join()
else:
    torchload.import_torch()
print(json.dumps({"frozen": gc.get_freeze_count(), "enabled": gc.isenabled(), "imported": "torch" in sys.modules}))
"""


@pytest.mark.parametrize("caller, thread, frozen", [
    ("program", "main", True),
    ("program", "thread", False),  # the app's probe: its widgets are not frozen with torch
    ("library", "main", False),  # a test, a notebook: loaderdoc.probe() leaves the collector alone
])
def test_only_the_programs_main_thread_freezes_torch(tmp_path, caller, thread, frozen):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(FAKE_TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), LOADERDOC_PATH]))
    proc = subprocess.run([sys.executable, "-c", PROBE, caller, thread], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    state = json.loads(proc.stdout)
    assert state["imported"] and state["enabled"]  # the collector runs again after the import
    assert (state["frozen"] >= 20_000) is frozen, state
