"""`loaderdoc watch --apply FILE`: the command's DataLoaders built with FILE's settings, named by the
role the framework gave them, what the script asked and what ran side by side in the report.

The runs are real: a child process under `loaderdoc watch --apply` builds real DataLoaders (a plain
script, a Lightning fit, a torchrun job); the construction logic itself is also tested in-process on
a stand-in class that refuses what torch refuses."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest
from test_watch import env_with_src, split_output, watch

from loaderdoc.base.errors import EXIT_USAGE, UserError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.export import FORMATS, render
from loaderdoc.watching import apply
from loaderdoc.watching.apply_file import plan_from_file, role_of_name

# a loop the script times nothing of: it says what its loaders were built with, as the script sees them
SCRIPT = """\
import json, sys
from torch.utils.data import DataLoader

def val_dataloader():  # a Lightning hook's name: the loader built here is the "val" loader
    return DataLoader(list(range(12)), batch_size=3, num_workers=0)

loader = DataLoader(list(range(48)), batch_size=4, num_workers=0)
for _ in range(2):
    for batch in loader:
        pass
val = val_dataloader()
for batch in val:
    pass
print(json.dumps({{"workers": loader.num_workers, "batch_size": loader.batch_size,
                  "prefetch_factor": loader.prefetch_factor, "val_workers": val.num_workers}}))
