"""Sharding an epoch across ranks (data.load's shard=): disjoint, complete, the same batch count
on every rank, exact resume per rank, a clear refusal at another world size. No processes here:
tests/checkpoint/test_checkpoint_ranks.py runs the same across 2 real torchrun ranks."""

import numpy as np
import pytest

from trainmedic import data
from trainmedic.data.shard import Shard, resolve_shard
from trainmedic.errors import DataError, ResumeError


def load(n=103, shard=False, **kw):
    kw.setdefault("batch_size", 8)
    return data.load({"i": np.arange(n)}, shard=shard, seed=5, progress=False, **kw)


def epoch(loader, e):
    loader.set_epoch(e)
    return [b[0].numpy() for b in loader]


@pytest.mark.parametrize("order", [{}, {"shuffle_block": 10}, {"shuffle": False}])
@pytest.mark.parametrize(
    "n, world, drop_last",
    [(103, 2, False), (103, 3, False), (103, 3, True), (96, 4, False), (2, 3, False), (100, 7, True)],
)
def test_ranks_are_disjoint_complete_and_equally_long(n, world, drop_last, order):
    for e in range(2):
        per_rank = [
            np.concatenate(
                epoch(load(n, (r, world), drop_last=drop_last, batch_size=5, **order), e)
                or [np.array([], int)]
            )
            for r in range(world)
        ]
        lengths = {len(load(n, (r, world), drop_last=drop_last, batch_size=5, **order)) for r in range(world)}
        assert len(lengths) == 1  # a DDP loop needs as many batches on every rank
        served = np.concatenate(per_rank)
        if drop_last:
            # Only full batches, and no sample twice.
            assert len(np.unique(served)) == len(served) == world * ((n // world) // 5) * 5
        else:
            assert set(served.tolist()) == set(range(n))  # every sample, every epoch
            assert len(served) == world * -(-n // world)  # padded by fewer than world repeats
            # Only the padding is served twice: without it the ranks' samples never overlap.
            assert len(served) - len(np.unique(served)) == (-n) % world


def test_each_step_of_the_ranks_is_one_step_of_a_single_process_with_world_times_the_batch():
    single = epoch(load(103, False, batch_size=24), 1)
    ranks = [epoch(load(103, (r, 3), batch_size=8), 1) for r in range(3)]
    for step, whole in enumerate(single):
        together = np.concatenate([ranks[r][step] for r in range(3)])
        if step < len(single) - 1:
            assert sorted(together.tolist()) == sorted(whole.tolist())
        else:  # the last step also serves the padding: the epoch's first 2 samples again
            assert sorted(together.tolist()) == sorted(whole.tolist() + single[0][:2].tolist())


@pytest.mark.parametrize("order", [{"shuffle_block": 100}, {"shuffle": False}])
def test_a_blocked_or_sequential_order_gives_each_rank_its_own_storage_chunks(order):
    # 100-row chunks: striding would hand each of 4 ranks a quarter of every one of the 10 chunks.
    chunks = []
    for rank in range(4):
        served = np.concatenate(epoch(load(1000, (rank, 4), batch_size=50, **order), 1))
        chunks.append(set((served // 100).tolist()))
    assert all(len(c) <= 3 for c in chunks)  # 2.5 chunks' worth each
    assert sum(len(c) for c in chunks) <= 10 + 3  # a chunk shared only where two stretches meet
    strided = np.concatenate(epoch(load(1000, (0, 4), batch_size=50), 1))
    assert len(set((strided // 100).tolist())) == 10  # the full shuffle: every rank reads every chunk


def test_len_and_explain_are_per_rank():
    loader = load(1000, (1, 2), batch_size=100)
    assert len(loader) == 5 and loader.samples_per_epoch == 500
    assert "rank 1 of 2: 500 of 1000 samples per epoch" in loader.explain()
    assert "padded" not in loader.explain()
    assert "padded with its first 1" in load(999, (0, 2)).explain()
    assert "last 1 of each epoch's order are dropped" in load(999, (0, 2), drop_last=True).explain()
    assert "shard: none" in load(10).explain()
    assert (
        "positions 500 to 999 of the epoch order, one stretch"
        in load(1000, (1, 2), shuffle_block=10).explain()
    )
    assert "rank=1/2" in repr(loader)


def test_auto_reads_torchrun_environment(monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    loader = load(100, "auto")
    assert (loader.rank, loader.world_size) == (1, 4) and "RANK/WORLD_SIZE" in loader.explain()
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert resolve_shard("auto") == Shard(0, 1, "WORLD_SIZE=1")
    monkeypatch.delenv("RANK")
    assert resolve_shard("auto").world_size == 1
    assert load(100).world_size == 1  # shard=False: every sample here
    monkeypatch.setenv("RANK", "one")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DataError, match="RANK='one'.*not whole numbers"):
        load(10, "auto")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(DataError, match=r"rank=2 is outside \[0, 2\)"):
        load(10, "auto")


@pytest.mark.parametrize(
    "bad, message",
    [
        ((2, 2), r"rank=2 is outside \[0, 2\); expected a rank from 0 to 1"),
        ((-1, 2), r"rank=-1 is outside"),
        ((0, 0), r"world_size=0 is not allowed"),
        ((0.0, 2), r"rank=0.0 is a float; expected a whole number"),
        ((True, 2), r"rank=True is a bool"),
        ("yes", r"shard='yes' is not understood; expected 'auto'"),
        ((1, 2, 3), r"is not understood"),
    ],
)
def test_bad_shard_values_are_named(bad, message):
    with pytest.raises(DataError, match=message):
        load(10, bad)


@pytest.mark.parametrize("tier", ["ram", "stream"])
def test_every_rank_resumes_exactly_mid_epoch(tier):
    for rank in range(3):
        whole = epoch(load(103, (rank, 3), tier=tier), 0) + epoch(load(103, (rank, 3), tier=tier), 1)
        first = load(103, (rank, 3), tier=tier)
        first.set_epoch(0)
        it = iter(first)
        taken = [next(it)[0].numpy() for _ in range(3)]
        state = first.state_dict()
        assert (state["rank"], state["world_size"]) == (rank, 3)
        resumed = load(103, (rank, 3), tier=tier)
        resumed.load_state_dict(state)
        rest = epoch(resumed, 0) + epoch(resumed, 1)
        assert all(np.array_equal(a, b) for a, b in zip(taken + rest, whole, strict=True))


def test_another_ranks_state_resumes_this_rank_at_the_same_position():
    # A checkpoint written by rank 0 restores every rank: the position is common, the shard is this rank's.
    rank0 = load(103, (0, 2))
    rank0.set_epoch(1)
    it = iter(rank0)
    next(it)
    next(it)
    rank1 = load(103, (1, 2))
    rank1.load_state_dict(rank0.state_dict())
    assert np.array_equal(next(iter(rank1))[0].numpy(), epoch(load(103, (1, 2)), 1)[2])


@pytest.mark.parametrize("world", [1, 3])
def test_a_state_from_another_world_size_is_refused_with_both_sizes_and_the_fix(world):
    state = load(103, (0, 2)).state_dict()
    other = load(103, (0, world) if world > 1 else False)
    with pytest.raises(
        ResumeError,
        match=rf"world_size=2 processes and this one is rank 0 of world_size={world}.*"
        r"Resume with 2 process\(es\).*set_epoch\(1\)",
    ):
        other.load_state_dict(state)


def test_a_state_from_before_sharding_counts_as_one_process():
    state = load(103).state_dict()
    del state["rank"], state["world_size"]
    load(103).load_state_dict(state)
    with pytest.raises(ResumeError, match="world_size=1"):
        load(103, (1, 2)).load_state_dict(state)
