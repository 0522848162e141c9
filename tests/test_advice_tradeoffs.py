"""Trade-off tables on recorded machines: exact arithmetic, measured vs computed kept apart."""

from __future__ import annotations

import json

from support.scenarios import get_scenario, measured, report

from loaderdoc.advice.knobs import KNOBS, explain
from loaderdoc.advice.tradeoffs import KNOB_ORDER, to_dict, tradeoffs
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.system.facts import MiB, Reading
from loaderdoc.system.fixtures import load_machine
from loaderdoc.text.tradeoffs import knob_text


def by_knob(items):
    return {t.knob: t for t in items}


def test_prefetch_arithmetic_in_dockers_64_mib_shm():
    s = LoaderSettings(batch_size=64, num_workers=6, prefetch_factor=4)
    t = by_knob(tradeoffs(load_machine("docker-64m-shm"), s, batch_bytes=19 * MiB))["prefetch_factor"]
    assert t.current == 4
    assert t.evidence == ["now: 4 x 6 x 19 MiB = 456 MiB of /dev/shm, 64 MiB free (computed)"]
    assert t.raising == "prefetch_factor 8 holds 8 x 6 x 19 MiB = 912 MiB of /dev/shm, 64 MiB free (computed)"
    assert t.lowering.startswith("prefetch_factor 2 holds 2 x 6 x 19 MiB = 228 MiB, 64 MiB free")
    rows = {r.value: r for r in t.rows}
    assert sorted(rows) == [1, 2, 4, 8]
    assert rows[4].current and rows[4].data["shm_bytes"] == 4 * 6 * 19 * MiB and rows[4].fits is False
    assert rows[1].data["batches_in_flight"] == 6 and rows[1].cells["fits /dev/shm"] == "no"  # 114 MiB
    assert not any(r.measured for r in t.rows)


def test_num_workers_from_probe_measurements_matches_the_issue_example():
    probe = report([
        measured(2, bps=5.0, starved=55, pss_mib=400),
        measured(4, bps=9.0, starved=20, pss_mib=760),
        measured(6, bps=11.6, starved=4, pss_mib=1120),
        measured(8, bps=11.8, starved=3, pss_mib=1480),
    ], batch_bytes=19 * MiB)
    s = LoaderSettings(batch_size=64, num_workers=4, persistent_workers=True)
    facts = load_machine("laptop-rtx3050")
    facts.memory.available = Reading.of(11 * 1024 * MiB, "/proc/meminfo")
    t = by_knob(tradeoffs(facts, s, probe=probe))["num_workers"]
    assert t.raising.startswith("+1 worker ≈ +180 MiB PSS (measured; memory budget 11 GiB); throughput flat "
                                "beyond 6 workers (11.6 batches/s at 6, 11.8 at 8, measured)")
    assert "+38 MiB of /dev/shm per worker (2 x 19 MiB;" in t.raising
    assert t.lowering.startswith("at 2 workers: 5.0 batches/s, the step waits 55% (measured)")
    assert [r.value for r in t.rows] == [2, 4, 6, 8]
    assert all(r.measured for r in t.rows)
    assert [r.current for r in t.rows] == [False, True, False, False]
    assert t.rows[1].cells["batches/s"] == "9.0" and t.rows[1].cells["worker PSS"] == "760 MiB"
    assert t.rows[3].cells["/dev/shm in flight"] == "2 x 8 x 19 MiB = 304 MiB"


def test_without_a_probe_nothing_claims_to_be_measured():
    facts = load_machine("k8s-4cpu-quota")
    items = tradeoffs(facts, LoaderSettings(batch_size=64, num_workers=3), batch_bytes=64 * 3 * 32 * 32)
    assert not any(r.measured for t in items for r in t.rows)
    text = knob_text(items)
    assert "(measured)" not in text and "batches/s" not in by_knob(items)["num_workers"].columns
    nw = by_knob(items)["num_workers"]
    # candidates: powers of two up to twice the 4-CPU quota, the current value, and the quota-based target
    assert [r.value for r in nw.rows] == [0, 1, 2, 3, 4, 8]
    assert nw.rows[3].cells["CPUs used / per rank"] == "4 / 4"
    assert "CPU room: 4 CPUs per rank, 3 workers + the training process use 4" in nw.raising


