"""benchmarks/watch_fixes.py's table and fixed-point logic on fake reports (no subprocess, no torch)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# by path: `pytest` (the README's line) does not put the repository root on sys.path
_spec = importlib.util.spec_from_file_location(
    "_loaderdoc_bench_watch_fixes", Path(__file__).resolve().parents[1] / "benchmarks" / "watch_fixes.py")
wf = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wf)


def loader(number: int, role: str | None = None, *, waits: int = 100, wait_s: float = 15.0, step_s: float = 5.0,
           workers: int = 0, script: int | None = None, change: dict | None = None, rules: tuple = ("starved",),
           gain: float | None = None, ceiling: float | None = None) -> dict:
    """A report's loader entry; ``script``: what the script asked where --apply changed it."""
    entry = {"loader": number, "role": role, "settings": {"num_workers": workers},
             "totals": {"steps": waits + 3, "waits": waits, "wait_s": wait_s, "step_s": step_s},
             "cpu": {"ceiling_per_s": ceiling, "rate_per_s": None, "load_is_cpu": True, "saturated": False}
             if ceiling is not None else None,
             "proposed": {"change": change, "rules": list(rules), "expected_gain": gain} if change else None}
    if script is not None and script != workers:
        entry.update(asked={"num_workers": script}, applied=["num_workers"])
    return entry


def report(*loaders: dict) -> dict:
    return {"loaders": list(loaders), "findings": []}


def plain(workers: int = 0, change: dict | None = None, gain: float | None = None, *, wait_s: float = 15.0,
          step_s: float = 5.0, ceiling: float | None = None, script: int = 0) -> dict:
    """A script's two unnamed loaders (val: loader 1, few waits; train: loader 2), both at ``workers``
    (an [dataloader] table goes to every loader); the train loader proposes ``change``."""
    return report(loader(1, waits=7, wait_s=5.0, step_s=0.1, workers=workers, script=script),
                  loader(2, wait_s=wait_s, step_s=step_s, workers=workers, script=script, change=change, gain=gain,
                         ceiling=ceiling))


def test_rate_and_ceiling_are_the_train_loaders():
    r = plain(wait_s=15.0, step_s=5.0, ceiling=12.5)
    assert wf.steady_rate(r) == pytest.approx(5.0)  # 100 waits / 20 s; val ignored
    assert wf.cpu_ceiling(r) == pytest.approx(12.5)
    assert wf.steady_rate({"loaders": []}) is None and wf.cpu_ceiling({"loaders": []}) is None
    named = report(loader(1, "val", waits=500, wait_s=1, step_s=1), loader(2, "train", waits=10, wait_s=1, step_s=1))
    assert wf.train_loader(named)["loader"] == 2  # the role wins over the waits


def test_proposals_per_loader_the_train_loaders_first_with_its_gain():
    r = report(loader(1, "val", waits=7, change={"num_workers": 4}, rules=("watch-data-starved",)),
               loader(2, "train", change={"num_workers": 1, "pin_memory": True}, gain=1.4,
                      rules=("watch-data-starved", "pin-memory")),
               loader(3, "test"))
    props = wf.proposals(r)
    assert [(p["loader"], p["train"]) for p in props] == [(2, True), (1, False)]
    assert wf.expected_gain(props) == pytest.approx(1.4)
    assert wf.proposals_text(props) == ("train: num_workers=1, pin_memory=True (watch-data-starved, pin-memory); "
                                        "val: num_workers=4 (watch-data-starved)")
    assert wf.proposals_text(wf.proposals(plain(0, {"num_workers": 2}))) == "loader 2: num_workers=2 (starved)"
    # the round's expected gain is the train loader's: none where only val proposes
    only_val = report(loader(1, "val", change={"num_workers": 2}, gain=2.0), loader(2, "train"))
    assert wf.expected_gain(wf.proposals(only_val)) is None
    assert wf.proposals_text([]) == "none"


def test_repeats_that_disagree_take_the_majority():
    a, b = {"dataloader": {"num_workers": 3}}, {"dataloader": {"num_workers": 2}}
    assert wf.pick_tables([a, b, b]) == (b, 1)
    assert wf.pick_tables([a, b]) == (a, 0)
    assert wf.pick_tables([{}, a, {}]) == ({}, 0)
    assert wf.pick_tables([]) == ({}, -1)


