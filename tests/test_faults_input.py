"""Bad input, through `python -m loaderdoc` as a user runs it: config files, flags, `--dataset`
factories and export targets. Each is one line on stderr, exit 3, and nothing written or changed.

Cases already covered elsewhere are listed in docs/faults.md and not repeated here.
"""

from __future__ import annotations

import json
import os

import pytest
from faults_support import fault_env, loaderdoc, namespaces_usable, one_line_error

from loaderdoc.base.errors import EXIT_CRITICAL, EXIT_PROBE_FAILED, EXIT_USAGE
from loaderdoc.system.fixtures import machine_path as load_machine_path

NS_REASON = namespaces_usable()


def short_id(value):
    """Test ids from the first characters: a 200 KB id would reach subprocesses in PYTEST_CURRENT_TEST."""
    return value[:24] if isinstance(value, str) else None


# ---- config files -------------------------------------------------------------------------------
@pytest.mark.parametrize("name, content, needles", [
    ("a.json", '{"num_workers": 4,', ["a.json:1", "not valid JSON"]),
    ("b.json", '{"num_workers": 2, "num_workers": 4}', ["b.json", "duplicate key 'num_workers'"]),
    ("c.yaml", "- 1\n- 2\n", ["c.yaml", "expected a mapping"]),
    ("d.yaml", "num_workers: 4\nnum_workers: 8\n", ["d.yaml:2", "duplicate key 'num_workers'"]),
    ("e.yaml", "dataloader:\n  num_workers: 2\nnum_workers: 3\n", ["both in [dataloader] and at the top level"]),
    ("f.toml", "[dataloader]\nnum_workers = 2\n[dataloader]\nnum_workers = 3\n", ["f.toml", "not valid TOML"]),
    ("g.yaml", "timeout: .nan\n", ["g.yaml:1", "timeout must be a finite number"]),
    ("h.yaml", "timeout: .inf\n", ["timeout must be a finite number"]),
    ("i.yaml", "num_workers: -1\n", ["i.yaml:1", "num_workers must be >= 0"]),
    ("j.yaml", "num_workers: '4'\n", ["num_workers must be a whole number"]),
    ("k.toml", "num_workers = 2.5\n", ["k.toml:1", "num_workers must be a whole number"]),
    ("l.yaml", "batch_size: 99999999999999999999\n", ["batch_size", "absurd"]),
    ("m.yaml", "prefetch_factor: 1000000000\nnum_workers: 2\n", ["prefetch_factor", "absurd"]),
    ("n.yaml", "batch_size: 0\n", ["batch_size must be a positive integer"]),
    ("o.yaml", "multiprocessing_context: threads\nnum_workers: 2\n", ["multiprocessing_context must be one of"]),
    ("p.yaml", "dataloader: 4\n", ["[dataloader] must be a table"]),
    ("q.yaml", "num_workers: .inf\n", ["num_workers must be a whole number"]),
    # [training]: every field checked; "no" is not true, "lots" is not a length
    ("r.toml", "[training]\ndistributed = \"no\"\n", ["r.toml:2", "[training] distributed must be true/false"]),
    ("s.toml", "[training]\ndataset_len = \"lots\"\n", ["s.toml:2", "dataset_len must be a whole number"]),
    ("t.toml", "[training]\ntensors_per_batch = \"2\"\n", ["t.toml:2", "tensors_per_batch must be a whole number"]),
    ("u.yaml", "training:\n  device: gpu\n", ["u.yaml:2", "device must be one of cuda, cpu"]),
    ("v.yaml", "training:\n  dataset_len: 0\n", ["dataset_len must be >= 1"]),
    ("w.toml", "[training]\nbatchnorm = true\n", ["unknown key 'batchnorm'", "did you mean 'uses_batchnorm'"]),
    ("x.toml", "[dataloader]\nnum_workers = 2\n[loader]\nnum_workers = 4\n", ["both [dataloader] and [loader]"]),
    # bounded: what a file may expand to, and how deep it may nest
    ("y.yaml", "a: &a [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8)),
     ["y.yaml:", "YAML aliases expand this value to over 100,000 values"]),
    ("z.yaml", "a: &x [1, *x]\n", ["z.yaml:1", "a YAML alias refers to a value that contains it"]),
    ("deep.json", "[" * 100_000 + "]" * 100_000, ["deep.json", "nested too deeply"]),
    ("deep.toml", "a = " + "[" * 100_000 + "]" * 100_000 + "\n", ["deep.toml", "nested too deeply"]),
], ids=short_id)
def test_bad_config_files_are_one_line_exit_3(tmp_path, name, content, needles):
    cfg = tmp_path / name
    cfg.write_text(content)
    one_line_error(loaderdoc("check", "--machine", "ci-2core", "--config", str(cfg)), EXIT_USAGE, *needles)


