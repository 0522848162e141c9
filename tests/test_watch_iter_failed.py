"""`iter(loader)` that raises before any batch (issue 49, family 6): `watch --apply` with
`multiprocessing_context = "spawn"` over a dataset holding a lambda broke the script, then watch
said "its settings were not applied: the command iterated no DataLoader". The hook now records the
loader with what iter() raised: critical `watch-loader-did-not-start`, naming the error, what
--apply changed, and the fix; the report opens in the app."""

from __future__ import annotations

import json
import sys

import pytest
from faults_support import loaderdoc
from textual.widgets import Static

from loaderdoc.system.fixtures import load_machine
from loaderdoc.tui.app import make_app
from loaderdoc.watching.report_file import load_watch_report

SCRIPT = """\
import torch
from torch.utils.data import DataLoader, Dataset

class Squares(Dataset):
    def __init__(self):
        self.make = lambda i: torch.full((4,), float(i * i))
    def __len__(self):
        return 64
    def __getitem__(self, i):
        return self.make(i)

if __name__ == "__main__":
    for batch in DataLoader(Squares(), batch_size=4CONTEXT):
        pass
"""


def one(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def spawned(tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT.replace("CONTEXT", ""), encoding="utf-8")
    (tmp_path / "spawn.toml").write_text('[dataloader]\nnum_workers = 2\nmultiprocessing_context = "spawn"\n',
                                         encoding="utf-8")
    proc = loaderdoc("watch", "--apply", "spawn.toml", "--report", "r.json", "--", sys.executable, "train.py",
                     cwd=tmp_path)
    return proc, tmp_path / "r.json"


def test_a_loader_apply_broke_says_what_iter_raised_and_how_to_fix_it(spawned):
    proc, report_path = spawned
    assert proc.returncode == 1, proc.stderr[-3000:]  # the command's own exit code
    err = one(proc.stderr)
    assert "were not applied" not in err and "no torch DataLoader was iterated" not in err
    report = json.loads(report_path.read_text())
    (loader,) = report["loaders"]
    assert loader["iter_error"].startswith("AttributeError: Can't pickle local object 'Squares.__init__.<locals>")
    assert loader["settings"]["multiprocessing_context"] == "spawn" and loader["totals"]["steps"] == 0
    (finding,) = [f for f in report["findings"] if f["rule_id"] == "watch-loader-did-not-start"]
    assert report["status"] == "critical" and finding["severity"] == "critical"
    assert "--apply changed num_workers 0 -> 2, multiprocessing_context None -> 'spawn'" in finding["evidence"]
    assert finding["fix"].endswith("or drop multiprocessing_context from the --apply file (fork).")
    assert "no batch, iter(loader) raised; --apply: num_workers 0 -> 2, multiprocessing_context None -> spawn" in err


async def test_its_report_opens_in_the_app(spawned):
    _, report_path = spawned
    app = make_app(facts=load_machine("ci-2core"), watch_run=load_watch_report(report_path),
                   header_fn=lambda *a, **k: ["test header"])
    async with app.run_test(size=(80, 24)) as pilot:
        await pilot.pause()
        assert app.session.findings[0].rule_id == "watch-loader-did-not-start"
        assert "0 batches" in str(app.screen.query_one("#run-head", Static).render())


def test_a_script_that_asks_spawn_itself_is_told_to_start_with_fork(tmp_path):
    (tmp_path / "train.py").write_text(
        SCRIPT.replace("CONTEXT", ', num_workers=2, multiprocessing_context="spawn"'), encoding="utf-8")
    proc = loaderdoc("watch", "--report", "r.json", "--", sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]
    (finding,) = [f for f in json.loads((tmp_path / "r.json").read_text())["findings"]
                  if f["rule_id"] == "watch-loader-did-not-start"]
    assert finding["cause"].startswith("Under multiprocessing_context='spawn' each worker starts a fresh interpreter")
    assert finding["fix"].endswith("or start the workers with fork (multiprocessing_context='fork').")


REFUSED = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

def build(workers):
    # timm's create_loader always passes persistent_workers=True: with --workers 0 torch refuses it
    return DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8, num_workers=workers,
                      persistent_workers=True)

if __name__ == "__main__":
    for batch in build(0):
        pass
"""


def test_a_loader_torch_refused_at_construction_is_named_with_the_users_line_and_no_loaderdoc_frame(tmp_path):
    """issue 57: was a traceback through loaderdoc's apply frame, then 'no torch DataLoader was iterated'."""
    (tmp_path / "train.py").write_text(REFUSED, encoding="utf-8")
    proc = loaderdoc("watch", "--report", "r.json", "--", sys.executable, "train.py", cwd=tmp_path)
    assert proc.returncode == 1, proc.stderr[-3000:]  # the script's own exit code
    traceback = proc.stderr.split("ValueError: persistent_workers option needs num_workers > 0")[0]
    # as bare Python prints it: no frame of the hook's (the checkout's own folder may be named loaderdoc)
    assert 'train.py", line 6, in build' in traceback and "watching/apply.py" not in traceback
    err = one(proc.stderr)
    assert "no torch DataLoader was iterated" not in err
    assert "no batch: torch refused or could not start the DataLoader" in err
    assert (f"CRITICAL watch-loader-refused: loader 1 (DataLoader, num_workers=0, batch_size=8) was refused by torch "
            f"at construction at {tmp_path / 'train.py'}:6") in err
    assert "(the program's own settings: nothing applied)" in err
    assert f"fix: Set persistent_workers=False where num_workers=0 (or give the loader workers) at {tmp_path / 'train.py'}:6" in err
    (loader,) = json.loads((tmp_path / "r.json").read_text())["loaders"]
    assert loader["init_error"] == "ValueError: persistent_workers option needs num_workers > 0"
    assert loader["settings"]["persistent_workers"] is True and loader["settings"]["num_workers"] == 0
    again = load_watch_report(tmp_path / "r.json")
    assert again.loaders[0].init_site == f"{tmp_path / 'train.py'}:6 < {tmp_path / 'train.py'}:10"  # with its caller
