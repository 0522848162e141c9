"""A real torchvision image pipeline for ``loaderdoc probe``: JPEG files on disk, ``ImageFolder``,
PIL decoding and the usual ImageNet training transforms.

    loaderdoc probe --dataset benchmarks.torchvision_pipeline:make_dataset --batch-size 64 --step-ms 35

run from the repository root (``--dataset`` imports from the current directory). The factory
generates its images on first use: 3000 deterministic synthetic JPEGs, 256-500 px a side,
about 200 MB, in ``$LOADERDOC_BENCH_IMAGES`` (default ``~/.cache/loaderdoc/bench-images-3000``).
``make_small_dataset`` is the same pipeline over 96 images (``$LOADERDOC_BENCH_SMALL_IMAGES``,
default ``~/.cache/loaderdoc/bench-images-96``), for tests.

Not a pass/fail test; ``python -m benchmarks.torchvision_pipeline [--count N] [--samples N]``
generates the images, then times one sample (decode + transforms) in this process.

Needs torchvision and Pillow, which loaderdoc does not depend on. :func:`import_torchvision`
also copes with the CUDA-linked torchvision wheel next to a CPU-only torch (see there).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import Any

MARKER = ".loaderdoc-bench-images.json"
FORMAT_VERSION = 1
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)

_META_REGISTRATIONS = "torchvision._meta_registrations"
_META_FILE = os.path.join("torchvision", "_meta_registrations.py")


# ---- torchvision ------------------------------------------------------------------------------
def _raised_in_meta_registrations(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(_META_FILE):
            return True
        tb = tb.tb_next
    return False


def _forget_torchvision() -> None:
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]


def import_torchvision() -> types.ModuleType:
    """``import torchvision``, or, where its compiled ops cannot load, torchvision without them.

    A torchvision wheel whose ``_C`` extension does not load against the installed torch (the
    CUDA-linked wheel next to a CPU-only torch of the same version, or a wheel built for another
    torch) fails at import in ``torchvision/_meta_registrations.py`` with ``RuntimeError: operator
    torchvision::nms does not exist``: it registers fake kernels for ops that were never loaded.
    On exactly that failure the half-imported modules are dropped, an empty module stands in for
    ``torchvision._meta_registrations`` and the import is tried once more. Datasets, PIL-based
    transforms and models work then; the compiled ops (``torchvision.ops.nms``, ``roi_align``,
    ``torchvision.io``'s decoders) do not. :func:`torchvision_stubbed` says whether that happened.

    Any other failure (torchvision not installed, an unrelated error) is raised as it is.
    """
    loaded = sys.modules.get("torchvision")
    if loaded is not None and hasattr(loaded, "datasets"):
        return loaded
    try:
        import torchvision
    except RuntimeError as exc:
        if not _raised_in_meta_registrations(exc):
            raise
    else:
        return torchvision
    _forget_torchvision()
    sys.modules[_META_REGISTRATIONS] = types.ModuleType(
        _META_REGISTRATIONS, "stub: torchvision's compiled ops did not load (see import_torchvision)"
    )
    try:
        import torchvision
    except BaseException:
        _forget_torchvision()
        raise
    return torchvision


def torchvision_stubbed() -> bool:
    """Whether the torchvision imported here runs without its compiled ops (the stand-in above)."""
    module = sys.modules.get(_META_REGISTRATIONS)
    return module is not None and getattr(module, "__file__", None) is None


# ---- the images ---------------------------------------------------------------------------------
def _params(count: int, classes: int, seed: int, min_size: int, max_size: int, quality: int) -> dict:
    return {"format": FORMAT_VERSION, "count": count, "classes": classes, "seed": seed,
            "min_size": min_size, "max_size": max_size, "quality": quality}


def _marker(root: Path) -> dict | None:
    try:
        return json.loads((root / MARKER).read_text())
    except (OSError, ValueError):
        return None


def _complete(root: Path, params: dict) -> bool:
    if _marker(root) != params:
        return False
    found = 0
    for k in range(params["classes"]):
        try:
            found += sum(1 for e in os.scandir(root / f"class_{k}") if e.name.endswith(".jpg"))
        except OSError:
            return False
    return found == params["count"]


def _replaceable(root: Path) -> bool:
    """An earlier image set of ours (another size or seed) or an empty directory."""
    if not root.exists():
        return True
    if not root.is_dir():
        return False
    return _marker(root) is not None or not any(root.iterdir())


def synth_image(n: int, *, seed: int = 0, classes: int = 10, min_size: int = 256, max_size: int = 500):
    """Image ``n`` of the set: a PIL RGB image, the same for the same arguments.

    A smooth gradient (a 3x3 colour grid scaled up), a dozen flat ellipses and rectangles (edges),
    a fine bilinear texture and Gaussian noise (sigma 10): at JPEG quality 90 it takes about
    0.46 bytes a pixel (ImageNet's photos: about 0.8), so decoding costs roughly what a photo's
    does. Each class has its own tint.
    """
    import numpy as np
    from PIL import Image, ImageDraw

    rng = np.random.default_rng([seed, n])
    w, h = (int(v) for v in rng.integers(min_size, max_size + 1, size=2))
    grid = rng.integers(0, 256, size=(3, 3, 3), dtype=np.uint8)
    tint = np.random.default_rng([seed, 1_000_003, n % classes]).integers(-40, 41, size=3)
    grid = np.clip(grid.astype(np.int16) + tint, 0, 255).astype(np.uint8)
    base = Image.fromarray(grid).resize((w, h), Image.BICUBIC)
    draw = ImageDraw.Draw(base)
    for _ in range(12):
        x0, x1 = sorted(int(v) for v in rng.integers(0, w, 2))
        y0, y1 = sorted(int(v) for v in rng.integers(0, h, 2))
        fill = tuple(int(c) for c in rng.integers(0, 256, 3))
        (draw.ellipse if rng.random() < 0.5 else draw.rectangle)([x0, y0, x1, y1], fill=fill)
    fine = rng.integers(0, 256, size=(h // 3 + 1, w // 3 + 1, 3), dtype=np.uint8)
    image = Image.blend(base, Image.fromarray(fine).resize((w, h), Image.BILINEAR), 0.3)
    pixels = np.asarray(image, dtype=np.float32)
    pixels += rng.standard_normal(size=pixels.shape, dtype=np.float32) * 10.0
    return Image.fromarray(np.clip(pixels, 0, 255).astype(np.uint8))


def generate_images(
    root: str | os.PathLike,
    count: int = 3000,
    classes: int = 10,
    seed: int = 0,
    *,
    min_size: int = 256,
    max_size: int = 500,
    quality: int = 90,
) -> Path:
    """Write ``root/class_{n % classes}/img_{n}.jpg`` for n < count; return ``root``.

    Nothing is written when ``root`` already holds this set (its marker file names the same
    parameters and every image is there). Otherwise the images go to a temporary directory beside
    ``root`` that is renamed to ``root`` when complete, so a reader never sees half a set and two
    processes generating at once both end with one whole set. An earlier set of ours with other
    parameters, or an empty directory, is replaced; any other existing ``root`` is refused
    (FileExistsError), never deleted.
    """
    if classes < 1 or count < classes:
        raise ValueError(f"need count >= classes >= 1 (every class folder needs an image), got "
                         f"count={count}, classes={classes}")
    if not 1 <= min_size <= max_size:
        raise ValueError(f"need 1 <= min_size <= max_size, got {min_size}, {max_size}")
    root = Path(root).expanduser()
    params = _params(count, classes, seed, min_size, max_size, quality)
    if _complete(root, params):
        return root
    if not _replaceable(root):
        raise FileExistsError(f"{root} exists and is not a loaderdoc benchmark image set; "
                              "not replacing it (point LOADERDOC_BENCH_IMAGES elsewhere)")
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.tmp-", dir=root.parent))
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp's 0700 would become root's mode
        for k in range(classes):
            (tmp / f"class_{k}").mkdir()
        for n in range(count):
            image = synth_image(n, seed=seed, classes=classes, min_size=min_size, max_size=max_size)
            image.save(tmp / f"class_{n % classes}" / f"img_{n}.jpg", "JPEG", quality=quality)
        (tmp / MARKER).write_text(json.dumps(params, sort_keys=True) + "\n")
        _install(tmp, root, params)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)  # gone already when it was renamed into place
    return root


def _install(tmp: Path, root: Path, params: dict) -> None:
    try:
        os.rename(tmp, root)  # fails when root exists and is not empty
        return
    except OSError:
        pass
    if _complete(root, params):  # another process finished first: keep its set
        return
    if not _replaceable(root):
        raise FileExistsError(f"{root} appeared while generating and is not a loaderdoc image set")
    trash = Path(tempfile.mkdtemp(prefix=f".{root.name}.old-", dir=root.parent))
    try:
        os.rename(root, trash / "set")
        os.rename(tmp, root)
    finally:
        shutil.rmtree(trash, ignore_errors=True)


# ---- the datasets -------------------------------------------------------------------------------
def train_transform() -> Any:
    """torchvision's ImageNet training transform (v1 API): crop, flip, tensor, normalize."""
    tv = import_torchvision()
    T = tv.transforms
    return T.Compose([
        T.RandomResizedCrop(224),
        T.RandomHorizontalFlip(),
        T.ToTensor(),
        T.Normalize(IMAGENET_MEAN, IMAGENET_STD),
    ])


def image_folder(root: str | os.PathLike) -> Any:
    tv = import_torchvision()
    return tv.datasets.ImageFolder(str(root), transform=train_transform())


def _cache_dir(env: str, name: str) -> Path:
    value = os.environ.get(env)
    return Path(value).expanduser() if value else Path.home() / ".cache" / "loaderdoc" / name


def make_dataset() -> Any:
    """The probe's factory: ImageFolder over 3000 JPEGs (generated on first use: about 35 s on a 2-core machine)."""
    import_torchvision()  # before generating: without torchvision, no time is spent on images
    return image_folder(generate_images(_cache_dir("LOADERDOC_BENCH_IMAGES", "bench-images-3000")))


def read_all_files(dataset: Any) -> int:
    """Read every image file of an ImageFolder once (into the page cache); returns the bytes read.

    The probe and the grid must measure one workload: on this VM files read minutes ago can be
    cold again, and a first read of a JPEG costs several ms of waiting on the disk, which turns
    the CPU-bound pipeline into an I/O-bound one until the files are cached."""
    total = 0
    for path, _ in getattr(dataset, "samples", []):
        with open(path, "rb") as f:
            total += len(f.read())
    return total


def make_job_dataset() -> Any:
    """The GPU acceptance's real job and its probe (issue 48): the same pipeline over 1280 images
    in 10 classes (``$LOADERDOC_BENCH_JOB_IMAGES``, default ``~/.cache/loaderdoc/bench-images-1280``)."""
    import_torchvision()
    return image_folder(generate_images(_cache_dir("LOADERDOC_BENCH_JOB_IMAGES", "bench-images-1280"),
                                        count=1280, classes=10))


def make_small_dataset() -> Any:
    """The same pipeline over 96 images in 4 classes (about 1 s to generate), for tests."""
    import_torchvision()
    root = _cache_dir("LOADERDOC_BENCH_SMALL_IMAGES", "bench-images-96")
    return image_folder(generate_images(root, count=96, classes=4))


# ---- timing -------------------------------------------------------------------------------------
def _per_sample_ms(fn, samples: int) -> list[float]:
    times = []
    for i in range(samples):
        t = time.perf_counter()
        fn(i)
        times.append((time.perf_counter() - t) * 1000)
    return times


def _summary(times: list[float]) -> str:
    q = statistics.quantiles(times, n=20)
    return f"mean {statistics.fmean(times):.2f} ms, median {statistics.median(times):.2f}, p95 {q[18]:.2f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", help="image directory (default: $LOADERDOC_BENCH_IMAGES or the cache)")
    parser.add_argument("--count", type=int, default=3000)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--samples", type=int, default=300, help="samples to time (0: only generate)")
    args = parser.parse_args(argv)
    default = "bench-images-3000" if args.count == 3000 else f"bench-images-{args.count}"
    root = Path(args.root).expanduser() if args.root else _cache_dir("LOADERDOC_BENCH_IMAGES", default)

    t = time.perf_counter()
    generate_images(root, count=args.count, classes=args.classes)
    elapsed = time.perf_counter() - t
    files = list(root.rglob("*.jpg"))
    size = sum(p.stat().st_size for p in files)
    print(f"{root}: {len(files)} images, {size / 2**20:.1f} MiB ({size / len(files) / 1024:.1f} KiB "
          f"an image); ready in {elapsed:.1f} s")
    if not args.samples:
        return

    import torch

    tv = import_torchvision()
    print(f"torch {torch.__version__}, torchvision {tv.__version__}"
          + (" (compiled ops stubbed)" if torchvision_stubbed() else ""))
    dataset = image_folder(root)
    n = min(args.samples, len(dataset))
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:n].tolist()
    torch.manual_seed(0)
    _per_sample_ms(lambda i: dataset[order[i]], min(20, n))  # warm the page cache and the code
    decode = _per_sample_ms(lambda i: dataset.loader(dataset.samples[order[i]][0]), n)
    print(f"decode only (PIL open + convert RGB):          {_summary(decode)}")
    default_threads = torch.get_num_threads()
    full = _per_sample_ms(lambda i: dataset[order[i]], n)
    print(f"decode + transforms, torch {default_threads} threads:          {_summary(full)}")
    torch.set_num_threads(1)
    one = _per_sample_ms(lambda i: dataset[order[i]], n)
    print(f"decode + transforms, torch.set_num_threads(1): {_summary(one)}")


if __name__ == "__main__":
    main()
