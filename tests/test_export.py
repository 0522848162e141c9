"""Export: format by suffix, atomic writes, never clobbering, header naming the machine."""

from __future__ import annotations

import json
import os

import pytest

from loaderdoc.advice.findings import Finding
from loaderdoc.advice.recommend import recommend
from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import ExportError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.config import load_settings
from loaderdoc.export import FORMATS, export_header, findings_header, format_for, render, write_export
from loaderdoc.system.fixtures import load_machine

SETTINGS = LoaderSettings(batch_size=32, num_workers=2, prefetch_factor=2, persistent_workers=True)


def test_format_follows_suffix_or_flag():
    assert format_for("a.toml", None) == "toml"
    assert format_for("a.PY", None) == "py"
    assert format_for("a.json", None) == "json"
    assert format_for("-", None) == "toml"
    assert format_for("a.txt", "json") == "json"
    assert format_for("a.yml", None) == "yaml"
    assert format_for("a.yaml", "hf") == "hf"
    with pytest.raises(ExportError, match=r"suffix; name it \.toml, \.yaml, \.json or \.py, or pass --format"):
        format_for("a.txt", None)


@pytest.mark.parametrize("fmt", ["toml", "py", "json"])
def test_written_files_load_back(tmp_path, fmt):
    path = tmp_path / f"loader.{fmt}"
    assert write_export(path, SETTINGS, header=["for a test machine"]) == path
    text = path.read_text()
    if fmt == "toml":
        assert tomllib.loads(text)["dataloader"]["num_workers"] == 2
        assert load_settings(path).as_kwargs() == SETTINGS.as_kwargs()
    elif fmt == "json":
        assert json.loads(text)["dataloader"] == SETTINGS.as_kwargs()
    else:
        compile(text, str(path), "exec")
        assert "# for a test machine" in text
    assert oct(path.stat().st_mode & 0o777) == "0o600"  # owner only: an export can carry a command line


def test_existing_file_is_never_overwritten_without_force(tmp_path):
    path = tmp_path / "loader.toml"
    path.write_text("precious\n")
    with pytest.raises(ExportError, match="already exists; pass --force"):
        write_export(path, SETTINGS)
    assert path.read_text() == "precious\n"
    write_export(path, SETTINGS, force=True)
    assert "num_workers = 2" in path.read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["loader.toml"]  # no temp files left


def test_bad_targets_write_nothing(tmp_path):
    with pytest.raises(ExportError, match="does not exist"):
        write_export(tmp_path / "missing" / "x.toml", SETTINGS)
    with pytest.raises(ExportError, match="is a directory"):
        write_export(tmp_path, SETTINGS, fmt="toml")
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        if os.geteuid() == 0:
            pytest.skip("root ignores directory permissions")
        with pytest.raises(ExportError, match="permission denied"):
            write_export(locked / "x.toml", SETTINGS)
    finally:
        locked.chmod(0o700)
    assert list(locked.iterdir()) == []


def test_unwritable_directory_as_root_via_readonly_mount_is_reported(tmp_path):
    # /proc is never writable, even for root: the error is one line and nothing is created
    with pytest.raises(ExportError, match="cannot write"):
        write_export("/proc/loaderdoc-test.toml", SETTINGS)


def test_stdout(capsys):
    assert write_export("-", SETTINGS, fmt="json") is None
    assert json.loads(capsys.readouterr().out)["dataloader"]["num_workers"] == 2


def test_header_names_machine_and_reasons():
    facts = load_machine("k8s-4cpu-quota")
    rec = recommend(facts, batch_size=16, sample_bytes=3 * 224 * 224)
    header = export_header(facts, rec)
    text = render(rec.settings, "toml", header)
    assert "4 CPUs (cgroup quota)" in text
    assert "num_workers: 3: CPU budget 4 (cgroup quota)" in text
    assert tomllib.loads(text)["dataloader"]["num_workers"] == 3


@pytest.mark.parametrize("fmt", ["toml", "py", "yaml", "json"])
def test_header_carries_each_findings_fix_whole(fmt):
    """A fix outside the DataLoader (here glibc's malloc tunable, from a real probe of 8 MiB samples
    whose workers' memory kept rising) reaches the exported file, and the file still parses."""
    import json

    from support.scenarios import RECORDED_DIR

    from loaderdoc.advice.rules import evaluate
    from loaderdoc.probing.result import ProbeReport
    from loaderdoc.system.facts import MachineFacts

    raw = json.loads((RECORDED_DIR / "real-large-heap-growth.json").read_text(encoding="utf-8"))
    facts, probe = MachineFacts.from_dict(raw["facts"]), ProbeReport.from_dict(raw["probe"])
    rec = recommend(facts, batch_size=4, probe=probe)
    findings = evaluate(facts, rec.settings, batch_bytes=rec.batch_bytes, probe=probe)
    growing = next(f for f in findings if f.rule_id == "worker-memory-growing")
    header = export_header(facts, rec, findings)
    fix_lines = header[header.index(f"  [warning] worker-memory-growing: {growing.symptom}") + 1:]
    fix_lines = fix_lines[:next((i for i, line in enumerate(fix_lines) if not line.startswith("    ")), None)]
    assert fix_lines[0].startswith("    fix: ")
    assert " ".join(line.strip() for line in fix_lines).removeprefix("fix: ") == growing.fix
    assert all(len(line) <= 98 for line in fix_lines)
    text = render(rec.settings, fmt, header)
    assert "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072" in text
    assert _parsed_workers(text, fmt) == rec.settings.num_workers
    if fmt == "json":
        assert growing.fix.split(".")[0] in " ".join(json.loads(text)["notes"])