sys.exit({code})
"""


def run(tmp_path: Path, settings_file: Path, code: int = 0, *command: str):
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(code=code), encoding="utf-8")
    proc = watch("--json", "--apply", str(settings_file), "--", *(command or (sys.executable, str(script))),
                 cwd=tmp_path)
    assert proc.returncode == code, proc.stderr[-3000:]
    lines, report = split_output(proc.stdout)
    return proc, [json.loads(line) for line in lines if line.startswith("{")], report


def flat(text: str) -> str:
    """The summary's lines wrap where a path's length puts them: compare words, not lines."""
    return " ".join(text.split())


def by_role(report: dict) -> dict:
    return {entry["role"]: entry for entry in report["loaders"]}


def test_an_exported_toml_is_applied_to_a_plain_script_and_batch_size_is_not(tmp_path):
    exported = tmp_path / "fast.toml"  # what `loaderdoc --export fast.toml` writes
    exported.write_text(render(LoaderSettings(batch_size=64, num_workers=2, persistent_workers=True), "toml"))
    proc, (seen,), report = run(tmp_path, exported)
    # the script's own view: two workers, its own batch size
    assert seen == {"workers": 2, "batch_size": 4, "prefetch_factor": 2, "val_workers": 2}
    assert ("--apply: " f"{exported} sets batch_size=64, shuffle=False, drop_last=False; not applied: they "
            "change the training itself") in flat(proc.stderr)
    main, val = by_role(report)[None], by_role(report)["val"]
    assert main["asked"]["num_workers"] == 0 and main["settings"]["num_workers"] == 2
    assert main["asked"]["batch_size"] == main["settings"]["batch_size"] == 4
    assert main["applied"] == ["num_workers", "persistent_workers"]
    assert val["settings"]["num_workers"] == 2  # a table without a name goes to every loader
    assert report["apply"]["loaders_matched"] == 2 and report["apply"]["unmatched"] == []
    assert report["apply"]["tables"] == {"": {"num_workers": 2, "pin_memory": False, "timeout": 0.0,
                                              "persistent_workers": True}}
    # the summary names the loaders as the user knows them and says what changed
    assert "loader 1 (DataLoader, num_workers=2" in flat(proc.stderr) and "val loader (DataLoader" in flat(proc.stderr)
    assert "--apply: num_workers 0 -> 2, persistent_workers False -> True" in flat(proc.stderr)


def test_a_lightning_file_with_worker_settings_and_no_workers_is_made_consistent(tmp_path):
    lightning = tmp_path / "data.yaml"  # a LightningCLI config's data: init_args
    lightning.write_text("data:\n  init_args:\n    prefetch_factor: 4\n    persistent_workers: true\n"
                         "    pin_memory: true\n")
    proc, (seen,), report = run(tmp_path, lightning)
    assert seen["workers"] == 0 and seen["prefetch_factor"] is None  # torch would refuse prefetch_factor
    assert "prefetch_factor=4 not applied to a loader: it needs num_workers > 0" in flat(proc.stderr)
    assert "persistent_workers=True not applied to the val loader: it needs num_workers > 0" in flat(proc.stderr)
    main = by_role(report)[None]
    assert main["applied"] == ["pin_memory"] and main["settings"]["pin_memory"] is True
    assert main["settings"]["prefetch_factor"] is None and main["settings"]["persistent_workers"] is False


def test_a_table_for_a_loader_never_built_is_said_and_the_exit_code_is_the_scripts(tmp_path):
    per_loader = tmp_path / "per.toml"
    per_loader.write_text("[val_dataloader]\nnum_workers = 1\n[test_dataloader]\nnum_workers = 2\n")
    proc, (seen,), report = run(tmp_path, per_loader, 5)
    assert seen["workers"] == 0 and seen["val_workers"] == 1  # only the val loader has a table
    assert report["exit_code"] == 5 and report["apply"]["unmatched"] == ["test"]
    assert by_role(report)[None]["applied"] == [] and by_role(report)[None]["apply_tables"] == []
    assert "its [test] settings were not applied: the command iterated no test loader" in flat(proc.stderr)


@pytest.mark.parametrize("content, says", [
    ("[training]\nsteps = 10\n", "names no DataLoader setting"),
    ("batch_size = 64\nshuffle = true\n", "sets only batch_size=64, shuffle=True, which change the training"),
    (None, "no such file; check the --apply path"),
])
def test_a_file_with_nothing_to_apply_is_refused_before_the_command_runs(tmp_path, content, says):
    settings_file = tmp_path / "settings.toml"
    if content is not None:
        settings_file.write_text(content)
    marker = tmp_path / "ran"
    proc = watch("--apply", str(settings_file), "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    assert proc.returncode == EXIT_USAGE and not marker.exists()
    assert says in flat(proc.stderr) and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_export_format_reads_back_as_one_table_for_every_loader(tmp_path, fmt):
    path = tmp_path / f"x.{ {'lightning': 'yaml', 'hydra': 'yaml', 'hf': 'yaml'}.get(fmt, fmt) }"
    path.write_text(render(LoaderSettings(batch_size=64, num_workers=3, prefetch_factor=4), fmt))
    plan = plan_from_file(str(path))
    assert list(plan.tables) == [""] and plan.tables[""]["num_workers"] == 3
    assert plan.tables[""]["prefetch_factor"] == 4
    assert any(item.endswith("batch_size=64") for item in plan.not_applied)


def test_role_names_of_config_tables():
    assert [role_of_name(n) for n in ("", "train_dataloader", "eval", "validation", "test", "dataloader",
                                      "predict_loader")] == ["", "train", "val", "val", "test", "", "predict"]


def test_a_bad_value_is_a_usage_error_naming_the_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[dataloader]\nnum_workers = -1\n")
    with pytest.raises(UserError, match=r"bad.toml:2: dataloader.num_workers: num_workers must be >= 0"):
        plan_from_file(str(path))


# ---- the construction, in-process, on a stand-in that refuses what torch refuses ---------------
class Loader:
    def __init__(self, dataset, batch_size=1, num_workers=0, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory=False):
        if num_workers == 0 and (prefetch_factor is not None or persistent_workers):
            raise ValueError("prefetch_factor and persistent_workers need num_workers > 0")
        if num_workers == 3:
            raise ValueError("three workers refused")
        self.dataset, self.batch_size, self.num_workers = dataset, batch_size, num_workers
        self.prefetch_factor, self.persistent_workers, self.pin_memory = prefetch_factor, persistent_workers, pin_memory


def patched(tables: dict | None) -> type:
    cls = type("Loader", (Loader,), {"__init__": Loader.__init__})
    assert apply.wrap_init(cls, apply.Applier({"file": "f.toml", "tables": tables} if tables is not None else None))
    assert apply.wrap_init(cls, apply.Applier(None))  # once: a second patch leaves it as it is
    return cls


def test_without_apply_the_loader_is_only_named_and_its_arguments_untouched():
    cls = patched(None)

    def train_dataloader():
        return cls([1], 8, 2, prefetch_factor=4)

    loader = train_dataloader()
    assert (loader.num_workers, loader.prefetch_factor, getattr(loader, apply.ROLE)) == (2, 4, "train")
    assert not hasattr(loader, apply.ASKED)
    assert getattr(cls([1]), apply.ROLE) is None


def test_the_roles_table_wins_over_the_common_one_and_taking_workers_away_drops_worker_settings():
    cls = patched({"": {"num_workers": 0, "pin_memory": True}, "train": {"num_workers": 1}})

    def get_eval_dataloader():
        return cls([1], 8, 2, prefetch_factor=4, persistent_workers=True)

    def train_dataloader():
        return cls([1], 8, 2, prefetch_factor=4)

    val, train = get_eval_dataloader(), train_dataloader()
    assert (val.num_workers, val.prefetch_factor, val.persistent_workers, val.pin_memory) == (0, None, False, True)
    assert getattr(val, apply.APPLIED_KEYS) == ["num_workers", "prefetch_factor", "persistent_workers", "pin_memory"]
    assert getattr(val, apply.ASKED)["num_workers"] == 2 and getattr(val, apply.TABLES_USED) == [""]
    assert (train.num_workers, train.prefetch_factor) == (1, 4)
    assert getattr(train, apply.TABLES_USED) == ["", "train"]

    def prepare_data_loader(dataloader):  # accelerate's re-build copies the loader it is given
        return cls(dataloader.dataset, 8, dataloader.num_workers, prefetch_factor=dataloader.prefetch_factor)

    copy = prepare_data_loader(train)
    assert getattr(copy, apply.ROLE) == "train" and getattr(copy, apply.ASKED) == getattr(train, apply.ASKED)


def test_settings_the_constructor_refuses_fall_back_to_the_scripts_own(capsys):
    cls = patched({"": {"num_workers": 3}})
    loader = cls([1], 8, 1)
    assert loader.num_workers == 1 and getattr(loader, apply.APPLIED_KEYS) == []
    err = capsys.readouterr().err
    assert "could not build a loader with num_workers=3 (three workers refused); it runs with the script's" in err
    with pytest.raises(ValueError, match="need num_workers"):  # the script's own mistake stays its own
        cls([1], 8, 0, prefetch_factor=2)


# ---- frameworks -------------------------------------------------------------------------------------
LIGHTNING = """\
import torch
import lightning as L
from torch.utils.data import DataLoader

