"""The step hooks: trainmedic.data loaders as a step source, post-import hooks, the model's batch size."""

from __future__ import annotations

import sys

import numpy as np
import torch

from trainmedic import data
from trainmedic.data.loader import Loader
from trainmedic.run.probe.clock import LOADER, OPTIMIZER, StepClock
from trainmedic.run.probe.hooks import TorchHooks
from trainmedic.run.probe.patches import after_import


def _loader(rows: int = 40, batch_size: int = 8) -> Loader:
    arrays = {"x": np.arange(rows * 2, dtype=np.float32).reshape(rows, 2), "y": np.arange(rows)}
    return data.load(arrays, batch_size=batch_size, progress=False)


def test_iterating_a_trainmedic_loader_marks_loader_steps():
    clock = StepClock(warmup=1)
    hooks = TorchHooks(clock)
    hooks.install()
    try:
        loader = _loader()
        batches = [batch for batch in loader]  # 5 batches
        assert len(batches) == 5 and batches[0][0].shape == (8, 2)
    finally:
        hooks.uninstall()
    # One boundary as each batch is asked for, one more when the epoch turns out to be over.
    assert (clock.source, clock.index) == (LOADER, 5)
    assert len(clock.warmup_durations) == 1 and len(clock.durations.items()) == 4
    assert Loader.__iter__ is Loader.__dict__["__iter__"]
    assert not hasattr(Loader.__iter__, "__wrapped__")  # restored


def test_the_loader_hook_keeps_epochs_positions_and_early_exits_intact():
    clock = StepClock(warmup=0)
    hooks = TorchHooks(clock)
    hooks.install()
    try:
        loader = _loader(rows=24, batch_size=8)
        for i, _ in enumerate(loader):
            if i == 1:
                break  # the generator is closed; the loader keeps its position
        assert loader.state_dict()["batches_served"] == 2
        assert len(list(loader)) == 1  # the rest of epoch 0
        assert loader.epoch == 1
        for epoch in range(1, 3):
            loader.set_epoch(epoch)
            assert len(list(loader)) == 3
    finally:
        hooks.uninstall()


def test_an_optimizer_step_outranks_the_loader():
    clock = StepClock(warmup=0)
    hooks = TorchHooks(clock)
    hooks.install()
    try:
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in _loader():
            loss = (model(x).squeeze(1) - y).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        assert clock.source == OPTIMIZER
        assert hooks.batch_size() == 8  # seen by the forward hook on the root model
    finally:
        hooks.uninstall()


def test_after_import_runs_once_the_module_is_imported(tmp_path, monkeypatch):
    (tmp_path / "tm_late_module.py").write_text("VALUE = 41\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    seen = []
    after_import("tm_late_module", lambda module: seen.append(module.VALUE + 1))
    cancelled = after_import("tm_never_imported", seen.append)
    try:
        import tm_late_module  # noqa: F401

        assert seen == [42]
        after_import("tm_late_module", lambda module: seen.append("now"))  # already imported: at once
        assert seen == [42, "now"]
    finally:
        cancelled()
        sys.modules.pop("tm_late_module", None)
    assert not any(type(f).__name__ == "_PostImportFinder" for f in sys.meta_path)  # idle: off the path


def test_a_failing_callback_never_breaks_the_users_import(tmp_path, monkeypatch):
    (tmp_path / "tm_fragile_module.py").write_text("VALUE = 1\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    after_import("tm_fragile_module", lambda module: 1 / 0)
    try:
        import tm_fragile_module

        assert tm_fragile_module.VALUE == 1
    finally:
        sys.modules.pop("tm_fragile_module", None)
