"""torch's intra-op thread count, read from the environment without importing torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from loaderdoc.system.detect import detect
from loaderdoc.system.facts import MachineFacts, Reading
from loaderdoc.system.fixtures import load_machine
from loaderdoc.system.machine_schema import MachineFileError, validate_machine
from loaderdoc.system.threads import read_intra_op_threads

AFFINITY_64 = Reading.of(list(range(64)), "os.sched_getaffinity(0)")
PHYSICAL_32 = Reading.of(32, "topology")


def threads(env, affinity=AFFINITY_64, physical=PHYSICAL_32):
    return read_intra_op_threads(env, affinity, physical)


def test_unset_is_torch_default_one_per_cpu_of_the_affinity_set():
    r = threads({}, physical=Reading.of(64, "topology"))
    assert (r.value, r.known) == (64, True)
    assert "affinity set, 64" in r.source


def test_the_default_is_capped_at_the_physical_cores():
    r = threads({})
    assert r.value == 32 and "32 physical cores" in r.source


@pytest.mark.parametrize(("raw", "expected"), [("8", 8), ("4,2", 4), (" 3 ", 3)])
def test_omp_num_threads_first_value_sizes_the_pool(raw, expected):
    r = threads({"OMP_NUM_THREADS": raw})
    assert r.value == expected and r.source == f"OMP_NUM_THREADS={raw}"


@pytest.mark.parametrize("raw", ["abc", "0", "", "-2", "3x"])
def test_an_invalid_omp_num_threads_is_unknown_with_the_reason(raw):
    r = threads({"OMP_NUM_THREADS": raw})
    assert not r.known and r.get() is None
    assert f"OMP_NUM_THREADS={raw!r}" in r.unknown


def test_mkl_num_threads_wins_over_omp_num_threads():
    r = threads({"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1"})
    assert r.value == 1 and r.source.startswith("MKL_NUM_THREADS=1") and "OMP_NUM_THREADS=2" in r.source


def test_mkl_dynamic_false_lifts_the_physical_core_cap_and_only_false_does():
    assert threads({"OMP_NUM_THREADS": "48"}).value == 32
    assert threads({"OMP_NUM_THREADS": "48", "MKL_DYNAMIC": "0"}).value == 32
    assert threads({"OMP_NUM_THREADS": "48", "MKL_DYNAMIC": "FALSE"}).value == 48


def test_no_affinity_read_is_unknown():
    r = threads({}, affinity=Reading.missing("not on this OS", "os.sched_getaffinity"))
    assert not r.known and "not on this OS" in r.unknown


def test_detect_reads_it_from_the_env_it_is_given():
    assert detect(env={"OMP_NUM_THREADS": "1"}).torch.intra_op_threads.value == 1
    assert not detect(env={"OMP_NUM_THREADS": "abc"}).torch.intra_op_threads.known


def test_a_machine_recorded_without_the_reading_loads_as_not_recorded():
    facts = load_machine("k8s-4cpu-quota")
    r = facts.torch.intra_op_threads
    assert not r.known and "not recorded" in r.unknown
    # and a recording that has it keeps it
    data = facts.to_dict()
    data["torch"]["intra_op_threads"] = {"value": 32, "source": "OMP_NUM_THREADS=32", "unknown": None}
    validate_machine(data)
    assert MachineFacts.from_dict(data).torch.intra_op_threads.get() == 32
    data["torch"]["intra_op_threads"]["value"] = 0
    with pytest.raises(MachineFileError, match="torch.intra_op_threads"):
        validate_machine(data)


PROBE = ("import json, torch; from loaderdoc.system.detect import detect; "
         "print(json.dumps([detect().torch.intra_op_threads.get(), torch.get_num_threads()]))")


@pytest.mark.parametrize("env", [{}, {"OMP_NUM_THREADS": "16"}, {"OMP_NUM_THREADS": "2", "MKL_NUM_THREADS": "1"}],
                         ids=["unset", "omp-16", "mkl-over-omp"])
def test_the_reading_is_what_the_installed_torch_runs(env):
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DYNAMIC")}
    out = subprocess.run([sys.executable, "-c", PROBE], env={**clean, **env}, capture_output=True, text=True,
                         timeout=120, check=True)
    predicted, actual = json.loads(out.stdout.strip().splitlines()[-1])
    assert predicted == actual
