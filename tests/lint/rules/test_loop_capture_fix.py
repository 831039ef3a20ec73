"""TM101's repair: each captured loop variable bound when the callable is made, as a keyword-only
default (``lambda t, *, i=i: ...``), checked by running the broken and the repaired code: torch
hooks, a LambdaLR, stored closures and, in a child process, Keras's Lambda layer and
LearningRateScheduler."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from lint_fix_kit import repaired, run_module, unfixable

from trainmedic.lint import get_rule, lint_source


def test_seed_000_keras_lambda_per_antenna():
    after = repaired(
        """
        from tensorflow import keras
        from tensorflow.keras import layers

        inputs = keras.Input(shape=(4, 14, 448, 2, 1))
        branches = []
        for rx_idx in range(num_rx_antennas):
            x = layers.Lambda(lambda x: x[:, rx_idx, :, :, :])(inputs)
            x = layers.Conv2D(32, 3, padding="same")(x)
            branches.append(x)
        model = keras.Model(inputs, layers.Concatenate()(branches))
        """,
        "TM101",
    )
    assert after == textwrap.dedent(
        """
        from tensorflow import keras
        from tensorflow.keras import layers

        inputs = keras.Input(shape=(4, 14, 448, 2, 1))
        branches = []
        for rx_idx in range(num_rx_antennas):
            x = layers.Lambda(lambda x, *, rx_idx=rx_idx: x[:, rx_idx, :, :, :])(inputs)
            x = layers.Conv2D(32, 3, padding="same")(x)
            branches.append(x)
        model = keras.Model(inputs, layers.Concatenate()(branches))
        """
    )


def test_every_parameter_list_shape_gets_a_valid_keyword_only_default():
    after = repaired(
        """
        import threading
        from torch.optim.lr_scheduler import LambdaLR

        for shard in shards:
            threading.Thread(target=lambda: preprocess(shard)).start()
        for k, (mean, std) in enumerate(stats):
            handlers.append(lambda b: normalize(b, mean, std, k))
        for i in range(3):
            wrappers.append(lambda *args: call(i, *args))
            wrappers.append(lambda x, *, scale=1.0: x * scale + i)
            wrappers.append(lambda x, /, y=(2): x + y + i)
            wrappers.append(lambda x,: x + i)
        scalers = [lambda v: v * s for s in (0.5, 1.0, 2.0)]
        for group in groups:
            schedulers.append(
                LambdaLR(
                    optimizers[group],
                    lr_lambda=lambda e: (  # warm up
                        min(1.0, e / warmup[group])
                    ),
                )
            )
        """,
        "TM101",
    )
    assert after == textwrap.dedent(
        """
        import threading
        from torch.optim.lr_scheduler import LambdaLR

        for shard in shards:
            threading.Thread(target=lambda *, shard=shard: preprocess(shard)).start()
        for k, (mean, std) in enumerate(stats):
            handlers.append(lambda b, *, mean=mean, std=std, k=k: normalize(b, mean, std, k))
        for i in range(3):
            wrappers.append(lambda *args, i=i: call(i, *args))
            wrappers.append(lambda x, *, scale=1.0, i=i: x * scale + i)
            wrappers.append(lambda x, /, y=(2), *, i=i: x + y + i)
            wrappers.append(lambda x, *, i=i,: x + i)
        scalers = [lambda v, *, s=s: v * s for s in (0.5, 1.0, 2.0)]
        for group in groups:
            schedulers.append(
                LambdaLR(
                    optimizers[group],
                    lr_lambda=lambda e, *, group=group: (  # warm up
                        min(1.0, e / warmup[group])
                    ),
                )
            )
        """
    )


def test_nested_functions_get_the_default_in_their_def_line():
    after = repaired(
        """
        import threading

        for i, block in enumerate(model.blocks):
            def save_grad(grad):
                grads[i] = grad
            block.weight.register_hook(save_grad)

        for name, module in model.named_modules():
            @module.register_forward_hook
            def keep(
                mod,
                inputs,
                output,
            ):
                outputs[name] = output

        for shard in shards:
            async def work() -> None:
                await process(shard)
            threads.append(threading.Thread(target=run_async, args=(work,)))
            tasks.append(loop.call_soon(work))
        """,
        "TM101",
    )
    assert "    def save_grad(grad, *, i=i):\n        grads[i] = grad\n" in after
    assert "        output, *, name=name,\n    ):\n" in after
    assert "    async def work(*, shard=shard) -> None:\n" in after


def test_nested_loops_bind_every_variable_in_one_repair(tmp_path):
    source = textwrap.dedent(
        """
        hooks = []
        for i in range(2):
            for j in range(3):
                hooks.append(lambda: (i, j))
        """
    )
    [violation] = lint_source(source, "train.py", [get_rule("TM101")], with_fixes=True)
    assert violation.fix.description == (
        "bind `i`, `j` when the lambda is made, as keyword-only defaults `*, i=i, j=j`"
    )
    after = repaired(source, "TM101")
    assert "hooks.append(lambda *, i=i, j=j: (i, j))" in after
    assert [h() for h in run_module(after, tmp_path)["hooks"]] == [(i, j) for i in range(2) for j in range(3)]


def test_a_variable_assigned_again_after_the_lambda_keeps_its_value_at_creation_and_says_so(tmp_path):
    source = textwrap.dedent(
        """
        fns = []
        for scale in (1.0, 2.0, 3.0):
            fns.append(lambda v: v * scale)
            scale = scale * 10
        """
    )
    [violation] = lint_source(source, "train.py", [get_rule("TM101")], with_fixes=True)
    assert violation.fix.description == (
        "bind `scale` when the lambda is made, as keyword-only default `*, scale=scale`; `scale` is "
        "assigned again at line 5 after the lambda is made, and the lambda now keeps the value from "
        "before line 5"
    )
    after = repaired(source, "TM101")
    assert [f(1.0) for f in run_module(source, tmp_path / "broken")["fns"]] == [30.0, 30.0, 30.0]
    assert [f(1.0) for f in run_module(after, tmp_path / "fixed")["fns"]] == [1.0, 2.0, 3.0]


def test_a_while_loop_counter_is_bound_at_each_step(tmp_path):
    source = textwrap.dedent(
        """
        fns = []
        n = 0
        while n < 3:
            fns.append(lambda: n)
            n += 1
        """
    )
    after = repaired(source, "TM101")
    assert "    fns.append(lambda *, n=n: n)\n" in after
    assert [f() for f in run_module(source, tmp_path / "broken")["fns"]] == [3, 3, 3]
    assert [f() for f in run_module(after, tmp_path / "fixed")["fns"]] == [0, 1, 2]


# -- the repaired code runs as the loop meant ----------------------------------------------------

_HOOKS = """
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 5), nn.ReLU(), nn.Linear(5, 3))
outputs, outputs_with_kwargs, inputs_seen, grads = {}, {}, {}, {}
for name, module in model.named_children():
    module.register_forward_hook(lambda m, inp, out: outputs.__setitem__(name, out.detach().clone()))
    module.register_forward_hook(
        lambda m, args, kwargs, out: outputs_with_kwargs.__setitem__(name, out.detach().clone()),
        with_kwargs=True,
    )
    module.register_forward_pre_hook(lambda m, args: inputs_seen.__setitem__(name, args[0].detach().clone()))