def test_ranks_on_a_node_share_dev_shm():
    facts = load_machine("h100x8-node")
    facts.distributed.local_world_size = Reading.of(8, "LOCAL_WORLD_SIZE")
    s = LoaderSettings(batch_size=256, num_workers=8, pin_memory=True, persistent_workers=True)
    t = by_knob(tradeoffs(facts, s, batch_bytes=36 * MiB))["prefetch_factor"]
    row = next(r for r in t.rows if r.current)
    assert row.cells["/dev/shm"] == "2 x 8 x 36 MiB x 8 ranks = 4.5 GiB"
    assert row.data["shm_bytes"] == 2 * 8 * 36 * MiB * 8


def test_pin_memory_on_a_cpu_box_has_no_effect():
    t = by_knob(tradeoffs(load_machine("ci-2core"), LoaderSettings(num_workers=1, pin_memory=True)))["pin_memory"]
    assert "no usable GPU" in t.raising and t.note


def test_pin_memory_copy_times_come_from_the_probe():
    sc = get_scenario("laptop-pageable-copies")
    t = by_knob(tradeoffs(sc.facts(), sc.settings, batch_bytes=sc.batch_bytes, probe=sc.probe))["pin_memory"]
    # medians of (12.4, 12.5) and (4.1, 4.0) with an even count take the upper one
    assert t.raising.startswith("copies 8.4 ms faster per batch (12.5 -> 4.1 ms, measured)")
    assert {r.value: r.cells["batches/s"] for r in t.rows} == {False: "17.0", True: "19.1"}


def test_persistent_workers_share_of_an_epoch():
    sc = get_scenario("laptop-short-epochs-restart")
    t = by_knob(tradeoffs(sc.facts(), sc.settings, batch_bytes=sc.batch_bytes, probe=sc.probe))["persistent_workers"]
    # ceil(2000 / 32) = 63 batches / 25 batches/s = 2.52 s; the first batch took 1.2 s, 0.04 s of it
    # (one batch at 25 batches/s) loading it, which persistent workers do too: 1.16 / (1.16 + 2.52) = 32%
    assert "epoch: 63 batches / 25.0 batches/s = 2.5 s (computed from measured throughput)" in t.evidence
    assert ("measured with 4 workers: starting the workers took 1.20 s to the first batch, 0.04 s of it loading that "
            "batch (persistent workers load it too): restarting them costs about 1.16 s") in t.evidence
    assert t.raising.startswith("saves 1.16 s per epoch (32% of a 2.5 s epoch)")


def test_a_restart_timed_in_a_run_of_its_own_is_the_start_up():
    # the probe times the restart in a run without a steady window (no rate): that measurement,
    # not the first batch of the rate run, is what restarting the workers costs, less the gap
    # persistent workers still leave (loading the next epoch's first batch): 1.2 - 0.1 s
    import dataclasses

    sc = get_scenario("laptop-short-epochs-restart")
    rate_run = dataclasses.replace(sc.probe.results[0], first_batch_s=0.5, epoch_restart_s=None)
    restart_run = dataclasses.replace(sc.probe.results[0], batches_per_s=None, samples_per_s=None, batches=0,
                                      epoch_restart_s=1.2, epoch_restart_persistent_s=0.1)
    probe = dataclasses.replace(sc.probe, results=[rate_run, restart_run])
    t = by_knob(tradeoffs(sc.facts(), sc.settings, batch_bytes=sc.batch_bytes, probe=probe))["persistent_workers"]
    assert t.raising.startswith("saves 1.10 s per epoch"), t.raising
    assert "measured with 4 workers: the gap between epochs was 1.20 s without and 0.10 s with" in t.evidence


def test_worker_only_knobs_say_they_do_nothing_without_workers():
    items = by_knob(tradeoffs(load_machine("ci-2core"), LoaderSettings(num_workers=0)))
    assert items["prefetch_factor"].note and items["prefetch_factor"].rows == []
    assert items["persistent_workers"].note and items["persistent_workers"].rows == []


