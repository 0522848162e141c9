"""Rule-by-rule checks: each rule fires with its evidence where it should, and stays silent at the edge."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from loaderdoc import policy
from loaderdoc.advice.findings import CRITICAL, WARNING
from loaderdoc.advice.rules import RULES, TrainingContext, catalogue, evaluate
from loaderdoc.base.errors import SettingsError
from loaderdoc.base.settings import LoaderSettings
from loaderdoc.probing.result import ConfigResult, ProbeReport, StageTimes, WaitStats, WorkloadInfo
from loaderdoc.system.facts import MiB, Reading
from loaderdoc.system.fixtures import load_machine
from loaderdoc.watching import rules as watch_rules  # noqa: F401  (the whole catalogue, as watch runs it)

IMAGE_F32 = 3 * 224 * 224 * 4


def ids(findings):
    return [f.rule_id for f in findings]


def one(findings, rule_id):
    hits = [f for f in findings if f.rule_id == rule_id]
    assert len(hits) == 1, ids(findings)
    return hits[0]


# ---- catalogue --------------------------------------------------------------------------------
def test_the_watch_feature_s_rules_join_the_catalogue_last_and_only_from_watching():
    """The general rules know nothing of watch; loaderdoc.watching.rules adds its own after them (the
    catalogue's order is the order findings of one severity are listed in), and its judges of two
    general rules; a watched loader evaluated without them is a loud programming error."""
    code = """if True:
        import json
        import loaderdoc.advice.rules as r
        from loaderdoc.system.facts import MachineFacts
        general = [x.id for x in r.RULES]
        try:
            r.evaluate(MachineFacts(), None, watch=object())
            error = None
        except RuntimeError as exc:
            error = str(exc)
        import loaderdoc.watching.rules
        print(json.dumps({"general": general, "all": [x.id for x in r.RULES], "judges": sorted(r.WATCHED_JUDGES),
                          "error": error}))
    """
    got = json.loads(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                    check=True).stdout)
    general, everything = got["general"], got["all"]
    assert general and not any(i.startswith("watch-") for i in general)
    assert everything[:len(general)] == general and all(i.startswith("watch-") for i in everything[len(general):])
    assert got["judges"] == ["cpu-oversubscribed", "threads-oversubscribed"]
    assert got["error"] == "a watched loader evaluated without the watch rules: import loaderdoc.watching.rules first"


def test_catalogue_ids_are_unique_and_every_rule_says_where_its_threshold_comes_from():
    assert len({r.id for r in RULES}) == len(RULES)
    for r in RULES:
        # "ok" only for a rule that says a measured run is fine (evaluate(with_ok=True) keeps it)
        assert r.severity in (WARNING, CRITICAL) or (r.severity == "ok" and r.needs == "watch"), r.id
        assert r.threshold and r.title
        assert r.needs in ("machine", "settings", "probe", "context", "watch")
    assert [c["id"] for c in catalogue()] == [r.id for r in RULES]


def test_rules_import_neither_torch_nor_textual():
    code = (
        "import sys; import loaderdoc.advice.rules, loaderdoc.advice.tradeoffs, loaderdoc.advice.knobs, "
        "loaderdoc.advice.recommend, loaderdoc.policy; "
        "bad = [m for m in ('torch', 'textual') if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


# ---- settings torch rejects -------------------------------------------------------------------
def test_rejected_settings_built_directly_are_critical_and_the_change_repairs_them():
    bad = LoaderSettings(num_workers=0, prefetch_factor=4, persistent_workers=True)
    f = one(evaluate(load_machine("ci-2core"), bad), "settings-rejected")
    assert f.severity == CRITICAL
    assert "prefetch_factor" in f.symptom and "persistent_workers" in f.symptom
    assert f.settings_change == {"prefetch_factor": None, "persistent_workers": False}
    assert bad.replace(**f.settings_change).problems() == []


def test_prefetch_below_one_with_workers_goes_back_to_torch_default():
    f = one(evaluate(load_machine("ci-2core"), LoaderSettings(num_workers=1, prefetch_factor=0)),
            "settings-rejected")
    assert f.settings_change == {"prefetch_factor": 2}


def test_shuffle_is_rejected_only_for_a_probed_iterable_dataset():
    facts = load_machine("ci-2core")
    s = LoaderSettings(batch_size=32, shuffle=True, num_workers=1, prefetch_factor=2, persistent_workers=True)
    stream = ProbeReport(workload=WorkloadInfo(name="mod:make_stream", batch_size=32, iterable=True))
    f = one(evaluate(facts, s, probe=stream), "settings-rejected")
    assert f.severity == CRITICAL and f.symptom.endswith(": shuffle")
    assert "mod:make_stream" in f.evidence[0] and "expected unspecified shuffle option" in f.evidence[0]
    assert f.settings_change == {"shuffle": False} and "shuffle buffer" in f.fix
    # a map-style dataset, or no probe to say what the dataset is: shuffling is fine
    mapped = ProbeReport(workload=WorkloadInfo(name="image", batch_size=32))
    assert "settings-rejected" not in ids(evaluate(facts, s, probe=mapped))
    assert "settings-rejected" not in ids(evaluate(facts, s))


def _with_torch(machine, version, installed=True):
    facts = load_machine(machine)
    facts.torch.installed = Reading.of(installed, "test")
    facts.torch.version = Reading.of(version, "test") if version is not None else Reading.missing("not read")
    return facts


def test_in_order_off_is_refused_where_the_installed_torch_predates_it():
    s = LoaderSettings(batch_size=32, num_workers=4, pin_memory=True, persistent_workers=True, in_order=False)
    facts = load_machine("laptop-rtx3050")  # recorded with torch 2.5.1+cu124
    f = one(evaluate(facts, s), "settings-rejected")
    assert f.severity == CRITICAL and f.symptom.endswith("before the first batch: in_order")
    assert f.evidence == ["in_order=False needs torch >= 2.6: with the installed torch 2.5.1+cu124, DataLoader(...) "
                          "raises TypeError (got an unexpected keyword argument 'in_order'), with or without workers"]
    assert "arrived in torch 2.6" in f.cause and "worker-only" not in f.fix and "upgrade" in f.fix
    assert f.settings_change == {"in_order": True}
    assert "settings-rejected" not in ids(evaluate(facts, s.replace(**f.settings_change)))
    # torch in that version refuses the keyword itself: without workers too
    assert "settings-rejected" in ids(evaluate(facts, LoaderSettings(batch_size=32, in_order=False)))


@pytest.mark.parametrize("version, refused", [
    ("1.13.1+cu117", True), ("2.5.1", True), ("2.6.0", False), ("2.6.0a0+gitabc", False), ("2.10.0+cpu", False),
    ("3.0.0", False), (None, False), ("nightly", False),
])
def test_in_order_off_is_judged_by_the_torch_release_and_unknown_stays_silent(version, refused):
    s = LoaderSettings(batch_size=32, num_workers=1, in_order=False)
    assert ("settings-rejected" in ids(evaluate(_with_torch("ci-2core", version), s))) is refused
    # in order (torch's default, left out of the kwargs) is fine on every torch
    assert "settings-rejected" not in ids(evaluate(_with_torch("ci-2core", version), s.replace(in_order=True)))


def test_in_order_off_is_not_judged_without_torch_installed_or_without_workers_on_a_new_torch():
    s = LoaderSettings(batch_size=32, num_workers=1, in_order=False)
    assert "settings-rejected" not in ids(evaluate(_with_torch("ci-2core", "2.5.1", installed=False), s))
    # torch >= 2.6 ignores it without workers: no error, no cost, no finding
    assert evaluate(load_machine("ci-2core"), LoaderSettings(batch_size=32, num_workers=0, in_order=False)) == []


def test_in_order_on_an_old_torch_and_worker_only_settings_are_named_and_repaired_together():
    bad = LoaderSettings(batch_size=32, num_workers=0, prefetch_factor=2, in_order=False)
    f = one(evaluate(load_machine("k8s-4cpu-quota"), bad), "settings-rejected")  # torch 2.5.1+cpu
    assert f.symptom.endswith(": prefetch_factor, in_order") and len(f.evidence) == 2
    assert "worker processes" in f.cause and "torch 2.6" in f.cause
    assert f.settings_change == {"prefetch_factor": None, "in_order": True}
    assert "settings-rejected" not in ids(evaluate(load_machine("k8s-4cpu-quota"), bad.replace(**f.settings_change)))


def test_workers_repeating_an_iterable_dataset_is_critical_from_two_workers():
    facts = load_machine("ci-2core")
    s = LoaderSettings(batch_size=32, num_workers=4, prefetch_factor=2, persistent_workers=True)
    checked = ConfigResult(settings=s.replace(num_workers=2), batches_per_s=20.0, starvation_pct=5.0,
                           workers_repeat=True)
    stream = ProbeReport(workload=WorkloadInfo(name="mod:make_stream", batch_size=32, iterable=True),
                         results=[checked])
    f = one(evaluate(facts, s, probe=stream), "iterable-workers-repeat")
    assert f.severity == CRITICAL and "each sample arrives 4 times per epoch" in " ".join(f.evidence)
    assert "get_worker_info" in f.fix and f.settings_change == {}
    # one worker (or none) yields the stream once; a stream split between workers is fine
    assert "iterable-workers-repeat" not in ids(evaluate(facts, s.replace(num_workers=1), probe=stream))
    checked.workers_repeat = False
    assert "iterable-workers-repeat" not in ids(evaluate(facts, s, probe=stream))


def test_a_missing_distributed_sampler_is_not_asked_of_an_iterable_dataset():
    facts = load_machine("h100x8-node")
    facts.distributed.world_size = Reading.of(8, "WORLD_SIZE")
    s = LoaderSettings(batch_size=64, num_workers=8)
    ctx = TrainingContext(distributed=True, uses_distributed_sampler=False)
    assert "distributed-sampler-missing" in ids(evaluate(facts, s, context=ctx))
    # DataLoader takes no sampler for an IterableDataset: whether the stream is split by rank is unknown
    stream = ProbeReport(workload=WorkloadInfo(name="mod:make_stream", batch_size=64, iterable=True))
    assert "distributed-sampler-missing" not in ids(evaluate(facts, s, probe=stream, context=ctx))


# ---- CPU --------------------------------------------------------------------------------------
def test_eight_workers_in_a_four_cpu_pod_names_the_quota():
    facts = load_machine("k8s-4cpu-quota")
    f = one(evaluate(facts, LoaderSettings(num_workers=8)), "cpu-oversubscribed")
    assert f.settings_change == {"num_workers": 3}
    text = " ".join(f.evidence)
    assert "cgroup CPU quota: 4 CPUs" in text and "os.cpu_count() = 64" in text


def test_workers_equal_to_the_budget_are_not_oversubscribed():
    assert "cpu-oversubscribed" not in ids(evaluate(load_machine("laptop-rtx3050"), LoaderSettings(num_workers=8)))
    assert "cpu-oversubscribed" in ids(evaluate(load_machine("laptop-rtx3050"), LoaderSettings(num_workers=9)))


def test_oversubscription_is_per_rank_under_torchrun():
    facts = load_machine("h100x8-node")
    facts.distributed.launcher = Reading.of("torchrun", "environment")
    facts.distributed.local_world_size = Reading.of(8, "LOCAL_WORLD_SIZE")
    # 224 CPUs / 8 ranks = 28 per rank
    assert "cpu-oversubscribed" not in ids(evaluate(facts, LoaderSettings(num_workers=28)))
    f = one(evaluate(facts, LoaderSettings(num_workers=32)), "cpu-oversubscribed")
    assert f.settings_change == {"num_workers": 27}
    assert any("32 workers x 8 ranks = 256" in e for e in f.evidence)


def test_quota_hidden_from_cpu_count_is_a_machine_level_warning():
    f = one(evaluate(load_machine("k8s-4cpu-quota")), "cpu-quota-hidden")
    # the recording has no thread count: the fix sizes the pool beside its 3 workers (3 + 1 = 4 CPUs)
    assert "num_workers <= 3" in f.fix and "OMP_NUM_THREADS=1" in f.fix
    assert "cpu-quota-hidden" not in ids(evaluate(load_machine("laptop-rtx3050")))
    # with a config, cpu-oversubscribed judges num_workers against the quota instead
    assert "cpu-quota-hidden" not in ids(evaluate(load_machine("k8s-4cpu-quota"), LoaderSettings(num_workers=3)))


# ---- /dev/shm ---------------------------------------------------------------------------------
def test_docker_default_shm_without_batch_size_warns_with_the_docker_command():
    f = one(evaluate(load_machine("docker-64m-shm")), "shm-too-small")
    assert f.severity == WARNING
    assert "--shm-size" in f.fix and "--ipc=host" in f.fix
    assert "Docker's 64 MiB default" in " ".join(f.evidence)


def test_shm_arithmetic_matches_the_issue_example():
    # 6 workers x prefetch 4 x 19 MiB = 456 MiB against 64 MiB free: cannot fit
    s = LoaderSettings(num_workers=6, prefetch_factor=4)
    f = one(evaluate(load_machine("docker-64m-shm"), s, batch_bytes=19 * MiB), "shm-too-small")
    assert f.severity == CRITICAL
    assert f.evidence[0] == "6 workers x prefetch 4 x 19 MiB = 456 MiB"
    assert "docker run --shm-size=1g" in f.fix
    # half of 64 MiB holds one 19 MiB batch: one worker, one batch
    assert f.settings_change == {"num_workers": 1, "prefetch_factor": 1}
    assert s.replace(**f.settings_change).problems() == []


def test_shm_in_kubernetes_suggests_a_memory_emptydir():
    s = LoaderSettings(num_workers=3)
    f = one(evaluate(load_machine("k8s-4cpu-quota"), s, batch_bytes=IMAGE_F32 * 64), "shm-too-small")
    assert "emptyDir" in f.fix and "medium: Memory" in f.fix


def test_small_batches_fit_in_docker_shm_and_stay_silent():
    # 4 workers x 2 x 2 MiB = 16 MiB, a quarter of 64 MiB
    s = LoaderSettings(num_workers=4)
    assert "shm-too-small" not in ids(evaluate(load_machine("docker-64m-shm"), s, batch_bytes=2 * MiB))
    # 4 workers x 2 x 5 MiB = 40 MiB: fits, but above half of free: warning
    f = one(evaluate(load_machine("docker-64m-shm"), s, batch_bytes=5 * MiB), "shm-too-small")
    assert f.severity == WARNING
    assert f.settings_change == {"prefetch_factor": 1}


def test_no_workers_means_no_shm_use():
    s = LoaderSettings(num_workers=0)
    assert "shm-too-small" not in ids(evaluate(load_machine("docker-64m-shm"), s, batch_bytes=500 * MiB))


def test_ranks_share_one_dev_shm():
    facts = load_machine("laptop-rtx3050")
    facts.shm.free = Reading.of(7884 * MiB, "os.statvfs('/dev/shm')")  # 7.7 GiB free
    s = LoaderSettings(num_workers=4, prefetch_factor=2)
    assert "shm-too-small" not in ids(evaluate(facts, s, batch_bytes=200 * MiB))  # 1.6 GiB
    facts.distributed.local_world_size = Reading.of(4, "LOCAL_WORLD_SIZE")
    f = one(evaluate(facts, s, batch_bytes=200 * MiB), "shm-too-small")  # 6.25 GiB > half of free
    assert any("x 4 ranks" in e for e in f.evidence)


def test_probe_shm_failure_surfaces_as_the_shm_finding_not_a_crash():
    s = LoaderSettings(num_workers=4)
    failed = ConfigResult(settings=s, status="failed",
                          error="RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2>: "
                                "No space left on device (28)")
    probe = ProbeReport(workload=WorkloadInfo(batch_size=64, batch_bytes=48 * MiB), results=[failed])
    found = evaluate(load_machine("docker-64m-shm"), s, probe=probe)
    f = one(found, "shm-too-small")
    assert f.severity == CRITICAL and "unable to allocate shared memory" in f.evidence[0]
    assert "worker-crashed" not in ids(found)


# ---- GPU / pinning ----------------------------------------------------------------------------
def test_pin_memory_on_a_cpu_box_warns_and_turns_it_off():
    f = one(evaluate(load_machine("ci-2core"), LoaderSettings(num_workers=1, pin_memory=True)),
            "pin-memory-without-gpu")
    assert f.settings_change == {"pin_memory": False}
    assert "torch build: CPU-only" in f.evidence
    assert "pin-memory-without-gpu" not in ids(evaluate(load_machine("laptop-rtx3050"),
                                                        LoaderSettings(num_workers=4, pin_memory=True)))


def test_gpus_with_a_cpu_only_torch_build():
    facts = load_machine("h100x8-node")
    facts.torch.cuda_build = Reading.of(None, "torch/version.py")
    facts.torch.version = Reading.of("2.8.0+cpu", "importlib.metadata")
    found = evaluate(facts)
    f = one(found, "gpu-without-cuda-torch")
    assert "8 x NVIDIA H100 80GB HBM3" in f.symptom
    assert "gpu-without-cuda-torch" not in ids(evaluate(load_machine("h100x8-node")))


def test_cuda_context_without_a_driver():
    f = one(evaluate(load_machine("ci-2core"), context=TrainingContext(device="cuda")), "cuda-torch-without-driver")
    assert "NVIDIA GPUs visible: 0" in f.evidence
    assert any("NVML Shared Library Not Found" in e for e in f.evidence)
    assert "cuda-torch-without-driver" not in ids(evaluate(load_machine("ci-2core")))


# ---- open files -------------------------------------------------------------------------------
def test_open_file_limit_below_linux_default():
    facts = load_machine("laptop-rtx3050")
    facts.limits.nofile_soft = Reading.of(1024, "resource.getrlimit(RLIMIT_NOFILE)")
    facts.limits.nofile_hard = Reading.of(1048576, "resource.getrlimit(RLIMIT_NOFILE)")
    assert "open-files-low" not in ids(evaluate(facts, LoaderSettings(num_workers=4)))  # 1024 is the default
    facts.limits.nofile_soft = Reading.of(256, "resource.getrlimit(RLIMIT_NOFILE)")
    f = one(evaluate(facts, LoaderSettings(num_workers=4)), "open-files-low")
    assert "ulimit -n 65536" in f.fix and "file_system" in f.fix
    # a hard limit as low as the soft one can't be raised with ulimit: say where to raise it
    facts.limits.nofile_hard = Reading.of(256, "resource.getrlimit(RLIMIT_NOFILE)")
    f = one(evaluate(facts, LoaderSettings(num_workers=4)), "open-files-low")
    assert "ulimit -n" not in f.fix and "--ulimit nofile=65536:65536" in f.fix
    assert "open-files-low" not in ids(evaluate(facts, LoaderSettings(num_workers=0)))
    facts.limits.sharing_strategy = Reading.of("file_system", "torch.multiprocessing")
    assert "open-files-low" not in ids(evaluate(facts, LoaderSettings(num_workers=4)))


def test_open_files_counted_from_tensors_per_batch():
    facts = load_machine("laptop-rtx3050")
    facts.limits.nofile_soft = Reading.of(1024, "resource.getrlimit(RLIMIT_NOFILE)")
    s = LoaderSettings(num_workers=8, prefetch_factor=4)  # 32 batches in flight
    ctx = TrainingContext(tensors_per_batch=65)  # detection: images + 64 target tensors
    f = one(evaluate(facts, s, context=ctx), "open-files-low")
    assert f.severity == CRITICAL
    assert f.evidence[0] == "8 workers x prefetch 4 x 65 tensors = 2080 file descriptors held by the training process"
    assert "open-files-low" not in ids(evaluate(facts, s, context=TrainingContext(tensors_per_batch=2)))


def test_sorted_most_severe_first():
    s = LoaderSettings(num_workers=8, prefetch_factor=4, pin_memory=True)
    found = evaluate(load_machine("k8s-4cpu-quota"), s, batch_bytes=IMAGE_F32 * 64)
    ranks = [f.rank for f in found]
    assert ranks == sorted(ranks, reverse=True)
    assert found[0].rule_id == "shm-too-small"
    assert {"cpu-oversubscribed", "pin-memory-without-gpu"} <= set(ids(found))


@pytest.mark.parametrize("spiky", [True, False])
def test_spike_rule_needs_both_ratio_and_size(spiky):
    s = LoaderSettings(num_workers=4)
    wait = WaitStats(p50_ms=2.0, p95_ms=80.0 if spiky else 5.0)
    r = ConfigResult(settings=s, batches_per_s=10, starvation_pct=5, wait=wait)
    probe = ProbeReport(workload=WorkloadInfo(batch_size=64, step_ms=40), results=[r])
    assert ("spiky-batches" in ids(evaluate(load_machine("laptop-rtx3050"), s, probe=probe))) is spiky


def test_oversubscription_that_measurably_pays_off_is_not_flagged():
    # I/O-bound workers (real shape, recorded on a 2-CPU box): 11 -> 19 workers still +36% -> silent
    facts = load_machine("ci-2core")
    s = LoaderSettings(batch_size=32, num_workers=24, persistent_workers=True)
    probe = ProbeReport(results=[
        ConfigResult(settings=LoaderSettings(batch_size=32), batches_per_s=4.4, starvation_pct=91),
        ConfigResult(settings=s.replace(num_workers=11), batches_per_s=31.6, starvation_pct=35),
        ConfigResult(settings=s.replace(num_workers=19), batches_per_s=43.1, starvation_pct=12),
        ConfigResult(settings=s, batches_per_s=42.3, starvation_pct=14),
    ])
    assert "cpu-oversubscribed" not in ids(evaluate(facts, s, probe=probe))
    # no gain from 11 to 19: CPU-bound after all -> fires, with the measurements as evidence
    probe.results[2].batches_per_s = 32.0
    probe.results[3].batches_per_s = 31.9
    f = one(evaluate(facts, s, probe=probe), "cpu-oversubscribed")
    assert ("measured: 11 workers 31.6 batches/s, 19 workers 32.0 batches/s, 24 workers 31.9 batches/s"
            in f.evidence)
    # worker vs no worker says nothing about oversubscription
    probe.results = probe.results[:1] + probe.results[3:]
    assert "cpu-oversubscribed" in ids(evaluate(facts, s, probe=probe))


def test_starved_config_is_pointed_at_the_cheapest_measured_one_that_feeds_the_step():
    facts = load_machine("laptop-rtx3050")  # 8 CPUs
    s = LoaderSettings(batch_size=32, num_workers=1, persistent_workers=True)
    probe = ProbeReport(results=[
        ConfigResult(settings=s, batches_per_s=4, starvation_pct=70),
        ConfigResult(settings=s.replace(num_workers=4), batches_per_s=11.5, starvation_pct=6),
        ConfigResult(settings=s.replace(num_workers=6), batches_per_s=11.8, starvation_pct=3),
        ConfigResult(settings=s.replace(num_workers=12), batches_per_s=12.0, starvation_pct=1),
    ])
    f = one(evaluate(facts, s, probe=probe), "data-starved")
    assert f.severity == CRITICAL
    assert f.settings_change == {"num_workers": 4}
    # nothing measured waits less than half as much: silent (transform-bound's territory)
    probe.results = probe.results[:1] + [ConfigResult(settings=s.replace(num_workers=4), batches_per_s=5,
                                                      starvation_pct=50)]
    assert "data-starved" not in ids(evaluate(facts, s, probe=probe))


def test_unprobed_settings_get_no_probe_verdict():
    # the probe measured other configurations only: nothing is said about the user's own
    sc_facts = load_machine("laptop-rtx3050")
    s = LoaderSettings(batch_size=32, num_workers=3)
    probe = ProbeReport(results=[ConfigResult(settings=LoaderSettings(batch_size=32, num_workers=2),
                                              batches_per_s=3, starvation_pct=80,
                                              wait=WaitStats(p50_ms=1, p95_ms=500))])
    assert not {"data-starved", "spiky-batches", "persistent-workers-off"} & set(ids(evaluate(sc_facts, s, probe=probe)))


def _starved_probe(cpu_pct=None, fetch_cpu_pct=None):
    s = LoaderSettings(batch_size=32, num_workers=4, persistent_workers=True)
    results = [ConfigResult(settings=s.replace(num_workers=2), batches_per_s=6, starvation_pct=60, cpu_util_pct=cpu_pct),
               ConfigResult(settings=s, batches_per_s=10, starvation_pct=45, cpu_util_pct=cpu_pct),
               ConfigResult(settings=s.replace(num_workers=6), batches_per_s=9.9, starvation_pct=46,
                            cpu_util_pct=cpu_pct)]
    if fetch_cpu_pct is not None:
        results.append(ConfigResult(settings=LoaderSettings(batch_size=32), batches_per_s=2, starvation_pct=85,
                                    fetch_cpu_pct=fetch_cpu_pct))
    return s, ProbeReport(workload=WorkloadInfo(batch_size=32, step_ms=50), results=results)


def test_transform_bound_tells_cpu_work_from_waiting_on_storage():
    laptop = load_machine("laptop-rtx3050")  # 8 CPUs, no container: psutil's CPU figure is ours
    s, busy = _starved_probe(cpu_pct=90)
    f = one(evaluate(laptop, s, probe=busy), "transform-bound")
    assert "DALI" in f.fix and "WebDataset" not in f.fix
    assert "CPUs busy while measuring: 7.2 of 8 available" in f.evidence
    s, idle = _starved_probe(cpu_pct=10)
    f = one(evaluate(laptop, s, probe=idle), "transform-bound")
    assert "WebDataset" in f.fix and "DALI" not in f.fix
    # in a container the machine-wide CPU figure includes other tenants: use the 0-worker split, or say both
    docker = load_machine("docker-64m-shm")
    s, idle = _starved_probe(cpu_pct=10)
    f = one(evaluate(docker, s, probe=idle), "transform-bound")
    assert "DALI" in f.fix and "WebDataset" in f.fix
    s, waits = _starved_probe(cpu_pct=10, fetch_cpu_pct=12)
    f = one(evaluate(docker, s, probe=waits), "transform-bound")
    assert "num_workers=0: 12% of the fetch time was CPU work, the rest waiting" in f.evidence
    assert "WebDataset" in f.fix and "DALI" not in f.fix


def test_transform_bound_stays_silent_when_the_probe_did_not_look_far_enough():
    # best is the largest worker count tried and it is below the CPU budget: more workers might help
    s = LoaderSettings(batch_size=32, num_workers=2, persistent_workers=True)
    probe = ProbeReport(results=[ConfigResult(settings=s.replace(num_workers=1), batches_per_s=3, starvation_pct=70),
                                 ConfigResult(settings=s, batches_per_s=5, starvation_pct=45)])
    assert "transform-bound" not in ids(evaluate(load_machine("laptop-rtx3050"), s, probe=probe))


def test_sigbus_in_the_probe_is_a_shm_finding_and_sigkill_an_oom_crash():
    s = LoaderSettings(batch_size=64, num_workers=4)
    bus = ConfigResult(settings=s, status="failed",
                       error="the measuring process died (killed by signal SIGBUS) before reporting")
    found = evaluate(load_machine("docker-64m-shm"), s, probe=ProbeReport(results=[bus]))
    assert ids(found) == ["shm-too-small"]
    kill = ConfigResult(settings=s, status="failed",
                        error="the measuring process died (killed by signal SIGKILL) before reporting")
    f = one(evaluate(load_machine("laptop-rtx3050"), s, probe=ProbeReport(results=[kill])), "worker-crashed")
    assert "OOM killer" in f.cause


def test_too_many_open_files_in_the_probe():
    s = LoaderSettings(batch_size=64, num_workers=8)
    failed = ConfigResult(settings=s, status="failed",
                          error="RuntimeError: Too many open files. Communication with the workers is no longer possible.")
    found = evaluate(load_machine("laptop-rtx3050"), s, probe=ProbeReport(results=[failed]))
    assert ids(found) == ["open-files-low"] and found[0].severity == CRITICAL


def test_workers_only_add_ipc_needs_a_measurement_with_as_many_workers():
    facts = load_machine("ci-2core")
    zero = ConfigResult(settings=LoaderSettings(batch_size=128), batches_per_s=43.8, starvation_pct=10.4)
    one_w = ConfigResult(settings=LoaderSettings(batch_size=128, num_workers=1), batches_per_s=42.9,
                         starvation_pct=13.0)
    probe = ProbeReport(workload=WorkloadInfo(batch_size=128), results=[zero, one_w])
    # 1 worker measured: 0 workers is as fast -> fires, and with the step waiting 10% it doesn't call the data cheap
    f = one(evaluate(facts, LoaderSettings(batch_size=128, num_workers=1), probe=probe), "workers-only-add-ipc")
    assert "CPUs are already taken" in f.cause
    assert f.settings_change["num_workers"] == 0
    # 2 workers were never measured: silent
    assert "workers-only-add-ipc" not in ids(evaluate(facts, LoaderSettings(batch_size=128, num_workers=2),
                                                      probe=probe))
    # workers measurably faster: silent
    one_w.batches_per_s = 60.0
    assert "workers-only-add-ipc" not in ids(evaluate(facts, LoaderSettings(batch_size=128, num_workers=1),
                                                      probe=probe))


def test_persistent_rule_reads_the_restart_of_a_non_persistent_run_with_as_many_workers():
    facts = load_machine("laptop-rtx3050")
    s = LoaderSettings(batch_size=32, num_workers=4, pin_memory=True)
    persistent = ConfigResult(settings=s.replace(persistent_workers=True), batches_per_s=25, starvation_pct=3,
                              first_batch_s=0.2, epoch_restart_s=0.01)
    restarting = ConfigResult(settings=s, batches_per_s=24, starvation_pct=3, first_batch_s=0.3,
                              epoch_restart_s=1.2)
    probe = ProbeReport(workload=WorkloadInfo(batch_size=32, dataset_len=2000), results=[persistent, restarting])
    f = one(evaluate(facts, s, probe=probe), "persistent-workers-off")
    assert f.evidence[0] == "measured: the gap between epochs was 1.20 s without and 0.01 s with"
    assert f.symptom.startswith("Each epoch spends 1.2 s (32%) restarting 4 workers")
    # a large dataset: the same start-up is under 10% of the epoch
    probe.workload.dataset_len = 200_000
    assert "persistent-workers-off" not in ids(evaluate(facts, s, probe=probe))


def test_persistent_rule_weighs_the_restart_as_the_probe_does_and_never_contradicts_its_pick():
    # busy torchvision, `loaderdoc probe` on this VM: 8 workers took 0.94 s to the first batch,
    # 0.93 s of it loading that batch, which persistent workers load too. The probe chose
    # persistent_workers=False (0.01 s saved, 0.16 % of a 47-step epoch); the rule used to count
    # the whole 0.94 s and warned "Each epoch spends 0.9 s (14%) restarting 8 workers"
    facts = load_machine("laptop-rtx3050")
    s = LoaderSettings(batch_size=64, shuffle=True, num_workers=8, prefetch_factor=2)
    pick = ConfigResult(settings=s, batches_per_s=8.3, starvation_pct=46, first_batch_s=0.94,
                        stages=StageTimes(batches=12, samples=768, dataset_ms=900.0, dataset_cpu_ms=850.0,
                                          dataset_queued_ms=0.0, collate_ms=30.0))
    probe = ProbeReport(workload=WorkloadInfo(batch_size=64, dataset_len=3000), results=[pick])
    saved = policy.restart_saving(probe.results, (8, 2))
    assert not saved.timed and saved.saving_s == pytest.approx(0.01)
    assert "persistent-workers-off" not in ids(evaluate(facts, s, probe=probe))
    # a start-up far longer than a batch's loading is what the rule is for
    pick.first_batch_s = 2.0
    f = one(evaluate(facts, s, probe=probe), "persistent-workers-off")
    assert f.evidence[0] == ("measured: starting the workers took 2.00 s to the first batch, 0.93 s of it loading "
                             "that batch (persistent workers load it too): restarting them costs about 1.07 s")


def test_bursty_waits_of_a_starved_loader_are_not_called_spiky():
    # real probe shape: 5 workers on 2 CPUs deliver in bursts: p50 4 ms, p95 621 ms, 84% starved
    s = LoaderSettings(batch_size=32, num_workers=5, persistent_workers=True)
    r = ConfigResult(settings=s, batches_per_s=6.6, starvation_pct=84, wait=WaitStats(p50_ms=4.1, p95_ms=621))
    probe = ProbeReport(workload=WorkloadInfo(batch_size=32, step_ms=20), results=[r])
    assert "spiky-batches" not in ids(evaluate(load_machine("ci-2core"), s, probe=probe))


def _odd_probes():
    yield ProbeReport()  # nothing measured
    yield ProbeReport(results=[ConfigResult()])  # a result with every measurement missing
    yield ProbeReport(results=[ConfigResult(settings=LoaderSettings(num_workers=2), status="failed")])
    yield ProbeReport(workload=WorkloadInfo(batch_size=8, dataset_len=0, step_ms=0), results=[
        ConfigResult(settings=LoaderSettings(num_workers=2), batches_per_s=0.0, starvation_pct=100.0,
                     wait=WaitStats(p50_ms=0.0, p95_ms=0.0), worker_pss_bytes=0, first_batch_s=0.0),
        ConfigResult(settings=LoaderSettings(num_workers=2), batches_per_s=5.0, starvation_pct=0.0,
                     worker_pss_bytes=1, h2d_pinned_ms=0.0, h2d_pageable_ms=0.0),
    ])


@pytest.mark.parametrize("machine", ["ci-2core", "laptop-rtx3050", "docker-64m-shm", "k8s-4cpu-quota", "h100x8-node"])
def test_rules_and_tradeoffs_never_raise_on_partial_information(machine):
    from loaderdoc.advice.tradeoffs import tradeoffs

    facts = load_machine(machine)
    settings_variants = [None, LoaderSettings(), LoaderSettings(batch_size=None, num_workers=3),
                         LoaderSettings(num_workers=-1, prefetch_factor=0, timeout=-1),
                         LoaderSettings(num_workers=2, prefetch_factor=0, batch_size=0)]
    contexts = [None, TrainingContext(device="cuda", uses_batchnorm=True, distributed=True,
                                      uses_distributed_sampler=False, dataset_len=0, tensors_per_batch=0,
                                      fixed_input_size=False, cudnn_benchmark=True)]
    for probe in [None, *_odd_probes()]:
        for s in settings_variants:
            for ctx in contexts:
                for batch_bytes in (None, 0, 10**12):
                    evaluate(facts, s, batch_bytes=batch_bytes, probe=probe, context=ctx)
            tradeoffs(facts, s, probe=probe)


def test_an_empty_machine_record_claims_nothing_about_the_machine():
    from loaderdoc.system.facts import MachineFacts

    # no CPU count, no GPU reading, no /dev/shm: nothing to be oversubscribed or missing
    assert evaluate(MachineFacts()) == []
    assert evaluate(MachineFacts(), LoaderSettings(num_workers=64, pin_memory=True), batch_bytes=10**9) == []


def test_a_cuda_build_without_a_gpu_is_not_flagged_on_its_own():
    facts = load_machine("ci-2core")
    facts.torch.cuda_build = Reading.of("12.8", "torch/version.py")  # the default Linux wheel
    facts.torch.version = Reading.of("2.8.0+cu128", "importlib.metadata")
    assert evaluate(facts) == []
    assert evaluate(facts, LoaderSettings(batch_size=64, num_workers=1)) == []
    f = one(evaluate(facts, context=TrainingContext(device="cuda")), "cuda-torch-without-driver")
    assert "torch build: CUDA 12.8" in f.evidence


def test_drop_last_under_ddp_without_batchnorm_is_not_flagged():
    facts = load_machine("h100x8-node")
    facts.distributed.world_size = Reading.of(8, "WORLD_SIZE")
    s = LoaderSettings(batch_size=64, num_workers=8)
    ctx = TrainingContext(distributed=True, uses_distributed_sampler=True, uses_batchnorm=False, dataset_len=49_704)
    assert "drop-last-batchnorm" not in ids(evaluate(facts, s, context=ctx))
    # with BatchNorm, a 1-sample last batch per rank: ceil(49_672 / 8) = 6209 = 97 x 64 + 1
    ctx = TrainingContext(distributed=True, uses_distributed_sampler=True, uses_batchnorm=True, dataset_len=49_672)
    f = one(evaluate(facts, s, context=ctx), "drop-last-batchnorm")
    assert "Expected more than 1 value per channel" in f.symptom
    # a last batch of 8 or more is left alone
    ctx.dataset_len = 8 * (97 * 64 + 8)
    assert "drop-last-batchnorm" not in ids(evaluate(facts, s, context=ctx))


def test_ram_pressure_extrapolates_a_fixed_plus_per_worker_cost():
    facts = load_machine("laptop-rtx3050")
    facts.memory.available = Reading.of(2560 * MiB, "/proc/meminfo")  # 2.5 GiB; 80% = 2048 MiB
    s = LoaderSettings(batch_size=32, num_workers=8, persistent_workers=True)
    # measured: 600 MiB shared by all + 200 MiB per worker
    probe = ProbeReport(results=[
        ConfigResult(settings=s.replace(num_workers=2), batches_per_s=5, starvation_pct=5, worker_pss_bytes=1000 * MiB),
        ConfigResult(settings=s.replace(num_workers=4), batches_per_s=5, starvation_pct=5, worker_pss_bytes=1400 * MiB),
    ])
    f = one(evaluate(facts, s, probe=probe), "ram-pressure")
    assert f.severity == WARNING
    assert f.evidence[0] == ("workers' PSS with 8 workers: 2.1 GiB (extrapolated in a straight line from 2, 4 "
                             "workers, measured)")  # 600 + 8 x 200 = 2200 MiB
    assert f.settings_change == {"num_workers": 7}  # 600 + 7 x 200 = 2000 MiB < 2048 MiB
    # at 4 workers the measurement itself is used, and it fits
    assert "ram-pressure" not in ids(evaluate(facts, s.replace(num_workers=4), probe=probe))
    # a cgroup limit caps the budget below what the host has available: critical
    facts.memory.cgroup_limit = Reading.of(2048 * MiB, "memory.max")
    facts.memory.cgroup_usage = Reading.of(0, "memory.current")
    f = one(evaluate(facts, s, probe=probe), "ram-pressure")
    assert f.severity == CRITICAL and "cgroup limit 2 GiB" in f.evidence[-1]


def test_training_context_fields_are_all_documented_and_loadable():
    from dataclasses import fields

    assert [f.name for f in fields(TrainingContext)] == list(TrainingContext.FIELDS)
    ctx = TrainingContext.from_mapping({"device": "cuda", "dataset_len": 100})
    assert ctx.to_dict()["device"] == "cuda" and ctx.uses_batchnorm is None
    with pytest.raises(SettingsError, match="unknown key 'batchnorm' \\(did you mean 'uses_batchnorm'"):
        TrainingContext.from_mapping({"batchnorm": True})


def test_slurm_tasks_with_cpus_per_task_are_not_divided_again():
    facts = load_machine("h100x8-node")
    facts.distributed.launcher = Reading.of("slurm", "SLURM_PROCID")
    facts.distributed.local_world_size = Reading.of(8, "SLURM_NTASKS_PER_NODE")
    facts.distributed.cpus_per_task = Reading.of(16, "SLURM_CPUS_PER_TASK")
    facts.cpu.affinity = Reading.of(list(range(16)), "os.sched_getaffinity(0)")  # the task's own CPUs
    assert facts.cpus_per_rank == 16
    assert "cpu-oversubscribed" not in ids(evaluate(facts, LoaderSettings(num_workers=12)))
    f = one(evaluate(facts, LoaderSettings(num_workers=24)), "cpu-oversubscribed")
    assert "SLURM_CPUS_PER_TASK = 16 (each Slurm task owns its CPUs)" in f.evidence
    assert f.settings_change == {"num_workers": 15}


def test_measurements_at_another_batch_size_do_not_judge_these_settings():
    facts = load_machine("h100x8-node")
    probe = ProbeReport(workload=WorkloadInfo(batch_size=256, step_ms=80), device="cuda:0", results=[
        ConfigResult(settings=LoaderSettings(batch_size=256, num_workers=2, pin_memory=True), batches_per_s=4.8,
                     starvation_pct=62, h2d_pageable_ms=14, h2d_pinned_ms=3),
        ConfigResult(settings=LoaderSettings(batch_size=256, num_workers=8, pin_memory=True), batches_per_s=12.4,
                     starvation_pct=2, h2d_pageable_ms=14, h2d_pinned_ms=3),
    ])
    s = LoaderSettings(batch_size=256, num_workers=2, pin_memory=True)
    assert "data-starved" in ids(evaluate(facts, s, probe=probe))
    # the same knobs with batch_size 64 were never measured
    assert evaluate(facts, s.replace(batch_size=64), probe=probe) == []
    assert evaluate(facts, s.replace(batch_size=64, pin_memory=False), probe=probe) == []
    assert "pin-memory-off-slow-copy" in ids(evaluate(facts, s.replace(pin_memory=False), probe=probe))


def _growth_probe(*runs):
    from loaderdoc.probing.result import MemoryGrowth

    results = [ConfigResult(settings=LoaderSettings(batch_size=4, num_workers=w, prefetch_factor=2), batches_per_s=10,
                            starvation_pct=30, worker_memory_growth=MemoryGrowth(
                                first_bytes=int(a * MiB), last_bytes=int(b * MiB), seconds=2.0,
                                heap_rise_bytes=None if heap is None else int(heap * MiB)))
               for w, a, b, heap in runs]
    return ProbeReport(workload=WorkloadInfo(batch_size=4, step_ms=20, sample_bytes=8 * MiB), results=results)


def _growing_finding(settings, probe):
    return [f for f in evaluate(load_machine("ci-2core"), settings, probe=probe) if f.rule_id == "worker-memory-growing"]


def test_growing_worker_memory_held_by_the_heap_points_at_the_malloc_threshold():
    probe = _growth_probe((2, 245, 477, 350))
    (f,) = _growing_finding(LoaderSettings(batch_size=4, num_workers=2, prefetch_factor=2), probe)
    assert "245 MiB -> 477 MiB in 2.0 s" in f.evidence[0] and "malloc heap" in f.evidence[-1]
    assert "GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072" in f.fix and f.settings_change == {}


def test_growing_worker_memory_the_heap_does_not_hold_is_called_live_memory():
    probe = _growth_probe((2, 245, 477, 20))
    (f,) = _growing_finding(LoaderSettings(batch_size=4, num_workers=2, prefetch_factor=2), probe)
    assert "cache in the dataset" in f.cause and "GLIBC_TUNABLES" not in f.fix


@pytest.mark.parametrize("first,last", [(400, 480), (100, 150)])  # 1.2x; +50 MiB
def test_worker_memory_that_rose_a_little_is_settled(first, last):
    probe = _growth_probe((2, first, last, 0))
    assert not _growing_finding(LoaderSettings(batch_size=4, num_workers=2, prefetch_factor=2), probe)


def test_growth_elsewhere_says_nothing_about_the_users_settings_measured_settled():
    probe = _growth_probe((2, 245, 477, 350), (3, 400, 410, 0))
    assert not _growing_finding(LoaderSettings(batch_size=4, num_workers=3, prefetch_factor=2), probe)
    assert _growing_finding(None, probe)  # no settings: what the probe saw is said


@pytest.mark.parametrize("batch_mib,growing", [(8, True), (32, False)])
def test_a_rise_one_batch_a_worker_could_explain_is_not_growth(batch_mib, growing):
    from loaderdoc import policy
    from loaderdoc.probing.result import MemoryGrowth

    # 300 -> 390 MiB (1.3x, +90 MiB) with 3 workers: each may hold the batch it builds in /dev/shm,
    # counted in its PSS; 3 x 32 MiB could be that swing, 3 x 8 MiB could not
    r = ConfigResult(settings=LoaderSettings(batch_size=4, num_workers=3, prefetch_factor=2), batches_per_s=10,
                     batch_bytes=batch_mib * MiB,
                     worker_memory_growth=MemoryGrowth(first_bytes=300 * MiB, last_bytes=390 * MiB, seconds=2.0))
    assert policy.still_growing(r) is growing


def test_ram_pressure_calls_a_still_rising_reading_a_floor():
    from loaderdoc.probing.result import MemoryGrowth

    facts = load_machine("ci-2core")
    budget = facts.memory.budget
    s = LoaderSettings(batch_size=4, num_workers=2, prefetch_factor=2)
    r = ConfigResult(settings=s, batches_per_s=10, starvation_pct=30, worker_pss_bytes=int(0.9 * budget),
                     worker_memory_growth=MemoryGrowth(first_bytes=int(0.5 * budget), last_bytes=int(0.9 * budget),
                                                       seconds=2.0))
    probe = ProbeReport(workload=WorkloadInfo(batch_size=4, step_ms=20), results=[r])
    (f,) = [f for f in evaluate(facts, s, probe=probe) if f.rule_id == "ram-pressure"]
    assert any("still rising" in e and "a floor" in e for e in f.evidence)
    r.worker_memory_growth = None
    (f,) = [f for f in evaluate(facts, s, probe=probe) if f.rule_id == "ram-pressure"]
    assert not any("still rising" in e for e in f.evidence)


# ---- threads-oversubscribed -------------------------------------------------------------------
def _with_threads(machine, threads, **distributed):
    facts = load_machine(machine)
    facts.torch.intra_op_threads = Reading.of(threads, "test")
    for name, value in distributed.items():
        setattr(facts.distributed, name, Reading.of(value, "test"))
    return facts


def test_torch_default_pool_on_a_quota_fires_and_owns_the_thread_advice():
    facts = load_machine("k8s-4cpu-quota")  # affinity 64, quota 4
    facts.cpu.cgroup_quota = Reading.of(8.0, "cpu.max")
    facts.cpu.physical = Reading.of(64, "topology")
    from loaderdoc.system.threads import read_intra_op_threads
    facts.torch.intra_op_threads = read_intra_op_threads({}, facts.cpu.affinity, facts.cpu.physical)
    found = evaluate(facts)
    f = one(found, "threads-oversubscribed")
    assert f.severity == WARNING and f.symptom == "torch's intra-op pool runs 64 threads on 8 CPUs"
    assert "intra-op threads: 64 (torch's default: one per CPU of the affinity set, 64)" in f.evidence
    assert "DataLoader workers: 7 (the count recommended for this machine)" in f.evidence
    assert "64 threads + 7 workers = 71 wanting a CPU during a CPU step, on 8 CPUs" in f.evidence
    assert "throttles" in f.cause and "OMP_NUM_THREADS=1" in f.fix and "loaderdoc tune" in f.fix
    assert f.settings_change == {"torch_threads": 1} and f.expected_gain is None
    # cpu-quota-hidden keeps the workers and leaves the pool to this rule: one value, said once
    hidden = one(found, "cpu-quota-hidden")
    assert "num_workers <= 7" in hidden.fix and "OMP_NUM_THREADS" not in hidden.fix
    assert "threads-oversubscribed" in hidden.fix


def test_config_workers_set_the_thread_target_and_zero_workers_get_the_whole_budget():
    facts = _with_threads("k8s-4cpu-quota", 32)
    f = one(evaluate(facts, LoaderSettings(num_workers=2)), "threads-oversubscribed")
    assert "DataLoader workers: 2 (the config's num_workers)" in f.evidence
    assert f.settings_change == {"torch_threads": 2} and "2 threads + 2 workers fill the 4 CPUs" in f.fix
    f = one(evaluate(facts, LoaderSettings(num_workers=0)), "threads-oversubscribed")
    assert f.settings_change == {"torch_threads": 4} and "whole 4 CPUs" in f.fix
    # workers past the budget: the least pool, and cpu-oversubscribed says how many workers
    found = evaluate(facts, LoaderSettings(num_workers=6))
    assert one(found, "threads-oversubscribed").settings_change == {"torch_threads": 1}
    assert "cpu-oversubscribed" in ids(found)


def test_one_thread_per_rank_is_silent_and_a_pool_that_fits_is_left_to_tune():
    torchrun_4 = {"launcher": "torchrun", "world_size": 4, "local_world_size": 4}
    assert "threads-oversubscribed" not in ids(evaluate(_with_threads("h100x8-node", 1, **torchrun_4),
                                                        LoaderSettings(num_workers=8)))
    # 4 ranks without OMP_NUM_THREADS (srun): 112 threads per rank on 56 CPUs per rank
    f = one(evaluate(_with_threads("h100x8-node", 112, **torchrun_4), LoaderSettings(num_workers=8)),
            "threads-oversubscribed")
    assert "4 ranks x (112 threads + 8 workers) = 480 on this node's 224 CPUs" in f.evidence
    assert f.settings_change == {"torch_threads": 48} and "in every rank" in f.fix
    # the pool sized to the budget (torch's default on an unrestricted machine): no finding
    assert "threads-oversubscribed" not in ids(evaluate(_with_threads("ci-2core", 2), LoaderSettings(num_workers=1)))
    assert "threads-oversubscribed" in ids(evaluate(_with_threads("ci-2core", 3), LoaderSettings(num_workers=1)))


def test_unknown_thread_count_and_mkl_source():
    assert "threads-oversubscribed" not in ids(evaluate(load_machine("k8s-4cpu-quota")))
    facts = load_machine("ci-2core")
    facts.torch.intra_op_threads = Reading.of(8, "MKL_NUM_THREADS=8 (torch follows it over OMP_NUM_THREADS=1)")
    f = one(evaluate(facts), "threads-oversubscribed")
    assert "MKL_NUM_THREADS=1" in f.fix


def _check_json(env_extra):
    import json
    import os

    drop = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "MKL_DYNAMIC", "WORLD_SIZE", "LOCAL_WORLD_SIZE",
            "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS")
    env = {k: v for k, v in os.environ.items() if k not in drop} | env_extra
    proc = subprocess.run([sys.executable, "-m", "loaderdoc", "check", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    report = json.loads(proc.stdout)
    return proc.returncode, report, [f["rule_id"] for f in report["findings"]]


def test_check_finds_an_oversized_pool_from_the_environment():
    from loaderdoc.base.errors import EXIT_WARNING

    # MKL_DYNAMIC=FALSE: torch then really runs 4096 threads (MKL would cap them at the cores)
    rc, report, fired = _check_json({"OMP_NUM_THREADS": "4096", "MKL_DYNAMIC": "FALSE"})
    assert "threads-oversubscribed" in fired
    assert report["status"] == "warning" and rc == report["exit_code"] == EXIT_WARNING
    rc, report, fired = _check_json({"OMP_NUM_THREADS": "1"})
    assert "threads-oversubscribed" not in fired and rc == report["exit_code"]


def test_a_merged_change_has_one_expected_gain_overlapping_findings_are_not_multiplied():
    """issue 57: the 0-worker run's data-starved fix expected 1.67x, its threads finding priced the same
    change again, and the --fixes file multiplied them: 2.77x."""
    from loaderdoc.advice.findings import WARNING, Finding, proposed_change

    def f(rule, change, gain):
        return Finding(rule_id=rule, severity=WARNING, symptom="s", evidence=["1"], cause="c", fix="f",
                       threshold="t", settings_change=change, expected_gain=gain)

    starved = f("watch-data-starved", {"num_workers": 1, "torch_threads": 1}, 1.67)
    threads = f("threads-oversubscribed", {"torch_threads": 1}, 1.66)
    restarts = f("watch-slow-epoch-start", {"persistent_workers": True}, 1.2)
    assert proposed_change([starved, threads])["expected_gain"] == pytest.approx(1.67)
    # a change of another setting is independent: its gain multiplies
    merged = proposed_change([starved, threads, restarts])
    assert merged["expected_gain"] == pytest.approx(1.67 * 1.2)
    assert merged["change"] == {"num_workers": 1, "torch_threads": 1, "persistent_workers": True}
    assert proposed_change([starved, f("x", {"num_workers": 1}, None)])["expected_gain"] is None
