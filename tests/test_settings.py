"""LoaderSettings: torch's validation rules, loading TOML/YAML/JSON, and every output format."""

from __future__ import annotations

import json

import pytest

from loaderdoc.base._compat import tomllib
from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.config import load_settings
from loaderdoc.export import render, to_python, to_toml


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- validation mirrors torch -------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, key",
    [
        ({"num_workers": 0, "prefetch_factor": 2}, "prefetch_factor"),
        ({"num_workers": 0, "persistent_workers": True}, "persistent_workers"),
        ({"num_workers": 0, "multiprocessing_context": "spawn"}, "multiprocessing_context"),
        ({"num_workers": -1}, "num_workers"),
        ({"timeout": -5.0}, "timeout"),
        ({"batch_size": 0}, "batch_size"),
        ({"num_workers": 2, "prefetch_factor": 0}, "prefetch_factor"),
        ({"num_workers": 2, "multiprocessing_context": "threads"}, "multiprocessing_context"),
        ({"batch_size": None, "drop_last": True}, "drop_last"),
    ],
)
def test_torch_rejections_are_problems(kwargs, key):
    problems = LoaderSettings(**kwargs).problems()
    assert [k for k, _ in problems] == [key]
    with pytest.raises(SettingsError):
        LoaderSettings(**kwargs).validate()


def test_valid_settings_have_no_problems():
    s = LoaderSettings(batch_size=64, num_workers=4, prefetch_factor=4, persistent_workers=True, pin_memory=True)
    assert s.problems() == []
    assert s.batches_in_flight == 16


def test_torch_default_prefetch_is_two_with_workers():
    assert LoaderSettings(num_workers=3).batches_in_flight == 6
    assert LoaderSettings(num_workers=0).batches_in_flight == 0


def test_our_validation_agrees_with_torch():
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    ds = TensorDataset(torch.zeros(4, 1))
    for kwargs in (
        {"num_workers": 0, "prefetch_factor": 2},
        {"num_workers": 0, "persistent_workers": True},
        {"num_workers": -1},
        {"num_workers": 0, "multiprocessing_context": "spawn"},
        {"timeout": -1.0},
        {"batch_size": None, "drop_last": True},
    ):
        assert LoaderSettings(**kwargs).problems(), kwargs
        with pytest.raises(ValueError):
            DataLoader(ds, **kwargs)


# ---- loading ------------------------------------------------------------------------------
def test_yaml_with_zero_one_booleans(tmp_path):
    path = write(tmp_path, "config.yaml", "num_workers: 8\npin_memory: 1\npersistent_workers: 1\nprefetch_factor: 2\n")
    s = load_settings(path)
    assert (s.num_workers, s.pin_memory, s.persistent_workers, s.prefetch_factor) == (8, True, True, 2)


def test_toml_dataloader_table_and_top_level(tmp_path):
    table = write(tmp_path, "a.toml", "[model]\nlr = 0.1\n[dataloader]\nnum_workers = 4\nshuffle = true\n")
    assert load_settings(table).num_workers == 4
    top = write(tmp_path, "b.toml", "num_workers = 2\nbatch_size = 16\n")
    assert load_settings(top).batch_size == 16


def test_unknown_key_named_with_suggestion_and_line(tmp_path):
    path = write(tmp_path, "c.toml", "[dataloader]\nnum_workers = 4\nnum_worker = 2\n")
    with pytest.raises(SettingsError, match=r"c\.toml:3: dataloader.num_worker: unknown setting 'num_worker' \(did you mean 'num_workers'\?\)"):
        load_settings(path)


def test_wrong_types_named(tmp_path):
    with pytest.raises(SettingsError, match=r"d\.yaml:2: pin_memory must be true/false \(or 1/0\), got 2"):
        load_settings(write(tmp_path, "d.yaml", "num_workers: 2\npin_memory: 2\n"))
    with pytest.raises(SettingsError, match="num_workers must be a whole number, got 'eight'"):
        load_settings(write(tmp_path, "e.yaml", "num_workers: eight\n"))
    with pytest.raises(SettingsError, match="num_workers must be a whole number, got 2.5"):
        load_settings(write(tmp_path, "f.toml", "num_workers = 2.5\n"))