def test_batch_size_rows_scale_the_measured_sample():
    s = LoaderSettings(batch_size=128, num_workers=1)
    t = by_knob(tradeoffs(load_machine("ci-2core"), s, batch_bytes=128 * 3072))["batch_size"]
    assert "one sample: 3 KiB; one batch of 128: 384 KiB" in t.evidence
    assert [(r.value, r.data["shm_bytes"]) for r in t.rows] == [
        (64, 2 * 64 * 3072), (128, 2 * 128 * 3072), (256, 2 * 256 * 3072), (512, 2 * 512 * 3072)]
    assert "GPU memory for activations is not measured" in t.raising


def test_json_and_text_forms():
    sc = get_scenario("healthy-h100-ddp")
    items = tradeoffs(sc.facts(), sc.settings, batch_bytes=sc.batch_bytes, probe=sc.probe)
    data = json.loads(json.dumps(to_dict(items)))
    assert [d["knob"] for d in data] == list(KNOB_ORDER)
    assert data[0]["rows"][0]["cells"]["num_workers"] == "4"
    text = knob_text(items, explain_knobs=True)
    assert "num_workers (now 8)" in text and "turn off:" in text and "* measured by the probe" in text
    table = items[0].table()
    assert table[0] == items[0].columns and len(table) == len(items[0].rows) + 1


def test_every_knob_has_an_explanation():
    for name in (*KNOB_ORDER, "drop_last", "shuffle", "timeout", "multiprocessing_context"):
        k = explain(name)
        assert k.what and k.pros and k.cons and k.when_to_change
    assert set(KNOB_ORDER) <= set(KNOBS)


def test_io_bound_recording_says_the_cpu_count_is_not_the_limit():
    sc = get_scenario("recorded-io-bound-24-workers")
    t = by_knob(tradeoffs(sc.facts(), sc.settings, batch_bytes=sc.batch_bytes, probe=sc.probe))["num_workers"]
    assert ("the CPU count is not the limit here: 19 workers measured 43.1 batches/s, 4.5x the most 2 could deliver "
            "(9.7: 2 x the 207 ms a batch the training process loaded in with 0 workers) on 2 CPUs") in t.raising
    assert "only take turns" not in t.raising
    assert "throughput flat beyond 19 workers (43.1 batches/s at 19, 42.3 at 24, measured)" in t.raising


def test_when_no_worker_count_beats_zero_it_says_so():
    sc = get_scenario("recorded-tensors-one-worker")
    t = by_knob(tradeoffs(sc.facts(), sc.settings, batch_bytes=sc.batch_bytes, probe=sc.probe))["num_workers"]
    assert "no worker count measured beats num_workers=0 (46.2 batches/s; best with workers 41.4 at 1, measured)" in t.raising
    assert "worker memory: each worker adds ≈ 103 MiB PSS (measured, with 1 worker)" in t.evidence


def test_measurements_at_another_batch_size_are_labelled():
    sc = get_scenario("healthy-h100-ddp")
    items = by_knob(tradeoffs(sc.facts(), sc.settings.replace(batch_size=128), probe=sc.probe))
    assert "measured at batch_size 256; these settings use 128" in items["num_workers"].evidence
    same = by_knob(tradeoffs(sc.facts(), sc.settings, probe=sc.probe))
    assert not any("measured at batch_size" in e for e in same["num_workers"].evidence)


def test_batch_bytes_scale_from_the_probed_batch():
    from loaderdoc.advice.rules import batch_bytes_from_probe

    sc = get_scenario("healthy-h100-ddp")  # probed 256 x 150528 bytes
    assert batch_bytes_from_probe(sc.probe, sc.settings) == 256 * 150528
    assert batch_bytes_from_probe(sc.probe, sc.settings.replace(batch_size=128)) == 128 * 150528
    t = by_knob(tradeoffs(sc.facts(), sc.settings.replace(batch_size=128), probe=sc.probe))["prefetch_factor"]
    assert t.evidence[0].startswith("now: 2 x 8 x 18.4 MiB x 8 ranks = 2.3 GiB of /dev/shm")