def test_tables_less_what_the_script_sets_itself():
    base = report(loader(1, "val", workers=4), loader(2, "train", workers=0))
    tables = {"train_dataloader": {"num_workers": 0, "pin_memory": True}, "val_dataloader": {"num_workers": 4}}
    assert wf.normalized(tables, base) == {"train_dataloader": {"pin_memory": True}}
    # [dataloader] goes to every loader: a value is the script's own only where all of them ran with it
    assert wf.normalized({"dataloader": {"num_workers": 4}}, base) == {"dataloader": {"num_workers": 4}}
    assert wf.normalized({"dataloader": {"num_workers": 0}}, plain(0)) == {}
    assert wf.normalized({"test_dataloader": {"num_workers": 0}}, base) == {"test_dataloader": {"num_workers": 0}}


def test_settings_seen_per_role_and_dataloader_for_every_loader():
    r = report(loader(1, "val", workers=1), loader(2, "train", workers=2))
    assert wf.settings_seen(r, {}) is None
    assert wf.settings_seen(r, {"train_dataloader": {"num_workers": 2}, "val_dataloader": {"num_workers": 1}})
    assert wf.settings_seen(r, {"train_dataloader": {"num_workers": 1}}) is False
    assert wf.settings_seen(r, {"dataloader": {"num_workers": 2}}) is False  # val ran with 1
    assert wf.settings_seen(plain(2), {"dataloader": {"num_workers": 2}})
    assert wf.settings_seen(r, {"test_dataloader": {"num_workers": 2}}) is False  # no test loader ran


def test_tables_text():
    assert wf.tables_text({"val_dataloader": {"num_workers": 1}, "train_dataloader": {"num_workers": 2}}) == (
        "train: num_workers=2; val: num_workers=1")
    assert wf.tables_text({"dataloader": {"num_workers": 2, "pin_memory": True}}) == "all: num_workers=2, pin_memory=True"
    assert wf.tables_text({}) == "(script's own)"


def scripted(plan: dict):
    """A fake runner: the reports each applied configuration gives (keyed by its tables_text), each
    repeat's --fixes file named after its round and repeat where fix_tables gives tables."""
    calls = []

    def run(tables, apply_file):
        calls.append((wf.tables_text(tables), apply_file))
        k = len(calls) - 1
        return [(r, f"r{k}-{i}.toml" if wf.fix_tables(r)[0] else None) for i, r in enumerate(plan[wf.tables_text(tables)])]
    return run, calls


def test_fixed_point_after_one_application_with_gains_and_ceilings():
    run, calls = scripted({
        "(script's own)": [plain(0, {"num_workers": 2}, 1.8, ceiling=11.0),
                           plain(0, {"num_workers": 2}, 1.7, wait_s=16, step_s=4, ceiling=13.0)],
        "all: num_workers=2": [plain(2, wait_s=2, step_s=8), plain(2, wait_s=2, step_s=8)],
    })
    res = wf.iterate(run, max_applications=3)
    assert calls == [("(script's own)", None), ("all: num_workers=2", "r0-0.toml")]
    assert res["outcome"] == "fixed-point" and res["fixed_point"] and res["applications"] == 1
    first, second = res["rounds"]
    assert first["rates"] == [pytest.approx(5.0), pytest.approx(5.0)]
    assert first["ceiling"] == pytest.approx(12.0) and first["ceilings"] == [11.0, 13.0]
    assert first["next_tables"] == {"dataloader": {"num_workers": 2}}
    assert first["expected_gain"] == pytest.approx(1.8)  # the first repeat writing the taken tables
    assert first["measured_gain"] == pytest.approx(2.0)  # 10 steps/s after, 5 before
    # the second round's file keeps what --apply set, and proposes nothing more
    assert second["settings_seen"] == [True, True] and second["next_tables"] == {"dataloader": {"num_workers": 2}}
    assert second["proposals"] == [] and second["measured_gain"] is None and second["ceiling"] is None
    text = wf.table({"loop": res})
    assert "all: num_workers=2" in text and "loader 2: num_workers=2 (starved)" in text and "12.0" in text
    assert "fixed-point after 1 application(s)" in text


