"""Fault: a real, small /dev/shm (16 MiB tmpfs in a private mount namespace) and 48 MiB batches.

torch's workers really fail here ("unable to allocate shared memory(shm) ... No space left on
device"). `loaderdoc probe` must report it as the shm-too-small finding with its fix, and
`loaderdoc check` with the same batch must have predicted it. Needs root for `unshare --mount`
and `mount`; skipped with the reason elsewhere.
"""

from __future__ import annotations

import json

import pytest
from faults_support import fault_env, in_small_shm, loaderdoc, namespaces_usable

from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import EXIT_CRITICAL, EXIT_OK

REASON = namespaces_usable()
pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

BATCH = ["--batch-size", "16", "--sample-shape", "3x1024x1024", "--dtype", "uint8"]  # 48 MiB batches
# the probe stops once settled (3-6 s here, even beside 14 busy processes); the budget is only its cap.
# 10 s was not always enough beside the suite's other workers (CI at fe94651: "Findings: none", so no
# worker run failed: the slow 0-worker baseline of 48 MiB batches left no budget for one, as we read it)
BUDGET = ["--budget", "60"]


def shm_findings(doc: dict) -> list[dict]:
    return [f for f in doc["findings"] if f["rule_id"] == "shm-too-small"]


def test_check_predicts_the_failure_before_any_probe(tmp_path):
    env, _ = fault_env()
    proc = loaderdoc("check", *BATCH, "--json", env=env, prefix=in_small_shm())
    doc = json.loads(proc.stdout)
    assert doc["summary"]["shm_free_bytes"] <= 16 * 1024**2  # really the small tmpfs
    assert proc.returncode == EXIT_CRITICAL == doc["exit_code"], proc.stderr
    (shm,) = shm_findings(doc)
    assert shm["severity"] == "critical"
    assert "48 MiB" in " ".join(shm["evidence"]) and "--shm-size" in shm["fix"]
    # the same with the settings in a config file: critical, with a change that fits
    cfg = tmp_path / "train.toml"
    cfg.write_text("[dataloader]\nbatch_size = 16\nnum_workers = 2\n")
    env, _ = fault_env()
    proc = loaderdoc("check", "--config", str(cfg), "--sample-shape", "3x1024x1024", "--json",
                     env=env, prefix=in_small_shm())
    doc = json.loads(proc.stdout)
    assert proc.returncode == EXIT_CRITICAL, proc.stderr
    (shm,) = shm_findings(doc)
    assert shm["severity"] == "critical" and shm["settings_change"]["num_workers"] == 0


def test_probe_hits_the_real_shm_failure_and_reports_the_shm_finding(tmp_path):
    out = tmp_path / "loader.toml"
    env, _ = fault_env()
    proc = loaderdoc("probe", "--dataset", "faults_data:make_big", *BATCH, "--step-ms", "0", *BUDGET,
                     "--json", "--no-progress", "--export", str(out), env=env, prefix=in_small_shm())
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    failed = [r for r in doc["results"] if r["status"] == "failed"]
    assert failed, "no worker configuration failed: was /dev/shm really small?"
    assert any("shared memory" in r["error"] or "Bus error" in r["error"] for r in failed), failed[0]["error"]
    assert all(r["settings"]["num_workers"] > 0 for r in failed)
    # the recommendation avoids what crashed: load in the main process
    assert doc["recommended"]["num_workers"] == 0
    (shm,) = shm_findings(doc)
    assert "shared memory" in shm["symptom"]
    assert "--shm-size" in shm["fix"] and "--ipc=host" in shm["fix"]
    assert any("unable to allocate shared memory" in e for e in shm["evidence"])
    # shm failures are not reported twice as a generic crash
    assert "worker-crashed" not in {f["rule_id"] for f in doc["findings"]}
    text = out.read_text()
    assert tomllib.loads(text)["dataloader"]["num_workers"] == 0
    assert "shm-too-small" in text  # the export header carries the finding


def test_probe_text_output_shows_the_finding_and_its_fix():
    env, _ = fault_env()
    proc = loaderdoc("probe", "--dataset", "faults_data:make_big", *BATCH, "--step-ms", "0", *BUDGET,
                     "--no-progress", env=env, prefix=in_small_shm())
    assert proc.returncode == EXIT_OK, proc.stderr
    flat = " ".join(proc.stdout.split())  # the text wraps to the terminal's width
    findings = flat.split("Findings", 1)[1]
    assert "shm-too-small" in findings and "docker run --shm-size=" in findings, proc.stdout[:3000]
    assert "unable to allocate shared memory" in flat  # the failure itself, in the table's notes