def test_unreadable_config_files(tmp_path):
    binary = tmp_path / "x.toml"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    one_line_error(loaderdoc("check", "--config", str(binary)), EXIT_USAGE, "cannot read it")
    folder = tmp_path / "dir.yaml"
    folder.mkdir()
    one_line_error(loaderdoc("check", "--config", str(folder)), EXIT_USAGE, "is a directory")


def test_contradictory_settings_torch_would_refuse_are_critical_findings(tmp_path):
    cfg = tmp_path / "train.yaml"
    cfg.write_text("num_workers: 0\npersistent_workers: true\nbatch_size: 8\n")
    proc = loaderdoc("check", "--machine", "ci-2core", "--config", str(cfg))
    assert proc.returncode == EXIT_CRITICAL, proc.stderr
    assert "settings-rejected" in proc.stdout and "persistent_workers" in proc.stdout


def test_a_yaml_merge_key_still_reads_its_values(tmp_path):
    # the expansion bound counts aliases; an ordinary anchor + merge is fine
    cfg = tmp_path / "merge.yaml"
    cfg.write_text("base: &b {num_workers: 2, batch_size: 8}\ndataloader:\n  <<: *b\n  shuffle: true\n")
    proc = loaderdoc("check", "--machine", "ci-2core", "--config", str(cfg), "--json")
    assert json.loads(proc.stdout)["config"]["settings"]["num_workers"] == 2, proc.stderr


# ---- recorded machines (--machine) --------------------------------------------------------------
def recorded(tmp_path, edit) -> str:
    data = json.loads(load_machine_path("ci-2core").read_text())
    edit(data)
    path = tmp_path / "machine.json"
    path.write_text(json.dumps(data))
    return str(path)


def _set(section, reading, value):
    def edit(data):
        data[section][reading]["value"] = value
    return edit


@pytest.mark.parametrize("content, needles", [
    ("[]", ["expected a JSON object of machine facts, got a list"]),
    ('{"cpu": "lots"}', ["not a machine recorded by 'loaderdoc facts --json'"]),
    ("{}", ["no schema_version, cpu, memory, shm"]),
    ("[" * 100_000 + "]" * 100_000, ["nested too deeply"]),
    ('{"cpu": ', ["line 1: not valid JSON"]),
], ids=short_id)
def test_a_machine_file_that_is_not_a_machine_is_one_line_exit_3(tmp_path, content, needles):
    path = tmp_path / "machine.json"
    path.write_text(content)
    one_line_error(loaderdoc("check", "--machine", str(path)), EXIT_USAGE, f"--machine {path}", *needles)