def test_nothing_proposed_in_round_0_is_a_fixed_point():
    run, calls = scripted({"(script's own)": [plain(0), plain(0)]})
    res = wf.iterate(run, 3)
    assert res["outcome"] == "fixed-point" and res["applications"] == 0 and len(calls) == 1
    # proposing what the script already has is nothing new either
    run, calls = scripted({"(script's own)": [plain(2, {"num_workers": 2}, script=2)]})
    assert wf.iterate(run, 3)["outcome"] == "fixed-point" and len(calls) == 1


def test_per_role_tables_lightning_style():
    def fit(train: int, val: int, *, train_change=None, val_change=None, step_s=5.0):
        return report(loader(1, "train", workers=train, script=0, change=train_change, step_s=step_s, gain=1.3),
                      loader(2, "val", waits=30, workers=val, script=0, change=val_change))
    run, calls = scripted({
        "(script's own)": [fit(0, 0, train_change={"num_workers": 1}, val_change={"num_workers": 4})],
        "train: num_workers=1; val: num_workers=4": [fit(1, 4, step_s=2.0)],
    })
    res = wf.iterate(run, 3)
    assert [c[0] for c in calls] == ["(script's own)", "train: num_workers=1; val: num_workers=4"]
    assert res["outcome"] == "fixed-point"
    first, second = res["rounds"]
    assert first["next_tables"] == {"train_dataloader": {"num_workers": 1}, "val_dataloader": {"num_workers": 4}}
    assert first["expected_gain"] == pytest.approx(1.3)
    assert wf.proposals_text(first["proposals"]) == "train: num_workers=1 (starved); val: num_workers=4 (starved)"
    assert second["settings_seen"] == [True]


def test_a_change_back_to_a_tried_configuration_is_a_cycle():
    run, calls = scripted({
        "(script's own)": [plain(8, {"num_workers": 1}, script=8)],
        "all: num_workers=1": [plain(1, {"num_workers": 5}, script=8)],
        "all: num_workers=5": [plain(5, {"num_workers": 1}, script=8)],
    })
    res = wf.iterate(run, max_applications=5)
    assert [c[0] for c in calls] == ["(script's own)", "all: num_workers=1", "all: num_workers=5"]
    assert res["outcome"] == "cycle" and not res["fixed_point"] and res["applications"] == 2
    # back to the script's own value is back to round 0
    run, _ = scripted({
        "(script's own)": [plain(0, {"num_workers": 1})],
        "all: num_workers=1": [plain(1, {"num_workers": 0})],
    })
    res = wf.iterate(run, 3)
    assert res["outcome"] == "cycle" and res["applications"] == 1


def test_max_applications_and_dry_run_and_failure_stop():
    plan = {"(script's own)": [plain(0, {"num_workers": 1})]}
    plan.update({f"all: num_workers={n}": [plain(n, {"num_workers": n + 1})] for n in range(1, 6)})
    res = wf.iterate(scripted(plan)[0], max_applications=3)
    assert res["outcome"] == "max-applications" and res["applications"] == 3 and len(res["rounds"]) == 4
    run, calls = scripted(plan)
    dry = wf.iterate(run, max_applications=3, dry_run=True)
    assert dry["outcome"] == "dry-run" and len(dry["rounds"]) == 1 and not dry["fixed_point"] and len(calls) == 1

    def broken(tables, apply_file):
        raise RuntimeError("exit 1")
    assert wf.iterate(broken, 3)["outcome"] == "failed: exit 1"


def test_an_apply_that_did_not_take_is_flagged():
    run, _ = scripted({
        "(script's own)": [plain(0, {"num_workers": 2})],
        "all: num_workers=2": [plain(0, {"num_workers": 2})],  # the loaders kept 0
    })
    res = wf.iterate(run, 3)
    assert res["rounds"][1]["settings_seen"] == [False]
    assert res["outcome"] == "not-applied" and not res["fixed_point"]
    assert "(NOT applied)" in wf.table({"loop": res})
