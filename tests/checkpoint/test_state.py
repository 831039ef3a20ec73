"""What each kind of object saves, content digests, and mismatch messages before loading."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from trainmedic.checkpoint import state
from trainmedic.errors import CheckpointMismatchError


def test_kinds_of_objects():
    model = torch.nn.Linear(2, 2)
    sampler = torch.utils.data.DistributedSampler(list(range(8)), num_replicas=1, rank=0, seed=3)
    cases = {
        state.MODULE: model,
        state.STATE_DICT: torch.optim.SGD(model.parameters(), lr=0.1),
        state.TORCH_GENERATOR: torch.Generator().manual_seed(1),
        state.NUMPY_GENERATOR: np.random.default_rng(1),
        state.NUMPY_RANDOM_STATE: np.random.RandomState(1),
        state.PY_RANDOM: random.Random(1),
        state.SAMPLER: sampler,
        state.DATALOADER: torch.utils.data.DataLoader(list(range(8)), sampler=sampler),
        state.VALUE: {"best": 0.5},
    }
    assert {kind: state.capture(obj).kind for kind, obj in cases.items()} == {kind: kind for kind in cases}


def test_compiled_and_wrapped_modules_save_the_inner_keys():
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    wrapped = torch.nn.DataParallel(model)
    assert list(state.capture(wrapped).state) == ["0.weight", "0.bias"]
    plain = torch.nn.Sequential(torch.nn.Linear(2, 2))
    state.apply("model", wrapped, state.capture(plain), "ckpt")
    assert torch.equal(model[0].weight, plain[0].weight)


def test_generators_come_back_to_the_same_draws():
    for make, draw in [
        (lambda: np.random.default_rng(7), lambda g: g.random()),
        (lambda: random.Random(7), lambda g: g.random()),
        (lambda: torch.Generator().manual_seed(7), lambda g: torch.rand(1, generator=g).item()),
    ]:
        generator = make()
        saved = state.capture(generator)
        expected = draw(generator)
        draw(generator)
        state.apply("g", generator, saved, "ckpt")
        assert draw(generator) == expected


def test_digest_is_content_not_identity():
    a = {"w": torch.arange(6.0).reshape(2, 3), "n": 3, "tag": "x"}
    b = {"tag": "x", "n": 3, "w": torch.arange(6.0).reshape(2, 3).clone()}
    assert state.digest(a) == state.digest(b)
    b["w"][0, 0] = 1e-7
    assert state.digest(a) != state.digest(b)
    assert state.digest(np.zeros(3, np.float32)) != state.digest(np.zeros(3, np.float64))


def test_a_different_model_names_its_keys_before_loading():
    saved = state.capture(torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1)))
    other = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.Linear(16, 1), torch.nn.ReLU(), torch.nn.Linear(1, 1)
    )
    with pytest.raises(CheckpointMismatchError) as info:
        state.check("model", other, saved, "runs/x/000001-step-1")
    message = str(info.value)
    assert "missing from the checkpoint: 3.weight, 3.bias" in message
    assert "0.weight (8, 4) saved vs (16, 4) here" in message
    assert "runs/x/000001-step-1" in message


def test_an_optimizer_over_other_parameters_is_named():
    model = torch.nn.Linear(2, 2)
    saved = state.capture(torch.optim.Adam(model.parameters()))
    other = torch.optim.Adam([{"params": [model.weight]}, {"params": [model.bias]}])
    with pytest.raises(CheckpointMismatchError, match=r"sizes \[2\], this optimizer has \[1, 1\]"):
        state.check("optimizer", other, saved, "ckpt")


def test_values_are_refilled_in_place_and_immutables_returned():
    history, seen = [1, 2], {"a"}
    assert state.apply("h", history, state.Captured(state.VALUE, [3]), "c")[0] == [3] and history == [3]
    state.apply("s", seen, state.Captured(state.VALUE, {"b"}), "c")
    assert seen == {"b"}
    assert state.apply("best", 0.1, state.Captured(state.VALUE, 0.5), "c")[0] == 0.5
