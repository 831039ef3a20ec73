"""The op census charges a torch call to the user's line that made it, never to one a library made it for.

Real steps, real torch calls: a module-level loop once had its optimizer's, clipping's and a
GradScaler's calls charged to ``<module>``, and a DataLoader's per-item calls to the loop that
iterated it; both read as per-sample loops.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from trainmedic.run.probe.call_floor import measure
from trainmedic.run.probe.clock import OPTIMIZER
from trainmedic.run.probe.session import WatchSession


class Items(Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        x = torch.full((8,), float(i))
        return (x - 3.0) / 2.0, torch.tensor(i % 2)  # per-item calls: the loader's, not the loop's


def make_sample():
    sig = torch.randn(16)
    for _ in range(5):
        sig = sig + 0.1 * torch.roll(sig, 1)  # tiny calls made by the user's own line
    return sig


def run_steps(step, steps=6):
    session = WatchSession(warmup=3).start()
    try:
        for _ in range(steps):
            session.clock.boundary(OPTIMIZER)
            step()
    finally:
        measured = session.stop()
    return measured


def test_calls_made_by_modules_clipping_and_the_optimizer_are_the_librarys():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    def step():
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad()

    census = run_steps(step).census
    assert census.counted and census.steps == 2
    own = {key.rsplit(":", 1)[1]: tally for key, tally in census.by_function.items()}
    # The user's own calls: mse_loss (through torch.nn.functional, glue) and backward's entry.
    assert set(own) == {"step"}
    assert own["step"].calls / census.steps <= 3
    assert own["step"].grad_calls >= 1  # the loss touches the model's output: compute, not data
    # AdamW's per-parameter updates and clipping's norms were made by those libraries.
    assert census.library_calls / census.steps > 20


def test_calls_inside_a_dataloaders_fetch_are_data_not_the_loops():
    loader = DataLoader(Items(), batch_size=16)
    batches = iter(())

    def step():
        nonlocal batches
        batch = next(batches, None)
        if batch is None:
            batches = iter(loader)
            batch = next(batches)
        return batch[0].sum()

    census = run_steps(step).census
    assert census.loader_calls > 0
    lines = {where.rsplit(":", 1)[1] for where in census.by_line}
    getitem = str(Items.__getitem__.__code__.co_firstlineno + 2)
    assert getitem not in lines, "the dataset's per-item calls are not the user's loop's"


def test_a_per_sample_functions_calls_cost_more_to_start_than_to_run():
    def step():
        torch.stack([make_sample() for _ in range(8)])

    census = run_steps(step).census
    (tally,) = [t for key, t in census.by_function.items() if key.endswith(":make_sample")]
    assert tally.calls / census.steps == 8 * 16  # randn + 5 x (roll, mul, add) per sample
    assert tally.overhead_bound and tally.grad_calls == 0


def test_a_large_call_is_work_not_overhead():
    big = torch.randn(512, 512)

    def step():
        for _ in range(3):
            big @ big

    census = run_steps(step).census
    (tally,) = [t for key, t in census.by_function.items() if key.endswith(":step")]
    assert not tally.overhead_bound
    assert tally.work_s > 10 * tally.floor_s


def test_the_call_floor_is_measured_on_this_machine():
    cost = measure(torch, "cpu")
    assert 0 < cost.floor_s < 1e-3
    assert cost.byte_s > 0 and cost.flop_s > 0
    # A kilobyte is below the floor; a 64 MiB copy is far above it, on any machine.
    assert cost.work_s(1024, 0) < cost.floor_s < cost.work_s(64 << 20, 0)


@pytest.mark.slow
def test_detaching_a_model_output_is_not_work_on_the_model():
    model = nn.Linear(64, 256)
    x = torch.randn(32, 64)
    pool = [torch.zeros(0, 256)]

    def step():
        out = model(x)
        pool[0] = torch.cat([pool[0], out.detach()])  # a growing pool of detached outputs

    census = run_steps(step).census
    line = str(step.__code__.co_firstlineno + 2)
    (tally,) = [t for where, t in census.by_line.items() if where.endswith(f":{line}")]
    assert tally.grad_calls == census.steps  # the detach touched a tensor that requires grad ...
    assert tally.grad_work_s == 0 < tally.work_s  # ... and did none of the line's work: the cat did
