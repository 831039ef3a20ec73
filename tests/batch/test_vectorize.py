"""vectorize(): vmap where it can, a loop that says why where it cannot, the same numbers either way."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import torch
from generators import params, tone, tone_global

from trainmedic.batch import FallbackWarning, vectorize
from trainmedic.errors import BatchError


def columns(samples: int) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in params(samples).items()}


def test_batched_output_equals_per_sample_calls_exactly():
    vf = vectorize(tone)
    cols = columns(40)
    out = vf(**cols, seed=9, start=100)
    assert vf.mode == "vmap" and vf.reason is None and vf.notes == []
    assert out["iq"].shape == (40, 3, 64) and out["delay"].dtype == torch.int64
    for i in range(40):
        one = vf.one(100 + i, **{k: v[i] for k, v in cols.items()}, seed=9)
        assert torch.equal(out["iq"][i], one["iq"]) and torch.equal(out["delay"][i], one["delay"])


def test_the_batch_size_does_not_change_any_sample():
    vf = vectorize(tone)
    cols = columns(30)
    whole = vf(**cols, seed=1)["iq"]
    parts = torch.cat(
        [vf(**{k: v[s : s + 7] for k, v in cols.items()}, seed=1, start=s)["iq"] for s in range(0, 30, 7)]
    )
    assert torch.equal(whole, parts)


def branchy(freq, snr_db):
    if freq > 4:  # data-dependent control flow: vmap cannot batch it
        return torch.full((3,), 1.0) * freq
    return torch.zeros(3) + snr_db


def test_data_dependent_control_flow_falls_back_with_the_line_named():
    vf = vectorize(branchy)
    cols = columns(12)
    with pytest.warns(FallbackWarning) as caught:
        out = vf(**cols)
    message = str(caught[0].message)
    assert "data-dependent control flow" in message and "test_vectorize.py:" in message
    assert "`if freq > 4:" in message and "torch.where" in message
    assert vf.mode == "loop"
    expected = torch.stack([branchy(cols["freq"][i], cols["snr_db"][i]) for i in range(12)])
    assert torch.equal(out, expected)


def uses_item(freq, snr_db):
    return torch.ones(2) * float(freq.item())


def test_item_calls_fall_back_and_say_so():
    vf = vectorize(uses_item)
    with pytest.warns(FallbackWarning, match=r"a \.item\(\) call at .*test_vectorize.py:\d+"):
        out = vf(**columns(5))
    assert out.shape == (5, 2)


def numpy_fn(freq, snr_db):
    return np.sin(np.arange(4) * freq) + snr_db


def test_numpy_functions_run_per_sample_on_numpy_rows_and_say_so():
    vf = vectorize(numpy_fn)
    p = params(6)
    with pytest.warns(FallbackWarning, match="NumPy code"):
        out = vf(**p)
    assert vf.numpy and isinstance(out, np.ndarray) and out.shape == (6, 4)
    np.testing.assert_array_equal(out[3], numpy_fn(p["freq"][3], p["snr_db"][3]))


def test_global_random_draws_are_batched_with_a_note():
    vf = vectorize(tone_global)
    out = vf(**columns(8))
    assert vf.mode == "vmap" and out.shape == (8, 64)
    assert len(vf.notes) == 1 and "global random generator" in vf.notes[0] and "rng" in vf.notes[0]
    assert not torch.equal(out[0], out[1])


def ragged(freq, snr_db):
    return torch.zeros(int(freq.item()))


def test_outputs_that_change_shape_per_sample_are_named():
    cols = {"freq": torch.tensor([2.0, 2.0, 3.0]), "snr_db": torch.zeros(3)}
    with (
        pytest.warns(FallbackWarning),
        pytest.raises(BatchError, match=r"shape \(2,\) for sample 0 but \(3,\) for sample 2"),
    ):
        vectorize(ragged)(**cols)


def typo(freq, snr_db):
    return torch.zeros(3) + undefined_name  # noqa: F821 - the user's own bug


def test_the_functions_own_error_is_raised_not_hidden_behind_a_loop():
    vf = vectorize(typo)
    with pytest.raises(NameError, match="undefined_name"):
        vf(**columns(4))


def test_arguments_of_mixed_lengths_or_single_values_are_refused():
    vf = vectorize(tone)
    with pytest.raises(BatchError, match=r"different numbers of samples \('freq': 4, 'snr_db': 3\)"):
        vf(freq=torch.zeros(4), snr_db=torch.zeros(3))
    with pytest.raises(BatchError, match=r"'snr_db' of tone is 3.0, a single value.*functools.partial"):
        vf(freq=torch.zeros(4), snr_db=3.0)


def test_partial_functions_keep_their_name():
    vf = vectorize(functools.partial(tone, length=16))
    assert vf.name == "tone"
    assert vf(**columns(3))["iq"].shape == (3, 3, 16)