for i, layer in enumerate([model[0], model[2]]):
    def save_grad(grad):
        grads[i] = grad.clone()
    layer.weight.register_hook(save_grad)
x = torch.randn(2, 4)
model(x).sum().backward()
"""


def test_real_forward_hooks_and_tensor_hooks_record_each_layer(tmp_path):
    after = repaired(_HOOKS, "TM101")
    assert "lambda m, inp, out, *, name=name:" in after
    assert "lambda m, args, kwargs, out, *, name=name:" in after
    assert "lambda m, args, *, name=name:" in after
    assert "def save_grad(grad, *, i=i):" in after
    broken = run_module(textwrap.dedent(_HOOKS), tmp_path / "broken")
    fixed = run_module(after, tmp_path / "fixed")
    # Broken: every hook writes the last layer's key.
    assert list(broken["outputs"]) == ["2"] and list(broken["grads"]) == [1]
    model, x = fixed["model"], fixed["x"]
    expected, h = {}, x
    inputs = {}
    for name, layer in model.named_children():
        inputs[name] = h
        h = layer(h).detach()
        expected[name] = h
    for recorded in (fixed["outputs"], fixed["outputs_with_kwargs"]):
        assert list(recorded) == ["0", "1", "2"]
        assert all(torch.equal(recorded[k], expected[k]) for k in expected)
    assert all(torch.equal(fixed["inputs_seen"][k], inputs[k]) for k in inputs)
    assert torch.equal(fixed["grads"][0], model[0].weight.grad)
    assert torch.equal(fixed["grads"][1], model[2].weight.grad)
    # The same data, the same hooks' values where the broken code happened to be right.
    assert torch.equal(broken["outputs"]["2"], fixed["outputs"]["2"])


def test_a_real_lambda_lr_per_optimizer_follows_its_own_base(tmp_path):
    source = textwrap.dedent(
        """
        import torch
        from torch.optim.lr_scheduler import LambdaLR

        schedulers = []
        for base in (1.0, 0.5, 0.25):
            opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
            schedulers.append(LambdaLR(opt, lr_lambda=lambda epoch: base * 0.5**epoch))
        seen = []
        for epoch in range(3):
            seen.append([s.get_last_lr()[0] for s in schedulers])
            for s in schedulers:
                s.optimizer.step()
                s.step()
        """
    )
    after = repaired(source, "TM101")
    assert "lr_lambda=lambda epoch, *, base=base: base * 0.5**epoch" in after
    broken = run_module(source, tmp_path / "broken")["seen"]
    fixed = run_module(after, tmp_path / "fixed")["seen"]
    expected = [[b * 0.5**e for b in (1.0, 0.5, 0.25)] for e in range(3)]
    assert fixed == expected
    # LambdaLR calls the lambda once when it is made: right at first, wrong from the first step on.
    assert broken[0] == expected[0] and broken[1] == [0.125] * 3


def test_stored_closures_return_their_own_iteration_values(tmp_path):
    source = textwrap.dedent(
        """
        import numpy as np
        import torch

        scale = torch.tensor([1.0, 2.0, 3.0])
        heads, metrics = [], {}
        for i in range(3):
            heads.append(lambda x: x * scale[i])
        for k in (1, 2):
            def top_k(scores):
                return np.sort(scores)[-k:].sum()
            metrics[f"top{k}"] = top_k
        """
    )
    after = repaired(source, "TM101")
    x = torch.arange(4.0)
    broken = run_module(source, tmp_path / "broken")
    fixed = run_module(after, tmp_path / "fixed")
    assert all(torch.equal(h(x), x * 3.0) for h in broken["heads"])
    assert all(torch.equal(h(x), x * s) for h, s in zip(fixed["heads"], (1.0, 2.0, 3.0)))
    scores = [0.1, 0.7, 0.3]
    assert {k: f(scores) for k, f in fixed["metrics"].items()} == {"top1": 0.7, "top2": 0.7 + 0.3}


# -- Keras: the layer and the callback that call with more than one positional argument -----------

_KERAS_SCRIPT = """
import numpy as np
import keras
from keras import layers

