"""The loader contract on every tier and source: order, epochs, resume at start, middle and end."""

import h5py
import numpy as np
import pytest
import torch

from trainmedic import data
from trainmedic.errors import DataError, ResumeError

TIERS = ["ram", "disk", "stream"]
N = 1000


@pytest.fixture
def arrays():
    rng = np.random.default_rng(0)
    return {"x": rng.standard_normal((N, 3, 4)).astype(np.float32), "y": np.arange(N, dtype=np.int64)}


@pytest.fixture
def h5_path(tmp_path, arrays):
    path = tmp_path / "signals.h5"
    with h5py.File(path, "w") as f:
        f.create_dataset("x", data=arrays["x"], chunks=(64, 3, 4))
        f.create_dataset("y", data=arrays["y"], chunks=(64,))
    return path


def labels(loader):
    return np.concatenate([batch[-1].numpy() for batch in loader])


@pytest.mark.parametrize("tier", TIERS)
def test_batches_are_tensors_in_field_order_with_the_right_rows(tier, arrays, tmp_path):
    loader = data.load(arrays, fields=["y", "x"], batch_size=64, tier=tier, cache_dir=tmp_path)
    assert loader.tier == tier
    assert loader.fields == ("y", "x")
    batches = list(loader)
    assert len(batches) == len(loader) == 16
    for y, x in batches:
        assert x.dtype == torch.float32 and x.shape[1:] == (3, 4) and y.dtype == torch.int64
        assert torch.equal(x, torch.from_numpy(arrays["x"][y.numpy()]))
    assert batches[-1][0].shape[0] == N - 15 * 64


@pytest.mark.parametrize("tier", TIERS)
def test_every_sample_once_per_epoch_same_order_on_every_tier(tier, h5_path, tmp_path):
    reference = data.load({"y": np.arange(N)}, batch_size=100, seed=5)
    loader = data.load(h5_path, fields=["x", "y"], batch_size=100, seed=5, tier=tier, cache_dir=tmp_path)
    for epoch in range(2):
        reference.set_epoch(epoch)
        loader.set_epoch(epoch)
        got = labels(loader)
        assert np.array_equal(np.sort(got), np.arange(N))
        assert np.array_equal(got, labels(reference))


def test_epochs_advance_without_set_epoch_and_set_epoch_replays(arrays):
    loader = data.load(arrays, batch_size=100, seed=1)
    first, second = labels(loader), labels(loader)
    assert not np.array_equal(first, second)
    loader.set_epoch(0)
    assert np.array_equal(labels(loader), first)


def test_drop_last_and_no_shuffle(arrays):
    loader = data.load(arrays, batch_size=300, shuffle=False, drop_last=True)
    assert len(loader) == 3
    assert np.array_equal(labels(loader), np.arange(900))


@pytest.mark.parametrize("tier", TIERS)
@pytest.mark.parametrize("stop_after", [0, 7, 16])  # start, middle and end of an epoch
def test_resume_continues_with_exactly_the_batches_of_an_uninterrupted_run(
    tier, stop_after, h5_path, tmp_path
):
    def make():
        return data.load(h5_path, fields=["x", "y"], batch_size=64, seed=9, tier=tier, cache_dir=tmp_path)

    uninterrupted = make()
    uninterrupted.set_epoch(3)
    expected = [y.numpy() for _, y in uninterrupted]
    uninterrupted.set_epoch(4)
    expected += [y.numpy() for _, y in uninterrupted]

    first = make()
    first.set_epoch(3)
    batches = iter(first)
    served = [next(batches)[1].numpy() for _ in range(stop_after)]
    state = first.state_dict()  # a checkpoint after `stop_after` steps

    resumed = make()
    resumed.load_state_dict(state)
    for epoch in range(resumed.epoch, 5):  # the usual loop, entered again after the restart
        resumed.set_epoch(epoch)
        served += [y.numpy() for _, y in resumed]
    assert len(served) == len(expected)
    for got, want in zip(served, expected):
        assert np.array_equal(got, want)