@pytest.mark.parametrize("edit, needle", [
    (_set("cpu", "logical", "lots"), "cpu.logical.value: expected a whole number >= 1, got 'lots'"),
    (_set("cpu", "affinity", []), "cpu.affinity.value: expected a non-empty list of CPU numbers"),
    (_set("memory", "total", True), "memory.total.value: expected a whole number >= 0, got True"),
    (_set("shm", "free", -1), "shm.free.value: expected a whole number >= 0"),
    (_set("cpu", "cgroup_quota", 0), "cpu.cgroup_quota.value: expected a positive finite number"),
    (lambda d: d.update(cpu="lots"), "cpu: expected an object of readings, got a string"),
    (lambda d: d.update(schema_version=99), "schema_version: expected 1..1, got 99"),
    (lambda d: d["gpu"].update(devices={}), "gpu.devices: expected a list"),
])
def test_a_machine_file_with_a_wrong_value_names_it(tmp_path, edit, needle):
    one_line_error(loaderdoc("check", "--machine", recorded(tmp_path, edit)), EXIT_USAGE, needle)


def test_a_machine_directory_is_one_line_exit_3(tmp_path):
    folder = tmp_path / "machines.json"
    folder.mkdir()
    one_line_error(loaderdoc("check", "--machine", str(folder)), EXIT_USAGE, "is a directory")


def test_a_machine_recorded_here_and_one_from_a_newer_build_load(tmp_path):
    facts = loaderdoc("facts", "--json")
    path = tmp_path / "here.json"
    data = json.loads(facts.stdout)
    data["cpu"]["a_reading_from_the_future"] = {"value": 1, "source": "", "unknown": None}  # ignored
    path.write_text(json.dumps(data))
    proc = loaderdoc("check", "--machine", str(path))
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr


# ---- command-line flags -------------------------------------------------------------------------
@pytest.mark.parametrize("args, needle", [
    (["check", "--batch-size", "0"], "must be >= 1"),
    (["check", "--batch-size", "10000000000"], "absurd"),
    (["check", "--batch-size", "lots"], "expected a whole number"),
    (["check", "--sample-shape", "0x3"], "dimensions must be positive"),
    (["check", "--sample-shape", "100000x100000x100000"], "over a trillion"),
    (["check", "--sample-shape", "3x224x"], "expected dimensions like 3x224x224"),
    (["check", "--sample-shape", "3xx224"], "expected dimensions like 3x224x224"),
    (["check", "--dtype", "float128"], "invalid choice"),
    (["probe", "tensor", "--budget", "-1"], "must be a finite number >= 0"),
    (["probe", "tensor", "--budget", "nan"], "must be a finite number >= 0"),
    (["probe", "tensor", "--budget", "0"], "must be > 0"),
    (["probe", "tensor", "--step-ms", "inf"], "must be a finite number >= 0"),
    (["--export", ""], "needs a file name"),
    (["probe", "tensor", "--export", ""], "needs a file name"),
    (["probe", "tensor", "--json", "--export", "-"], "both write to stdout"),
])
def test_bad_flags_are_one_line_exit_3(args, needle):
    one_line_error(loaderdoc(*args, timeout=60), EXIT_USAGE, needle)


# ---- --dataset ----------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, needles", [
    ("faults_data:needs_an_argument", ["raised TypeError", "called with no arguments"]),
    ("faults_data:returns_getitem_without_len", ["returned NotADataset, not a Dataset"]),
    ("faults_data:returns_a_list_of_tensors_tuple", ["returned tuple, not a Dataset"]),
    ("faults_data:raises_keyboard_interrupt_like", ["raised SystemExit"]),  # sys.exit() in a factory
    ("probe_userdata:factory_raises", ["raised FileNotFoundError", "/data/train does not exist"]),
    ("probe_userdata:returns_none", ["returned NoneType"]),
    ("probe_userdata:returns_empty", ["empty"]),
    ("probe_userdata:make_typo", ["has no attribute", "did you mean"]),
])
def test_bad_dataset_factories_are_one_line_exit_3(spec, needles):
    one_line_error(loaderdoc("probe", "--dataset", spec, "--budget", "2"), EXIT_USAGE, f"--dataset {spec}", *needles)


