"""The collective timer on a real (one-rank) gloo process group: DDP's all-reduce and dist.* calls."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from trainmedic.run.probe.clock import OPTIMIZER, StepClock
from trainmedic.run.probe.collectives import CollectiveTimer


@pytest.fixture(scope="module")
def group():
    # Port 0: the store binds a port the OS picks, where a port found free beforehand could be taken.
    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _timer(warmup: int = 1) -> tuple[StepClock, CollectiveTimer]:
    clock = StepClock(warmup=warmup)
    timer = CollectiveTimer(clock)
    timer.install(torch)
    return clock, timer


def _train(model: torch.nn.Module, clock: StepClock, steps: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 4)
    for _ in range(steps):
        model(x).sum().backward()
        opt.step()
        opt.zero_grad()
        clock.boundary(OPTIMIZER)


def test_ddp_all_reduce_is_timed_per_steady_step_and_gradients_stay_right(group):
    clock, timer = _timer(warmup=1)
    try:
        torch.manual_seed(0)
        plain = torch.nn.Linear(4, 2)
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        model.module.load_state_dict(plain.state_dict())
        x = torch.randn(8, 4)
        model(x).sum().backward()
        plain(x).sum().backward()
        # The stock hook averages over the (one) rank exactly as DDP without a hook would.
        assert torch.allclose(model.module.weight.grad, plain.weight.grad)
        model.zero_grad()
        _train(model, clock, steps=5)
        stats = timer.stats()
    finally:
        timer.uninstall()
    # Boundaries 1..5 close steps 0..4 (the first opens counting); step 0 is warm-up.
    assert [i for i, _ in stats.waits] == [1, 2, 3]
    assert all(0 <= w < 1 for _, w in stats.waits)
    assert stats.kinds == ("DDP gradient all-reduce",)


def test_a_users_own_comm_hook_is_kept_and_timed(group):
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

    calls = []

    def my_hook(state, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
        calls.append(bucket.index())
        return default_hooks.allreduce_hook(state, bucket)

    clock, timer = _timer(warmup=0)
    try:
        model = DistributedDataParallel(torch.nn.Linear(4, 2))
        model.register_comm_hook(dist.group.WORLD, my_hook)
        _train(model, clock, steps=3)
        stats = timer.stats()
    finally:
        timer.uninstall()
    assert calls  # the user's hook still runs
    assert len(stats.waits) == 2 and stats.kinds == ("DDP gradient all-reduce",)


def test_python_collectives_are_timed_and_everything_is_restored(group):
    original = dist.all_reduce
    clock, timer = _timer(warmup=0)
    try:
        assert dist.all_reduce is not original
        clock.boundary(OPTIMIZER)
        t = torch.ones(3)
        dist.all_reduce(t)
        dist.barrier()
        work = dist.all_reduce(t, async_op=True)  # returns at once: not a wait
        work.wait()
        clock.boundary(OPTIMIZER)
        stats = timer.stats()
    finally:
        timer.uninstall()
    assert dist.all_reduce is original
    assert DistributedDataParallel.forward.__name__ == "forward"
    assert not hasattr(DistributedDataParallel.forward, "__wrapped__")
    assert len(stats.waits) == 1 and stats.waits[0][1] > 0
    assert stats.kinds == ("dist.all_reduce", "dist.barrier")


def test_a_new_step_source_starts_the_count_again(group):
    from trainmedic.run.probe.clock import MARKER

    clock, timer = _timer(warmup=0)
    try:
        for _ in range(4):
            clock.boundary(OPTIMIZER)
        clock.boundary(MARKER)  # a better source takes over: index back to 0
        clock.boundary(MARKER)
        stats = timer.stats()
    finally:
        timer.uninstall()
    assert [i for i, _ in stats.waits] == [0]


def test_a_stack_inside_a_collective_is_a_sync_wait_at_the_users_line(group):
    import sys

    from trainmedic.categories import SYNC
    from trainmedic.run.probe.frames import FrameClassifier

    classifier, captured = FrameClassifier(), []

    class Payload:
        def __reduce__(self):
            # Pickled inside dist.all_gather_object: torch.distributed is on the stack.
            captured.append(classifier.classify(sys._getframe()))
            return (int, (1,))

    out = [None]
    dist.all_gather_object(out, Payload())
    assert out == [1]
    assert (captured[0].category, captured[0].kind) == (SYNC, "collective")


def test_a_collective_that_calls_another_is_counted_once(group):
    clock, timer = _timer(warmup=0)
    try:
        clock.boundary(OPTIMIZER)
        out = [None]
        dist.all_gather_object(out, {"a": 1})  # calls dist.all_gather inside
        clock.boundary(OPTIMIZER)
        stats = timer.stats()
    finally:
        timer.uninstall()
    assert stats.kinds == ("dist.all_gather_object",)
