"""The command line as a user runs it: exit codes, one-line errors, nothing written on failure."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import EXIT_CRITICAL, EXIT_OK, EXIT_USAGE, EXIT_WARNING


def run(*args: str, cwd=None, env=None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "loaderdoc", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, code: int, *needles: str) -> None:
    assert proc.returncode == code, proc.stderr + proc.stdout
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    for needle in needles:
        assert needle in lines[0]


def test_help_lists_commands_and_exit_codes():
    proc = run("--help")
    assert proc.returncode == 0
    for word in ("check", "probe", "--export", "exit codes", "critical"):
        assert word in proc.stdout
    check_help = run("check", "--help")
    assert "--config" in check_help.stdout and "exit codes" in check_help.stdout


def test_fast_paths_import_neither_torch_nor_textual():
    code = (
        "import sys, io, contextlib\n"
        "from loaderdoc.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['check', '--json'])\n"
        "bad = [m for m in ('torch', 'textual', 'cpuinfo') if m in sys.modules]\n"
        "print(rc, bad)\n"
        "print(sorted(m for m in sys.modules if m.startswith('loaderdoc.commands.')))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout + proc.stderr
    first, imported = lines
    assert first.split(" ", 1)[1].strip() == "[]", proc.stdout + proc.stderr
    # only the command that runs builds its options: the other commands' modules are not imported
    assert imported == "['loaderdoc.commands.check', 'loaderdoc.commands.common']", imported
    help_code = (
        "import sys, io, contextlib\n"
        "from loaderdoc.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try: main(['--help'])\n"
        "    except SystemExit: pass\n"
        "print([m for m in ('torch', 'textual') if m in sys.modules])\n"
    )
    proc = subprocess.run([sys.executable, "-c", help_code], capture_output=True, text=True, timeout=60)
    assert proc.stdout.strip() == "[]", proc.stderr


def test_check_on_this_machine_reports_and_exits_by_severity():
    proc = run("check")
    assert proc.returncode in (EXIT_OK, EXIT_WARNING, EXIT_CRITICAL), proc.stderr
    assert "CPU" in proc.stdout and "status:" in proc.stdout
    doc = json.loads(run("check", "--json").stdout)
    assert doc["schema"] == "loaderdoc.check/1"
    assert doc["exit_code"] == {"ok": 0, "warning": 1, "critical": 2}[doc["status"]]
    assert doc["summary"]["cpu_budget"] >= 1
    assert doc["machine"]["cpu"]["logical"]["value"] >= 1


def test_check_healthy_recorded_machine_exits_zero():
    proc = run("check", "--machine", "h100x8-node", "--json")
    doc = json.loads(proc.stdout)
    assert proc.returncode == doc["exit_code"]
    assert doc["summary"]["usable_gpus"] == 8


def test_check_lints_a_config_against_a_pod(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("num_workers: 8\npin_memory: 1\nbatch_size: 64\n")
    proc = run("check", "--machine", "k8s-4cpu-quota", "--config", str(cfg), "--sample-shape", "3x224x224", "--json")
    doc = json.loads(proc.stdout)
    ids = {f["rule_id"] for f in doc["findings"]}
    assert doc["status"] in ("warning", "critical")
    assert proc.returncode == doc["exit_code"] != EXIT_OK
    assert any("cpu" in i for i in ids), ids  # 8 workers on a 4-CPU quota
    assert any("pin" in i for i in ids), ids  # pin_memory without a GPU
    assert any("shm" in i for i in ids), ids  # 8 x 2 x 9.2 MiB in 64 MiB


def test_check_reports_torch_rejected_settings_as_critical(tmp_path):
    cfg = tmp_path / "bad.toml"
    cfg.write_text("[dataloader]\nnum_workers = 0\nprefetch_factor = 4\n")
    proc = run("check", "--machine", "ci-2core", "--config", str(cfg))
    assert proc.returncode == EXIT_CRITICAL, proc.stdout + proc.stderr
    assert "prefetch_factor" in proc.stdout


@pytest.mark.parametrize(
    "content, name, needles",
    [
        ("num_workers = 4\nnum_worker = 2\n", "a.toml", ["a.toml:2", "did you mean 'num_workers'"]),
        ("num_workers: [\n", "b.yaml", ["b.yaml", "not valid YAML"]),
        ("num_workers = \n", "c.toml", ["c.toml", "not valid TOML"]),
        ("pin_memory: maybe\n", "d.yaml", ["pin_memory must be true/false"]),
    ],
)
def test_bad_config_is_one_line_exit_3(tmp_path, content, name, needles):
    cfg = tmp_path / name
    cfg.write_text(content)
    assert_one_line_error(run("check", "--config", str(cfg)), EXIT_USAGE, *needles)


def test_usage_errors_use_the_usage_code(tmp_path):
    assert_one_line_error(run("check", "--config", str(tmp_path / "nope.toml")), EXIT_USAGE, "no such file")
    assert run("check", "--batch-size", "-3").returncode == EXIT_USAGE
    assert run("check", "--sample-shape", "3xfoo").returncode == EXIT_USAGE
    assert run("--no-such-flag").returncode == EXIT_USAGE
    assert_one_line_error(run("check", "--machine", "no-such-box"), EXIT_USAGE, "no recorded machine")


def test_export_writes_toml_for_this_machine_and_refuses_to_clobber(tmp_path):
    out = tmp_path / "loader.toml"
    proc = run("--export", str(out), "--batch-size", "32", "--sample-shape", "3x224x224")
    assert proc.returncode == 0, proc.stderr
    text = out.read_text()
    assert text.startswith("# DataLoader settings by loaderdoc")
    table = tomllib.loads(text)["dataloader"]
    assert table["batch_size"] == 32 and table["num_workers"] >= 0
    again = run("--export", str(out))
    assert_one_line_error(again, EXIT_USAGE, "already exists", "--force")
    assert out.read_text() == text
    assert run("--export", str(out), "--force").returncode == 0


def test_export_python_and_json_and_stdout(tmp_path):
    py = tmp_path / "loader.py"
    assert run("--export", str(py), "--machine", "laptop-rtx3050").returncode == 0
    assert "pin_memory=True" in py.read_text()
    proc = run("--export", "-", "--format", "json", "--machine", "ci-2core")
    assert json.loads(proc.stdout)["dataloader"]["pin_memory"] is False


def test_export_bad_paths_write_nothing(tmp_path):
    assert_one_line_error(run("--export", str(tmp_path / "no" / "x.toml")), EXIT_USAGE, "does not exist")
    assert_one_line_error(run("--export", str(tmp_path / "x.txt")), EXIT_USAGE, "--format")
    assert list(tmp_path.iterdir()) == []


def test_facts_json_round_trips_as_a_fixture(tmp_path):
    proc = run("facts", "--json", "--label", "test box")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "box.json"
    path.write_text(proc.stdout)
    doc = json.loads(run("check", "--machine", str(path), "--json").stdout)
    assert doc["machine"]["label"] == "test box"


def test_training_table_feeds_the_context_rules(tmp_path):
    cfg = tmp_path / "train.toml"
    cfg.write_text(
        "[dataloader]\nbatch_size = 64\nnum_workers = 1\n\n"
        "[training]\nuses_batchnorm = true\ndataset_len = 1025\n"
    )
    doc = json.loads(run("check", "--machine", "ci-2core", "--config", str(cfg), "--json").stdout)
    assert "drop-last-batchnorm" in {f["rule_id"] for f in doc["findings"]}
    assert doc["config"]["training"]["dataset_len"] == 1025
    cfg.write_text(cfg.read_text().replace("dataset_len = 1025", "dataset_len = 1024"))
    doc = json.loads(run("check", "--machine", "ci-2core", "--config", str(cfg), "--json").stdout)
    assert "drop-last-batchnorm" not in {f["rule_id"] for f in doc["findings"]}
    cfg.write_text("[dataloader]\nnum_workers = 1\n[training]\nuses_batchnrom = true\n")
    assert_one_line_error(run("check", "--config", str(cfg)), EXIT_USAGE, "[training]", "uses_batchnrom")


def test_shared_options_work_before_or_after_the_command(tmp_path):
    before = json.loads(run("--batch-size", "64", "--sample-shape", "3x224x224", "check", "--machine", "ci-2core",
                            "--json").stdout)
    after = json.loads(run("check", "--machine", "ci-2core", "--batch-size", "64", "--sample-shape", "3x224x224",
                           "--json").stdout)
    assert before["batch_bytes"] == after["batch_bytes"] == 64 * 3 * 224 * 224
    neither = json.loads(run("check", "--machine", "ci-2core", "--json").stdout)
    assert neither["batch_bytes"] is None
