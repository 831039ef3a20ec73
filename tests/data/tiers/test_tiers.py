"""Each tier on its own: the same batches for the same order, and the stream tier's reader thread."""

import threading

import numpy as np
import pytest
import torch

from trainmedic.data.materialize import NoProgress
from trainmedic.data.order import batch_slices, epoch_order
from trainmedic.data.sources.arrays import ArraySource
from trainmedic.data.tiers.disk import DiskTier
from trainmedic.data.tiers.ram import RamTier
from trainmedic.data.tiers.stream import StreamTier
from trainmedic.data.tiers.vram import VramTier

CPU = torch.device("cpu")
N = 700


@pytest.fixture
def source():
    rng = np.random.default_rng(1)
    return ArraySource({"x": rng.standard_normal((N, 5)).astype(np.float32), "y": np.arange(N)})


def make(name, source, tmp_path):
    if name == "vram":  # on a CPU device: the same code path without CUDA, device tensors on the host
        return VramTier(source, CPU, NoProgress())
    if name == "ram":
        return RamTier(source, CPU, 64, NoProgress())
    if name == "disk":
        return DiskTier(source, CPU, 64, tmp_path, NoProgress())
    return StreamTier(source, CPU, 64, window_bytes=64 * 5 * 40 * 3)  # several windows per epoch


@pytest.mark.parametrize("name", ["vram", "ram", "disk", "stream"])
def test_tier_serves_the_rows_of_the_order(name, source, tmp_path):
    tier = make(name, source, tmp_path)
    order = epoch_order(N, shuffle=True, seed=4, epoch=0)
    batches = list(tier.epoch(order, batch_slices(N, 64, False, start_batch=2)))
    assert len(batches) == 11 - 2
    got = np.concatenate([y.numpy() for _, y in batches])
    assert np.array_equal(got, order[128:])
    for x, y in batches:
        assert torch.equal(x, torch.from_numpy(source.array("x")[y.numpy()]))


def test_ram_tier_serves_a_dict_in_place_and_copies_a_memmap(source, tmp_path):
    assert "nothing copied" in RamTier(source, CPU, 64, NoProgress()).facts[0]
    np.save(tmp_path / "x.npy", source.array("x"))
    mapped = ArraySource({"x": np.load(tmp_path / "x.npy", mmap_mode="r")})
    assert "read" in RamTier(mapped, CPU, 64, NoProgress()).facts[0]


def test_ram_tier_batches_are_fresh_tensors_on_cpu(source):
    tier = RamTier(source, CPU, 64, NoProgress())
    order = np.arange(N)
    first, second = list(tier.epoch(order, [(0, 64), (64, 128)]))
    assert first[1][0].item() == 0 and second[1][0].item() == 64  # a kept batch is not overwritten


class FailingSource(ArraySource):
    def read(self, field, indices, out):
        if indices[0] > 300:
            raise OSError("disk went away")
        super().read(field, indices, out)


def test_stream_reader_errors_surface_where_the_user_iterates(source):
    failing = FailingSource({"x": source.array("x"), "y": source.array("y")})
    tier = StreamTier(failing, CPU, 64, window_bytes=64 * 48 * 2)
    with pytest.raises(OSError, match="disk went away"):
        list(tier.epoch(np.arange(N), batch_slices(N, 64, False)))
    assert not [t for t in threading.enumerate() if t.name == "trainmedic-stream"]


def test_stream_reader_stops_when_the_loop_breaks(source):
    tier = StreamTier(source, CPU, 64, window_bytes=64 * 48 * 2)
    batches = tier.epoch(np.arange(N), batch_slices(N, 64, False))
    next(batches)
    batches.close()
    assert not [t for t in threading.enumerate() if t.name == "trainmedic-stream"]
