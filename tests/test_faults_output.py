"""Where the output goes wrong: stdout closed, full, cut off by its reader or unable to encode a
character; exports aimed at devices, pipes and very long names; and a bug inside loaderdoc.

The policy (src/loaderdoc/base/output.py): EPIPE exits 141 quietly, as `cat` does under `head`; any other
failed write to stdout is one line on stderr and exit 3; a bug exits 70. No traceback may ever exit
0, 1 or 2, which `check` uses for "healthy", "warnings" and "critical".
Device files are made in a private mount namespace (a tmpfs over /dev), never the host's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from faults_support import assert_nothing_left, fault_env, loaderdoc, namespaces_usable, one_line_error

from loaderdoc.base.errors import EXIT_BROKEN_PIPE, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE

NS_REASON = namespaces_usable()


def run_with_stdout(args: list[str], stdout, *, env=None, prefix=None) -> subprocess.CompletedProcess:
    """``python -m loaderdoc ARGS`` with stdout given (a closed pipe, a device); stderr captured."""
    if env is None:
        env, _ = fault_env()
    cmd = (prefix or []) + [sys.executable, "-m", "loaderdoc", *args]
    proc = subprocess.run(cmd, stdout=stdout, stderr=subprocess.PIPE, text=True, env=env, timeout=120)
    assert_nothing_left(env["LOADERDOC_FAULT_TAG"])
    return proc


# ---- broken standard output -------------------------------------------------------------------
@pytest.mark.parametrize("args", [
    ["check"],
    ["check", "--json"],
    ["facts", "--json"],
    ["facts"],
    ["tradeoffs"],
    ["tradeoffs", "--json"],
    ["--export", "-"],
    ["probe", "tensor", "--budget", "2", "--no-progress"],
    ["probe", "tensor", "--budget", "2", "--no-progress", "--json"],
])
def test_a_reader_that_went_away_is_a_quiet_exit_141(args):
    # `loaderdoc ... | head -1` where head has already exited: the write gets EPIPE every time
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = run_with_stdout(args, write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == EXIT_BROKEN_PIPE, proc.stderr
    assert proc.stderr == "", proc.stderr  # quietly, as cat does


@pytest.mark.parametrize("args", [["check"], ["facts"], ["tradeoffs"], ["--export", "-"]])
def test_a_closed_stdout_is_one_line_exit_3(args):
    proc = run_with_stdout(args, None, prefix=["sh", "-c", 'exec "$@" >&-', "sh"])
    one_line_error(proc, EXIT_USAGE, "standard output is closed")


@pytest.mark.parametrize("args", [["check"], ["check", "--json"], ["tradeoffs", "--json"], ["--export", "-"]])
def test_stdout_on_a_full_device_is_one_line_exit_3(args):
    with open("/dev/full", "w") as full:  # writing to the host's /dev/full replaces nothing
        proc = run_with_stdout(args, full)
    one_line_error(proc, EXIT_USAGE, "cannot write to standard output", "No space left on device")


def test_a_closed_stdout_does_not_swallow_an_export_file(tmp_path):
    # with fd 1 closed the export's temporary file would become fd 1; it must still be right
    target = tmp_path / "loader.toml"
    proc = run_with_stdout(["--export", str(target)], None, prefix=["sh", "-c", 'exec "$@" >&-', "sh"])
    assert proc.returncode == EXIT_OK, proc.stderr
    assert target.read_text().count("[dataloader]") == 1


def test_an_ascii_only_output_escapes_a_non_ascii_path(tmp_path):
    folder = tmp_path / "données"
    folder.mkdir()
    cfg = folder / "loader.toml"
    cfg.write_text("[dataloader]\nnum_workers = 1\n")
    env, _ = fault_env({"PYTHONIOENCODING": "ascii"})
    proc = loaderdoc("check", "--config", str(cfg), "--machine", "ci-2core", env=env)
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr
    assert "donn\\xe9es" in proc.stdout  # escaped, not a crash, and the rest of the report is there
    assert "status:" in proc.stdout


def test_a_bug_exits_70_with_its_traceback_never_0_1_or_2(tmp_path):
    # a sitecustomize that breaks check's report stands in for a bug in loaderdoc
    (tmp_path / "sitecustomize.py").write_text(
        "import loaderdoc.commands.check as c\n"
        "def broken(args):\n    raise RuntimeError('a bug')\n"
        "c.build_report = broken\n"
    )
    env, _ = fault_env(pythonpath=[str(tmp_path)])
    proc = loaderdoc("check", env=env)
    assert proc.returncode == EXIT_INTERNAL, proc.stderr
    assert "Traceback" in proc.stderr and "RuntimeError: a bug" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("loaderdoc: internal error (exit 70)")


# ---- exports aimed at devices and pipes (a private /dev) --------------------------------------
PRIVATE_DEV = (
    "mount -t tmpfs -o size=1m tmpfs /dev"
    " && mknod -m 666 /dev/null c 1 3 && mknod -m 666 /dev/full c 1 7 && mknod -m 666 /dev/zero c 1 5"
    " && mknod -m 666 /dev/urandom c 1 9 && mknod -m 660 /dev/loop250 b 7 250"
    " && ln -s /proc/self/fd /dev/fd && ln -s /proc/self/fd/1 /dev/stdout && ln -s /proc/self/fd/2 /dev/stderr"
)


def in_private_dev(target: str) -> list[str]:
    """Run the rest with a fresh /dev in a mount namespace, then print what ``target`` is. Its
    output goes through a file of its own (/tmp is shared by the tests running beside it)."""
    script = f'out=$(mktemp) && {PRIVATE_DEV} && "$@" > "$out"; rc=$?; cat "$out"; rm -f "$out"; ' \
             f'echo "KIND: $(stat -c %F {target})"; exit $rc'
    return ["unshare", "--mount", "sh", "-c", script, "sh"]


def kind_after(proc: subprocess.CompletedProcess) -> str:
    return proc.stdout.strip().splitlines()[-1].removeprefix("KIND: ")


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
@pytest.mark.parametrize("force", [[], ["--force"]])
def test_export_to_dev_null_writes_into_the_device(force):
    proc = loaderdoc("--export", "/dev/null", "--format", "toml", *force, prefix=in_private_dev("/dev/null"))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert kind_after(proc) == "character special file"


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_export_to_dev_full_fails_and_keeps_the_device():
    proc = loaderdoc("--export", "/dev/full", "--format", "toml", "--force", prefix=in_private_dev("/dev/full"))
    one_line_error(proc, EXIT_USAGE, "cannot write /dev/full", "No space left on device")
    assert kind_after(proc) == "character special file"


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_export_to_dev_stdout_writes_to_stdout_and_keeps_the_link():
    proc = loaderdoc("--export", "/dev/stdout", "--format", "toml", "--force", prefix=in_private_dev("/dev/stdout"))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "num_workers" in proc.stdout
    assert kind_after(proc) == "symbolic link"


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_export_to_a_block_device_is_refused():
    proc = loaderdoc("--export", "/dev/loop250", "--format", "toml", "--force", prefix=in_private_dev("/dev/loop250"))
    one_line_error(proc, EXIT_USAGE, "/dev/loop250 is a block device")
    assert kind_after(proc) == "block special file"


def test_export_into_a_fifo_is_read_by_its_reader(tmp_path):
    fifo = tmp_path / "settings.fifo"
    os.mkfifo(fifo)
    received: list[str] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_text()))
    reader.start()
    proc = loaderdoc("--export", str(fifo), "--format", "toml")
    reader.join(timeout=60)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert "num_workers" in received[0]
    assert fifo.is_fifo()


# ---- file names at the filesystem's limit ---------------------------------------------------------
@pytest.mark.parametrize("length", [244, 255])
def test_a_long_legal_name_is_written(tmp_path, length):
    target = tmp_path / ("x" * (length - 5) + ".toml")
    proc = loaderdoc("--export", str(target))
    assert proc.returncode == EXIT_OK, proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]  # and no temporary sibling left


def test_a_name_over_the_limit_is_one_line_before_any_work(tmp_path):
    target = tmp_path / ("x" * 251 + ".toml")
    proc = loaderdoc("--export", str(target), "--preset", "tensor", "--budget", "30")
    one_line_error(proc, EXIT_USAGE, "256 bytes", "over this filesystem's 255")
    assert list(tmp_path.iterdir()) == []
