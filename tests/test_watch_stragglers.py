"""The straggler rule's arithmetic, on hand-built ranks (the real torchrun run is in test_watch_ranks)."""

from __future__ import annotations

from loaderdoc.watching.stragglers import RankRun, find_stragglers

GiB = 1024**3


def _rank(rank, share, per_batch_ms, **facts):
    return RankRun(rank=rank, node=facts.pop("node", "0"), wait_share=share,
                   wait_per_batch_s=per_batch_ms / 1000, steps=100, **facts)


def test_two_ranks_the_slow_one_is_compared_with_the_other_not_a_median_it_pulls_up():
    found = find_stragglers([_rank(0, 0.04, 2.0), _rank(1, 0.62, 33.0)])
    assert [s.rank for s in found] == [1]
    assert found[0].ratio == 16.5
    assert "62 % of its time against 4 %" in found[0].text()


def test_the_explanation_names_what_the_rank_has_less_of():
    ranks = [_rank(r, 0.05, 3.0, cpus=16, shm_total_bytes=12 * GiB, num_workers=8) for r in range(3)]
    ranks.append(_rank(3, 0.55, 9.0, node="1", cpus=4, shm_total_bytes=64 * 1024**2, num_workers=8))
    (s,) = find_stragglers(ranks)
    assert s.rank == 3 and s.node == "1"
    text = s.text()
    assert "rank 3 on node 1 waits 3.0x" in text
    assert "may use 4 CPUs where the others have 16 CPUs" in text
    assert "/dev/shm is 64 MiB where the others have 12 GiB" in text
    assert "workers" not in text  # same worker count: not named


def test_when_no_recorded_fact_differs_it_says_to_look_at_the_data():
    (s,) = find_stragglers([_rank(0, 0.02, 1.0, cpus=2), _rank(1, 0.02, 1.2, cpus=2), _rank(2, 0.4, 20.0, cpus=2)])
    assert s.differences == [] and "its shard of the data" in s.text()


def test_fewer_workers_explain_a_straggler():
    (s,) = find_stragglers([_rank(0, 0.01, 0.5, num_workers=4), _rank(1, 0.7, 40.0, num_workers=0)])
    assert s.differences == ["its loader has 0 workers where the others have 4 workers"]


def test_others_that_never_wait():
    (s,) = find_stragglers([_rank(0, 0.0, 0.0), _rank(1, 0.3, 12.0)])
    assert "waits for data where the other ranks do not" in s.text()


def test_no_straggler_among_even_ranks_small_gaps_or_a_single_rank():
    assert find_stragglers([_rank(r, 0.3, 10.0 + r) for r in range(4)]) == []
    assert find_stragglers([_rank(0, 0.001, 0.1), _rank(1, 0.004, 0.4)]) == []  # under 5 % waiting
    assert find_stragglers([_rank(0, 0.02, 0.2), _rank(1, 0.06, 0.9)]) == []  # 4.5x, but 0.7 ms a batch
    assert find_stragglers([_rank(0, 0.6, 30.0)]) == []