def test_state_dict_is_plain_and_round_trips_through_torch_save(arrays, tmp_path):
    loader = data.load(arrays, batch_size=64, seed=2)
    iterator = iter(loader)
    next(iterator), next(iterator)
    torch.save(loader.state_dict(), tmp_path / "state.pt")
    state = torch.load(tmp_path / "state.pt", weights_only=True)
    assert state["epoch"] == 0 and state["batches_served"] == 2


@pytest.mark.parametrize(
    "change, message",
    [({"batch_size": 32}, "batch_size=64"), ({"seed": 3}, "seed=2"), ({"shuffle": False}, "shuffle=True")],
)
def test_resuming_a_different_loader_names_the_difference(arrays, change, message):
    state = data.load(arrays, batch_size=64, seed=2).state_dict()
    options = {"batch_size": 64, "seed": 2, **change}
    with pytest.raises(ResumeError, match=message.replace("=", "=")):
        data.load(arrays, **options).load_state_dict(state)
    with pytest.raises(ResumeError, match="not a trainmedic.data loader state"):
        data.load(arrays).load_state_dict({"epoch": 1})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"batch_size": 0}, "batch_size=0"),
        ({"shuffle_block": -1}, "shuffle_block=-1"),
        ({"seed": "0"}, "seed='0'"),
        ({"device": "gpu0"}, "device='gpu0'"),
        ({"device": "cuda"}, "torch.cuda.is_available"),
    ],
)
def test_bad_arguments_name_the_value(arrays, kwargs, message):
    if kwargs.get("device") == "cuda" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(DataError, match=message.replace("(", r"\(").replace(".", r"\.")):
        data.load(arrays, **kwargs)


def test_explain_gives_the_numbers_behind_the_tier(arrays):
    loader = data.load(arrays, batch_size=100)
    text = loader.explain()
    assert "RAM:" in text and "available" in text and "→ ram" in text
    assert "1000 samples" in text and "x: float32 3×4" in text
    assert "10 of 100 per epoch" in text or "batches: 10 of 100" in text


def test_a_checkpoint_on_the_epochs_last_batch_resumes_into_the_next_epoch(arrays):
    def run(resume_from=None):
        loader = data.load(arrays, batch_size=300, seed=4)
        start, served, state = 0, [], None
        if resume_from is not None:
            start, saved = resume_from
            loader.load_state_dict(saved)
        for epoch in range(start, 3):
            loader.set_epoch(epoch)
            for _, y in loader:
                served.append(y.numpy())
                if resume_from is None and epoch == 0 and len(served) == 4 and state is None:
                    state = (epoch, loader.state_dict())  # the user saves the epoch they are in
        return served, state

    whole, state = run()
    resumed, _ = run(resume_from=state)
    assert len(whole[4:]) == len(resumed)
    assert all(np.array_equal(a, b) for a, b in zip(whole[4:], resumed))


def test_a_new_iteration_takes_the_cursor_over(arrays):
    loader = data.load(arrays, batch_size=100, seed=0)
    first = iter(loader)
    a = next(first)[1]
    second = iter(loader)
    b = next(second)[1]
    assert not np.array_equal(a.numpy(), b.numpy())  # batch 1, then batch 2 of the same epoch
    assert list(first) == []  # the older iterator stops instead of double-counting
    assert loader.state_dict()["batches_served"] == 2


def test_big_endian_arrays_are_served_as_native_tensors(tmp_path, arrays):
    big = arrays["x"].astype(">f4")
    np.save(tmp_path / "x.npy", big)
    for source in ({"x": big}, tmp_path / "x.npy"):
        for tier in ("ram", "stream"):
            x = next(iter(data.load(source, batch_size=N, shuffle=False, tier=tier)))[0]
            assert torch.equal(x, torch.from_numpy(arrays["x"]))


def test_an_empty_source_is_refused(tmp_path):
    from trainmedic.errors import SourceError

    with pytest.raises(SourceError, match="0 samples"):
        data.load({"x": np.zeros((0, 3))})


def test_materialising_keeps_a_users_gc_freeze(tmp_path):
    import gc

    np.save(tmp_path / "x.npy", np.zeros((10, 2)))
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        data.load(tmp_path / "x.npy")
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
