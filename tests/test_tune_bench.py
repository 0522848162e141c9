"""benchmarks/tune_vs_grid.py's grid, verdicts and table on fake numbers (no run, no torch)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

# by path: `pytest` (the README's line) does not put the repository root on sys.path
_spec = importlib.util.spec_from_file_location(
    "_loaderdoc_bench_tune_vs_grid", Path(__file__).resolve().parents[1] / "benchmarks" / "tune_vs_grid.py")
tvg = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = tvg  # its dataclasses look their module up there
_spec.loader.exec_module(tvg)

MIB = 2**20


def run(rate: float | None, pss_mib: float = 0.0, duration: float = 10.0, status: str = "ok") -> dict:
    return {"steps_per_s": rate, "workers_pss_bytes": int(pss_mib * MIB) or None, "duration_s": duration,
            "status": status if rate else "failed"}


def row(key: tuple, *rates: float | None, pss_mib: float | None = None, duration: float = 10.0,
        extra: bool = False) -> dict:
    pss = 100.0 * key[0] if pss_mib is None else pss_mib
    return {"key": list(tvg.as_key(key)), "runs": [run(r, pss, duration) for r in rates], "extra": extra}


def result(grid: list[dict], pick: tuple | None, wall_s: float, probe: dict | None = None) -> dict:
    return {"job": "cpu_cnn", "grid": grid,
            "tune": {"pick": list(tvg.as_key(pick)) if pick else None, "wall_s": wall_s, "pick_steps_per_s": 7.0,
                     "trials": [{"key": [0, 0], "steps_per_s": 6.0, "status": "ok"},
                                {"key": [2, 2], "steps_per_s": 7.0, "status": "ok"},
                                {"key": [3, 2], "steps_per_s": None, "status": "failed"}]},
            "probe": probe if probe is not None else {"skipped": "Trainer.fit"}}


def grid_of() -> list[dict]:
    """0: 6.0; 1: 6.8; 2: 7.0 (7.2 and 6.8 over two runs); 3: 7.1 / 7.15; 4: 6.5. 120 s in one pass."""
    return [row((0, 0), 6.0), row((1, 2), 6.8), row((2, 2), 7.2, 6.8), row((2, 4), 6.9),
            row((3, 2), 7.1, 7.1), row((3, 4), 7.15, 7.15), row((4, 2), 6.5), row((4, 4), 6.5)]


def test_grid_keys_cover_four_times_the_cpus_at_two_depths():
    keys = tvg.grid_keys(2)
    assert keys[0] == (0, 0, False) and len(keys) == 17 and keys[-1] == (8, 4, False)
    assert {k[1] for k in keys if k[0]} == {2, 4} and len(set(keys)) == len(keys) and not any(k[2] for k in keys)
    assert tvg.grid_keys(2, quick=True) == [(0, 0, False), (2, 2, False), (4, 2, False)]
    assert tvg.key_of(0, 4, True) == (0, 0, False) and tvg.key_of(3, None) == (3, 2, False)
    assert tvg.key_of(3, 4, True) == (3, 4, True)
    assert tvg.as_key([2, 2]) == (2, 2, False) and tvg.as_key([2, 4, True]) == (2, 4, True)  # old files: 2 long
    assert [tvg.key_text(k) for k in ((0, 0), (3, 4), [3, 2, True], None)] == ["0", "3/pf4", "3/pf2/pw", "-"]
    # tune's TrialSettings and the probe's LoaderSettings, as their reports write them
    assert tvg.settings_key({"num_workers": 2, "prefetch_factor": None, "persistent_workers": None}) == (2, 2, False)
    assert tvg.settings_key({"num_workers": 2, "prefetch_factor": 4, "persistent_workers": True}) == (2, 4, True)


def test_best_lean_spread_and_grid_time():
    grid = {tvg.as_key(r["key"]): r for r in grid_of()}
    rates = tvg.rates_of(grid)
    assert rates[(2, 2, False)] == pytest.approx(7.0)  # the mean of its runs
    best, lean = tvg.best_and_lean(rates, {k: tvg.row_pss(r) for k, r in grid.items()})
    assert best == (3, 4, False)
    assert lean == (2, 2, False)  # 7.0 >= 0.97 * 7.15; 1 worker (6.8) is not; the fewer workers, then the less PSS
    assert tvg.spread(grid) == pytest.approx(0.4 / 7.2)
    assert tvg.grid_seconds(grid) == pytest.approx(80.0)  # the first run of each, reruns not counted
    grid[(5, 2, False)] = row((5, 2), 9.0, extra=True)
    assert tvg.grid_seconds(grid) == pytest.approx(80.0)  # nor extras
    assert tvg.rerun_keys(grid, 3) == [(2, 2, False), (3, 4, False), (3, 2, False)]  # extras are not rerun
    assert tvg.best_and_lean({}, {}) == (None, None)
    assert tvg.spread({(0, 0, False): row((0, 0), 6.0)}) is None


def test_a_lean_fast_quick_pick_passes():
    res = tvg.judge(result(grid_of(), (2, 2), wall_s=20.0))
    v = res["verdict"]
    assert res["best"] == [3, 4, False] and res["lean"] == [2, 2, False] and res["grid_configs"] == 8
    assert v["share_of_best"] == pytest.approx(7.0 / 7.15)
    assert v["time_share"] == pytest.approx(0.25)
    assert v["fast_enough"] and v["quick_enough"] and v["lean_enough"] and v["passed"]
    assert not v["within_noise_only"]
    assert tvg.verdict_text(res) == "yes"


def test_speed_within_the_grids_spread_passes_and_says_so():
    # 1 worker at 6.8 is 95 % of 7.15: under 97 %, but the grid's own runs differ by 5.6 %
    res = tvg.judge(result(grid_of(), (1, 2), wall_s=10.0))
    v = res["verdict"]
    assert v["share_of_best"] == pytest.approx(6.8 / 7.15)
    assert v["fast_enough"] and v["within_noise_only"] and v["lean_enough"]
    assert tvg.verdict_text(res) == "yes (speed within the grid's noise)"
    # without reruns there is no spread to allow for
    flat = [row(tuple(r["key"]), r["runs"][0]["steps_per_s"]) for r in grid_of()]
    assert not tvg.judge(result(flat, (1, 2), wall_s=10.0))["verdict"]["fast_enough"]


def test_slow_costly_or_fat_picks_fail_each_bar():
    slow = tvg.judge(result(grid_of(), (0, 0), wall_s=10.0))
    assert not slow["verdict"]["fast_enough"] and slow["verdict"]["lean_enough"]
    long = tvg.judge(result(grid_of(), (2, 2), wall_s=21.0))
    assert not long["verdict"]["quick_enough"]
    fat = tvg.judge(result(grid_of(), (3, 4), wall_s=10.0))
    assert fat["verdict"]["fast_enough"] and not fat["verdict"]["lean_enough"]
    assert tvg.verdict_text(fat) == "no: memory"
    none = tvg.judge(result(grid_of(), None, wall_s=10.0))
    assert not none["verdict"]["passed"] and none["verdict"]["share_of_best"] is None
    assert tvg.verdict_text(none) == "no: speed, memory"
    # tune's persistent twin is not the grid's row of the same workers: its own extra row
    twin = tvg.judge(result(grid_of() + [row((2, 2, True), 7.3, extra=True)], (2, 2, True), wall_s=10.0))
    assert twin["best"] == [2, 2, True] and twin["verdict"]["share_of_best"] == pytest.approx(1.0)
    assert twin["verdict"]["passed"] and twin["grid_configs"] == 8
    # a pick outside the grid, measured as an extra row, is judged on it
    extra = tvg.judge(result(grid_of() + [row((9, 2), 7.0, extra=True)], (9, 2), wall_s=10.0))
    assert extra["verdict"]["share_of_best"] == pytest.approx(7.0 / 7.15) and not extra["verdict"]["lean_enough"]


def test_failed_runs_are_not_rates():
    grid = grid_of() + [row((5, 2), None), row((6, 2), 9.0, None)]
    res = tvg.judge(result(grid, (2, 2), wall_s=10.0))
    assert res["best"] == [6, 2, False]  # its failed rerun is left out of the mean
    assert tvg.row_rate(row((5, 2), None)) is None and tvg.row_pss(row((5, 2), None)) is None


def test_the_probes_pick_is_judged_against_the_grid_too():
    probe = {"pick": [3, 2], "predicted_per_s": 8.0, "measured_per_s": 7.9, "wall_s": 31.0}
    res = tvg.judge(result(grid_of(), (2, 2), wall_s=10.0, probe=probe))
    assert res["probe"]["grid_steps_per_s"] == pytest.approx(7.1)
    assert res["probe"]["share_of_best"] == pytest.approx(7.1 / 7.15)
    assert tvg.probe_text(res) == "3/pf2 (pred 8.0 / meas 7.9; grid 7.1 = 99%; 31 s)"
    assert tvg.probe_text(result([], None, 1.0)) == "not probed: Trainer.fit"
    assert tvg.probe_text({"probe": {"error": "exit 4, no JSON"}}) == "no pick (exit 4, no JSON)"


def test_table_rows_and_the_saved_file_round_trip(tmp_path):
    res = tvg.judge(result(grid_of(), (2, 2), wall_s=20.0))
    text = tvg.table([res])
    head, line = text.splitlines()
    assert head.split()[0] == "job" and "pass" in head
    assert line.startswith("cpu_cnn")
    for part in ("3/pf4 (7.2)", "2/pf2 (7.0, 200 MiB)", "6%", "80 (8)", "2/pf2 (7.0 in tune)", "7.0 = 98%",
                 "20 (25%)", "0:6.0 2/pf2:7.0 3/pf2:failed", "not probed: Trainer.fit", "yes"):
        assert part in line, part
    grid = tvg.grid_table(res).splitlines()
    assert len(grid) == 1 + 8 and "2/pf2" in grid[3] and "7.2 6.8" in grid[3]
    saved = tmp_path / "run.json"
    saved.write_text(json.dumps({"jobs": [res]}))
    assert tvg.main(["--table-from", str(saved)]) == 0
    failed = tvg.judge({"job": "io_bound", "grid": [], "tune": {"error": "exit 4, no report", "wall_s": 5.0},
                        "probe": {}})
    assert "no pick (exit 4, no report)" in tvg.table([failed])


def test_dry_run_lists_the_commands(capsys):
    assert tvg.main(["--dry-run", "--jobs", "io_bound,lightning_fit", "--steps", "30"]) == 0
    out = capsys.readouterr().out
    assert "tune --report R.json --steps 30 --" in out and "io_bound.py --steps 1000000" in out
    assert "--dataset benchmarks.tune_vs_grid:io_bound_dataset --batch-size 8" in out
    assert "lightning_fit.py --epochs 1000000" in out and "not probed" in out
    with pytest.raises(SystemExit):
        tvg.main(["--dry-run", "--jobs", "nope"])


def _fake(monkeypatch, name: str, script: str) -> None:
    """``name`` (tune_command / probe_command) runs ``script`` in a Python of its own instead."""
    import sys

    def command(job, *args):
        report = next((str(a) for a in args if isinstance(a, Path)), "")
        return [sys.executable, "-c", script, report]

    monkeypatch.setattr(tvg, name, command)


TUNE_REPORT = {
    "schema": "loaderdoc.tune/1", "loader": {"key": "site:/x/cpu_cnn.py:35"}, "stopped": "settled", "elapsed_s": 50.0,
    "trials": [
        {"number": 1, "settings": {"num_workers": 0, "prefetch_factor": None, "persistent_workers": False},
         "status": "ok", "steps_per_s": 6.0, "step_ms": 120.5, "duration_s": 20.0, "purpose": "your settings"},
        {"number": 2, "settings": {"num_workers": 2, "prefetch_factor": None, "persistent_workers": True},
         "status": "ok", "steps_per_s": 7.1, "step_ms": 121.0, "duration_s": 25.0, "purpose": "twin"},
        {"number": 3, "settings": {"num_workers": 3, "prefetch_factor": 4, "persistent_workers": None},
         "status": "failed", "steps_per_s": None, "duration_s": 5.0, "purpose": "climb"}],
    "pick": {"settings": {"num_workers": 2, "prefetch_factor": None, "persistent_workers": True},
             "steps_per_s": 7.1, "trial": 2, "reason": "r"},
}


def test_tunes_report_is_read_and_its_progress_shown(monkeypatch, tmp_path, capsys):
    script = ("import json, sys; print('loaderdoc tune: trial 1: your settings ...', file=sys.stderr); "
              "print('the table'); open(sys.argv[1], 'w').write(" + repr(json.dumps(TUNE_REPORT)) + ")")
    _fake(monkeypatch, "tune_command", script)
    out = tvg.run_tune(tvg.JOBS["cpu_cnn"], 40, tmp_path)
    assert "    | loaderdoc tune: trial 1: your settings ..." in capsys.readouterr().out
    assert out["exit_code"] == 0 and out["table"] == ["the table"] and out["key"] == "site:/x/cpu_cnn.py:35"
    assert out["pick"] == [2, 2, True] and out["pick_steps_per_s"] == 7.1 and out["first_step_ms"] == 120.5
    assert [t["key"] for t in out["trials"]] == [[0, 0, False], [2, 2, True], [3, 4, False]]
    assert tvg.trials_text(out["trials"]) == "0:6.0 2/pf2/pw:7.1 3/pf4:failed"
    _fake(monkeypatch, "tune_command", "import sys; print('boom', file=sys.stderr); sys.exit(4)")
    (tmp_path / "again").mkdir()  # no report there
    failed = tvg.run_tune(tvg.JOBS["cpu_cnn"], 40, tmp_path / "again")
    assert failed["error"] == "exit 4, no report" and failed["stderr_tail"] == ["boom"]


def test_the_probes_json_is_read(monkeypatch):
    doc = {"elapsed_s": 12.0, "stopped": "settled", "results": [{}, {}, {}],
           "recommended": {"num_workers": 3, "prefetch_factor": 2, "persistent_workers": False},
           "prediction": {"pick_predicted_per_s": 8.0, "pick_measured_per_s": 7.5}}
    _fake(monkeypatch, "probe_command", "import json; print(json.dumps(" + repr(doc) + "))")
    out = tvg.run_probe(tvg.JOBS["io_bound"], 17.0)
    assert out["pick"] == [3, 2, False] and out["runs"] == 3
    assert (out["predicted_per_s"], out["measured_per_s"], out["step_ms"]) == (8.0, 7.5, 17.0)
    assert tvg.run_probe(tvg.JOBS["lightning_fit"], 17.0) == {"skipped": tvg.JOBS["lightning_fit"].why_not_probed}
    assert "error" in tvg.run_probe(tvg.JOBS["io_bound"], None)
    _fake(monkeypatch, "probe_command", "import sys; sys.exit(4)")
    assert tvg.run_probe(tvg.JOBS["io_bound"], 17.0)["error"] == "exit 4, no JSON"
