"""The Keras lint rules on real Keras 3 code: each script is run (torch backend) to show the
mistake does what the rule says, and linted to show the rule finds it — and nothing on the fix.

Each rule with a repair is also run as ``trainmedic lint --fix`` repairs it, to show the repair
does what the hand-written fix does. Two child processes in all: one runs every broken script, one
every fixed and repaired script (Keras takes ~3 s to import), each in its own namespace (runpy).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainmedic.lint import get_rule, lint_source, select_rules
from trainmedic.lint.autofix import repair_source

pytestmark = [pytest.mark.slow]

#: name -> (the code the broken script must get, broken source, the fix: (old, new) edits of that
#: source, each found exactly once). Scripts leave what they observed in RESULT.
CASES = {
    # TM101, seed 000 #6: Lambda layers built in a loop all read the loop variable's last value.
    "loop_capture": (
        "TM101",
        """
        import numpy as np
        import keras
        from keras import layers

        inputs = keras.Input((3,))
        heads = []
        for i in range(3):
            heads.append(layers.Lambda(lambda t: t[:, i : i + 1] * 1.0)(inputs))
        model = keras.Model(inputs, layers.Concatenate()(heads))
        RESULT = model.predict(np.array([[1.0, 2.0, 3.0]], dtype="float32"), verbose=0).tolist()[0]
    """,
        [("lambda t: t[:, i : i + 1]", "lambda t, i=i: t[:, i : i + 1]")],
    ),
    # TM102, seed 000 #7: Keras 3 cannot tell which way a metric function should go.
    "monitor_mode": (
        "TM102",
        """
        import numpy as np
        import keras

        def bit_error_rate(y_true, y_pred):
            return keras.ops.mean(keras.ops.cast(keras.ops.not_equal(y_true > 0.5, y_pred > 0.5), "float32"))

        x = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
        y = (x[:, :1] > 0).astype("float32")
        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")])
        model.compile(optimizer="sgd", loss="binary_crossentropy", metrics=[bit_error_rate])
        stop = keras.callbacks.EarlyStopping(monitor="val_bit_error_rate", patience=2)
        history = model.fit(x, y, validation_data=(x, y), epochs=2, batch_size=32, verbose=0, callbacks=[stop])
        RESULT = len(history.history["loss"])
    """,
        [
            (
                'monitor="val_bit_error_rate", patience=2',
                'monitor="val_bit_error_rate", mode="min", patience=2',
            )
        ],
    ),
    # TM103 on the torch backend: a torch op on a KerasTensor while building a functional model.
    "backend_op_on_keras_tensor": (
        "TM103",
        """
        import numpy as np
        import torch
        import keras
        from keras import layers

        inputs = keras.Input((4, 8))
        h = layers.Dense(8)(inputs)
        h = torch.reshape(h, (-1, 32))
        model = keras.Model(inputs, layers.Dense(1)(h))
        RESULT = list(model.predict(np.ones((2, 4, 8), dtype="float32"), verbose=0).shape)
    """,
        [("h = torch.reshape(h, (-1, 32))", "h = keras.ops.reshape(h, (-1, 32))")],
    ),
    # TM105: a PyDataset that opens its HDF5 file for every batch (seed 000 #5).
    "open_per_batch": (
        "TM105",
        """
        import h5py
        import numpy as np
        import keras

        with h5py.File("pairs.h5", "w") as f:
            f["x"] = np.ones((64, 4), dtype="float32")
            f["y"] = np.zeros((64, 1), dtype="float32")

        class Batches(keras.utils.PyDataset):
            def __init__(self, path, batch_size, **kwargs):
                super().__init__(**kwargs)
                self.path, self.batch_size = path, batch_size

            def __len__(self):
                return 64 // self.batch_size

            def __getitem__(self, index):
                rows = slice(index * self.batch_size, (index + 1) * self.batch_size)
                with h5py.File(self.path, "r") as f:
                    return f["x"][rows], f["y"][rows]

        model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
        model.compile(optimizer="sgd", loss="mse")
        RESULT = len(model.fit(Batches("pairs.h5", 16), epochs=2, verbose=0).history["loss"])
    """,
        [
            (
                "self.path, self.batch_size = path, batch_size",
                'self.file, self.batch_size = h5py.File(path, "r"), batch_size',
            ),
            (
                '                with h5py.File(self.path, "r") as f:\n                    return f["x"][rows], f["y"][rows]',
                '                return self.file["x"][rows], self.file["y"][rows]',
            ),
        ],
    ),
}

#: Runs each script given, in its own namespace, and prints {name: RESULT or the error}.
RUNNER = """
import json, runpy, sys
import torch
torch.set_num_threads(1)
results = {}
for path in sys.argv[1:]:
    try:
        results[path] = {"result": runpy.run_path(path, run_name="__main__").get("RESULT")}
    except Exception as exc:
        results[path] = {"error": f"{type(exc).__name__}: {exc}"}
