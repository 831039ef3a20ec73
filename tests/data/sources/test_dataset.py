"""A torch Dataset is materialised once, through __getitems__ when it has one."""

import numpy as np
import pytest
import torch
from torch.utils.data import Dataset, TensorDataset

from trainmedic import data
from trainmedic.errors import FieldError, SourceError


class Pairs(Dataset):
    def __init__(self, n=100):
        self.n = n
        self.single_calls = 0

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.single_calls += 1
        return torch.full((4,), float(i)), i


class Batched(Pairs):
    def __init__(self, n=100):
        super().__init__(n)
        self.batch_calls = 0

    def __getitems__(self, indices):
        self.batch_calls += 1
        return [(torch.full((4,), float(i)), i) for i in indices]


def test_tuple_samples_become_named_fields():
    loader = data.load(Pairs(), fields=["x", "y"], batch_size=10, seed=0)
    assert loader.fields == ("x", "y")
    for x, y in loader:
        assert torch.equal(x[:, 0], y.float())


def test_getitems_is_used_when_present():
    dataset = Batched(1000)
    data.load(dataset, batch_size=10)
    assert dataset.batch_calls >= 2 and dataset.single_calls == 0
    assert dataset.batch_calls < 10  # chunks of many rows, not one call per batch or sample


def test_dict_samples_and_tensor_dataset():
    class Dicts(Pairs):
        def __getitem__(self, i):
            return {"image": np.full((2, 2), i, dtype=np.uint8), "label": i}

    loader = data.load(Dicts(30), fields=["label", "image"], batch_size=30, shuffle=False)
    label, image = next(iter(loader))
    assert image.dtype == torch.uint8 and torch.equal(image[:, 0, 0].long(), label)
    tensors = data.load(TensorDataset(torch.arange(8.0), torch.arange(8)), batch_size=8, shuffle=False)
    assert tensors.fields == ("0", "1")


def test_ragged_sample_names_field_and_row():
    class Ragged(Pairs):
        def __getitem__(self, i):
            return torch.zeros(4 if i != 37 else 5), i

    with pytest.raises(FieldError, match=r"field 'x' of sample 37 .* shape \(5,\), but sample 0 has \(4,\)"):
        data.load(Ragged(), fields=["x", "y"])


def test_wrong_number_of_field_names_and_empty_dataset():
    with pytest.raises(FieldError, match="names 3 fields.*tuples of 2"):
        data.load(Pairs(), fields=["a", "b", "c"])
    with pytest.raises(SourceError, match="empty"):
        data.load(Pairs(0))