def test_a_training_script_that_parses_argv_at_import(tmp_path):
    # a common mistake: --dataset train:make where train.py runs argparse when imported
    (tmp_path / "train.py").write_text(
        "import argparse\nargs = argparse.ArgumentParser().parse_args()\n\ndef make():\n    return []\n")
    proc = loaderdoc("probe", "--dataset", "train:make", "--budget", "2", cwd=tmp_path)
    assert proc.returncode == EXIT_USAGE, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith("loaderdoc: error: --dataset train:make: importing train")


def test_a_bad_dataset_through_the_probed_export_writes_nothing(tmp_path):
    out = tmp_path / "loader.toml"
    one_line_error(loaderdoc("--export", str(out), "--dataset", "probe_userdata:NOT_CALLABLE"), EXIT_USAGE,
                   "not a callable")
    assert list(tmp_path.iterdir()) == []


# ---- export targets -----------------------------------------------------------------------------
@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_export_into_a_read_only_directory_as_root(tmp_path):
    # root passes os.access; a read-only bind mount is refused by the kernel itself
    ro = tmp_path / "ro"
    ro.mkdir()
    env, _ = fault_env()
    prefix = ["unshare", "--mount", "sh", "-c", f'mount --bind {ro} {ro} && mount -o remount,bind,ro {ro} && exec "$@"',
              "sh"]
    proc = loaderdoc("--export", str(ro / "loader.toml"), env=env, prefix=prefix)
    one_line_error(proc, EXIT_USAGE, "cannot write", str(ro))
    assert list(ro.iterdir()) == []


@pytest.mark.skipif(NS_REASON is not None, reason=NS_REASON or "")
def test_export_onto_a_full_filesystem_leaves_no_partial_file(tmp_path):
    full = tmp_path / "full"
    full.mkdir()
    env, _ = fault_env()
    # a 64 KiB tmpfs filled up, then the export, then what is left in it (inside the namespace)
    script = (f"mount -t tmpfs -o size=64k tmpfs {full} && (dd if=/dev/zero of={full}/filler bs=4k 2>/dev/null; true)"
              f' && "$@"; rc=$?; ls -A {full}; exit $rc')
    proc = loaderdoc("--export", str(full / "loader.toml"), env=env, prefix=["unshare", "--mount", "sh", "-c", script,
                                                                             "sh"])
    one_line_error(proc, EXIT_USAGE, "loader.toml", "No space left on device")
    assert proc.stdout.split() == ["filler"], proc.stdout  # no half-written export, no temporary file


@pytest.mark.parametrize("where, needle", [
    ("{file}/loader.toml", "is not a directory"),
    ("{missing}/loader.toml", "does not exist"),
    ("/proc/loader.toml", "cannot write"),
])
def test_export_to_paths_that_cannot_hold_a_file(tmp_path, where, needle):
    afile = tmp_path / "afile"
    afile.write_text("x")
    target = where.format(file=afile, missing=tmp_path / "no" / "such")
    one_line_error(loaderdoc("--export", target), EXIT_USAGE, needle)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"] and afile.read_text() == "x"


@pytest.fixture
def precious(tmp_path):
    path = tmp_path / "loader.toml"
    data = b"# hand-tuned, do not lose\n[dataloader]\nnum_workers = 3\n\x00\xff"
    path.write_bytes(data)
    os.utime(path, (1_000_000_000, 1_000_000_000))
    return path, data


def assert_untouched(path, data) -> None:
    assert path.read_bytes() == data
    assert path.stat().st_mtime == 1_000_000_000
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary sibling


def test_an_existing_export_is_byte_identical_after_every_refusal(precious):
    path, data = precious
    one_line_error(loaderdoc("--export", str(path)), EXIT_USAGE, "already exists", "--force")
    assert_untouched(path, data)
    one_line_error(loaderdoc("probe", "tensor", "--budget", "1", "--export", str(path)), EXIT_USAGE, "already exists")
    assert_untouched(path, data)
    one_line_error(loaderdoc("--export", str(path), "--preset", "tensor", "--budget", "1"), EXIT_USAGE,
                   "already exists")
    assert_untouched(path, data)


