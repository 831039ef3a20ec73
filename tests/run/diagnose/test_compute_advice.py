"""A compute- or bandwidth-bound verdict points to the tool that measures the levers left."""

from __future__ import annotations

import pytest

from trainmedic.run.diagnose.rules import compute, memory_bandwidth
from trainmedic.run.diagnose.rules.base import Context
from trainmedic.run.probe.source_facts import Sources


def ctx(command=(), device="cpu", model_batch=None, **kw) -> Context:
    return Context(
        where="train.py:12",
        seconds_per_step=0.1,
        step_median_s=0.1,
        device=device,
        sources=Sources(model_batch=model_batch),
        command=tuple(command),
        **kw,
    )


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_compute_advice_points_to_tune(device):
    advice = compute.advise(
        "", Context(where="train.py:12", seconds_per_step=0.1, step_median_s=0.1, device=device)
    )
    assert "`trainmedic tune model.py:build`" in advice.fix
    assert "--script train.py --set batch_size=2,4,8" in advice.fix  # no command known: the generic form
    assert advice.title.endswith("at train.py:12")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        # `trainmedic run examples/mnist.py --epochs 1 --batch-size 64`: the current batch first (tune's
        # baseline), the script's other arguments after --.
        (
            ["examples/mnist.py", "--epochs", "1", "--batch-size", "64"],
            "`trainmedic tune --script examples/mnist.py --set batch_size=64,32,128 -- --epochs 1`",
        ),
        (["train.py", "--bs=16"], "`trainmedic tune --script train.py --set bs=16,8,32`"),
        (
            ["app.py", "model=resnet", "training.batch_size=8"],
            "`trainmedic tune --script app.py --set training.batch_size=8,4,16 -- model=resnet`",
        ),
        (
            ["my train.py", "--per-device-train-batch-size", "4", "--", "--batch-size", "9"],
            "`trainmedic tune --script 'my train.py' --set per_device_train_batch_size=4,2,8 -- -- --batch-size 9`",
        ),
    ],
)
def test_tune_pointer_names_the_runs_own_script_and_batch_option(command, expected):
    advice = compute.advise("", ctx(command))
    assert expected in advice.fix
    assert "train.py --set batch_size=2,4,8" not in advice.fix


def test_an_option_with_its_default_is_read_from_the_source_and_the_batch_from_the_model(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        "import argparse\np = argparse.ArgumentParser()\np.add_argument('--batch-size', type=int, default=48)\n"
    )
    advice = compute.advise("", ctx([str(script), "--epochs", "2"], model_batch=48))
    assert f"`trainmedic tune --script {script} --set batch_size=48,24,96 -- --epochs 2`" in advice.fix


def test_a_script_without_a_batch_option_is_told_what_to_do_instead(tmp_path):
    script = tmp_path / "loop.py"
    script.write_text("import torch\nbatch_size = 32\n")
    advice = compute.advise("", ctx([str(script), "--epochs", "1"], model_batch=32, device="cuda"))
    assert (
        f"`{script} --epochs 1` has no batch-size option that `trainmedic tune --script` can set"
        in advice.fix
    )
    assert 'add one (e.g. `parser.add_argument("--batch-size", type=int)`' in advice.fix
    assert (
        f"then `trainmedic tune --script {script} --set batch_size=32,16,64 -- --epochs 1` measures it"
        in advice.fix
    )
    assert "`build(batch_size)` function for `trainmedic tune model.py:build`" in advice.fix


def test_a_module_run_is_told_that_tune_takes_the_file():
    advice = compute.advise("", ctx(["-m", "pkg.train", "--batch-size", "8"]))
    assert "`trainmedic tune --script` takes a script's file, not -m pkg.train" in advice.fix


def test_keras_advice_points_to_the_runs_own_script_too():
    advice = compute.advise("", ctx(["fit.py", "--batch_size", "128"], step_source="keras"))
    assert "`trainmedic tune --script fit.py --set batch_size=128,64,256`" in advice.fix


def test_bandwidth_advice_says_a_larger_batch_does_not_help_and_points_to_tune():
    advice = memory_bandwidth.advise(
        "", Context(where=None, seconds_per_step=0.1, step_median_s=0.1, device="cuda")
    )
    assert "a larger batch does not help" in advice.fix and "trainmedic tune" in advice.fix
