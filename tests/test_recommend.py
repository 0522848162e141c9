"""The facts-only recommendation on recorded machines: each choice and its reason."""

from __future__ import annotations

import dataclasses

import pytest

from loaderdoc.advice.recommend import recommend
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ConfigResult, ProbeReport, WorkloadInfo
from loaderdoc.system.facts import MiB, Reading
from loaderdoc.system.fixtures import load_machine

IMAGE = 3 * 224 * 224  # uint8 bytes of one 224x224 RGB sample


def test_ci_box_gets_one_worker_and_no_pinning():
    rec = recommend(load_machine("ci-2core"), batch_size=64, sample_bytes=IMAGE)
    s = rec.settings
    assert (s.num_workers, s.pin_memory, s.persistent_workers, s.prefetch_factor) == (1, False, True, 2)
    assert "CPU budget 2" in rec.reasons["num_workers"]
    assert "no usable GPU" in rec.reasons["pin_memory"]


def test_pod_counts_the_cgroup_quota_not_the_host():
    facts = load_machine("k8s-4cpu-quota")
    assert facts.cpu.logical.value == 64
    rec = recommend(facts, batch_size=8, sample_bytes=IMAGE)
    assert rec.settings.num_workers == 3
    assert "cgroup quota" in rec.reasons["num_workers"]


def test_laptop_stays_on_physical_cores_and_pins_for_its_gpu():
    rec = recommend(load_machine("laptop-rtx3050"), batch_size=32, sample_bytes=IMAGE)
    assert rec.settings.num_workers == 4
    assert rec.settings.pin_memory is True
    assert "physical cores" in rec.reasons["num_workers"]


def test_h100_node_split_across_local_ranks():
    facts = load_machine("h100x8-node")
    single = recommend(facts, batch_size=256, sample_bytes=IMAGE)
    assert single.settings.num_workers == 16  # the unmeasured cap
    facts.distributed.local_world_size = Reading.of(8, "env LOCAL_WORLD_SIZE")
    facts.distributed.launcher = Reading.of("torchrun", "env")
    per_rank = recommend(facts, batch_size=256, sample_bytes=IMAGE)
    # 224 CPUs / 8 ranks = 28 per rank, but 112 physical / 8 = 14 real cores each
    assert per_rank.settings.num_workers == 14
    assert "8 local ranks" in per_rank.reasons["num_workers"]
    assert per_rank.settings.pin_memory is True


def test_docker_default_shm_shrinks_prefetch_and_workers():
    facts = load_machine("docker-64m-shm")
    rec = recommend(facts, batch_size=64, sample_bytes=IMAGE)  # 9.2 MiB batches, 32 MiB usable
    s = rec.settings
    assert s.batches_in_flight * 64 * IMAGE <= 32 * MiB
    assert s.num_workers == 3 and s.prefetch_factor == 1
    assert "/dev/shm" in rec.reasons["num_workers"]


def test_batches_larger_than_shm_mean_no_workers():
    facts = load_machine("docker-64m-shm")
    rec = recommend(facts, batch_size=16, sample_bytes=4 * 1024 * 1024)  # 64 MiB batches
    assert rec.settings.num_workers == 0
    assert rec.settings.prefetch_factor is None and rec.settings.persistent_workers is False
    assert "--shm-size" in rec.reasons["num_workers"]
    rec.settings.validate()


def test_roomy_shm_only_lowers_prefetch_when_needed():
    facts = load_machine("laptop-rtx3050")
    free = facts.shm.free.value
    batch = free // 2 // 6  # 4 workers x 2 prefetch = 8 batches would not fit half of free
    rec = recommend(facts, batch_size=1, sample_bytes=batch)
    assert rec.settings.num_workers == 4
    assert rec.settings.prefetch_factor == 1
    assert rec.settings.batches_in_flight * batch <= free // 2


def test_single_cpu_gets_no_workers():
    facts = load_machine("ci-2core")
    facts.cpu.affinity = Reading.of([0], "os.sched_getaffinity")
    rec = recommend(facts)
    assert rec.settings.num_workers == 0
    assert rec.settings.persistent_workers is False
    assert "placeholder" in rec.reasons["batch_size"]


def test_probe_choice_is_the_starting_point():
    facts = load_machine("laptop-rtx3050")  # 8 CPUs: the probe's 3 workers are within the budget
    report = ProbeReport(
        workload=WorkloadInfo(name="image", batch_size=32, batch_bytes=32 * IMAGE),
        recommended=LoaderSettings(batch_size=32, num_workers=3, prefetch_factor=4, persistent_workers=True),
        reasons=["num_workers=3: 41.0 steps/s, within 2% of the best (4 workers, 41.5 steps/s)"],
    )
    rec = recommend(facts, probe=report)
    assert rec.source == "probe"
    assert rec.settings.num_workers == 3 and rec.settings.prefetch_factor == 4
    assert rec.reasons["num_workers"].startswith("num_workers=3")


def test_an_iterable_dataset_is_never_given_shuffle():
    # torch refuses shuffle=True for an IterableDataset, with the probe's pick and without one
    report = ProbeReport(workload=WorkloadInfo(name="mod:make_stream", batch_size=32, iterable=True),
                         recommended=LoaderSettings(batch_size=32, num_workers=1, prefetch_factor=2,
                                                    persistent_workers=True))
    for probe in (report, ProbeReport(workload=report.workload)):
        rec = recommend(load_machine("ci-2core"), probe=probe)
        assert rec.settings.shuffle is False
        assert "IterableDataset" in rec.reasons["shuffle"]
    assert recommend(load_machine("ci-2core"), batch_size=32).settings.shuffle is True


