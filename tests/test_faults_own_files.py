"""Issue 49, family 3 (the user's files): ``watch --report``/``--fixes`` and ``tune --report``
replaced whatever was at their path without ``--force``: the script being run, a results CSV, the
``--apply`` input. Now a file loaderdoc did not write is kept (exit 3, one line, before the command
runs) unless ``--force``; the command's own files and the ``--apply`` input are kept even then; an
earlier report of the same kind is still replaced, as a rerun expects. Through the real command."""

from __future__ import annotations

import json
import sys
import textwrap

from faults_support import loaderdoc, one_line_error

from loaderdoc.base.errors import EXIT_OK, EXIT_USAGE

LOOP = textwrap.dedent("""
    import sys
    from torch.utils.data import DataLoader
    for _ in DataLoader(list(range(8)), batch_size=2):
        pass
    if len(sys.argv) > 1:  # the script writes its results where the report was asked to go
        open(sys.argv[1], "w").write("epoch,loss\\n1,0.5\\n")
""")


def _script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(LOOP)
    return path


def test_watch_never_writes_its_report_over_the_script_it_runs(tmp_path):
    script = _script(tmp_path)
    before = script.read_text()
    proc = loaderdoc("watch", "--report", str(script), "--force", "--", sys.executable, str(script), cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, f"--report {script}: that is a file the command names", "never writes over it")
    assert script.read_text() == before


def test_watch_keeps_a_file_it_did_not_write_unless_forced_and_replaces_its_own_report(tmp_path):
    script = _script(tmp_path)
    results = tmp_path / "results.csv"
    results.write_text("epoch,loss\n1,0.5\n")
    proc = loaderdoc("watch", "--report", str(results), "--", sys.executable, str(script), cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, f"--report {results}: the file exists and is not a loaderdoc watch report",
                   "--force")
    assert results.read_text() == "epoch,loss\n1,0.5\n"
    # an earlier report is replaced as before; --force replaces the CSV
    report = tmp_path / "run.json"
    for _ in range(2):
        proc = loaderdoc("watch", "--report", str(report), "--", sys.executable, str(script), cwd=tmp_path)
        assert proc.returncode == EXIT_OK, proc.stderr
        assert json.loads(report.read_text())["schema"].startswith("loaderdoc.watch/")
    proc = loaderdoc("watch", "--report", str(results), "--force", "--", sys.executable, str(script), cwd=tmp_path)
    assert proc.returncode == EXIT_OK, proc.stderr
    assert json.loads(results.read_text())["schema"].startswith("loaderdoc.watch/")


def test_fixes_never_replace_the_file_they_apply(tmp_path):
    script = _script(tmp_path)
    applied = tmp_path / "next.toml"
    applied.write_text("# my notes: tried on the A100 box\n[dataloader]\nnum_workers = 1\n")
    before = applied.read_text()
    proc = loaderdoc("watch", "--apply", str(applied), "--fixes", str(applied), "--force", "--", sys.executable,
                     str(script), cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, f"--fixes {applied}: that is the --apply input")
    assert applied.read_text() == before


def test_a_file_the_command_made_at_the_report_path_during_the_run_is_kept(tmp_path):
    script = _script(tmp_path)
    report = tmp_path / "out.json"
    proc = loaderdoc("watch", "--report", str(report), "--", sys.executable, str(script), str(report), cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert f"--report {report}: the file exists and is not a loaderdoc watch report" in proc.stderr
    assert report.read_text() == "epoch,loss\n1,0.5\n"


def test_tune_keeps_a_file_it_did_not_write(tmp_path):
    script = _script(tmp_path)
    results = tmp_path / "results.csv"
    results.write_text("epoch,loss\n")
    proc = loaderdoc("tune", "--report", str(results), "--", sys.executable, str(script), cwd=tmp_path)
    one_line_error(proc, EXIT_USAGE, f"--report {results}: the file exists and is not a loaderdoc tune report")
    assert results.read_text() == "epoch,loss\n"
