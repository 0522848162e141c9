"""Config formats loaderdoc does not read (issue 49, family 6): JSON5, an INI `setup.cfg`, a `.env`
holding a path, Jsonnet and Dhall each drew "not valid TOML". Now one line naming the format and
the ones that are read, exit 3, through `check --config`. A file of such a suffix whose text is also
TOML (an INI section often is) is still read. JSON with `//` and `/* */` comments (Mozilla TTS's
config.json, a `.jsonc`; issue 50) is read, each key at its line."""

from __future__ import annotations

import json

import pytest
from faults_support import loaderdoc, one_line_error

READS = "loaderdoc reads TOML, YAML, JSON and Python (.py) configs: put the DataLoader settings in one of those"


@pytest.mark.parametrize("name, text, fmt", [
    ("loader.json5", "{\n  // the loader\n  num_workers: 4,\n}\n", "JSON5"),
    ("setup.cfg", "[metadata]\nname = proj\n[options]\ninstall_requires =\n    torch\n", "INI (setup.cfg-style)"),
    (".env", "DATA_DIR=/data/my images\nNUM_WORKERS=4\n", "dotenv"),
    ("data.jsonnet", "local w = 4;\n{ num_workers: w }\n", "Jsonnet"),
    ("data.dhall", "let w = 4 in { num_workers = w }\n", "Dhall"),
])
def test_a_format_not_read_is_named_in_one_line(tmp_path, name, text, fmt):
    (tmp_path / name).write_text(text, encoding="utf-8")
    proc = loaderdoc("check", "--config", name, cwd=tmp_path)
    one_line_error(proc, 3, f"{name}: {fmt} files are not read; {READS}")
    assert "TOML:" not in proc.stderr


def test_an_ini_file_whose_text_is_also_toml_is_still_read(tmp_path):
    (tmp_path / "train.cfg").write_text("[dataloader]\nnum_workers = 4\nbatch_size = 64\n", encoding="utf-8")
    proc = loaderdoc("check", "--config", "train.cfg", cwd=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert "num_workers <- dataloader.num_workers:2" in proc.stdout


JSONC = """\
{
    "run_name": "ljspeech",  // a comment after a "string" and a url http://x.y
    /* a block comment
       "num_loader_workers": 99, */
    "note": "// not a comment: inside a string",
    // "batch_size": 64,
    "batch_size": 32,
    "num_loader_workers": 4
}
"""


@pytest.mark.parametrize("name", ["config.json", "config.jsonc"])
def test_json_with_comments_is_read_each_key_at_its_line(tmp_path, name):
    (tmp_path / name).write_text(JSONC, encoding="utf-8")
    proc = loaderdoc("check", "--config", name, cwd=tmp_path)
    assert proc.returncode in (0, 1), proc.stderr
    assert "batch_size=32, num_workers=4" in proc.stdout
    assert "read from: batch_size <- batch_size:7, num_workers <- num_loader_workers:8" in proc.stdout


def test_json_with_comments_and_a_real_error_names_its_line(tmp_path):
    (tmp_path / "config.json").write_text('{\n  // fine\n  "batch_size": 32\n  "num_workers": 4,\n}\n',
                                          encoding="utf-8")
    proc = loaderdoc("check", "--config", "config.json", cwd=tmp_path)
    one_line_error(proc, 3, "config.json:4: not valid JSON: ")


def test_json_with_comments_and_trailing_commas_is_read_as_json5_readers_read_it(tmp_path):
    """Amphion's exp_config.json (read with json5.loads): a comma before a closing bracket has one
    meaning; every key keeps its line."""
    (tmp_path / "config.json").write_text(
        '{\n  "dataset": [\n    "LJSpeech",\n    //"hifitts"\n  ],\n  "train": {\n    "batch_size": 16,\n'
        '    "dataloader": {"num_worker": 2, "pin_memory": true,},\n  },\n}\n', encoding="utf-8")
    proc = loaderdoc("check", "--config", "config.json", "--json", cwd=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr
    loader = json.loads(proc.stdout)["config"]["loaders"][0]
    assert loader["settings"]["batch_size"] == 16 and loader["settings"]["pin_memory"] is True
    assert loader["set_by"]["batch_size"]["line"] == 7 and loader["set_by"]["pin_memory"]["line"] == 8