def test_a_probe_pick_beyond_the_cpus_without_the_measurement_that_justifies_it_is_capped():
    # a report whose pick exceeds this machine's 2 CPUs, with measurements showing no gain past them
    facts = load_machine("ci-2core")
    s = LoaderSettings(batch_size=32, num_workers=6, persistent_workers=True)
    report = ProbeReport(
        workload=WorkloadInfo(name="image", batch_size=32, batch_bytes=32 * IMAGE),
        results=[ConfigResult(settings=s.replace(num_workers=2), batches_per_s=10.0, starvation_pct=20),
                 ConfigResult(settings=s, batches_per_s=10.4, starvation_pct=18)],
        recommended=s,
    )
    rec = recommend(facts, probe=report)
    assert rec.settings.num_workers == 2
    assert "no measurement showed more workers than CPUs paying off" in rec.reasons["num_workers"]
    # the same pick with the measurement that justifies it (I/O-bound: 2 -> 6 workers, 2x) stands
    report.results[0].batches_per_s = 5.0
    rec = recommend(facts, probe=report)
    assert rec.settings.num_workers == 6
    assert "more workers than CPUs because 2 -> 6 workers went 5.0 -> 10.4 batches/s" in rec.reasons["num_workers"]


@pytest.mark.parametrize("name", ["ci-2core", "laptop-rtx3050", "docker-64m-shm", "k8s-4cpu-quota", "h100x8-node"])
def test_every_recommendation_is_valid_and_explained(name):
    rec = recommend(load_machine(name), batch_size=32, sample_bytes=IMAGE)
    assert rec.settings.problems() == []
    for key in ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size"):
        assert rec.reasons.get(key), key


def test_the_probes_measured_persistence_and_order_are_kept_not_replaced_by_a_rule_of_thumb():
    # the probe weighed 2 workers' start-up against a 25000-step epoch and chose not to keep them;
    # on spiky loads it measured in_order=False faster. recommend() used to set persistent_workers
    # from "workers > 0" and drop in_order, so the app and `loaderdoc --export` contradicted the probe
    report = ProbeReport(
        workload=WorkloadInfo(name="large-image", batch_size=4, batch_bytes=4 * 8 * MiB),
        recommended=LoaderSettings(batch_size=4, shuffle=True, num_workers=2, prefetch_factor=2,
                                   persistent_workers=False, in_order=False),
        reasons=["num_workers=2: 16.1 steps/s, the best measured",
                 "persistent_workers=False: restarting them costs about 0.03 s; that is only 0.00% of a "
                 "25000-step epoch",
                 "in_order=False: 45.0 steps/s (one run) vs at most 39.0 in order (+15%)",
                 "pin_memory=False: no CUDA device, pinning would only cost RAM"],
        device="cpu",
    )
    rec = recommend(load_machine("ci-2core"), probe=report)
    assert rec.settings.persistent_workers is False and rec.settings.in_order is False
    assert rec.reasons["persistent_workers"].startswith("persistent_workers=False: restarting them")
    assert rec.settings.pin_memory is False and rec.reasons["pin_memory"].startswith("pin_memory=False")
    keep = dataclasses.replace(report, recommended=report.recommended.replace(persistent_workers=True, in_order=True))
    rec = recommend(load_machine("ci-2core"), probe=keep)
    assert rec.settings.persistent_workers is True and rec.settings.in_order is True


def test_in_order_false_is_kept_only_as_measured_and_where_torch_takes_it():
    report = ProbeReport(
        workload=WorkloadInfo(name="spiky", batch_size=32, batch_bytes=32 * 4096),
        recommended=LoaderSettings(batch_size=32, shuffle=True, num_workers=2, prefetch_factor=2,
                                   persistent_workers=True, in_order=False),
        reasons=["in_order=False: 45.0 steps/s (one run) vs at most 39.0 in order (+15%)"], device="cpu")
    rec = recommend(load_machine("ci-2core"), probe=report)  # torch 2.13: takes it
    assert rec.settings.in_order is False and rec.reasons["in_order"].startswith("in_order=False")
    old = load_machine("docker-64m-shm")  # torch 2.3: DataLoader(in_order=...) raises TypeError there
    assert old.torch.version.get().startswith("2.3")
    assert recommend(old, probe=report).settings.in_order is True
    # the memory fit leaves one worker of the probe's two: unordered delivery was not measured there
    tiny = recommend(load_machine("ci-2core"), probe=report, batch_size=32, sample_bytes=6 * 1024**3)
    assert tiny.settings.num_workers < 2 and tiny.settings.in_order is True


def test_a_tunes_export_follows_the_machines_findings_on_what_the_trials_did_not_measure():
    """issue 57: tune's export kept the script's pin_memory=True on a machine without a GPU."""
    from loaderdoc.advice.recommend import settled_for_machine
    from loaderdoc.system.fixtures import load_machine

    picked = LoaderSettings(batch_size=16, num_workers=1, pin_memory=True, shuffle=True)
    measured = ("num_workers", "prefetch_factor", "persistent_workers")
    settled, notes = settled_for_machine(picked, load_machine("ci-2core"), measured)
    assert settled.pin_memory is False and settled.num_workers == 1 and settled.shuffle is True
    assert len(notes) == 1 and notes[0].startswith("pin_memory=False (pin-memory-without-gpu: ")
    # on a GPU node pinning stays; and what the trials measured is never changed (16 workers on 2 CPUs)
    assert settled_for_machine(picked, load_machine("h100x8-node"), measured) == (picked, [])
    many = picked.replace(num_workers=16, pin_memory=False)
    assert settled_for_machine(many, load_machine("ci-2core"), measured)[0].num_workers == 16
