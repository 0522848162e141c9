"""Probe edge cases, through `python -m loaderdoc probe` as a user runs it: a training step too long
for the budget, an endless IterableDataset, a dataset that starts processes in their own session.

As in test_faults_workers.py, each test asserts the exit code, the message and that no process the
command started survives it (tests/faults_support.py finds them by an environment tag, in any
session, even reparented to init).
"""

from __future__ import annotations

import json

from faults_support import loaderdoc, one_line_error

from loaderdoc.errors import EXIT_OK, EXIT_USAGE


# ---- a long training step -------------------------------------------------------------------
def test_a_budget_too_short_for_the_training_step_says_so_in_one_line():
    # measuring one configuration takes at least 3 steps (after the first batch, in the warm-up,
    # in the steady window): 9 s of 3 s steps do not fit 6 s. The step-blind watchdog (7.9 s at
    # this budget) used to kill that healthy run: exit 4 and a worker-hung finding on the dataset.
    proc = loaderdoc("probe", "--dataset", "faults_data:make_slow", "--batch-size", "8", "--step-ms", "3000",
                     "--budget", "6", "--no-progress", "--json")
    line = one_line_error(proc, EXIT_USAGE, "6 s probe budget is too short for a 3000 ms training step",
                          "--budget")
    assert "hang" not in line and "dataset" not in line
    assert proc.stdout == ""


def test_a_long_training_step_that_fits_the_budget_is_measured():
    proc = loaderdoc("probe", "--dataset", "faults_data:make_slow", "--batch-size", "8", "--step-ms", "2000",
                     "--budget", "7", "--no-progress", "--json")
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    first = doc["results"][0]
    assert first["status"] == "ok", first["error"]
    assert first["step_ms_achieved"] >= 2000
    # loading 8 samples in 160 ms cannot starve a 2 s step: workers would not help
    assert doc["recommended"]["num_workers"] == 0
    assert not {"worker-hung", "worker-crashed"} & {f["rule_id"] for f in doc["findings"]}
