"""Presets and the user's --dataset MOD:FACTORY: cheap to list, loud and precise when wrong."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from loaderdoc.base.errors import EXIT_USAGE, UserError
from loaderdoc.probing import workloads
from loaderdoc.probing.workloads import (
    PRESETS,
    DatasetAttributeError,
    DatasetFactoryError,
    DatasetImportError,
    DatasetModuleNotFound,
    DatasetNotCallable,
    DatasetSpecError,
    DatasetTypeError,
    UnknownPresetError,
    WorkloadError,
    find_dataset_module,
    get_preset,
    load_user_dataset,
)

DATASETS = Path(__file__).with_name("probe_datasets")


@pytest.fixture
def userdata(monkeypatch):
    monkeypatch.syspath_prepend(str(DATASETS))


def test_probe_front_modules_do_not_import_torch():
    code = (
        "import sys\n"
        "import loaderdoc.probing.workloads, loaderdoc.commands.probe, loaderdoc.probing.result, loaderdoc.probing\n"
        "from loaderdoc.probing.workloads import PRESETS\n"
        "assert PRESETS['image'].sample_bytes == 3 * 224 * 224\n"
        "print('torch' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_presets_cover_the_kinds_of_loader_the_issue_names():
    assert {"image", "large-image", "tensor", "text", "remote"} <= set(PRESETS)
    for name, spec in PRESETS.items():
        assert spec.name == name and spec.description
        spec.check()
    assert PRESETS["remote"].io_ms > 5 * PRESETS["remote"].cpu_ms_nogil  # I/O-bound
    assert PRESETS["tensor"].in_memory and PRESETS["tensor"].serial_ms_per_sample == 0
    assert PRESETS["text"].variable_length
    assert PRESETS["large-image"].sample_bytes >= 1024 * 1024


def test_overrides_are_checked():
    spec = PRESETS["image"].with_overrides(sample_shape=(3, 64, 64), io_ms=5, cpu_ms_gil=None)
    assert spec.sample_shape == (3, 64, 64) and spec.io_ms == 5 and spec.cpu_ms_gil == PRESETS["image"].cpu_ms_gil
    with pytest.raises(WorkloadError, match="io_ms must be >= 0"):
        PRESETS["image"].with_overrides(io_ms=-1)
    with pytest.raises(WorkloadError, match="unknown workload field"):
        PRESETS["image"].with_overrides(colour="red")


def test_unknown_preset_suggests_the_close_one():
    with pytest.raises(UnknownPresetError, match="did you mean 'image'"):
        get_preset("imag")
    assert issubclass(UnknownPresetError, UserError)


def test_synthetic_samples_cost_what_the_spec_says():
    from loaderdoc.probing.synthetic import burn_cpu_holding_gil, burn_cpu_releasing_gil

    for burn in (burn_cpu_holding_gil, burn_cpu_releasing_gil):
        cpu0 = time.thread_time()
        burn(20)
        assert time.thread_time() - cpu0 >= 0.019
    spec = PRESETS["remote"].with_overrides(io_ms=30, cpu_ms_nogil=0, length=10)
    dataset, collate = spec.build()
    assert collate is None and len(dataset) == 10
    started = time.perf_counter()
    sample, label = dataset[3]
    assert time.perf_counter() - started >= 0.029
    assert tuple(sample.shape) == spec.sample_shape and label == 3
    with pytest.raises(IndexError):
        dataset[10]


def test_text_preset_pads_variable_lengths():
    spec = PRESETS["text"].with_overrides(cpu_ms_gil=0, length=50)
    dataset, collate = spec.build()
    batch = collate([dataset[i] for i in range(8)])
    lengths = batch["lengths"].tolist()
    assert len(set(lengths)) > 1  # really variable
    assert batch["input_ids"].shape == (8, max(lengths))
    assert batch["labels"].tolist() == [i % 10 for i in range(8)]


def test_spiky_preset_spikes_on_a_fixed_share_of_samples():
    from loaderdoc.probing.synthetic import _mix

    spec = PRESETS["spiky"]
    spiky = sum(1 for i in range(10_000) if _mix(i) % spec.io_spike_every == 0)
    assert 200 < spiky < 800  # about 1 in 25


def test_load_user_dataset_plain_and_with_collate(userdata):
    dataset, collate = load_user_dataset("probe_userdata:make")
    assert len(dataset) == 512 and collate is None
    dataset, collate = load_user_dataset("probe_userdata:make_with_collate")
    assert callable(collate)
    dataset, collate = load_user_dataset("probe_userdata:make_iterable")
    assert collate is None


def test_load_user_dataset_from_the_current_directory(tmp_path, monkeypatch):
    (tmp_path / "mydata.py").write_text("def build():\n    return list(range(10))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    dataset, _ = load_user_dataset("mydata:build")
    assert dataset == list(range(10))


@pytest.mark.parametrize(
    ("spec", "error", "needle"),
    [
        ("probe_userdata", DatasetSpecError, "expected MODULE:FACTORY"),
        ("probe_userdata:", DatasetSpecError, "expected MODULE:FACTORY"),
        ("no_such_module_xyz:make", DatasetModuleNotFound, "no module named 'no_such_module_xyz'"),
        ("probe_broken_import:make", DatasetImportError, "RuntimeError: config.yaml missing"),
        ("probe_missing_dep:make", DatasetImportError, "not installed"),
        ("probe_userdata:mak", DatasetAttributeError, "did you mean 'make'"),
        ("probe_userdata:NOT_CALLABLE", DatasetNotCallable, "is a int, not a callable"),
        ("probe_userdata:factory_raises", DatasetFactoryError, "FileNotFoundError: /data/train does not exist"),
        ("probe_userdata:returns_int", DatasetTypeError, "returned int, not a Dataset"),
        ("probe_userdata:returns_none", DatasetTypeError, "returned NoneType, not a Dataset"),
        ("probe_userdata:returns_bad_collate", DatasetTypeError, "must be a collate function"),
        ("probe_userdata:returns_empty", DatasetTypeError, "empty"),
    ],
)
def test_bad_dataset_values_are_one_line_user_errors(userdata, spec, error, needle):
    with pytest.raises(error) as info:
        load_user_dataset(spec)
    message = str(info.value)
    assert needle in message
    assert "\n" not in message
    assert isinstance(info.value, UserError) and info.value.exit_code == EXIT_USAGE


@pytest.mark.parametrize(("spec", "missing"), [("no_such_module_xyz:make", "no_such_module_xyz"),
                                               ("no_such_pkg_xyz.data:make", "no_such_pkg_xyz"),
                                               ("json.no_such_xyz:make", "json.no_such_xyz")])
def test_a_module_nowhere_to_import_is_said_before_anything_is_imported(spec, missing):
    # the probe command asks this before torch's seconds of import: a typo costs no wait
    with pytest.raises(DatasetModuleNotFound, match=f"no module named '{missing}'"):
        find_dataset_module(spec)


def test_a_module_that_is_there_is_left_to_the_import(userdata):
    for spec in ("probe_userdata:make", "probe_broken_import:make", "probe_missing_dep:make", "json:loads"):
        find_dataset_module(spec)  # found (or failing only when imported): the import explains
    assert "probe_broken_import" not in sys.modules  # looking did not import it


def test_factory_traceback_is_kept_for_whoever_wants_it(userdata):
    with pytest.raises(DatasetFactoryError) as info:
        load_user_dataset("probe_userdata:factory_raises")
    assert "factory_raises" in info.value.details


def test_parse_dataset_spec():
    assert workloads.parse_dataset_spec("a.b.c:make") == ("a.b.c", "make")
    with pytest.raises(DatasetSpecError):
        workloads.parse_dataset_spec("a:b:c")