inputs = keras.Input((3,))
heads = []
for i in range(3):
    heads.append(layers.Lambda(lambda t: t[:, i : i + 1] * 1.0)(inputs))
for mask in (0.5, 2.0):
    heads.append(layers.Lambda(lambda t: t[:, :1] * mask)(inputs))
model = keras.Model(inputs, layers.Concatenate()(heads))
OUTPUT = model.predict(np.array([[1.0, 2.0, 3.0]], dtype="float32"), verbose=0).tolist()[0]

schedules = []
for base in (0.1, 0.2):
    schedules.append(keras.callbacks.LearningRateScheduler(lambda epoch: base * 0.5**epoch))


class Seen(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.rates = []

    def on_epoch_begin(self, epoch, logs=None):
        self.rates.append(round(float(keras.ops.convert_to_numpy(self.model.optimizer.learning_rate)), 6))


RATES = []
for schedule in schedules:
    net = keras.Sequential([keras.Input((2,)), layers.Dense(1)])
    net.compile(optimizer=keras.optimizers.SGD(1.0), loss="mse")
    seen = Seen()
    net.fit(np.zeros((4, 2)), np.zeros((4, 1)), epochs=3, verbose=0, callbacks=[schedule, seen])
    RATES.append(seen.rates)
"""

_DRIVER = """
import json, runpy, sys
found = {}
for path in sys.argv[1:]:
    try:
        result = runpy.run_path(path, run_name="__main__")
        found[path] = {"output": result["OUTPUT"], "rates": result["RATES"]}
    except Exception as exc:
        found[path] = {"error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(found))
"""


@pytest.mark.slow
def test_keras_lambda_layers_and_learning_rate_schedulers(tmp_path):
    if importlib.util.find_spec("keras") is None:
        pytest.skip("keras is not installed")
    after = repaired(_KERAS_SCRIPT, "TM101")
    assert "layers.Lambda(lambda t, *, i=i: t[:, i : i + 1] * 1.0)" in after
    assert "layers.Lambda(lambda t, *, mask=mask: t[:, :1] * mask)" in after
    assert "LearningRateScheduler(lambda epoch, *, base=base: base * 0.5**epoch)" in after
    # The positional defaults the rule's message shows, for comparison.
    positional = after.replace(", *, ", ", ")
    scripts = {
        "broken": textwrap.dedent(_KERAS_SCRIPT),
        "fixed": after,
        "positional": positional,
        "positional_schedule": positional.replace("for mask in (0.5, 2.0):", "for mask in ():"),
    }
    for name, text in scripts.items():
        (tmp_path / f"{name}.py").write_text(text, encoding="utf-8")
    (tmp_path / "driver.py").write_text(_DRIVER, encoding="utf-8")
    env = {**os.environ, "KERAS_BACKEND": "torch", "PYTHONWARNINGS": "ignore"}
    done = subprocess.run(
        [sys.executable, "driver.py", *(f"{name}.py" for name in scripts)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    broken, fixed = found["broken.py"], found["fixed.py"]
    assert broken["output"] == [3.0, 3.0, 3.0, 2.0, 2.0]
    assert fixed["output"] == [1.0, 2.0, 3.0, 0.5, 2.0]
    assert broken["rates"] == [[0.2, 0.1, 0.05]] * 2
    assert fixed["rates"] == [[0.1, 0.05, 0.025], [0.2, 0.1, 0.05]]
    # Positional defaults go wrong in both: Keras's Lambda passes mask=None to `lambda t, mask=mask:`,
    # and LearningRateScheduler calls schedule(epoch, lr) first, so the optimizer's current rate
    # (1.0, then what the schedule set) lands in `base` and compounds.
    assert "kwargs={'mask': 'None'}" in found["positional.py"]["error"]
    assert found["positional_schedule.py"]["rates"] == [[1.0, 0.5, 0.125]] * 2


# -- what is refused, and why -------------------------------------------------------------------


def test_shapes_the_fixer_refuses_say_why():
    reasons = unfixable(
        """
        for i in range(3):
            fns.append(lambda **kw: run(i, **kw))
        for cfg in configs:
            schedulers.append(LambdaLR(opt, lr_lambda=lambda e: lr * e))
            lr = cfg.lr
        def outer():
            for i in range(3):
                def show():
                    nonlocal i
                    return i
                fns.append(show)
        for i in range(3):
            def read():
                global i
                return i
            fns.append(read)
        for cfg in configs:
            if cfg.warmup:
                w = cfg.warmup
            schedulers.append(LambdaLR(opt, lr_lambda=lambda e: min(1.0, e / w)))
        """,
        "TM101",
    )
    assert reasons == [
        "the lambda takes **kw, so a parameter `i` would also catch a caller's `i=` keyword; bind the "
        "value by hand",
        "`lr` is assigned at line 6, after the lambda is made, so a default would keep the previous "
        "iteration's value; move the lambda below that line",
        "show() declares `i` nonlocal, so it shares the variable instead of reading a copy and cannot "
        "take it as a parameter; fix it by hand",
        "read() declares `i` global, so it shares the variable instead of reading a copy and cannot take "
        "it as a parameter; fix it by hand",
        "`w` is assigned before the lambda is made only inside the `if` at line 19, which may not run on "
        "every iteration, so a default could keep an earlier iteration's value; bind it by hand",
    ]


def test_the_cards_example_repairs_to_clean_code():
    rule = get_rule("TM101")
    after = repaired(rule.before, "TM101")
    assert "layers.Lambda(lambda t, *, rx_idx=rx_idx: t[:, rx_idx, :, :, :])(inputs)" in after
    assert "trainmedic lint --fix" in rule.fix
