"""benchmarks/watch_fixes.py's table and fixed-point logic on fake reports (no subprocess, no torch)."""

from __future__ import annotations

import pytest

from benchmarks import watch_fixes as wf


def report(waits: int, wait_s: float, step_s: float, *findings: dict, workers: int = 0) -> dict:
    train = {"loader": 2, "settings": {"num_workers": workers},
             "totals": {"steps": waits + 3, "waits": waits, "wait_s": wait_s, "step_s": step_s}}
    val = {"loader": 1, "settings": {"num_workers": 0},
           "totals": {"steps": 10, "waits": 7, "wait_s": 5.0, "step_s": 0.1}}
    return {"loaders": [val, train], "findings": list(findings)}


def finding(rule: str, change: dict, gain: float | None = None, severity: str = "critical") -> dict:
    out = {"rule_id": rule, "severity": severity, "symptom": rule, "settings_change": change}
    if gain is not None:
        out["expected_gain"] = gain
    return out


def test_rate_is_the_train_loaders_steady_rate():
    assert wf.steady_rate(report(100, 15.0, 5.0)) == pytest.approx(5.0)  # 100 waits / 20 s; val ignored
    assert wf.steady_rate({"loaders": []}) is None


def test_changes_merge_most_severe_first_and_gain_multiplies():
    props = wf.proposals(report(10, 1, 1, finding("a", {"num_workers": 2}, 1.5),
                                finding("b", {"num_workers": 4, "pin_memory": True}, 1.2, "warning"),
                                finding("ok", {}, severity="ok")))
    change = wf.merged_change(props)
    assert change == {"num_workers": 2, "pin_memory": True}
    assert wf.expected_gain(props, change) == pytest.approx(1.5)  # b's num_workers=4 is not applied
    assert wf.expected_gain(wf.proposals(report(10, 1, 1, finding("a", {"num_workers": 2}))), {"num_workers": 2}) is None


def test_the_train_loaders_finding_comes_first():
    props = wf.proposals(report(10, 1, 1, finding("starved", {"num_workers": 4}) | {"symptom": "loader 1 (val) is starved"},
                                finding("starved", {"num_workers": 1}) | {"symptom": "loader 2 (train) is starved"}))
    assert [p["loader"] for p in props] == [2, 1]
    assert wf.merged_change(props) == {"num_workers": 1}


def test_repeats_that_disagree_take_the_majority():
    assert wf.pick_change([{"num_workers": 3}, {"num_workers": 2}, {"num_workers": 2}]) == {"num_workers": 2}
    assert wf.pick_change([{"num_workers": 3}, {"num_workers": 2}]) == {"num_workers": 3}
    assert wf.pick_change([]) == {}


def test_proposing_what_the_script_already_has_is_a_fixed_point():
    assert wf.next_settings({}, {"num_workers": 0}, {"num_workers": 0, "pin_memory": False}) is None
    assert wf.next_settings({}, {"num_workers": 2}, {"num_workers": 0}) == {"num_workers": 2}
    assert wf.next_settings({"num_workers": 2}, {"num_workers": 2}) is None


def test_settings_file_is_a_dataloader_table():
    assert wf.to_toml({"pin_memory": False, "num_workers": 2, "prefetch_factor": None}) == (
        '[dataloader]\nnum_workers = 2\npin_memory = false\nprefetch_factor = "none"\n')


def scripted(plan: dict):
    """A fake runner: the reports each applied configuration gives (keyed by num_workers)."""
    calls = []

    def run(settings):
        calls.append(dict(settings))
        return plan[settings.get("num_workers", 0)]
    return run, calls


def test_fixed_point_after_one_application_with_gains():
    run, calls = scripted({
        0: [report(100, 15, 5, finding("starved", {"num_workers": 2}, 1.8)),
            report(100, 16, 4, finding("starved", {"num_workers": 2}, 1.7))],
        2: [report(100, 2, 8, workers=2), report(100, 2, 8, workers=2)],
    })
    res = wf.iterate(run, max_applications=3)
    assert calls == [{}, {"num_workers": 2}]
    assert res["outcome"] == "fixed-point" and res["fixed_point"] and res["applications"] == 1
    first, second = res["rounds"]
    assert first["rates"] == [pytest.approx(5.0), pytest.approx(5.0)]
    assert first["expected_gain"] == pytest.approx(1.8)  # the first repeat proposing the taken change
    assert first["measured_gain"] == pytest.approx(2.0)  # 10 steps/s after, 5 before
    assert second["settings_seen"] == [True, True] and second["change"] == {} and second["measured_gain"] is None
    assert "fixed-point after 1 application(s)" in wf.table({"loop": res})


def test_a_change_back_to_a_tried_configuration_is_a_cycle():
    run, _ = scripted({
        0: [report(50, 1, 1, finding("oversubscribed", {"num_workers": 1}))],
        1: [report(50, 3, 1, finding("starved", {"num_workers": 0}), workers=1)],
    })
    res = wf.iterate(run, max_applications=3)
    assert res["outcome"] == "cycle" and not res["fixed_point"] and res["applications"] == 1


def test_max_applications_and_dry_run_and_failure_stop():
    plan = {n: [report(10, 1, 1, finding("more", {"num_workers": n + 1}), workers=n)] for n in range(6)}
    res = wf.iterate(scripted(plan)[0], max_applications=3)
    assert res["outcome"] == "max-applications" and res["applications"] == 3 and len(res["rounds"]) == 4
    dry = wf.iterate(scripted(plan)[0], max_applications=3, dry_run=True)
    assert dry["outcome"] == "dry-run" and len(dry["rounds"]) == 1 and not dry["fixed_point"]

    def broken(settings):
        raise RuntimeError("exit 1")
    assert wf.iterate(broken, 3)["outcome"] == "failed: exit 1"


def test_an_apply_that_did_not_take_is_flagged():
    run, _ = scripted({
        0: [report(10, 1, 1, finding("starved", {"num_workers": 2}))],
        2: [report(10, 1, 1, finding("starved", {"num_workers": 2}), workers=0)],  # the loader kept 0
    })
    res = wf.iterate(run, 3)
    assert res["rounds"][1]["settings_seen"] == [False]
    assert res["outcome"] == "not-applied" and not res["fixed_point"]
    assert "(NOT applied)" in wf.table({"loop": res})
