"""`trainmedic run` on Keras 3 `model.fit` scripts: real child processes, the same verdicts as PyTorch.

Keras runs on its torch backend (TensorFlow is not installed here), chosen in the child's
environment. Each script marks the line the diagnosis must point at with ``# expect-where``.
"""

from __future__ import annotations

import pytest

#: A PyDataset whose __getitem__ reads one sample at a time from a real HDF5 file (seed 000).
DATA_BOUND = """
import h5py
import numpy as np
import torch
import keras

torch.set_num_threads(1)  # steady timings on a small shared machine
N, F, BATCH = 2048, 32, 64
rng = np.random.default_rng(0)
with h5py.File("samples.h5", "w") as f:
    f.create_dataset("x", data=rng.normal(size=(N, F)).astype("float32"), chunks=(1, F), compression="gzip")
    f.create_dataset("y", data=rng.normal(size=(N, 1)).astype("float32"))


class H5Batches(keras.utils.PyDataset):
    def __init__(self, path, batch_size, **kwargs):
        super().__init__(**kwargs)
        self.file = h5py.File(path, "r")
        self.batch_size = batch_size

    def __len__(self):
        return N // self.batch_size

    def __getitem__(self, index):
        rows = range(index * self.batch_size, (index + 1) * self.batch_size)
        pairs = [(self.file["x"][i], self.file["y"][i]) for i in rows]  # expect-where
        return np.stack([p[0] for p in pairs]), np.stack([p[1] for p in pairs])


model = keras.Sequential([keras.Input((F,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)])
model.compile(optimizer="adam", loss="mse")
model.fit(H5Batches("samples.h5", BATCH), epochs=2, verbose=0)
"""

#: Big Dense layers fed from NumPy arrays: the model's own arithmetic is the step.
COMPUTE_BOUND = """
import numpy as np
import torch
import keras

torch.set_num_threads(1)  # steady timings on a small shared machine
rng = np.random.default_rng(0)
x = rng.normal(size=(4096, 512)).astype("float32")
y = rng.integers(0, 10, size=(4096,))
model = keras.Sequential([
    keras.Input((512,)),
    keras.layers.Dense(1024, activation="gelu"),
    keras.layers.Dense(1024, activation="gelu"),
    keras.layers.Dense(10),
])
model.compile(optimizer="sgd", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
model.fit(x, y, batch_size=128, epochs=2, verbose=0)  # expect-where
"""

#: A layer that loops over the samples of the batch in Python: hundreds of tiny ops a step.
TINY_OPS = """
import numpy as np
import torch
import keras

torch.set_num_threads(1)  # steady timings on a small shared machine
BATCH = 256


class PerSample(keras.layers.Layer):
    def call(self, x):
        rows = [keras.ops.tanh(x[i] * 2.0 + 1.0) * x[i] - 0.5 for i in range(x.shape[0])]  # expect-where
        return keras.ops.stack(rows)


rng = np.random.default_rng(0)
x = rng.normal(size=(BATCH * 12, 8)).astype("float32")
y = rng.normal(size=(BATCH * 12, 1)).astype("float32")
inputs = keras.Input((8,), batch_size=BATCH)
outputs = keras.layers.Dense(1)(PerSample()(inputs))  # features per sample, no gradient through them
model = keras.Model(inputs, outputs)
model.compile(optimizer="sgd", loss="mse")
model.fit(x, y, batch_size=BATCH, epochs=4, verbose=0)
"""


@pytest.fixture
def keras_tm(tm, monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    return tm


def _diagnose(tm, name: str, body: str) -> tuple[dict, str, str]:
    """Run the script under `trainmedic run`; (report, the marked `file:line`, stderr)."""
    tm.script(name, body)
    marked = [
        i for i, line in enumerate(body.lstrip().splitlines(), 1) if line.rstrip().endswith("# expect-where")
    ]
    result = tm("run", "--steps", "40", "--json", "report.json", name)
    assert result.returncode == 0, result.stderr[-3000:]
    report = tm.report()
    assert report["steps"]["source"] == "keras"
    assert report["steps"]["count"] == 40
    assert report["outcome"] == "step_limit"
    return report, f"{name}:{marked[0]}", result.stderr


@pytest.mark.slow
def test_a_data_bound_pydataset_is_found_at_its_getitem_line_with_the_keras_fix(keras_tm):
    report, where, stderr = _diagnose(keras_tm, "train.py", DATA_BOUND)
    assert report["bottleneck"] == "data", report["breakdown"]
    top = report["findings"][0]
    assert (top["category"], top["where"]) == ("data", where)
    # The HDF5 reads (and the Python around them, a "transform") share the line; the read's
    # finding names the file, the datasets the PyDataset read and the batch size Keras trained on.
    # How the line's time splits between the two varies run to run; together they are the step.
    at_line = [f for f in report["findings"] if f["category"] == "data" and f["where"] == where]
    assert sum(f["share"] for f in at_line) > 0.5
    [read] = [f for f in report["findings"] if f["kind"] == "hdf5"]
    assert read["where"] == where and read["share"] > 0.1
    assert read["suggestion"].endswith('/samples.h5", fields=["x", "y"], batch_size=64)')
    assert 'model.fit(loader.keras(inputs="x", targets="y"), epochs=...)' in read["fix"]
    assert "for x, y in loader" not in read["fix"]
    assert "marked by keras" in stderr


@pytest.mark.slow
def test_a_compute_bound_fit_is_compute_at_the_fit_line(keras_tm):
    report, where, _ = _diagnose(keras_tm, "train.py", COMPUTE_BOUND)
    assert report["bottleneck"] == "compute", report["breakdown"]
    assert report["breakdown"]["compute"] > 0.8
    top = report["findings"][0]
    assert (top["category"], top["where"]) == ("compute", where)
    assert "keras.mixed_precision" in top["fix"] and "torch.compile" not in top["fix"]
    # Keras's own per-step ops (metrics, optimizer) are not a tiny-op loop of the user's.
    assert report["breakdown"]["tiny_ops"] == 0


@pytest.mark.slow
def test_a_per_sample_loop_in_a_layer_is_tiny_ops_at_its_line(keras_tm):
    report, where, _ = _diagnose(keras_tm, "train.py", TINY_OPS)
    assert report["bottleneck"] == "tiny_ops", report["breakdown"]
    top = report["findings"][0]
    assert (top["category"], top["where"]) == ("tiny_ops", where)
    assert "keras.ops.vectorized_map" in top["fix"] and "batch.vectorize" not in top["fix"]
