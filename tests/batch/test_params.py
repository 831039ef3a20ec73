"""The job's params: columns from a dict or from per-sample dicts; what is ragged or mixed is named."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from trainmedic.batch.params import as_params
from trainmedic.errors import BatchError


def test_a_dict_of_columns_and_a_list_of_records_give_the_same_params():
    columns = as_params({"freq": [1.0, 2.0, 3.0], "snr": np.array([0, 5, 9]), "w": torch.ones(3, 2)})
    records = as_params(
        [
            {"freq": 1.0, "snr": 0, "w": [1.0, 1.0]},
            {"freq": 2.0, "snr": 5, "w": [1.0, 1.0]},
            {"freq": 3.0, "snr": 9, "w": [1.0, 1.0]},
        ]
    )
    assert columns.length == records.length == 3
    assert columns.describe()["w"] == {"dtype": "float32", "shape": [2]}
    assert as_params({"a": [1, 2]}).digest() != as_params({"a": [1, 3]}).digest()
    assert as_params({"a": [1, 2]}).digest() == as_params({"a": np.array([1, 2])}).digest()


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"freq": [1, 2, 3], "snr": [1, 2]}, r"mixed lengths \(freq: 3, snr: 2\)"),
        ({"freq": [1, 2], "fs": 48000}, r"params\['fs'\] is 48000, a single value.*functools.partial"),
        ({"name": ["a", "b"]}, r"params\['name'\] has dtype <U1"),
        ({"x": [[1, 2], [3]]}, r"params\['x'\] has rows of different lengths"),
        ({}, "params is empty"),
        ({"x": []}, "0 samples"),
        ([{"a": 1}, {"b": 2}], r"params\[1\] has keys \['b'\].*missing \['a'\], extra \['b'\]"),
        ("freq", "params is a str"),
    ],
)
def test_bad_params_are_named(params, message):
    with pytest.raises(BatchError, match=message):
        as_params(params)


def test_tensor_records_and_bfloat16_columns_become_params():
    records = as_params([{"w": torch.ones(2, requires_grad=True)}, {"w": torch.zeros(2, requires_grad=True)}])
    assert records.columns["w"].shape == (2, 2) and not records.columns["w"].requires_grad
    assert len(as_params({"a": torch.ones(3, dtype=torch.bfloat16)}).digest()) == 64
    with pytest.raises(BatchError, match="the key 1, a int"):
        as_params({1: [1.0, 2.0]})
