"""``loaderdoc watch --trace DIR`` (issue 34): a torch.profiler trace of a few steady steps of a
real training loop, read back with the standard JSON reader; and the faults of its folder and
options, through the real command."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from faults_support import fault_env, loaderdoc, namespaces_usable, one_line_error

from loaderdoc.base.errors import EXIT_USAGE

pytest.importorskip("torch")

LOOP = str(Path(__file__).resolve().parent / "watch_loops" / "tiny_model.py")
WAIT, STEP = "loaderdoc: data wait", "loaderdoc: step"


def _watch(*args: str, loop_args: tuple[str, ...] = (), prefix=None):
    env, _ = fault_env()
    proc = loaderdoc("watch", "--json", *args, "--", sys.executable, LOOP, *loop_args, env=env, prefix=prefix)
    report = json.loads(proc.stdout[proc.stdout.index("{\n"):]) if "{\n" in proc.stdout else None
    return proc, report


def test_a_trace_of_the_steady_steps_holds_the_waits_and_the_steps_ops(tmp_path):
    folder = tmp_path / "traces"  # created by --trace
    proc, report = _watch("--trace", str(folder), "--trace-steps", "6")
    assert proc.returncode == 0, proc.stderr
    (trace,) = report["traces"]
    assert trace["state"] == "written" and trace["steps"] == 6 and trace["from_batch"] == 12, trace
    assert [p.name for p in folder.iterdir()] == [Path(trace["path"]).name]  # no temporary file left
    assert Path(trace["path"]).stat().st_mode & 0o777 == 0o600  # owner only, as every file loaderdoc writes
    events = json.loads(Path(trace["path"]).read_text(encoding="utf-8"))["traceEvents"]
    ranges = [e for e in events if e.get("ph") == "X"]
    waits = [e for e in ranges if e["name"] == WAIT]
    steps = [e for e in ranges if e["name"] == STEP]
    assert len(waits) == 6 and len(steps) == 6
    # the step's own ops fall inside the step ranges, none inside a wait
    mms = [e for e in ranges if e["name"] == "aten::mm"]
    assert mms

    def inside(op, spans):
        return any(s["ts"] <= op["ts"] and op["ts"] + op["dur"] <= s["ts"] + s["dur"] for s in spans)

    assert all(inside(op, steps) for op in mms)
    assert not any(inside(op, waits) for op in mms)
    # waits and steps alternate, each wait before its step
    order = sorted(waits + steps, key=lambda e: e["ts"])
    assert [e["name"] for e in order] == [WAIT, STEP] * 6
    # the cost is said, and the profiler's start and export are not in the loader's step time
    text = " ".join(proc.stderr.split())
    assert f"trace: {trace['path']}: 6 steps of loader 1 from batch 12" in text
    assert "left out of the step times" in text
    assert trace["step_per_batch_before_s"] > 0 and trace["step_per_batch_traced_s"] > 0
    assert trace["start_s"] > 0 and trace["export_s"] > 0


def test_a_run_too_short_for_the_trace_says_so_and_keeps_its_exit_code(tmp_path):
    proc, report = _watch("--trace", str(tmp_path), loop_args=("--batches", "8"))
    assert proc.returncode == 0, proc.stderr
    (trace,) = report["traces"]
    assert trace["state"] == "waiting" and trace["path"] is None
    assert "trace: not recorded: it starts after 10 steady batches of an epoch, and the longest epoch had 7" \
        in " ".join(proc.stderr.split())
    assert list(tmp_path.iterdir()) == []


def test_a_program_running_its_own_profiler_is_traced_by_it_not_by_loaderdoc(tmp_path):
    proc, report = _watch("--trace", str(tmp_path), loop_args=("--own-profiler",))
    assert proc.returncode == 0, proc.stderr
    (trace,) = report["traces"]
    # (torch 2.13 lets a second profiler start, and the program's own then records nothing)
    assert trace["state"] == "failed" and "runs its own torch profiler" in trace["error"], trace
    assert "trace: not written: the program runs its own torch profiler" in " ".join(proc.stderr.split())
    assert report["loaders"][0]["totals"]["steps"] == 40  # the run went on, measured
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("make, args, needles", [
    (lambda d: (d / "f").write_text("x"), ("--trace", "{d}/f"), ("is a file, not a folder",)),
    (lambda d: None, ("--trace", "{d}/no/such"), ("does not exist", "create it first")),
    (lambda d: None, ("--trace", ""), ("--trace needs a folder",)),
    (lambda d: None, ("--trace-steps", "3"), ("--trace-steps goes with --trace",)),
    (lambda d: None, ("--trace", "{d}", "--trace-steps", "0"), ("--trace-steps", "must be >= 1")),
    (lambda d: None, ("--trace", "{d}", "--trace-steps", "ten"), ("--trace-steps", "expected a whole number")),
], ids=["a-file", "missing-parent", "empty", "steps-alone", "zero-steps", "steps-not-a-number"])
def test_a_bad_trace_request_is_one_line_before_the_command_runs(tmp_path, make, args, needles):
    make(tmp_path)
    marker = tmp_path / "ran"
    env, _ = fault_env()
    proc = loaderdoc("watch", *(a.format(d=tmp_path) for a in args), "--", sys.executable, "-c",
                     f"open({str(marker)!r}, 'w')", env=env)
    one_line_error(proc, EXIT_USAGE, *needles)
    assert not marker.exists()


def test_a_command_that_cannot_start_leaves_no_trace_folder(tmp_path):
    # --trace creates its folder; a command that is not there is refused before that
    folder = tmp_path / "traces"
    env, _ = fault_env()
    proc = loaderdoc("watch", "--trace", str(folder), "--", str(tmp_path / "no-such-program"), env=env)
    one_line_error(proc, EXIT_USAGE, "command not found")
    assert not folder.exists()


def test_trace_goes_with_a_command_not_with_merge(tmp_path):
    report = tmp_path / "r.json"
    report.write_text("{}")
    proc = loaderdoc("watch", "--merge", str(report), "--trace", str(tmp_path))
    one_line_error(proc, EXIT_USAGE, "--trace go with a command to run")


NS_REASON = namespaces_usable()


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_a_read_only_trace_folder_is_refused_as_root_too(tmp_path):
    # a read-only tmpfs over the folder (root passes every permission check: only a real write tells)
    folder = tmp_path / "ro"
    folder.mkdir()
    marker = tmp_path / "ran"
    env, _ = fault_env()
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs -o ro,size=1m tmpfs {folder} && exec "$@"', "sh"]
    proc = loaderdoc("watch", "--trace", str(folder), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')",
                     env=env, prefix=prefix)
    one_line_error(proc, EXIT_USAGE, f"--trace {folder}: cannot write into it", "Read-only file system")
    assert not marker.exists()
    assert os.listdir(folder) == []


FILLS_THE_DISK = """\
import sys
import torch
from torch.utils.data import DataLoader

