"""Issue 47, the thread budget as a knob: the training process's intra-op threads (``torch_threads``)
exported beside the DataLoader settings, read back from loaderdoc's ``[process]`` table, applied by
``watch --apply`` (OMP_NUM_THREADS in the command's environment, torch.set_num_threads in its
processes), kept by ``watch --fixes`` in a ``[process]`` table and never put into DataLoader kwargs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
from faults_support import loaderdoc_here
from test_watch import split_output, watch

from loaderdoc.advice.findings import Finding
from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import EXIT_USAGE, SettingsError, UserError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.config import read_config
from loaderdoc.export import FORMATS, render
from loaderdoc.session import Session, apply_change
from loaderdoc.system.fixtures import load_machine
from loaderdoc.watching import apply
from loaderdoc.watching.apply_file import OMP_ENV, plan_from_file
from loaderdoc.watching.fixes import fix_tables, fixes_toml

SETTINGS = LoaderSettings(batch_size=32, num_workers=2, prefetch_factor=2, persistent_workers=True)
SUFFIX = {"lightning": "yaml", "hydra": "yaml", "hf": "yaml"}


def flat(text: str) -> str:
    return " ".join(text.split())


# ---- export ------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_without_threads_every_format_is_as_before(fmt):
    plain = render(SETTINGS, fmt, ["a header"])
    assert render(SETTINGS, fmt, ["a header"], torch_threads=None) == plain
    assert "torch_threads" not in plain and "OMP_NUM_THREADS" not in plain and "set_num_threads" not in plain


def test_the_toml_export_gets_a_process_table_after_the_dataloader_table():
    text = render(SETTINGS, "toml", torch_threads=1)
    assert text == render(SETTINGS, "toml") + (
        "\n# the training process's intra-op threads: OMP_NUM_THREADS=1 in the job's environment or "
        "torch.set_num_threads(1)\n[process]\ntorch_threads = 1\n")
    assert tomllib.loads(text) == {"dataloader": tomllib.loads(render(SETTINGS, "toml"))["dataloader"],
                                   "process": {"torch_threads": 1}}


def test_yaml_and_json_exports_carry_a_top_level_process_mapping():
    import yaml

    doc = yaml.safe_load(render(SETTINGS, "yaml", torch_threads=3))
    assert doc["process"] == {"torch_threads": 3} and doc["dataloader"] == SETTINGS.as_kwargs()
    assert "# the training process's intra-op threads: OMP_NUM_THREADS=3" in render(SETTINGS, "yaml", torch_threads=3)
    doc = json.loads(render(SETTINGS, "json", torch_threads=3))
    assert doc["process"] == {"torch_threads": 3} and doc["dataloader"] == SETTINGS.as_kwargs()
    assert any("OMP_NUM_THREADS=3" in note for note in doc["notes"])


@pytest.mark.parametrize("fmt", ["lightning", "hydra", "hf"])
def test_fragments_with_no_place_for_it_name_it_in_their_header(fmt):
    import yaml

    text = render(SETTINGS, fmt, torch_threads=3)
    comments = [line for line in text.splitlines() if line.startswith("#")]
    assert any("OMP_NUM_THREADS=3 (torch.set_num_threads(3))" in line for line in comments), comments
    assert yaml.safe_load(text) == yaml.safe_load(render(SETTINGS, fmt))  # the fragment itself unchanged


def test_the_python_snippet_sets_the_thread_count_when_it_runs(tmp_path):
    pytest.importorskip("torch")
    snippet = render(SETTINGS, "py", ["made for a test"], torch_threads=3)
    assert "torch.set_num_threads(3)" in snippet and "OMP_NUM_THREADS=3" in snippet
    # exec'd in a fresh interpreter whose pool the environment sized to 1: the snippet makes it 3
    check = ("import sys, torch\nbefore = torch.get_num_threads()\nspace = {}\n"
             "exec(compile(open(sys.argv[1]).read(), sys.argv[1], 'exec'), space)\n"
             "loader = space['make_loader'](list(range(8)), num_workers=0, persistent_workers=False,"
             " prefetch_factor=None)\n"
             "print(before, torch.get_num_threads(), len(list(loader)))\n")
    path = tmp_path / "snippet.py"
    path.write_text(snippet)
    proc = subprocess.run([sys.executable, "-c", check, str(path)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1", "3", "1"]


@pytest.mark.parametrize("bad", [0, -2, True, 2.5, "2"])
def test_render_refuses_a_thread_count_that_is_not_a_positive_whole_number(bad):
    with pytest.raises(SettingsError, match="torch_threads must be"):
        render(SETTINGS, "toml", torch_threads=bad)


# ---- reading it back ---------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", FORMATS)
def test_an_export_reads_back_with_its_threads_where_the_layout_is_loaderdocs(tmp_path, fmt):
    path = tmp_path / f"x.{SUFFIX.get(fmt, fmt)}"
    path.write_text(render(SETTINGS, fmt, torch_threads=3))
    if fmt == "py":  # a snippet is a script, not a config: it is run, never read
        return
    config = read_config(path)
    assert config.torch_threads == (3 if fmt in ("toml", "yaml", "json") else None)
    settings = config.settings(config.loaders[0], strict=False)
    assert not hasattr(settings, "torch_threads") and settings.num_workers == 2
    plan = plan_from_file(str(path))
    assert plan.process == ({"torch_threads": 3} if fmt in ("toml", "yaml", "json") else {})
    assert plan.tables[""]["num_workers"] == 2 and "torch_threads" not in plan.tables[""]


def test_a_round_trip_export_check_apply(tmp_path):
    path = tmp_path / "fast.toml"
    path.write_text(render(SETTINGS, "toml", torch_threads=2))
    proc = loaderdoc_here("check", "--config", str(path), "--machine", "laptop-rtx3050")
    assert proc.returncode in (0, 1), proc.stderr  # read, judged: not refused
    plan = plan_from_file(str(path))
    assert plan.environment() == {OMP_ENV: "2"}
    env = json.loads(plan.env_value())
    assert env["process"] == {"torch_threads": 2} and "torch_threads" not in env["tables"][""]
    assert apply.Applier(env).torch_threads == 2
    # a file without [process]: the hook's JSON is as before, the environment untouched
    bare = tmp_path / "bare.toml"
    bare.write_text(render(SETTINGS, "toml"))
    assert "process" not in json.loads(plan_from_file(str(bare)).env_value())
    assert plan_from_file(str(bare)).environment() == {}


def test_a_file_with_only_a_process_table_is_something_to_apply(tmp_path):
    path = tmp_path / "threads.toml"
    path.write_text("[process]\ntorch_threads = 4\n")
    plan = plan_from_file(str(path))
    assert plan.tables == {} and plan.process == {"torch_threads": 4}
    line = plan.process_line({OMP_ENV: "16"})
    assert "OMP_NUM_THREADS=4 in the command's environment (replacing the inherited OMP_NUM_THREADS=16)" in line
    assert "replacing" not in plan.process_line({})


@pytest.mark.parametrize("name, content, needles", [
    ("a.toml", "[dataloader]\nnum_workers = 2\n\n[process]\ntorch_threads = 0\n",
     ["a.toml:5: process.torch_threads: torch_threads must be >= 1"]),
    ("b.toml", "[dataloader]\nnum_workers = 2\n[process]\ntorch_threads = \"2\"\n",
     ["b.toml:4: process.torch_threads: torch_threads must be a whole number"]),
    ("c.yaml", "dataloader:\n  num_workers: 2\nprocess:\n  torch_threads: 2.5\n",
     ["c.yaml:4: process.torch_threads: torch_threads must be a whole number"]),
    ("d.yaml", "num_workers: 2\nprocess:\n  torch_threads: true\n", ["d.yaml:3", "must be a whole number"]),
    ("e.toml", "[dataloader]\nnum_workers = 2\n[process]\ntorch_thread = 2\n",
     ["e.toml:4: process.torch_thread: unknown setting 'torch_thread' (did you mean 'torch_threads'?)"]),
    ("f.json", '{"dataloader": {"num_workers": 2},\n "process": {"torch_threads": -1}}',
     ["f.json:2", "torch_threads must be >= 1"]),
    ("g.yaml", "dataloader:\n  num_workers: 2\nprocess: 4\n", ["g.yaml:3", "[process] must be a table"]),
    ("h.toml", "[process]\ntorch_threads = 99999999\n", ["h.toml:2", "torch_threads = 99999999 is absurd"]),
])
def test_a_bad_process_table_is_refused_with_its_line_like_a_bad_setting(tmp_path, name, content, needles):
    path = tmp_path / name
    path.write_text(content)
    proc = loaderdoc_here("check", "--config", str(path), "--machine", "laptop-rtx3050")
    assert proc.returncode == EXIT_USAGE and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for needle in needles:
        assert needle in proc.stderr, proc.stderr
    with pytest.raises(UserError, match="watch: --apply "):
        plan_from_file(str(path))


def test_a_projects_own_process_section_is_not_loaderdocs(tmp_path):
    path = tmp_path / "project.yaml"  # a Lightning config with a `process:` of its own: not read, not refused
    path.write_text("data:\n  init_args:\n    num_workers: 4\nprocess:\n  name: trainer\n  priority: 2\n")
    config = read_config(path)
    assert config.torch_threads is None and config.loaders[0].keys


# ---- the hook's half ---------------------------------------------------------------------------
def test_the_applier_sets_torchs_threads_once_torch_is_imported_and_never_raises(monkeypatch, capsys):
    calls = []
    fake = types.SimpleNamespace(set_num_threads=calls.append)
    monkeypatch.setitem(sys.modules, "torch", fake)
    apply.Applier({"file": "f.toml", "tables": {}, "process": {"torch_threads": 2}}).set_torch_threads()
    apply.Applier({"file": "f.toml", "tables": {}}).set_torch_threads()  # no [process]: nothing
    apply.Applier({"file": "f.toml", "process": {"torch_threads": "2"}}).set_torch_threads()  # not an int
    assert calls == [2]

    def refuse(k):
        raise RuntimeError("pool already running")

    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(set_num_threads=refuse))
    apply.Applier({"file": "f.toml", "process": {"torch_threads": 2}}).set_torch_threads()
    assert "--apply f.toml: torch_threads=2 not applied: torch.set_num_threads failed (pool already running)" \
        in capsys.readouterr().err


# ---- a finding's change: torch_threads never reaches DataLoader kwargs -------------------------
def entry(role, waits, change=None, applied=(), settings=None):
    proposed = {"change": change, "rules": ["rule-x"], "expected_gain": 1.2} if change else None
    return types.SimpleNamespace(role=role, waits=waits, proposed=proposed, number=1,
                                 settings=settings or {"num_workers": 0}, applied={"applied": list(applied)})


def report(loaders, apply_outcome=None):
    return types.SimpleNamespace(loaders=loaders, apply=apply_outcome, command=["python", "train.py"])


def test_fixes_put_a_proposed_thread_count_in_a_process_table(tmp_path):
    run = report([entry(None, 100, {"num_workers": 2, "torch_threads": 1}), entry(None, 5)])
    tables, notes = fix_tables(run)
    assert tables == {"dataloader": {"num_workers": 2}, "process": {"torch_threads": 1}}
    text = fixes_toml(run, tables, notes)
    assert "num_workers=2, torch_threads=1 (rule-x" in text and "[process] torch_threads = 1" in text
    path = tmp_path / "next.toml"
    path.write_text(text)
    plan = plan_from_file(str(path))  # what the next --apply reads
    assert plan.tables == {"": {"num_workers": 2}} and plan.process == {"torch_threads": 1}


def test_fixes_keep_what_apply_set_and_the_training_loops_proposal_wins():
    applied = {"file": "a.toml", "process": {"torch_threads": 4, "torch_threads_ran": [4]}}
    tables, notes = fix_tables(report([entry("train", 100, applied=["num_workers"], settings={"num_workers": 2}),
                                       entry("val", 10)], applied))
    assert tables == {"train_dataloader": {"num_workers": 2}, "process": {"torch_threads": 4}}
    assert notes == ["no finding proposes a change"]  # a fixed point: the file holds what ran
    tables, _ = fix_tables(report([entry("val", 10, {"torch_threads": 3}), entry("train", 100, {"torch_threads": 1}),
                                   entry("predict", 50, {"torch_threads": 2})], applied))
    assert tables == {"process": {"torch_threads": 1}}  # per process: never a loader's table, nor a note


def test_a_fix_of_threads_in_the_app_is_exported_and_never_a_dataloader_argument():
    s = Session()
    s.facts_arrived(load_machine("laptop-rtx3050"))
    before = s.settings
    assert apply_change(before, {"torch_threads": 2}) == before
    applied, message = s.apply_fix(Finding(rule_id="r", severity="warning", symptom="s",
                                           settings_change={"torch_threads": 2}))
    assert applied and message == "torch_threads: None -> 2" and s.settings == before and s.torch_threads == 2
    applied, message = s.apply_fix(Finding(rule_id="r2", severity="warning", symptom="s",
                                           settings_change={"num_workers": 1, "torch_threads": 1}))
    assert applied and "num_workers: " in message and message.endswith("torch_threads: 2 -> 1")
    assert s.settings.num_workers == 1 and s.torch_threads == 1
    applied, message = s.apply_fix(Finding(rule_id="r3", severity="warning", symptom="s",
                                           settings_change={"torch_threads": 0}))
    assert not applied and "torch_threads must be >= 1" in message and s.torch_threads == 1


# ---- a real run ----------------------------------------------------------------------------------
LOOP = """\
import json, os, torch
from torch.utils.data import DataLoader

