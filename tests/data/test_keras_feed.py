"""loader.keras(): a trainmedic.data loader fed to Keras's model.fit, epochs in the loader's order.

Keras runs on its torch backend here (TensorFlow is not installed); the backend is chosen before
Keras is first imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

os.environ.setdefault("KERAS_BACKEND", "torch")
import keras  # after choosing the backend

from trainmedic import data
from trainmedic.data.keras_feed import _feed_class, _layout, configured_backend
from trainmedic.errors import DataError, FieldError

pytestmark = pytest.mark.filterwarnings("ignore:__array__ implementation:DeprecationWarning")

ROWS, BATCH = 100, 16  # 7 batches an epoch, the last one short


def _loader(seed: int = 5, **kwargs):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 3)).astype("float32")
    arrays = {"x": x, "y": x @ np.array([[1.0], [-2.0], [0.5]], dtype="float32"), "id": np.arange(ROWS)}
    return data.load(arrays, batch_size=BATCH, seed=seed, progress=False, **kwargs)


def _spied(feed) -> list[tuple[int, int, list[int]]]:
    """Record (loader epoch, batch index, sample ids) of every batch Keras asks the feed for."""
    log: list[tuple[int, int, list[int]]] = []

    class Spy(type(feed)):
        def __getitem__(self, index):
            batch = super().__getitem__(index)
            log.append((self.loader.epoch, index, batch[2].tolist()))  # sample_weights part: the ids
            return batch

    feed.__class__ = Spy
    return log


def _model() -> keras.Model:
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse")
    return model


def _own_epochs(epochs: int) -> list[list[int]]:
    """The ids an identical loader serves in its own `for batch in loader` iteration."""
    loader = _loader()
    served = []
    for epoch in range(epochs):
        loader.set_epoch(epoch)
        served.append([i for _, _, ids in loader for i in ids.tolist()])
    return served


def test_fit_sees_every_sample_once_per_epoch_in_the_loaders_own_order_and_trains():
    loader = _loader()
    # The ids ride along as sample weights: Keras hands them to the loss untouched.
    feed = loader.keras(inputs="x", targets="y", sample_weights="id")
    assert len(feed) == 7 and feed.num_batches == 7
    log = _spied(feed)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(0.002), loss="mse")  # a small rate: weights go up to 99
    history = model.fit(feed, epochs=3, shuffle=False, verbose=0).history
    # Keras reads batch 0 once to build the model, then 3 epochs of 7 batches in order.
    assert [index for _, index, _ in log[:1]] == [0]
    epochs = [log[1 + 7 * e : 1 + 7 * (e + 1)] for e in range(3)]
    assert [[index for _, index, _ in epoch] for epoch in epochs] == [list(range(7))] * 3
    assert [{e for e, _, _ in epoch} for epoch in epochs] == [{0}, {1}, {2}]
    served = [[i for _, _, ids in epoch for i in ids] for epoch in epochs]
    assert served == _own_epochs(3)
    assert all(sorted(ids) == list(range(ROWS)) for ids in served)
    assert served[0] != served[1]  # reshuffled every epoch
    assert loader.epoch == 3 and loader.state_dict()["epoch"] == 3
    assert history["loss"][-1] < history["loss"][0] / 4  # it really trains


def test_fits_default_batch_shuffle_still_serves_every_sample_once_per_epoch():
    loader = _loader()
    feed = loader.keras(inputs="x", targets="y", sample_weights="id")
    log = _spied(feed)
    keras.utils.set_random_seed(1)
    _model().fit(feed, epochs=2, verbose=0)  # shuffle=True: Keras permutes whole batches
    epochs = [log[1 + 7 * e : 1 + 7 * (e + 1)] for e in range(2)]
    assert [sorted(index for _, index, _ in epoch) for epoch in epochs] == [list(range(7))] * 2
    assert [index for _, index, _ in epochs[0]] != list(range(7))
    for epoch, own in zip(epochs, _own_epochs(2)):
        assert sorted(i for _, _, ids in epoch for i in ids) == list(range(ROWS))
        by_index = {index: ids for _, index, ids in epoch}
        assert [i for index in range(7) for i in by_index[index]] == own  # batch i is the loader's batch i


def test_steps_per_epoch_shorter_than_a_pass_moves_the_loader_per_full_pass():
    loader = _loader()
    feed = loader.keras(inputs="x", targets="y", sample_weights="id")
    log = _spied(feed)
    # Keras epochs of 3, 3 and 1 batches make one pass (Keras cuts the epoch where the pass ends).
    with pytest.warns(UserWarning, match="ran out of data"):
        _model().fit(feed, epochs=6, steps_per_epoch=3, shuffle=False, verbose=0)
    assert len(log) == 1 + 2 * 7
    passes = [log[1 + 7 * p : 1 + 7 * (p + 1)] for p in range(2)]
    assert [[i for _, _, ids in p for i in ids] for p in passes] == _own_epochs(2)
    assert loader.epoch == 2


def test_inputs_and_targets_are_arranged_as_keras_expects():
    loader = _loader()
    x, y, ids = next(iter(_loader()))
    assert [t.shape for t in loader.keras(inputs="x", targets="y")[0]] == [x.shape, y.shape]
    both = loader.keras(inputs=["x", "id"], targets="y")[0]
    assert isinstance(both[0], tuple) and both[0][1].tolist() == ids.tolist()
    named = loader.keras(inputs={"features": "x"}, targets="y")[0]
    assert set(named[0]) == {"features"}
    only_targets = loader.keras(targets="y", sample_weights="id")[0]
    assert torch.equal(only_targets[0], x)  # the field left over is the input
    assert _layout(("x", "y"), None, None, None) == (0, 1)
    assert _layout(("x",), None, None, None) == (0,)
    # NumPy arrays for the JAX and TensorFlow backends.
    as_numpy = _feed_class(keras)(loader, _layout(loader.fields, "x", "y", None), True)[0]
    assert all(isinstance(a, np.ndarray) for a in as_numpy)


def test_bad_field_choices_name_the_fields_and_the_fix():
    loader = _loader()
    with pytest.raises(FieldError, match=r"3 fields \['x', 'y', 'id'\].*inputs=\.\.\., targets=\.\.\."):
        loader.keras()
    with pytest.raises(
        FieldError, match=r"'label', which this loader does not serve; its fields are \['x', 'y', 'id'\]"
    ):
        loader.keras(inputs="x", targets="label")
    with pytest.raises(FieldError, match=r"targets=3 is a int; expected a field name"):
        loader.keras(inputs="x", targets=3)
    with pytest.raises(FieldError, match="none is left for the model's inputs"):
        loader.keras(targets=["x", "y", "id"])
    feed = loader.keras(inputs="x", targets="y")
    with pytest.raises(IndexError, match=r"batch 7 is out of range: an epoch of this loader has 7 batches"):
        feed[7]


def test_the_backend_keras_reads_is_named(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    assert configured_backend() == ("tensorflow", "Keras's default")
    (tmp_path / "keras.json").write_text('{"backend": "jax"}')
    assert configured_backend() == ("jax", str(tmp_path / "keras.json"))
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    assert configured_backend() == ("torch", "KERAS_BACKEND")


@pytest.mark.slow
def test_a_backend_that_cannot_be_imported_names_keras_backend_torch(tmp_path):
    code = textwrap.dedent("""
        import numpy as np
        from trainmedic import data
        from trainmedic.errors import DataError
        loader = data.load({"x": np.zeros((4, 2), "float32")}, batch_size=2, progress=False)
        try:
            loader.keras()
        except DataError as exc:
            print("ERROR", exc)
    """)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow"}
    done = subprocess.run(
        [sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ERROR loader.keras() needs Keras, which is installed, but `import keras` failed" in done.stdout
    assert "No module named 'tensorflow'" in done.stdout
    assert "backend 'tensorflow' (from KERAS_BACKEND)" in done.stdout
    assert "set KERAS_BACKEND=torch" in done.stdout
    assert issubclass(DataError, Exception)


def test_a_gpu_loader_for_a_backend_that_takes_numpy_is_refused_with_the_fix(monkeypatch):
    from types import SimpleNamespace

    from trainmedic.data.keras_feed import keras_dataset

    monkeypatch.setattr(keras.backend, "backend", lambda: "jax")
    on_gpu = SimpleNamespace(fields=("x", "y"), device=torch.device("cuda", 0))
    with pytest.raises(DataError, match=r"on cuda:0 but Keras runs on the 'jax' backend.*device='cpu'"):
        keras_dataset(on_gpu)