def items(n):
    return [(torch.full((4,), float(i)), torch.tensor([float(i)])) for i in range(n)]

class Tiny(L.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
    def training_step(self, batch, i):
        return torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1])
    def validation_step(self, batch, i):
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(batch[0]), batch[1]))
    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
    def train_dataloader(self):
        return DataLoader(items(32), batch_size=4, num_workers=0)
    def val_dataloader(self):
        return DataLoader(items(12), batch_size=3, num_workers=0)

L.Trainer(max_epochs=2, accelerator="cpu", devices=1, num_sanity_val_steps=2, enable_checkpointing=False,
          logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=".").fit(Tiny())
"""


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")
def test_a_per_loader_file_under_a_lightning_fit_reaches_the_train_loader_only(tmp_path):
    per_loader = tmp_path / "per.toml"
    per_loader.write_text("[train_dataloader]\nnum_workers = 2\nbatch_size = 8\n[test_dataloader]\nnum_workers = 1\n")
    script = tmp_path / "fit.py"
    script.write_text(LIGHTNING, encoding="utf-8")
    proc = watch("--json", "--apply", str(per_loader), "--", sys.executable, str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = split_output(proc.stdout)[1]
    loaders = by_role(report)
    assert sorted(loaders) == ["train", "val"]
    train, val = loaders["train"], loaders["val"]
    assert train["asked"]["num_workers"] == 0 and train["settings"]["num_workers"] == 2
    assert train["settings"]["batch_size"] == 4 and train["applied"] == ["num_workers"]
    assert val["settings"]["num_workers"] == 0 and val["applied"] == [] and val["totals"]["steps"] == 2 + 2 * 4
    assert report["apply"]["loaders_matched"] == 1 and report["apply"]["unmatched"] == ["test"]
    assert "[train] batch_size=8; not applied: it changes the training itself" in flat(proc.stderr)
    assert "train loader (DataLoader, num_workers=2" in flat(proc.stderr) and "val loader (DataLoader" in flat(proc.stderr)


@pytest.mark.skipif(importlib.util.find_spec("lightning") is None, reason="lightning is not installed")
def test_loaders_passed_to_fit_are_named_by_the_loop_that_iterates_them_and_get_their_roles_table(tmp_path):
    # issue 28: trainer.fit(model, train, val) with loaders the script built itself; Lightning knows
    # them as train and val, so does the report, and --apply's per-role tables reach them
    script = tmp_path / "fit.py"
    script.write_text(LIGHTNING.replace(".fit(Tiny())", ".fit(Tiny(), DataLoader(items(32), batch_size=4), "
                                                         "DataLoader(items(12), batch_size=3))"), encoding="utf-8")
    per_loader = tmp_path / "per.toml"
    per_loader.write_text("[train_dataloader]\nnum_workers = 1\npersistent_workers = true\n"
                          "[val_dataloader]\npin_memory = true\n")
    proc = watch("--json", "--apply", str(per_loader), "--", sys.executable, str(script), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = split_output(proc.stdout)[1]
    loaders = by_role(report)
    assert sorted(loaders) == ["train", "val"], [e.get("role") for e in report["loaders"]]
    train, val = loaders["train"], loaders["val"]
    assert train["asked"]["num_workers"] == 0 and train["settings"]["num_workers"] == 1
    assert train["settings"]["persistent_workers"] is True and train["settings"]["prefetch_factor"] == 2
    assert sorted(train["applied"]) == ["num_workers", "persistent_workers"]  # prefetch 2: torch's default
    assert [e["steps"] for e in train["epochs"]] == [8, 8]
    assert val["settings"]["num_workers"] == 0 and val["settings"]["pin_memory"] is True
    assert report["apply"]["loaders_matched"] == 2 and report["apply"]["unmatched"] == []


def test_torchrun_ranks_inherit_the_tables(tmp_path):
    pytest.importorskip("torch.distributed")
    settings_file = tmp_path / "fast.json"
    settings_file.write_text(json.dumps({"dataloader": {"num_workers": 1}}))
    script = tmp_path / "train.py"
    script.write_text(SCRIPT.format(code=0), encoding="utf-8")
    proc = watch("--json", "--apply", str(settings_file), "--", sys.executable, "-m", "torch.distributed.run",
                 "--standalone", "--nproc-per-node", "2", str(script), env=env_with_src(), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines, report = split_output(proc.stdout)
    assert [json.loads(line)["workers"] for line in lines if line.startswith("{")] == [1, 1]
    assert sorted(p["rank"] for p in report["processes"]) == [0, 1]
    assert all(e["settings"]["num_workers"] == 1 and e["applied"] == ["num_workers"] for e in report["loaders"])
    assert report["apply"]["loaders_matched"] == 4


def test_the_epilog_and_the_argument_say_what_apply_never_changes():
    proc = watch("--help")
    text = " ".join(proc.stdout.split())  # the epilog's own line breaks aside
    assert "--apply FILE" in text and "batch_size, shuffle and drop_last change the training itself" in text


def test_a_role_table_applied_at_iteration_sets_the_workers_first_and_is_all_or_nothing(capsys):
    import torch

    from loaderdoc.watching import apply

    def _inner_training_loop(loader, applier):  # the HF Trainer's loop: the role "train"
        apply.at_iteration(loader, applier, sys._getframe())

    table = {"multiprocessing_context": "spawn", "num_workers": 2}  # the context's setter needs workers
    loader = torch.utils.data.DataLoader([1, 2, 3], batch_size=1)
    _inner_training_loop(loader, apply.Applier({"file": "f.toml", "tables": {"train": table}}))
    assert getattr(loader, apply.ROLE) == "train" and loader.num_workers == 2
    assert loader.multiprocessing_context is not None and loader.prefetch_factor == 2
    assert sorted(getattr(loader, apply.APPLIED_KEYS)) == ["multiprocessing_context", "num_workers"]

    bad = torch.utils.data.DataLoader([1, 2, 3], batch_size=1)
    _inner_training_loop(bad, apply.Applier({"file": "f.toml", "tables": {"train": {
        "num_workers": 2, "multiprocessing_context": "no-such-method"}}}))
    assert bad.num_workers == 0 and bad.multiprocessing_context is None  # as the script built it
    assert not getattr(bad, apply.APPLIED_KEYS, None)
    assert "runs with the script's own settings" in capsys.readouterr().err