try:  # the disk fills while the run goes on
    with open(sys.argv[1], "wb") as fh:
        while True:
            fh.write(b"x" * 4096)
            fh.flush()
except OSError:
    pass
for batch in DataLoader(torch.arange(400), batch_size=4):
    torch.randn(32, 32) @ torch.randn(32, 32)
"""


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_a_trace_onto_a_disk_that_filled_says_the_disk_is_full(tmp_path):
    """Was: "the trace was not written: [Errno 2] No such file or directory: '.../trace.json'"."""
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "fill.py"
    script.write_text(FILLS_THE_DISK, encoding="utf-8")
    env, _ = fault_env()
    prefix = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
              f'mount -t tmpfs -o size=1m tmpfs {disk} && mkdir {disk}/traces && exec "$@"', "sh"]
    proc = loaderdoc("watch", "--json", "--trace", str(disk / "traces"), "--", sys.executable, str(script),
                     str(disk / "fill"), env=env, prefix=prefix)
    assert proc.returncode == 0, proc.stderr[-2000:]
    report = json.loads(proc.stdout[proc.stdout.index("{\n"):])
    (trace,) = report["traces"]
    assert trace["state"] == "failed", trace
    assert trace["error"].startswith(f"the disk holding {disk / 'traces'} is full (")
    assert trace["error"].endswith("free); free some space or give --trace another folder")
    assert "No such file or directory" not in proc.stderr


OWN_PROFILER_LATER = """\
import sys
import torch
from torch.utils.data import DataLoader

prof = None
for i, batch in enumerate(DataLoader(torch.arange(400), batch_size=4)):
    torch.randn(32, 32) @ torch.randn(32, 32)
    if i == 14:  # inside loaderdoc's traced window (it starts after 10 steady batches)
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
        prof.start()
    if i == 40:
        prof.stop()
        prof.export_chrome_trace(sys.argv[1])
print("done")
"""


def test_a_program_starting_its_own_profiler_inside_the_window_ends_ours_first(tmp_path):
    """Was: the program segfaulted (exit 139), then "no DataLoader was iterated"."""
    script = tmp_path / "own.py"
    script.write_text(OWN_PROFILER_LATER, encoding="utf-8")
    mine = tmp_path / "mine.json"
    env, _ = fault_env()
    proc = loaderdoc("watch", "--json", "--trace", str(tmp_path / "tr"), "--", sys.executable, str(script), str(mine),
                     env=env)
    assert proc.returncode == 0 and "done" in proc.stdout, proc.stderr[-2000:]
    assert json.loads(mine.read_text())["traceEvents"]  # the program's own trace, whole
    report = json.loads(proc.stdout[proc.stdout.index("{\n"):])
    (trace,) = report["traces"]
    assert trace["state"] == "written" and 0 < trace["steps"] < 10, trace
    assert trace["cut_short"] == f"the program started its own torch.profiler after {trace['steps']} steps"
    assert any(e.get("name") == WAIT for e in json.loads(Path(trace["path"]).read_text())["traceEvents"])
