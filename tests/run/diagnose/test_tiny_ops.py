"""tiny_ops advice: the trainmedic.batch call to write, naming the user's per-sample function."""

import textwrap

import pytest

from trainmedic.run.diagnose import diagnose
from trainmedic.run.diagnose.rules import Context, tiny_ops
from trainmedic.run.probe.recorder import BEFORE_MODEL

STEPS = 40


def context(function=None, where="gen.py:7", device="cuda"):
    return Context(where, 0.9, 1.0, device, ops_per_step=20_000, function=function)


def test_a_per_sample_function_is_named_in_the_batch_calls(completed, measure):
    # Seed 001: generate_iq_sample() called once per sample issued the tiny ops.
    fn = "gen.py:3:generate_iq_sample"
    lines = {
        (BEFORE_MODEL, "", "gen.py:7", fn): 0.9 * STEPS,
        ("compute", "forward", "train.py:20", "train.py:18:forward"): 0.1 * STEPS,
    }
    m = measure(lines, [1.0] * STEPS, ops_by_function={fn: 40_000, "train.py:18:forward": 20}, census_steps=2)
    top = diagnose(m, ["gen.py"], completed).findings[0]
    assert top.category == "tiny_ops"
    assert "trainmedic.batch" in top.fix
    assert "`gen = batch.vectorize(generate_iq_sample)`" in top.fix
    assert "one call `gen(...)` over the whole [batch, ...] tensors" in top.fix
    assert "`batch.generate(generate_iq_sample, params, out=...)`" in top.fix
    assert "(progress, Ctrl+C, resumable shards)" in top.fix
    assert top.suggestion == "batch.vectorize(generate_iq_sample)"


def test_the_measured_batching_gain_is_kept():
    advice = tiny_ops.advise("per-sample loop", context("gen.py:3:make_sample"))
    assert advice.factor == 8.0
    assert "typically 8-10x faster" in advice.fix
    assert "kernel launches" in advice.fix
    assert "operator dispatches" in tiny_ops.advise("per-sample loop", context(device="cpu")).fix
    assert advice.title == "20,000 tiny tensor ops per step in a Python loop at gen.py:7"


def test_a_module_level_loop_is_told_to_move_its_body_into_a_function():
    # Seed 001's generator written straight into the script: there is no function to batch.
    advice = tiny_ops.advise("per-sample loop", context("gen.py:1:<module>"))
    assert advice.fix.startswith(
        "The per-sample loop at gen.py:7 runs at module level: move its body into a function"
    )
    assert "`gen = batch.vectorize(make_sample)`" in advice.fix
    assert "<per_sample_fn>" not in advice.fix
    assert advice.suggestion is None, "make_sample does not exist yet: nothing to paste"


@pytest.mark.parametrize("function", [None, "gen.py:9:<listcomp>", "garbled"])
def test_without_a_function_name_the_call_has_a_placeholder(function):
    advice = tiny_ops.advise("per-sample loop", context(function))
    assert advice.fix.startswith(
        "Batch the per-sample function with trainmedic.batch: `gen = batch.vectorize(<per_sample_fn>)`"
    )
    assert "`batch.generate(<per_sample_fn>, params, out=...)`" in advice.fix
    assert advice.suggestion is None, "a placeholder call is not pasteable"


def test_a_loop_inside_the_function_asks_for_its_body_as_the_per_sample_function(tmp_path):
    # tests/scenarios/tiny_ops.py's shape: make_batch() builds each sample inline, so naming
    # make_batch in batch.vectorize() alone would batch the batch.
    path = tmp_path / "gen.py"
    path.write_text(
        textwrap.dedent("""
        import torch

        @torch.no_grad()
        def make_batch(n):
            out = []
            for _ in range(n):
                x = torch.randn(64)
                out.append(x * 2)
            return torch.stack(out)
    """),
        encoding="utf-8",
    )
    function = f"{path}:4:make_batch"  # co_firstlineno: the decorator's line
    advice = tiny_ops.advise("per-sample loop", context(function, where=f"{path}:9"))
    assert advice.fix.startswith(
        "Batch the loop in make_batch() with trainmedic.batch: move its body into a function of one "
        "sample (<per_sample_fn>), then `gen = batch.vectorize(<per_sample_fn>)`"
    )
    assert "one call `gen(...)` over the whole [batch, ...] tensors instead of the loop" in advice.fix
    # A loop over the parts of one sample (seed 001's receivers) reads the same: both calls are given.
    assert "; if make_batch() makes one sample, batch it whole: `batch.vectorize(make_batch)`." in advice.fix
    assert advice.suggestion is None
    # The same function's lines outside the loop (the for line's iterable, the stack) are not in it.
    for line in (7, 10):
        outside = tiny_ops.advise("per-sample loop", context(function, where=f"{path}:{line}"))
        assert "`gen = batch.vectorize(make_batch)`" in outside.fix


def test_an_unreadable_file_still_names_the_function(tmp_path):
    gone = tmp_path / "gone.py"
    advice = tiny_ops.advise("per-sample loop", context(f"{gone}:3:make_sample", where=f"{gone}:5"))
    assert "`gen = batch.vectorize(make_sample)`" in advice.fix