def test_malformed_files_name_the_line(tmp_path):
    with pytest.raises(SettingsError, match=r"bad\.toml: not valid TOML: .*line 2"):
        load_settings(write(tmp_path, "bad.toml", "num_workers = 4\npin_memory = \n"))
    with pytest.raises(SettingsError, match=r"bad\.yaml:2: not valid YAML"):
        load_settings(write(tmp_path, "bad.yaml", "num_workers: 4\n  pin_memory: [1\n"))
    with pytest.raises(SettingsError, match="no such file"):
        load_settings(tmp_path / "missing.toml")


def test_contradictions_raise_when_strict_and_pass_for_linting(tmp_path):
    path = write(tmp_path, "g.toml", "num_workers = 0\nprefetch_factor = 4\n")
    with pytest.raises(SettingsError, match=r"g\.toml:2: prefetch_factor needs num_workers > 0"):
        load_settings(path)
    lenient = load_settings(path, strict=False)
    assert lenient.combination_problems()
    # negative counts are wrong on their own: never lenient
    with pytest.raises(SettingsError, match="num_workers must be >= 0"):
        load_settings(write(tmp_path, "h.toml", "num_workers = -2\n"), strict=False)


def test_absurd_values_refused(tmp_path):
    with pytest.raises(SettingsError, match="absurd"):
        load_settings(write(tmp_path, "i.toml", "num_workers = 100000000\n"))


# ---- output and round trips ---------------------------------------------------------------
SAMPLES = [
    LoaderSettings(),
    LoaderSettings(batch_size=4, shuffle=True, num_workers=2, pin_memory=True, prefetch_factor=4,
                   persistent_workers=True, timeout=120.0, multiprocessing_context="forkserver"),
    LoaderSettings(batch_size=None, num_workers=0, shuffle=True),
    LoaderSettings(batch_size=2, num_workers=2, in_order=False),  # torch >= 2.6
]


@pytest.mark.parametrize("settings", SAMPLES)
def test_toml_round_trip(tmp_path, settings):
    path = write(tmp_path, "rt.toml", to_toml(settings, ["made for a test"]))
    assert path.read_text().startswith("# made for a test\n")
    assert tomllib.loads(path.read_text())["dataloader"]["num_workers"] == settings.num_workers
    loaded = load_settings(path)
    assert loaded.as_kwargs() == settings.as_kwargs()


@pytest.mark.parametrize("settings", SAMPLES)
def test_json_round_trip(tmp_path, settings):
    text = render(settings, "json", ["made for a test"])
    path = write(tmp_path, "rt.json", text)
    assert load_settings(path).as_kwargs() == settings.as_kwargs()
    assert json.loads(text)["dataloader"] == settings.as_kwargs()


def _skip_unless_torch_takes(settings):
    """in_order=False is a TypeError before torch 2.6 (the check rule says so): nothing to run there."""
    import inspect

    from torch.utils.data import DataLoader

    if not settings.in_order and "in_order" not in inspect.signature(DataLoader).parameters:
        pytest.skip("this torch has no DataLoader(in_order=...) (torch < 2.6)")


@pytest.mark.parametrize("settings", SAMPLES)
@pytest.mark.usefixtures("stop_multiprocessing_helpers")  # one of them is forkserver's
def test_python_snippet_runs_and_builds_that_loader(settings):
    torch = pytest.importorskip("torch")
    from torch.utils.data import TensorDataset

    _skip_unless_torch_takes(settings)

    namespace: dict = {}
    exec(compile(to_python(settings, ["header line"]), "<snippet>", "exec"), namespace)
    loader = namespace["make_loader"](TensorDataset(torch.arange(8.0)), timeout=0 if settings.num_workers == 0 else 30)
    assert loader.num_workers == settings.num_workers
    assert loader.pin_memory == settings.pin_memory
    assert getattr(loader, "in_order", True) == settings.in_order
    if settings.num_workers:
        assert loader.prefetch_factor == settings.effective_prefetch_factor
        assert loader.persistent_workers == settings.persistent_workers
    total = sum(len(batch[0]) if settings.batch_size else 1 for batch in loader)
    assert total in (8, 8 - 8 % (settings.batch_size or 1))


def test_kwargs_go_into_dataloader():
    import inspect

    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    for s in SAMPLES:
        if s.in_order or "in_order" in inspect.signature(DataLoader).parameters:
            DataLoader(TensorDataset(torch.zeros(4, 1)), **s.as_kwargs())
