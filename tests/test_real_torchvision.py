"""A real torchvision pipeline (JPEG files, ImageFolder, PIL decode, the ImageNet transforms) under
`loaderdoc probe`, and the pieces of ``benchmarks/torchvision_pipeline.py`` it stands on.

torchvision and Pillow are not loaderdoc dependencies and CI installs only '.[test]': the probe
test is skipped there with the reason, the image generator's tests are skipped without Pillow, and
the import helper's tests run everywhere (on fake torchvision packages).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from loaderdoc.base.errors import EXIT_OK

ROOT = Path(__file__).resolve().parents[1]
MODULE = ROOT / "benchmarks" / "torchvision_pipeline.py"

_spec = importlib.util.spec_from_file_location("_loaderdoc_bench_torchvision_pipeline", MODULE)
pipeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(pipeline)

BATCH = 16
# ImageFolder yields (3x224x224 float32 image, int label); default_collate stacks the images and
# turns the 16 labels into one int64 tensor
BATCH_BYTES = BATCH * 3 * 224 * 224 * 4 + BATCH * 8


# ---- import_torchvision, on fake torchvision packages -----------------------------------------
REPORT = textwrap.dedent("""
    import json, sys
    from benchmarks.torchvision_pipeline import import_torchvision, torchvision_stubbed
    out = {}
    try:
        tv = import_torchvision()
        out["datasets"] = tv.datasets.NAME
    except BaseException as exc:
        out["error"] = type(exc).__name__ + ": " + str(exc)
    out["stubbed"] = torchvision_stubbed()
    out["left"] = sorted(n for n in sys.modules if n.split(".")[0] == "torchvision")
    print(json.dumps(out))
""")

META_FAILS = 'import torchvision.extension\nraise RuntimeError("operator torchvision::nms does not exist")\n'


def fake_torchvision(tmp_path: Path, **files: str) -> Path:
    """A package laid out like torchvision's import of its extension and meta registrations."""
    package = tmp_path / "fake" / "torchvision"
    package.mkdir(parents=True)
    sources = {
        "__init__": "from . import extension\nfrom torchvision import _meta_registrations, datasets\n",
        "extension": "",
        "_meta_registrations": "import torchvision.extension\n",
        "datasets": "NAME = 'fake datasets'\n",
        **files,
    }
    for name, source in sources.items():
        (package / f"{name}.py").write_text(source)
    return package.parent


def report(path: Path | None, prelude: str = "") -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in (path, ROOT) if p)}
    proc = subprocess.run([sys.executable, "-c", prelude + REPORT], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_a_torchvision_that_imports_is_used_as_it_is(tmp_path):
    out = report(fake_torchvision(tmp_path))
    assert out == {"datasets": "fake datasets", "stubbed": False, "left": [
        "torchvision", "torchvision._meta_registrations", "torchvision.datasets", "torchvision.extension"]}


def test_the_meta_registrations_failure_is_retried_with_a_stub(tmp_path):
    # the CUDA-linked wheel next to the CPU-only torch: _C does not load, then
    # _meta_registrations registers a fake kernel for torchvision::nms and torch raises
    out = report(fake_torchvision(tmp_path, _meta_registrations=META_FAILS))
    assert out["datasets"] == "fake datasets" and out["stubbed"] is True, out


@pytest.mark.parametrize("files, error", [
    ({"__init__": "raise RuntimeError('broken elsewhere')\n"}, "RuntimeError: broken elsewhere"),
    ({"_meta_registrations": "raise ImportError('not the known failure')\n"}, "ImportError: not the known"),
    # stubbed, the retry fails further on: that error, and no half-imported torchvision left
    ({"_meta_registrations": META_FAILS, "datasets": "raise RuntimeError('datasets broke')\n"},
     "RuntimeError: datasets broke"),
])
def test_other_failures_are_raised_as_they_are(tmp_path, files, error):
    out = report(fake_torchvision(tmp_path, **files))
    assert out["error"].startswith(error), out
    assert out["stubbed"] is False and out["left"] in ([], ["torchvision.extension"]), out


def test_no_torchvision_is_an_import_error():
    out = report(None, prelude="import sys\nsys.modules['torchvision'] = None\n")
    assert out["error"].startswith("ModuleNotFoundError"), out
    assert out["stubbed"] is False


# ---- the images ---------------------------------------------------------------------------------
@pytest.fixture
def pil():
    return pytest.importorskip("PIL.Image", reason="Pillow is not installed (pip install pillow)")


def small(root: Path, **kw) -> Path:
    return pipeline.generate_images(root, **{"count": 6, "classes": 3, "min_size": 16, "max_size": 40, **kw})


def test_images_are_laid_out_for_image_folder_and_deterministic(tmp_path, pil):
    root = small(tmp_path / "a")
    names = sorted(str(p.relative_to(root)) for p in root.rglob("*.jpg"))
    assert names == sorted(f"class_{n % 3}/img_{n}.jpg" for n in range(6))
    for p in root.rglob("*.jpg"):
        with pil.open(p) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            assert all(16 <= side <= 40 for side in image.size)
    again = small(tmp_path / "b")
    assert all((root / n).read_bytes() == (again / n).read_bytes() for n in names)
    assert sorted(os.listdir(tmp_path)) == ["a", "b"]  # no temporary directory left beside them


def test_a_complete_set_is_not_written_again(tmp_path, pil, monkeypatch):
    root = small(tmp_path / "set")
    monkeypatch.setattr(pipeline, "synth_image", lambda *a, **k: pytest.fail("generated again"))
    assert small(tmp_path / "set") == root
    (root / "class_0" / "img_0.jpg").unlink()  # incomplete: generated anew
    monkeypatch.undo()
    small(tmp_path / "set")
    assert (root / "class_0" / "img_0.jpg").is_file()


def test_a_failed_generation_leaves_nothing(tmp_path, pil, monkeypatch):
    real = pipeline.synth_image

    def fail_at_3(n, **kw):
        if n == 3:
            raise OSError("disk full")
        return real(n, **kw)

    monkeypatch.setattr(pipeline, "synth_image", fail_at_3)
    with pytest.raises(OSError, match="disk full"):
        small(tmp_path / "set")
    assert os.listdir(tmp_path) == []


def test_only_its_own_sets_are_replaced(tmp_path, pil):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "keep.jpg").write_bytes(b"mine")
    with pytest.raises(FileExistsError, match="not a loaderdoc benchmark image set"):
        small(foreign)
    assert os.listdir(foreign) == ["keep.jpg"]

    ours = small(tmp_path / "set", count=9)
    small(ours)  # another count: replaced whole
    assert len(list(ours.rglob("*.jpg"))) == 6 and json.loads((ours / pipeline.MARKER).read_text())["count"] == 6
    assert sorted(os.listdir(tmp_path)) == ["photos", "set"]


