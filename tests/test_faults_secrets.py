"""Secrets and terminals: files that may hold a command line, and control characters in data.

- Every file loaderdoc writes (an export in each format, a watch report, a --fixes file, a tune
  report) is created 0600 whatever the umask: it can carry ``--token=...``. ``--force`` over an
  existing file keeps that file's mode.
- A control character inside data (a command line, a file name, a dataset's error message, a
  report's field) never reaches the output raw: every text command shows it as ``\\x1b``, and the
  app (``loaderdoc --report FILE`` in a real terminal) shows it, never obeys it.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import stat
import subprocess
import sys
import time
import unicodedata
from pathlib import Path

import pytest
from faults_support import TESTS, assert_nothing_left, fault_env, loaderdoc, run_tagged

from loaderdoc.base.errors import EXIT_OK, EXIT_PROBE_FAILED, EXIT_USAGE
from loaderdoc.base.visible import visible

TRAIN = """\
import torch
from torch.utils.data import DataLoader, TensorDataset

for _ in DataLoader(TensorDataset(torch.arange(64.0)), batch_size=8):
    pass
"""

# Imports no torch (a process of ~0.2 CPU-s, not ~1.5): for the tests whose subject is how the
# launcher shows or files the command line it ran. watch and tune take the command line from their
# own argv and show it, cut short or whole, and write their reports, the same whether the command
# iterated a DataLoader or not (then they say none was iterated, and exit as before).
NO_LOADER = "pass\n"


def mode_of(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def with_umask(mask: int) -> list[str]:
    return ["sh", "-c", f'umask {mask:03o} && exec "$@"', "sh"]


# ---- files created 0600 ------------------------------------------------------------------------
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o000])
@pytest.mark.parametrize("name", ["a.toml", "a.yaml", "a.json", "a.py", "l.yaml --format lightning",
                                  "h.yaml --format hydra", "f.yaml --format hf"])
def test_every_export_format_is_created_0600_whatever_the_umask(tmp_path, mask, name):
    path, *fmt = name.split()
    proc = loaderdoc("--export", str(tmp_path / path), *fmt, prefix=with_umask(mask))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert mode_of(tmp_path / path) == 0o600


@pytest.mark.parametrize("mask", [0o022, 0o077])
def test_watch_reports_and_fixes_holding_the_command_line_are_0600(tmp_path, mask):
    (tmp_path / "train.py").write_text(TRAIN)
    (tmp_path / "apply.toml").write_text("[dataloader]\nnum_workers = 1\n")  # a change: --fixes is written
    proc = loaderdoc("watch", "--report", "run.json", "--apply", "apply.toml", "--fixes", "next.toml", "--",
                     sys.executable, "train.py", "--token=hunter2", cwd=tmp_path, prefix=with_umask(mask))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "hunter2" in (tmp_path / "run.json").read_text()
    assert "hunter2" in (tmp_path / "next.toml").read_text()
    assert mode_of(tmp_path / "run.json") == 0o600
    assert mode_of(tmp_path / "next.toml") == 0o600


def test_a_tune_report_holding_the_command_line_is_0600(tmp_path):
    # the report's mode, not its trials: NO_LOADER (tune writes the report, command line and all,
    # the same way after a trial that measured nothing)
    (tmp_path / "train.py").write_text(NO_LOADER)
    proc = loaderdoc("tune", "--budget", "10", "--report", "tune.json", "--", sys.executable, "train.py",
                     "--token=hunter2", cwd=tmp_path, prefix=with_umask(0o022))
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr  # nothing measured; the report is written
    assert "hunter2" in (tmp_path / "tune.json").read_text()
    assert mode_of(tmp_path / "tune.json") == 0o600


@pytest.mark.parametrize("existing", [0o600, 0o640, 0o644, 0o604])
def test_force_keeps_the_mode_of_the_file_it_replaces(tmp_path, existing):
    for args in (["--export", "a.toml", "--force"],
                 # a file watch did not write is replaced only with --force (issue 49)
                 ["watch", "--report", "a.toml", "--force", "--", sys.executable, "-c", "pass"]):
        target = tmp_path / "a.toml"
        target.write_text("old\n")
        target.chmod(existing)
        proc = loaderdoc(*args, cwd=tmp_path, prefix=with_umask(0o022))
        assert proc.returncode == EXIT_OK, proc.stderr
        assert target.read_text() != "old\n"
        assert mode_of(target) == existing, args


# ---- control characters in data ----------------------------------------------------------------
# every C0 control but NUL (no argument or file name can hold it) and "/", DEL, C1, and the
# bidirectional controls that reorder a line; newline and tab are text
CONTROLS = ([chr(c) for c in range(1, 32) if chr(c) not in "\n\t"] + ["\x7f"] + [chr(c) for c in range(0x80, 0xa0)]
            + ["\u061c", "\u200e", "\u200f", *map(chr, range(0x202a, 0x202f)), *map(chr, range(0x2066, 0x206a))])


def obeyable(text: str) -> list[str]:
    """The characters of ``text`` a terminal would act on (judged by Unicode, not by loaderdoc)."""
    return sorted({ch for ch in text if ch not in "\n\t"
                   and (unicodedata.category(ch) == "Cc" or unicodedata.category(ch) == "Cf" and (
                        unicodedata.bidirectional(ch) in ("LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI")
                        or unicodedata.name(ch, "") in ("LEFT-TO-RIGHT MARK", "RIGHT-TO-LEFT MARK", "ARABIC LETTER MARK")))})


def hostile_words(seed: int, count: int = 4) -> list[str]:
    """Real sequences (a title change, a colour, a screen clear, C1's CSI), then words carrying
    every control character between them in a shuffled order."""
    rng = random.Random(seed)
    chars = CONTROLS[:]
    rng.shuffle(chars)
    words = [f"w{i}" + "".join(chars[i::count]) + "x" for i in range(count)]
    return ["\x1b]0;PWNED\x07", "\x1b[31mRED\x1b[0m", "\x1b[2J", "\x9b6n", *words]  # first: kept when cut short


def assert_shown_not_obeyed(output: str, words: list[str]) -> None:
    assert not obeyable(output), [hex(ord(c)) for c in obeyable(output)]
    assert "\\x1b]0;P" in output  # the title change, shown (a summary cuts a long command short)


def test_visible_escapes_every_obeyable_character_and_nothing_else():
    # exhaustive over the planes where controls live: the property the output layer rests on
    for code in [*range(0, 0x3000), *range(0xfe00, 0x10000)]:
        ch = chr(code)
        shown = visible(ch)
        assert not obeyable(shown), hex(code)
        if not obeyable(ch):
            assert shown == ch, hex(code)  # text (newline, tab, accents, CJK) is left as it is


@pytest.mark.parametrize("seed", range(3))
def test_watch_summary_shows_a_hostile_command_line_escaped(tmp_path, seed):
    # the summary's command line, not its loaders: NO_LOADER (its first line, the command cut
    # short, is the same; the loader lines below it carry nothing of the command line)
    (tmp_path / "train.py").write_text(NO_LOADER)
    words = hostile_words(seed)
    # the interpreter by its short name: the summary cuts a long command short, and a clone's venv
    # path (/tmp/ci/loaderdoc/.venv/bin/python3) would leave none of the words in it
    env, _ = fault_env({"PATH": os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")})
    proc = loaderdoc("watch", "--", os.path.basename(sys.executable), "train.py", *words, cwd=tmp_path, env=env)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "loaderdoc watch: " in proc.stderr
    assert_shown_not_obeyed(proc.stdout + proc.stderr, words)


@pytest.mark.parametrize("seed", range(2))
def test_tune_text_shows_a_hostile_command_line_escaped(tmp_path, seed):
    # the command line tune shows whole (on stdout and stderr), not its trials: NO_LOADER
    (tmp_path / "train.py").write_text(NO_LOADER)
    words = hostile_words(seed)
    proc = loaderdoc("tune", "--budget", "10", "--", sys.executable, "train.py", *words, cwd=tmp_path)
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    assert_shown_not_obeyed(proc.stdout + proc.stderr, words)


@pytest.mark.parametrize("seed", range(3))
def test_check_shows_a_hostile_config_file_name_escaped(tmp_path, seed):
    name = "".join(hostile_words(seed)).replace("/", "") + ".toml"
    (tmp_path / name).write_text("[dataloader]\nnum_workers = 2\n")
    proc = loaderdoc("check", "--config", name, cwd=tmp_path)
    assert proc.returncode in (0, 1, 2), proc.stderr
    assert visible(name) in proc.stdout
    assert_shown_not_obeyed(proc.stdout + proc.stderr, [])
    missing = loaderdoc("check", "--config", "no" + name, cwd=tmp_path)  # the error line quotes the name
    assert missing.returncode == EXIT_USAGE
    assert_shown_not_obeyed(missing.stderr, [])


def test_probe_text_shows_a_hostile_dataset_error_escaped(tmp_path):
    words = hostile_words(0)
    (tmp_path / "hostile_data.py").write_text(
        "import torch\n\n\nclass Bad(torch.utils.data.Dataset):\n    def __len__(self):\n        return 64\n\n"
        f"    def __getitem__(self, i):\n        raise ValueError({' '.join(words)!r})\n\n\n"
        "def make():\n    return Bad()\n")
    env, _ = fault_env(pythonpath=[str(tmp_path)])
    proc = loaderdoc("probe", "--dataset", "hostile_data:make", "--budget", "4", "--no-progress", env=env)
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    assert "ValueError" in proc.stdout
    assert_shown_not_obeyed(proc.stdout + proc.stderr, words)


FREE_TEXT = {"command", "cause", "evidence", "fix", "symptom", "threshold", "class", "hostname", "hostnames",
             "source", "unknown", "value", "purpose", "reason", "site", "label", "path", "torch", "ram"}


def hostile_report(fixture: str, seed: int, out: Path) -> Path:
    """A shipped report with control characters added to every free-text field."""
    rng = random.Random(seed)

    def spoil(doc, key=None):
        if isinstance(doc, dict):
            return {k: spoil(v, k) for k, v in doc.items()}
        if isinstance(doc, list):
            return [spoil(v, key) for v in doc]
        if isinstance(doc, str) and key in FREE_TEXT:
            return doc + "\x1b]0;PWNED\x07" + "".join(rng.sample(CONTROLS, 5))
        return doc

    out.write_text(json.dumps(spoil(json.loads((TESTS / "fixtures" / fixture).read_text()))))
    return out


REPORTS = ["watch/healthy.json", "watch/starved-timeline.json", "job/two-nodes.json", "tune/io-bound.json"]


@pytest.mark.parametrize("fixture", REPORTS)
def test_a_report_opened_without_a_terminal_prints_its_fields_escaped(tmp_path, fixture):
    report = hostile_report(fixture, 1, tmp_path / "r.json")
    env, tag = fault_env()
    proc = run_tagged([sys.executable, "-m", "loaderdoc", "--report", str(report)], tag, stdin=subprocess.DEVNULL,
                      capture_output=True, text=True, env=env, timeout=60)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert_shown_not_obeyed(proc.stdout + proc.stderr, [])


def run_app_in_a_terminal(args: list[str], until: bytes, timeout: float = 60.0) -> tuple[int, bytes]:
    """``loaderdoc ARGS`` on a real pseudo-terminal: every byte it wrote, read until ``until``
    has been drawn; then ctrl+q; its exit code."""
    import pty

    env, tag = fault_env({"TERM": "xterm-256color", "COLUMNS": "160", "LINES": "50"})
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execve(sys.executable, [sys.executable, "-m", "loaderdoc", *args], env)
    out = b""
    deadline = time.monotonic() + timeout
    try:
        while until not in out and time.monotonic() < deadline:
            if select.select([fd], [], [], 1.0)[0]:
                out += os.read(fd, 1 << 16)
        assert until in out, f"the app never drew {until!r}"
        os.write(fd, b"\x11")  # ctrl+q
        while True:
            try:
                chunk = os.read(fd, 1 << 16) if select.select([fd], [], [], 30)[0] else b""
            except OSError:  # EIO: the terminal's last reader is gone
                break
            if not chunk:
                break
            out += chunk
        _, status = os.waitpid(pid, 0)
        pid = 0
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    assert_nothing_left(tag)
    return os.waitstatus_to_exitcode(status), out


@pytest.mark.parametrize("fixture", REPORTS)
def test_the_app_shows_a_reports_escape_sequences_never_obeys_them(tmp_path, fixture):
    report = hostile_report(fixture, 2, tmp_path / "r.json")
    code, drawn = run_app_in_a_terminal(["--report", str(report)], until=b"PWNED")
    assert code == EXIT_OK
    assert b"\x1b]0;PWNED" not in drawn  # the title change the report carried
    assert b"\\x1b]0;PWNED" in drawn  # shown as text instead
    assert b"\xc2\x9b" not in drawn  # nor C1's CSI


def test_the_app_shows_a_config_paths_escape_sequence_never_obeys_it(tmp_path):
    # a folder named with a title change: the app's "read from" line and each setting's source name
    # the file (the path was drawn raw: the terminal obeyed it)
    folder = tmp_path / "runs\x1b]0;PWNED\x07"
    folder.mkdir()
    (folder / "loader.toml").write_text("[dataloader]\nnum_workers = 2\n")
    code, drawn = run_app_in_a_terminal(["--config", str(folder / "loader.toml")], until=b"PWNED")
    assert code == EXIT_OK
    assert b"\x1b]0;PWNED" not in drawn
    assert b"\\x1b]0;PWNED\\x07" in drawn


def test_what_a_dataset_wrote_into_a_probe_reaches_the_app_escaped():
    # a failing configuration's error and traceback, a probe that failed, its progress text: the
    # user's code wrote them; the app gets them through its messages, escaped there
    from loaderdoc.probing.result import ConfigResult, ProbeReport
    from loaderdoc.tui.messages import ProbeFailed, ProbeFinished, ProbeProgress, ProbeResultArrived

    hostile = "bad sample \x1b]0;PWNED\x07 \x9b31m"
    failed = ConfigResult(status="failed", error=hostile, traceback=f"Traceback\n  {hostile}\n")
    shown = [ProbeResultArrived(failed).result.error, ProbeResultArrived(failed).result.traceback,
             ProbeFinished(ProbeReport(results=[failed])).report.results[0].error,
             ProbeFailed(hostile, hostile).error, ProbeFailed(hostile, hostile).detail, ProbeProgress(0.5, hostile).text]
    for text in shown:
        assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text, text
        assert "\\x1b]0;PWNED\\x07" in text
    assert failed.error == hostile  # the probe's own record is left as measured
