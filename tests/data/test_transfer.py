"""The ram tier's path to the device, on the CPU: the pinned ring, the gather threads, their errors.

CUDA is replaced at its one seam (``copier``: staging buffer, copy + event, wait on an event) by
``LazyCopier``, which behaves like a stream: a copy runs only when its event (or a later one) is
waited on, or at ``synchronize()``. The tests collect batches first and synchronise last, so a
slot overwritten before the copy that reads it ran shows up as a wrong batch, every time.
"""

import threading

import numpy as np
import pytest
import torch

from trainmedic import data
from trainmedic.data.gather_ahead import THREAD_NAME, chunk_rows, gather_threads, ring_slots, usable_cores
from trainmedic.data.sources.base import FieldSpec
from trainmedic.data.transfer import HostToDevice, torch_dtype
from trainmedic.errors import DataError

CPU = torch.device("cpu")
N = 3000
WIDTH = 4096  # 16 KiB rows: 128-row batches (2 MiB) are gathered whole, 512-row ones in two chunks
KiB, MiB = 1024, 1024 * 1024


class Event:
    def __init__(self, number):
        self.number = number
        self.done = False


class LazyCopier:
    """A host stand-in for CudaCopier whose copies run late and in order, like a CUDA stream's."""

    def __init__(self):
        self.lock = threading.Lock()
        self.pending = []  # (event, staged, out), in issue order
        self.events = []
        self.waits = []

    def staging(self, shape, dtype):
        return torch.empty(shape, dtype=torch_dtype(dtype))

    def copy(self, staged):
        out = tuple(torch.empty_like(t) for t in staged)
        with self.lock:
            event = Event(len(self.events))
            self.events.append(event)
            self.pending.append((event, list(staged), out))
        return out, event

    def wait(self, event):
        with self.lock:
            self.waits.append(event.number)
            while not event.done:
                self._run_one()

    def synchronize(self):
        with self.lock:
            while self.pending:
                self._run_one()

    def _run_one(self):
        event, staged, out = self.pending.pop(0)
        for src, dst in zip(staged, out):
            dst.copy_(src)
        event.done = True


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(3)
    return {"x": rng.standard_normal((N, WIDTH), dtype=np.float32), "y": np.arange(N, dtype=np.int64)}


def specs_of(arrays):
    return [FieldSpec(name, a.dtype, a.shape[1:]) for name, a in arrays.items()]


def index_batches(order, size):
    return [order[i : i + size] for i in range(0, len(order), size)]


def gather_threads_alive():
    return [t for t in threading.enumerate() if t.name.startswith(THREAD_NAME)]


def check_batches(batches, arrays, indices):
    assert len(batches) == len(indices)
    for (x, y), idx in zip(batches, indices):
        assert torch.equal(x, torch.from_numpy(np.take(arrays["x"], idx, axis=0)))
        assert np.array_equal(y.numpy(), idx)


@pytest.mark.slow
@pytest.mark.parametrize(("threads", "size"), [(0, 128), (1, 128), (2, 128), (3, 128), (2, 512), (3, 512)])
def test_batches_equal_a_plain_take_of_the_order_and_slots_wait_for_their_copy(arrays, threads, size):
    copier = LazyCopier()
    mover = HostToDevice(specs_of(arrays), CPU, size, copier=copier, threads=threads)
    order = np.random.default_rng(7).permutation(N)
    indices = index_batches(order, size)  # the last batch is short
    assert len(indices) > mover.slots
    batches = list(mover.batches(arrays, indices))
    copier.synchronize()  # only now: every copy a slot's reuse did not force ran after all gathers
    check_batches(batches, arrays, indices)
    # One copy per batch; the host waited once per slot reuse, on the copy of batch k - N.
    assert len(copier.events) == len(indices)
    assert sorted(copier.waits) == list(range(len(indices) - mover.slots))
    assert mover.copied_bytes == N * (WIDTH * 4 + 8)
    mover.close()
    assert not gather_threads_alive()


def test_large_batches_are_split_into_chunks_across_threads(arrays):
    mover = HostToDevice(specs_of(arrays), CPU, 512, copier=LazyCopier(), threads=2)
    assert mover.chunk_rows == 256  # 4 MiB chunks: two per 8 MiB batch
    assert mover.slots == 3
    small = HostToDevice(specs_of(arrays), CPU, 128, copier=LazyCopier(), threads=3)
    assert small.chunk_rows == 128 and small.slots == 5  # 2 MiB batches whole, three at once