def _parsed_workers(text: str, fmt: str) -> int:
    """num_workers as the exported file gives it back to its reader (TOML, YAML, JSON, Python)."""
    import json

    import yaml

    if fmt == "toml":
        return tomllib.loads(text)["dataloader"]["num_workers"]
    if fmt == "yaml":
        return yaml.safe_load(text)["dataloader"]["num_workers"]
    if fmt == "json":
        return json.loads(text)["dataloader"]["num_workers"]
    import re

    namespace: dict = {}
    exec(compile(text, "loader.py", "exec"), namespace)  # defines make_loader; builds nothing
    assert callable(namespace["make_loader"])
    return int(re.search(r"num_workers=(\d+),", text).group(1))


@pytest.mark.parametrize("fmt", ["toml", "py", "yaml", "json"])
def test_header_text_cannot_end_its_comment_line(fmt):
    """A finding's text quotes what it saw (a traceback's file name, an error message): line
    breaks, quotes and control characters in it stay inside the comment in every format."""
    from loaderdoc.advice.findings import Finding

    nasty = 'line\none\r"""\x1b[31m # key: 1\x85two: 2\u2028three: 3\x00 {"a": 1} \\ \t end'
    finding = Finding("odd-finding", "warning", f"symptom {nasty}", fix=f"fix {nasty} " + "x" * 120)
    header = export_header(load_machine("k8s-4cpu-quota"), None, [finding])
    text = render(SETTINGS, fmt, header)
    assert _parsed_workers(text, fmt) == SETTINGS.num_workers
    if fmt != "json":
        assert "x" * 120 in text  # a long word stays whole: a command cut in two would be pasted wrong


@pytest.mark.parametrize("fmt, layout", [
    ("yaml", "[dataloader] table"),
    ("lightning", "LightningCLI"),
    ("hydra", "Hydra"),
    ("hf", "Hugging Face TrainingArguments"),
])
def test_every_yaml_export_reads_back_to_the_same_settings(tmp_path, fmt, layout):
    from loaderdoc.config import read_config
    from loaderdoc.export import hf_fields

    settings = LoaderSettings(batch_size=48, shuffle=True, num_workers=3, pin_memory=True, drop_last=True,
                              prefetch_factor=4, persistent_workers=True, in_order=False)
    path = tmp_path / "out.yaml"
    write_export(path, settings, fmt=fmt, header=["made for a test"])
    assert path.read_text().startswith("# made for a test\n")
    config = read_config(path)
    (loader,) = config.loaders
    assert loader.layout == layout
    back = config.settings(loader).as_kwargs()
    # TrainingArguments has no shuffle and no in_order field
    compared = hf_fields() if fmt == "hf" else settings.as_kwargs()
    for key in compared:
        assert back[key] == settings.as_kwargs()[key], key
    if fmt == "hf":
        assert "in_order" not in back  # read back as the Trainer's DataLoader will be built: in order
    else:
        assert back == settings.as_kwargs()


# how each format spells in_order=False; Hugging Face TrainingArguments cannot, and says so
IN_ORDER_FALSE = {"toml": "\nin_order = false\n", "yaml": "\n  in_order: false\n", "json": '"in_order": false',
                  "py": "\n        in_order=False,\n", "lightning": "\n    in_order: false\n",
                  "hydra": "\nin_order: false\n",
                  "hf": "# not written, TrainingArguments has no field for it: in_order=False\n"}


@pytest.mark.parametrize("fmt", FORMATS)
def test_in_order_is_written_only_when_false_as_each_format_writes_it(fmt):
    assert set(IN_ORDER_FALSE) == set(FORMATS)
    base = LoaderSettings(batch_size=16, num_workers=2)
    assert "in_order" not in render(base, fmt, ["header"])  # torch's default: left out, as torch < 2.6 wants
    text = render(base.replace(in_order=False), fmt, ["header"])
    assert text.count("in_order") == 1 and IN_ORDER_FALSE[fmt] in text, text
    # the settings the format can carry are written either way
    assert text.replace(IN_ORDER_FALSE[fmt], "").count("num_workers") == 1


def test_hugging_face_export_names_every_chosen_value_it_cannot_write():
    chosen = LoaderSettings(batch_size=16, num_workers=2, timeout=30.0, multiprocessing_context="spawn",
                            in_order=False)
    notes = [line for line in render(chosen, "hf").splitlines() if line.startswith("#")]
    assert notes[2] == ("# not written, TrainingArguments has no field for them: timeout=30.0, "
                        "multiprocessing_context='spawn', in_order=False")
    assert "get_train_dataloader" in notes[3]
    # torch's defaults (and shuffle, which the Trainer decides) lose nothing: no such note
    assert "not written" not in render(LoaderSettings(batch_size=16, num_workers=2, shuffle=True), "hf")


def test_findings_in_a_header_whole_lines_with_and_without_their_fix():
    # export_header (check's findings, fix wrapped at 98 columns) and probe --export (no fix) say them alike
    findings = [Finding("shm-too-small", "critical", "batches do not fit /dev/shm",
                        fix="docker run --shm-size=1g ... " + "or hold fewer batches in flight " * 3),
                Finding("pin-memory-without-gpu", "warning", "pin_memory=True but no GPU")]
    assert findings_header(findings) == [
        "findings on this machine:",
        "  [critical] shm-too-small: batches do not fit /dev/shm",
        "    fix: docker run --shm-size=1g ... or hold fewer batches in flight or hold fewer batches in",
        "         flight or hold fewer batches in flight",
        "  [warning] pin-memory-without-gpu: pin_memory=True but no GPU",
    ]
    assert findings_header(findings, with_fix=False) == [
        "findings on this machine:",
        "  [critical] shm-too-small: batches do not fit /dev/shm",
        "  [warning] pin-memory-without-gpu: pin_memory=True but no GPU",
    ]
    assert findings_header([]) == []