def test_every_class_needs_an_image(tmp_path):
    with pytest.raises(ValueError, match="count >= classes"):
        pipeline.generate_images(tmp_path / "set", count=3, classes=4)


# ---- the probe, for real --------------------------------------------------------------------------
@pytest.fixture
def torchvision():
    try:
        return pipeline.import_torchvision()
    except Exception as exc:  # not installed (CI), or installed and broken
        pytest.skip(f"torchvision cannot be imported here ({type(exc).__name__}: {exc}); it is not a "
                    "loaderdoc dependency: install the torchvision built for this torch, and pillow, "
                    "to run this test")


def test_probe_measures_a_real_torchvision_image_folder(tmp_path, torchvision):
    env = {**os.environ, "LOADERDOC_BENCH_SMALL_IMAGES": str(tmp_path / "images")}
    proc = subprocess.run(
        [sys.executable, "-m", "loaderdoc", "probe", "--dataset",
         "benchmarks.torchvision_pipeline:make_small_dataset", "--batch-size", str(BATCH),
         "--step-ms", "20", "--budget", "8", "--json", "--no-progress", "--torch-threads", "1"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=180,
    )
    # one intra-op thread: beside the suite's other workers on 2 CPUs, torch's 2 threads at 0 workers
    # wait at each op's barrier for a thread without a CPU (measured: 0.7 batches/s, one configuration
    # in the budget); the threads are test_probe_threads.py's subject, the pipeline is this test's
    assert proc.returncode == EXIT_OK, proc.stderr
    doc = json.loads(proc.stdout)
    workload = doc["workload"]
    assert workload["description"].endswith("ImageFolder") and workload["dataset_len"] == 96
    assert workload["batch_bytes"] == BATCH_BYTES and workload["sample_bytes"] == BATCH_BYTES // BATCH

    measured = [r for r in doc["results"] if r["status"] == "ok"]
    assert len(measured) >= 2 and len(measured) == len(doc["results"]), doc["results"]
    workers = {r["settings"]["num_workers"] for r in measured}
    assert 0 in workers and max(workers) >= 1  # baseline and a worker at least
    if doc["recommended"]["num_workers"] == 2 and 1 not in workers:
        # one worker is skipped only where the 0-worker run shows it cannot be fast enough
        assert any(r.startswith("num_workers=1 and fewer not measured") for r in doc["reasons"]), doc["reasons"]
    for r in measured:
        assert r["batches"] > 0 and r["batches_per_s"] > 0 and r["batch_bytes"] == BATCH_BYTES, r

    rec = doc["recommended"]
    assert rec["batch_size"] == BATCH and isinstance(rec["num_workers"], int) and rec["num_workers"] >= 0
    assert rec["num_workers"] in {r["settings"]["num_workers"] for r in measured}
    assert doc["reasons"] and doc["budget_s"] == 8.0