def test_a_second_pass_waits_on_the_copies_of_the_first(arrays):
    copier = LazyCopier()
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=copier, threads=2)
    indices = index_batches(np.arange(N), 128)
    first = list(mover.batches(arrays, indices[:2]))  # the ring goes back with two copies pending
    second = list(mover.batches(arrays, indices[5:]))
    copier.synchronize()
    check_batches(first + second, arrays, indices[:2] + indices[5:])


def test_two_live_iterators_get_separate_rings(arrays):
    copier = LazyCopier()
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=copier, threads=2)
    a_idx = index_batches(np.arange(N), 128)
    b_idx = index_batches(np.arange(N)[::-1].copy(), 128)
    a, b = mover.batches(arrays, a_idx), mover.batches(arrays, b_idx)
    got_a, got_b = [], []
    for batch_a, batch_b in zip(a, b):
        got_a.append(batch_a)
        got_b.append(batch_b)
    copier.synchronize()
    check_batches(got_a, arrays, a_idx)
    check_batches(got_b, arrays, b_idx)


def test_gather_threads_pull_at_most_a_ring_ahead_of_the_copies(arrays):
    copier = LazyCopier()
    mover = HostToDevice(specs_of(arrays), CPU, 64, copier=copier, threads=2)
    slots = mover.slots
    indices = index_batches(np.random.default_rng(1).permutation(N), 64)
    cond = threading.Condition()
    seen = {"pulled": 0, "consumed": 0, "too_far": []}

    def jobs():
        for k, idx in enumerate(indices):
            with cond:
                # Batch k may start once the copy of batch k - slots was issued, which happens
                # just before the consumer receives batch k - slots + 1.
                if k > seen["consumed"] + slots:
                    seen["too_far"].append(k)
                seen["pulled"] = k + 1
                cond.notify_all()
            yield idx

    stream = mover.batches(arrays, jobs())
    got = [next(stream)]
    with cond:
        seen["consumed"] = 1
        # The threads fill the whole ring while the consumer holds off (a deadlock guard, not a timing).
        assert cond.wait_for(lambda: seen["pulled"] >= slots + 1, timeout=60)
    for batch in stream:
        got.append(batch)
        with cond:
            seen["consumed"] += 1
    copier.synchronize()
    check_batches(got, arrays, indices)
    assert seen["too_far"] == []


class Flaky(np.ndarray):
    """A real array whose take fails for one row, as a memory map over a vanished file would."""

    def take(self, indices, *args, **kwargs):
        if 777 in indices:
            raise OSError("page at row 777 went away")
        return super().take(indices, *args, **kwargs)


@pytest.mark.parametrize("threads", [0, 2])
def test_a_failed_gather_surfaces_where_the_consumer_iterates(arrays, threads):
    copier = LazyCopier()
    flaky = {"x": arrays["x"].view(Flaky), "y": arrays["y"]}
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=copier, threads=threads)
    indices = index_batches(np.arange(N), 128)  # row 777 is in batch 6
    got = []
    with pytest.raises((DataError, OSError), match="row 777 went away") as raised:
        for batch in mover.batches(flaky, indices):
            got.append(batch)
    copier.synchronize()
    check_batches(got, arrays, indices[:6])  # every batch before the failing one, intact
    if threads:
        assert raised.type is DataError and "could not gather batch 6" in str(raised.value)
        assert isinstance(raised.value.__cause__, OSError)
    # The ring is whole again: the next pass serves every batch right.
    again = list(mover.batches(arrays, indices))
    copier.synchronize()
    check_batches(again, arrays, indices)
    mover.close()
    assert not gather_threads_alive()


def test_an_error_in_the_order_surfaces_at_its_batch(arrays):
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=LazyCopier(), threads=2)

    def jobs():
        yield np.arange(128)
        raise ValueError("order broke")

    stream = mover.batches(arrays, jobs())
    next(stream)
    with pytest.raises(DataError, match="batch 1 .*ValueError: order broke"):
        next(stream)
    mover.close()
    assert not gather_threads_alive()


