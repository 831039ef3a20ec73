"""Keras steps with no code change: fit's train batches mark steps, anchor the model, give the batch size.

Keras runs here on its torch backend (TensorFlow is not installed); the backend must be chosen
before Keras is first imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import Counter

import numpy as np
import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # after choosing the backend

from trainmedic.run.probe.clock import KERAS, LOADER, MARKER, OPTIMIZER, StepClock
from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.keras_hooks import KerasHooks, _leading_dim

# Keras 3.15 converts torch tensors with np.array(x, copy=False) internally; not ours to fix.
pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")


def _model() -> keras.Model:
    model = keras.Sequential(
        [keras.Input((4,)), keras.layers.Dense(3, activation="relu"), keras.layers.Dense(1)]
    )
    model.compile(optimizer="sgd", loss="mse")
    return model


def _xy(rows: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.normal(size=(rows, 4)).astype("float32"), rng.normal(size=(rows, 1)).astype("float32")


class _Seen(keras.callbacks.Callback):
    """What the clock said in the user's own callbacks, which run after the hooks."""

    def __init__(self, clock: StepClock) -> None:
        super().__init__()
        self.clock = clock
        self.begin: list[tuple[int, bool]] = []
        self.end: list[int] = []

    def on_train_batch_begin(self, batch, logs=None):
        self.begin.append((self.clock.index, self.clock.anchored))

    def on_train_batch_end(self, batch, logs=None):
        self.end.append(self.clock.index)


def test_fit_marks_one_keras_step_per_train_batch_and_anchors_it():
    clock = StepClock(warmup=2)
    hooks = KerasHooks(clock)
    hooks.install()
    seen = _Seen(clock)
    try:
        x, y = _xy(80)
        # 80 rows in batches of 16 with a 25 % validation split: 4 train batches per epoch.
        _model().fit(x, y, batch_size=16, epochs=3, validation_split=0.2, verbose=0, callbacks=[seen])
    finally:
        hooks.uninstall()
    # The boundary comes after each train step: the first opens counting, 11 more close steps,
    # and Keras's own DataLoader (torch backend) never outranks it.
    assert clock.source == KERAS
    assert clock.index == 12 - 1
    assert len(clock.warmup_durations) == 2 and len(clock.durations.items()) == 12 - 1 - 2
    # The train step is anchored (the model's work), the boundary already moved on when the
    # user's on_train_batch_end runs (it belongs to the next step, before its batch is fetched).
    assert all(anchored for _, anchored in seen.begin)
    assert seen.end == list(range(12))
    assert hooks.batch_size() == 16


def test_train_on_batch_loops_are_steps_too_and_the_batch_size_is_shared():
    clock = StepClock(warmup=0)
    sizes: Counter[int] = Counter()
    hooks = KerasHooks(clock, sizes)
    hooks.install()
    try:
        model = _model()
        x, y = _xy(40)
        for start in range(0, 40, 8):
            model.train_on_batch(x[start : start + 8], y[start : start + 8])
    finally:
        hooks.uninstall()
    assert (clock.source, clock.index) == (KERAS, 4)
    assert sizes == Counter({8: 5})


def test_keras_outranks_loader_and_optimizer_but_not_the_marker():
    clock = StepClock(warmup=0)
    clock.boundary(LOADER)
    clock.boundary(OPTIMIZER)
    clock.boundary(KERAS)
    assert (clock.source, clock.restarts) == (KERAS, 2)
    clock.boundary(OPTIMIZER)
    clock.boundary(LOADER)
    assert (clock.source, clock.index) == (KERAS, 0)
    clock.boundary(MARKER)
    clock.boundary(KERAS)
    assert (clock.source, clock.index) == (MARKER, 0)


def test_uninstall_restores_keras_and_the_models_train_function():
    callback_list = keras.callbacks.CallbackList
    before = {
        name: callback_list.__dict__[name]
        for name in ("on_train_batch_begin", "on_train_batch_end", "on_train_begin")
    }
    assert "train_on_batch" not in keras.Model.__dict__  # inherited from the backend's trainer
    hooks = KerasHooks(StepClock(warmup=0))
    hooks.install()
    model = _model()
    try:
        x, y = _xy(16)
        model.fit(x, y, batch_size=8, epochs=1, verbose=0)
        assert getattr(model.train_function, "_trainmedic_peek", False)
        assert keras.Model.__dict__["train_on_batch"].__wrapped__ is not None
    finally:
        hooks.uninstall()
    assert {name: callback_list.__dict__[name] for name in before} == before
    assert "train_on_batch" not in keras.Model.__dict__
    assert not getattr(model.train_function, "_trainmedic_peek", False)
    model.fit(*_xy(16), batch_size=8, epochs=1, verbose=0)  # still trains


def test_the_batch_size_is_read_from_nested_batches():
    x = torch.zeros(6, 2)
    assert _leading_dim([(x, x)]) == 6
    assert _leading_dim(({"a": np.zeros((5, 1))}, None)) == 5
    assert _leading_dim(iter([x])) is None  # TensorFlow hands the train function an iterator
    assert _leading_dim(np.float32(1.0)) is None


def test_keras_frames_are_classified_as_data_compute_and_progress():
    from trainmedic.run.probe.frames import _family

    assert _family("keras.src.trainers.data_adapters.py_dataset_adapter") == ("data", "loader")
    assert _family("keras.src.trainers.epoch_iterator") == ("data", "loader")
    assert _family("keras.src.backend.torch.trainer") == ("compute", "forward")
    assert _family("keras.src.layers.core.dense") == ("compute", "forward")
    assert _family("keras.src.backend.torch.optimizers.torch_adam") == ("compute", "optimizer")
    assert _family("keras.src.utils.progbar") == ("host_other", "progress bar")
    assert _family("keras.src.callbacks.model_checkpoint") == ("host_other", "checkpoint")
    assert _family("tensorflow.python.data.ops.dataset_ops") == ("data", "loader")
    assert _family("keras_hub.models") is None  # another package, not a keras submodule
    assert FrameClassifier().code_info  # the classifier itself is untouched


@pytest.mark.slow
def test_installed_by_a_post_import_hook_when_the_script_imports_keras_later():
    # A fresh process: the hooks wait for `import keras` and patch it when it finishes.
    code = textwrap.dedent("""
        import sys
        from trainmedic.run.probe.clock import StepClock
        from trainmedic.run.probe.keras_hooks import KerasHooks
        clock = StepClock(warmup=0)
        hooks = KerasHooks(clock)
        hooks.install()
        assert "keras" not in sys.modules and not hooks.installed
        import keras, numpy as np
        assert hooks.installed
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        model.fit(np.zeros((12, 2), "float32"), np.zeros((12, 1), "float32"), batch_size=4, verbose=0)
        hooks.uninstall()
        print("steps", clock.source, clock.index, hooks.batch_size())
    """)
    env = {**os.environ, "KERAS_BACKEND": "torch"}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "steps keras 2 4" in done.stdout