@pytest.mark.parametrize("command", [["probe", "--no-progress"], []], ids=["probe --export", "--export"])
def test_a_probe_that_measures_nothing_does_not_replace_the_export_even_with_force(precious, command):
    # the plain --export wrote the machine-facts recommendation over it and exited 0
    path, data = precious
    proc = loaderdoc(*command, "--dataset", "probe_userdata:make_raising", "--budget", "4",
                     "--export", str(path), "--force")
    assert proc.returncode == EXIT_PROBE_FAILED, proc.stderr
    assert_untouched(path, data)
    assert "no DataLoader configuration could be measured" in proc.stderr.splitlines()[-1]
    if not command:  # one line naming the failure and where it is
        assert len(proc.stderr.strip().splitlines()) == 1 and "probe_userdata.py:60" in proc.stderr, proc.stderr


@pytest.mark.parametrize("flag", ["--config", "--machine"])
def test_an_endless_input_file_is_refused_after_64_mib(flag):
    # reading /dev/zero to the end would fill the RAM; nothing past 64 MiB is a config or a machine
    one_line_error(loaderdoc("check", flag, "/dev/zero"), EXIT_USAGE, "/dev/zero", "over 64 MiB")


def test_a_config_with_a_byte_order_mark_is_read(tmp_path):
    cfg = tmp_path / "loader.toml"
    cfg.write_bytes(b"\xef\xbb\xbf[dataloader]\nnum_workers = 2\n")
    proc = loaderdoc("check", "--machine", "ci-2core", "--config", str(cfg), "--json")
    assert json.loads(proc.stdout)["config"]["settings"]["num_workers"] == 2, proc.stderr


# ---- inputs at the limits, through the real command (test_config_meaning.py reads them in-process) ----
@pytest.mark.parametrize("name, content, expected", [
    # a long list written out (past the 100,000 values aliases may expand to) is no alias bomb (it was refused as one)
    ("long.yaml", "num_workers: 2\nitems:\n" + "".join(f"  - {i}\n" for i in range(120_000)), {"num_workers": 2}),
    # a few hundred bytes naming 10^9 values are not built (they exhausted memory)
    ("huge.py", "items = [0] * 10**9\nn = 2**100000\ntable = {k: k for k in range(10**9)}\n"
     "train_dataloader = dict(num_workers=2, batch_size=8, ids=items, n=n, table=table)\n",
     {"num_workers": 2, "batch_size": 8}),
    # Hydra's interpolations in an otherwise valid config (exit 3 before): one read, one left to the job
    ("hydra.yaml", "batch_size: 32\ndata:\n  batch_size: ${batch_size}\n  num_workers: ${oc.env:NUM_WORKERS,4}\n",
     {"batch_size": 32}),
], ids=["120k-yaml-list", "py-1e9-values", "hydra-interpolation"])
def test_configs_at_the_limits_are_read_through_the_command(tmp_path, name, content, expected):
    cfg = tmp_path / name
    cfg.write_text(content)
    proc = loaderdoc("check", "--machine", "ci-2core", "--config", str(cfg), "--json", timeout=60)
    assert proc.returncode in (0, 1, 2) and "Traceback" not in proc.stderr, proc.stderr
    config = json.loads(proc.stdout)["config"]
    assert {k: config["settings"].get(k) for k in expected} == expected, config
    if name == "hydra.yaml":  # what only the job can resolve is said, not guessed
        # and, its framework unknown, what the file leaves unset is the training code's to decide
        assert config["read"] == "partial" and config["partial_reasons"][-1] == (
            "num_workers = ${oc.env:NUM_WORKERS,4}: read from the environment variable NUM_WORKERS when the job starts")
        assert config["partial_reasons"][0].startswith("not set in the file, so the training code decides")
