"""The fixes a confirmation tries: each changes one thing while its arm is fixed, nothing while
it is not, and nothing at all once removed."""

from __future__ import annotations

import sys
import textwrap
import types

import h5py
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from trainmedic.run.probe import counterfactuals
from trainmedic.run.probe.counterfactuals import Arm


def _module(tmp_path, name: str, source: str) -> types.ModuleType:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(source), encoding="utf-8")
    module = types.ModuleType(name)
    module.__file__ = str(path)
    exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
    sys.modules[name] = module
    return module


def test_a_replayed_function_returns_what_it_returned_and_runs_again_once_removed(tmp_path):
    module = _module(
        tmp_path,
        "cf_batches",
        """
        calls = []
        def next_batch():
            calls.append(1)
            return len(calls)
        """,
    )
    arm = Arm()
    counterfactual = counterfactuals.replay_function(
        arm, module.__dict__, "next_batch", "the batches of next_batch()"
    )
    assert [module.next_batch() for _ in range(3)] == [1, 2, 3]  # as-is: it runs, and is recorded
    arm.fixed = True
    replayed = [module.next_batch() for _ in range(6)]
    assert set(replayed) <= {1, 2, 3} and len(module.calls) == 3  # nothing ran
    assert counterfactual.used == 6
    counterfactual.remove()
    assert module.next_batch() == 4 and module.next_batch.__name__ == "next_batch"
    assert not hasattr(module.next_batch, "__wrapped__")
    del sys.modules["cf_batches"]


def test_a_replayed_loader_fetches_nothing_but_still_iterates():
    fetched = []

    class Counting(TensorDataset):
        def __getitem__(self, index):
            fetched.append(index)
            return super().__getitem__(index)

    loader = DataLoader(Counting(torch.arange(64.0).view(32, 2)), batch_size=4)
    original = DataLoader.__iter__(loader).__class__._next_data
    arm = Arm()
    counterfactual = counterfactuals.replay_loader(arm)
    try:
        batches = iter(loader)
        first = [next(batches)[0] for _ in range(2)]
        arm.fixed = True
        before = len(fetched)
        again = [next(batches)[0] for _ in range(5)]
        assert len(fetched) == before  # no item was read in the fixed arm
        assert all(any(torch.equal(a, b) for b in first) for a in again)
    finally:
        counterfactual.remove()
    assert batches.__class__._next_data is original


def test_a_skipped_call_is_skipped_only_from_its_own_line(tmp_path):
    module = _module(
        tmp_path,
        "cf_saves",
        """
        import json
        saved = []
        def save(value):
            saved.append(value)
        def step(i):
            save(i)
            save(-i)
        """,
    )
    arm = Arm()
    line = open(module.__file__).read().splitlines().index("    save(i)") + 1
    counterfactual = counterfactuals.skip_call(arm, module.__dict__, "save", module.__file__, line, "save()")
    module.step(1)
    arm.fixed = True
    module.step(2)
    counterfactual.remove()
    module.step(3)
    assert module.saved == [1, -1, -2, 3, -3]  # save(2) at its line skipped; save(-2) on the next ran
    assert counterfactual.used == 1
    del sys.modules["cf_saves"]


def test_inline_hdf5_reads_replay_each_dataset_its_own_arrays(tmp_path):
    path = tmp_path / "d.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(40.0).reshape(20, 2)
        f["y"] = np.arange(20)
    module = _module(
        tmp_path,
        "cf_reads",
        """
        def read(f, i):
            return f["x"][i : i + 2], f["y"][i : i + 2]
        """,
    )
    arm = Arm()
    import h5py as h5

    line = (
        open(module.__file__).read().splitlines().index('    return f["x"][i : i + 2], f["y"][i : i + 2]') + 1
    )
    counterfactual = counterfactuals.replay_at_line(
        arm, [(h5.Dataset, "__getitem__")], module.__file__, line, "reads"
    )
    try:
        with h5py.File(path, "r") as f:
            seen = [module.read(f, i) for i in (0, 4)]
            arm.fixed = True
            replayed = [module.read(f, i) for i in (8, 12, 16)]
            elsewhere = f["x"][10:12]  # not from the read's line: a real read
    finally:
        counterfactual.remove()
    for x, y in replayed:
        assert x.shape == (2, 2) and y.shape == (2,)  # x replays x's arrays, y replays y's
        assert any(np.array_equal(x, sx) and np.array_equal(y, sy) for sx, sy in seen)
    assert np.array_equal(elsewhere, np.arange(20.0, 24.0).reshape(2, 2))
    assert counterfactual.used == 6
    assert h5.Dataset.__getitem__.__qualname__ == "Dataset.__getitem__"
    del sys.modules["cf_reads"]


def test_the_site_names_the_function_around_a_line_and_the_call_a_statement_makes(tmp_path):
    path = tmp_path / "train.py"
    path.write_text(
        textwrap.dedent(
            """
            import torch

            class Data:
                def get(self, i):
                    return i

            def next_batch():
                return 1

            def train(model, opt):
                for step in range(3):
                    x = next_batch()
                    torch.save(model, "m.pt")
                    opt.step()
            """
        ),
        encoding="utf-8",
    )
    method = counterfactuals.site_of(str(path), 6)
    assert (method.function, method.klass, method.returns, method.trains) == ("get", "Data", True, False)
    maker = counterfactuals.site_of(str(path), 9)
    assert (maker.function, maker.klass, maker.nested, maker.returns) == ("next_batch", None, False, True)
    loop = counterfactuals.site_of(str(path), 14)
    assert (loop.function, loop.trains, loop.call) == ("train", True, "torch.save")
    assert counterfactuals.site_of(str(tmp_path / "missing.py"), 1) is None