loader = DataLoader(list(range(64)), batch_size=4, num_workers=0)
for _ in range(2):
    for batch in loader:
        torch.ones(8) * 2
print(json.dumps({"omp": os.environ.get("OMP_NUM_THREADS"), "threads": torch.get_num_threads()}))
"""


def watched(tmp_path: Path, *prefix: str):
    """The loop under ``watch --apply`` of a file asking for 3 threads, from a job environment of
    OMP_NUM_THREADS=1. 3: torch caps OMP_NUM_THREADS at the CPUs it may use, set_num_threads does not,
    so on a machine of fewer than 3 CPUs only the hook's call gives 3, and on any machine the
    environment alone would give 1."""
    pytest.importorskip("torch")
    from test_watch import env_with_src

    settings_file = tmp_path / "threads.toml"
    settings_file.write_text(render(LoaderSettings(num_workers=0), "toml", torch_threads=3))
    script = tmp_path / "train.py"
    script.write_text(LOOP)
    env = {**env_with_src(), "OMP_NUM_THREADS": "1"}  # what the job would run with
    proc = watch("--json", "--apply", str(settings_file), "--", *prefix, sys.executable, str(script), env=env,
                 cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines, doc = split_output(proc.stdout)
    return proc, json.loads(lines[-1]), doc, settings_file


def test_watch_apply_runs_the_command_with_the_thread_count(tmp_path):
    proc, seen, doc, settings_file = watched(tmp_path)
    assert seen == {"omp": "3", "threads": 3}
    assert (f"--apply {settings_file}: torch_threads=3: OMP_NUM_THREADS=3 in the command's environment "
            "(replacing the inherited OMP_NUM_THREADS=1)") in flat(proc.stderr)
    epochs = [e["torch_threads"] for loader in doc["loaders"] for e in loader["epochs"]]
    assert epochs and set(epochs) == {3}
    assert doc["apply"]["process"] == {"torch_threads": 3, "torch_threads_ran": [3]}
    assert f"--apply {settings_file}: torch_threads=3 applied (OMP_NUM_THREADS, torch.set_num_threads); the " \
           "epochs ran with 3" in flat(proc.stderr)


def test_a_command_that_replaces_its_environment_still_gets_the_thread_count_from_the_hook(tmp_path):
    # the job's own launcher sets OMP_NUM_THREADS=1 again: torch starts with 1, the hook makes it 3
    proc, seen, doc, _ = watched(tmp_path, "env", "OMP_NUM_THREADS=1")
    assert seen == {"omp": "1", "threads": 3}
    assert {e["torch_threads"] for loader in doc["loaders"] for e in loader["epochs"]} == {3}
