"""What plan says about each hotspot is true: how it grows with the batch is measured (a second
trace at half the batch), the fix follows from that, and every formula multiplies out to the
bytes it states. On a nanoGPT-style model written here (tests/plan/nano_style.py): its logits
are ``[B·S, V]`` after ``view(-1, V)``, which a shape alone reads as not growing with the batch."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from formula_kit import assert_multiplies_out
from nano_style import BLOCK, VOCAB, build

from trainmedic.plan import plan_memory
from trainmedic.plan.hotspots import formula_of
from trainmedic.plan.scaling import Growth, growth_of, named_sizes, other_batch, twins
from trainmedic.plan.tracker import Allocation
from trainmedic.units import parse_bytes

# Every test here shares a module-scoped run or traces several models: seconds, not milliseconds.
pytestmark = pytest.mark.slow

SOURCE = Path(__file__).with_name("nano_style.py")
CONFIGS = {"cpu": dict(device="cpu"), "a100-bf16": dict(device="a100-40gb", precision="bf16")}
BATCH = 8


def line(marker: str) -> str:
    lines = SOURCE.read_text(encoding="utf-8").splitlines()
    return f"nano_style.py:{next(i for i, text in enumerate(lines, 1) if marker in text)}"


@cache
def planned(config: str, batch: int = BATCH, measure: bool = True):
    return plan_memory(build, batch, measure_growth=measure, **CONFIGS[config])


def at(plan, where: str):
    """The hotspot at ``where`` (shown relative to the working folder, wherever that is)."""
    return next(h for h in plan.hotspots if h.where.endswith(where))


def lines_of(plan) -> set[str]:
    return {h.where.rsplit("/", 1)[-1] for h in plan.hotspots}


@pytest.mark.parametrize("config", CONFIGS)
def test_the_logits_and_their_loss_grow_with_the_batch_and_the_advice_says_so(config):
    plan = planned(config)
    for where in (line("LOSS LINE"), line("LOGITS LINE")):
        hotspot = at(plan, where)
        assert "grows with the batch and the sequence" in hotspot.advice, hotspot
        assert "does not grow" not in hotspot.advice
        assert "chunks of the tokens" in hotspot.advice  # the fixes that act on logits
    loss = at(plan, line("LOSS LINE"))
    saved = parse_bytes(re.search(r"holds ([0-9.]+ [KMG]iB) less here", loss.advice).group(1))
    half = at(planned(config, BATCH // 2, measure=False), line("LOSS LINE"))
    assert abs(saved - (loss.bytes - half.bytes)) <= 0.05 * loss.bytes  # what half the batch measured


@pytest.mark.parametrize("config", CONFIGS)
def test_a_hotspot_says_it_grows_exactly_when_half_the_batch_shrinks_it(config):
    plan, half = planned(config), planned(config, BATCH // 2, measure=False)
    smaller = {h.where: h.bytes for h in half.hotspots}  # both plans show paths alike
    for hotspot in plan.hotspots:
        if hotspot.where not in smaller:
            continue  # fell below the listing at the smaller batch: it shrank
        shrinks = smaller[hotspot.where] < 0.9 * hotspot.bytes
        assert ("does not grow" not in hotspot.advice) == shrinks, (hotspot, smaller[hotspot.where])


def test_on_a_gpu_target_the_loss_is_charged_to_its_own_line_not_to_def_forward():
    # CUDA autocast's stand-in casts ran the cross-entropy on the user's behalf, and the line
    # search stopped at them: the loss was charged to `def forward` of the module.
    plan = planned("a100-bf16")
    forward = next(
        f"nano_style.py:{i}"
        for i, text in enumerate(SOURCE.read_text(encoding="utf-8").splitlines(), 1)
        if text.strip() == "def forward(self, idx, targets):"
    )
    assert line("LOSS LINE") in lines_of(plan)
    assert forward not in lines_of(plan)
    loss = at(plan, line("LOSS LINE"))
    assert "fp32 copies autocast makes for the loss" in loss.advice


@pytest.mark.parametrize("config", CONFIGS)
def test_the_output_layers_formula_is_of_its_output_not_its_input(config):
    logits = at(planned(config), line("LOGITS LINE"))
    assert f"(B·S)·V·bytes = {BATCH}·{BLOCK}·{VOCAB}·" in logits.formula, logits.formula


@pytest.mark.parametrize("config", CONFIGS)
def test_every_formula_multiplies_to_the_bytes_it_states(config):
    for hotspot in planned(config).hotspots:
        assert_multiplies_out(hotspot.formula, hotspot.bytes)


# -- the measurement itself ----------------------------------------------------------------------


def _alloc(sid, shape, op="mm", where="m.py:3", dtype="float32"):
    return Allocation(sid, 4 * max(1, len(shape)) * 1, op, where, "forward", tuple(shape), dtype)


def test_twins_are_the_same_op_at_the_same_line_in_the_same_order():
    mine = {1: _alloc(1, (12288, 50304)), 2: _alloc(2, (768, 768)), 3: _alloc(3, (12288, 50304))}
    theirs = {7: _alloc(7, (6144, 50304)), 8: _alloc(8, (768, 768)), 9: _alloc(9, (6144, 50304))}
    paired = twins(mine, theirs)
    assert {sid: twin.sid for sid, twin in paired.items()} == {1: 7, 2: 8, 3: 9}
    folded = growth_of(mine[1], paired[1], 12, 6)
    assert folded.per_axis == (1024, None) and folded.kind == "linear"
    assert growth_of(mine[2], paired[2], 12, 6).kind == "none"


def test_a_line_that_ran_a_different_number_of_ops_at_the_other_batch_is_not_paired():
    mine = {1: _alloc(1, (12, 8)), 2: _alloc(2, (12, 8))}
    theirs = {5: _alloc(5, (6, 8))}
    assert twins(mine, theirs) == {}


def test_an_axis_that_moves_twice_as_fast_as_the_batch_is_faster_than_linear():
    pairwise = growth_of(_alloc(1, (128, 128, 16)), _alloc(2, (64, 64, 16)), 128, 64)
    assert pairwise.kind == "faster"


def test_a_hidden_size_equal_to_the_batch_is_not_the_batch_once_measured():
    alloc = _alloc(1, (768, 768))
    guessed = formula_of(alloc, 768)
    measured = formula_of(alloc, 768, Growth((None, None), 384, alloc.nbytes))
    assert guessed[0] == "batch" and measured[0] == "fixed"


def test_the_sequence_and_the_vocabulary_are_named_from_the_build():
    import torch

    parts = build(2)
    sizes = named_sizes(parts["model"], list(parts["inputs"]), 2)
    assert sizes == {BLOCK: "S", VOCAB: "V"}
    lone = torch.nn.Sequential(torch.nn.Embedding(300, 8), torch.nn.Linear(8, 4))
    assert named_sizes(lone, [torch.zeros(2, 16, dtype=torch.long)], 2) == {16: "S", 300: "V"}


def test_the_second_batch_is_half_or_two():
    assert [other_batch(b) for b in (1, 2, 12, 13)] == [2, 1, 6, 6]