print("RESULTS " + json.dumps(results))
"""


def _source(name: str, fixed: bool) -> str:
    _, source, edits = CASES[name]
    for old, new in edits if fixed else []:
        assert source.count(old) == 1, f"{name}: the fix's {old!r} must occur once"
        source = source.replace(old, new)
    return textwrap.dedent(source).lstrip()


def _repaired(name: str) -> str:
    after, _, _ = repair_source(_source(name, fixed=False), f"{name}.py", select_rules(None, None))
    return after


def _run_all(folder: Path, fixed: bool) -> dict[str, dict]:
    folder.mkdir()
    names = []
    for name in CASES:
        (folder / f"{name}.py").write_text(_source(name, fixed), encoding="utf-8")
        names.append(f"{name}.py")
        if fixed:
            (folder / f"{name}_repaired.py").write_text(_repaired(name), encoding="utf-8")
            names.append(f"{name}_repaired.py")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, *names],
        check=False,
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULTS "))
    return {Path(k).stem: v for k, v in json.loads(line.removeprefix("RESULTS ")).items()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[dict, dict]:
    root = tmp_path_factory.mktemp("keras_lint")
    return _run_all(root / "broken", False), _run_all(root / "fixed", True)


def _codes(source: str) -> list[str]:
    return [v.code for v in lint_source(source, "train.py")]


@pytest.mark.parametrize("name", list(CASES))
def test_the_rule_finds_the_mistake_and_nothing_on_the_fix(name):
    assert _codes(_source(name, fixed=False)) == [CASES[name][0]]
    assert _codes(_source(name, fixed=True)) == []


@pytest.mark.slow
def test_the_broken_scripts_really_go_wrong_in_keras(runs):
    broken, _ = runs
    # Every Lambda reads i == 2 when the model runs: three copies of the last column.
    assert broken["loop_capture"] == {"result": [3.0, 3.0, 3.0]}
    assert broken["monitor_mode"]["error"].startswith("ValueError")
    assert "val_bit_error_rate" in broken["monitor_mode"]["error"]
    assert broken["backend_op_on_keras_tensor"]["error"].startswith("TypeError")
    assert "KerasTensor" in broken["backend_op_on_keras_tensor"]["error"]
    assert broken["open_per_batch"] == {"result": 2}  # slow, not wrong: it trains


def test_the_fixed_scripts_run_in_keras(runs):
    _, fixed = runs
    assert {name: fixed[name] for name in CASES} == {
        "loop_capture": {"result": [1.0, 2.0, 3.0]},
        "monitor_mode": {"result": 2},
        "backend_op_on_keras_tensor": {"result": [2, 1]},
        "open_per_batch": {"result": 2},
    }


@pytest.mark.parametrize("name", [name for name in CASES if get_rule(CASES[name][0]).fixer])
def test_the_repaired_script_does_what_the_hand_fix_does(runs, name):
    _, fixed = runs
    assert _codes(_repaired(name)) == []
    assert fixed[f"{name}_repaired"] == fixed[name]


def test_the_torch_op_message_names_the_keras_ops_fix():
    [violation] = lint_source(_source("backend_op_on_keras_tensor", fixed=False), "train.py")
    assert violation.line == 8
    assert "torch.reshape() on Keras symbolic tensor `h`" in violation.message
    assert "must be Tensor, not KerasTensor" in violation.message
    assert "keras.ops.reshape" in violation.message