def test_an_abandoned_pass_leaves_its_threads_idle_and_close_stops_them(arrays):
    copier = LazyCopier()
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=copier, threads=3)
    indices = index_batches(np.arange(N), 128)
    stream = mover.batches(arrays, indices)
    first = [next(stream), next(stream)]
    assert len(gather_threads_alive()) == 3
    stream.close()  # returns once no thread writes into the ring any more
    (crew,) = mover._crews
    assert crew.busy == 0 and not crew.active and crew.fields is None  # the pass's arrays are let go
    # The threads are kept for the next pass (starting eight costs ~0.65 ms), which is served right.
    rest = list(mover.batches(arrays, indices[2:]))
    assert len(gather_threads_alive()) == 3
    copier.synchronize()
    check_batches(first + rest, arrays, indices)
    mover.close()
    assert not gather_threads_alive()


def test_a_mover_dropped_without_close_stops_its_threads(arrays):
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=LazyCopier(), threads=2)
    stream = mover.batches(arrays, index_batches(np.arange(N), 128))
    next(stream)
    del stream, mover  # CPython frees both here: the finalizer stops the threads
    assert not gather_threads_alive()


def test_the_loader_on_the_ring_keeps_order_and_resume(arrays):
    """A ram-tier loader whose mover goes through the ring serves what the CPU path serves."""

    def load(copier=None):
        loader = data.load(arrays, batch_size=128, tier="ram", seed=5, progress=False)
        if copier is not None:
            loader._tier.mover = HostToDevice(loader._tier.mover.specs, CPU, 128, copier=copier, threads=2)
        return loader

    plain = [b[-1].numpy().copy() for b in load()]
    copier = LazyCopier()
    ringed = load(copier)
    first = []
    for batch in ringed:
        first.append(batch)
        if len(first) == 4:
            state = ringed.state_dict()
            break  # abandons the pass mid-epoch
    ringed.close()
    assert not gather_threads_alive()
    resumed = load(copier)
    resumed.load_state_dict(state)
    rest = list(resumed)
    resumed.close()
    copier.synchronize()
    got = first + rest
    assert len(got) == len(plain)
    assert all(np.array_equal(b[-1].numpy(), labels) for b, labels in zip(got, plain))
    assert all(torch.equal(b[0], torch.from_numpy(arrays["x"][b[-1].numpy()])) for b in got)


def test_the_cpu_path_makes_a_fresh_array_per_batch_and_starts_no_thread(arrays):
    mover = HostToDevice(specs_of(arrays), CPU, 128)
    assert mover.copier is None
    batches = mover.batches(arrays, index_batches(np.arange(N), 128))
    first, second = next(batches), next(batches)
    assert not gather_threads_alive()
    assert first[1][0].item() == 0 and second[1][0].item() == 128  # a kept batch is not overwritten
    assert first[0].data_ptr() != second[0].data_ptr()


def test_the_stream_tiers_per_batch_path_reuses_slots_after_their_copy(arrays):
    copier = LazyCopier()
    mover = HostToDevice(specs_of(arrays), CPU, 128, copier=copier)
    indices = index_batches(np.random.default_rng(2).permutation(N), 128)
    batches = [mover.batch(arrays, idx) for idx in indices]
    copier.synchronize()
    check_batches(batches, arrays, indices)
    assert copier.waits == list(range(len(indices) - mover.slots))


def test_sizing_follows_batch_bytes_and_cores(monkeypatch):
    assert gather_threads(64 * KiB, 16) == 0  # inline: a hand-off costs more than the gather
    assert gather_threads(4 * MiB, 2) == 1  # a 2-core machine: overlap, never a split batch
    assert gather_threads(4 * MiB, 16) == 8
    assert gather_threads(4 * MiB, 128) == 8
    # 4 MiB batches of 16 KiB rows on 16 cores: each gathered whole, eight at once, ten slots.
    assert chunk_rows(256, 16 * KiB, 8) == 256
    assert ring_slots(256, 256, 8) == 10
    # 64 MiB batches: split in eight 8 MiB chunks, three slots (not one per thread).
    assert chunk_rows(4096, 16 * KiB, 8) == 512
    assert ring_slots(4096, 512, 8) == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    one = usable_cores()
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert usable_cores() == max(1, one // 2)
