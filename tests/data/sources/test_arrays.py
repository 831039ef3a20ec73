"""Dicts of arrays or tensors, and .npy files or folders, as sources."""

import numpy as np
import pytest
import torch

from trainmedic import data
from trainmedic.data.sources import open_source
from trainmedic.errors import FieldError, SourceError


def test_dict_of_tensors_and_arrays_keeps_dtypes():
    source = open_source({"x": torch.ones(10, 2, dtype=torch.float16), "y": np.arange(10, dtype=np.int32)})
    assert [s.describe() for s in source.specs] == ["x: float16 2", "y: int32 scalar"]
    assert source.nbytes == 10 * (4 + 4)


@pytest.mark.parametrize(
    "arrays, message",
    [
        ({"x": np.zeros((10, 2)), "y": np.zeros(9)}, "field 'y' has 9 samples but 'x' has 10"),
        ({"x": np.array(["a", "b"])}, "field 'x' .* dtype <U1"),
        (
            {"x": np.zeros(3), "t": np.array(["2020-01-01"] * 3, dtype="datetime64[D]")},
            "field 't' .*datetimes",
        ),
        ({"x": [[1, 2], [3]]}, "field 'x' .*ragged"),
        ({"x": np.float32(1.0)}, "field 'x' .*scalar"),
        ({}, "empty"),
        ({"x": torch.zeros(3, dtype=torch.bfloat16)}, "bfloat16"),
    ],
)
def test_bad_fields_are_named(arrays, message):
    with pytest.raises(FieldError, match=message):
        open_source(arrays)


def test_unknown_field_lists_the_known_ones():
    with pytest.raises(FieldError, match=r"field 'z' is not in .* it has \['x', 'y'\]"):
        data.load({"x": np.zeros(4), "y": np.zeros(4)}, fields=["z"])


def test_npy_file_folder_and_structured(tmp_path):
    x = np.arange(60, dtype=np.float32).reshape(20, 3)
    np.save(tmp_path / "x.npy", x)
    single = data.load(tmp_path / "x.npy", batch_size=20, shuffle=False)
    assert single.fields == ("x",)
    assert torch.equal(next(iter(single))[0], torch.from_numpy(x))

    folder = tmp_path / "fields"
    folder.mkdir()
    np.save(folder / "x.npy", x)
    np.save(folder / "label.npy", np.arange(20))
    both = data.load(folder, fields=["x", "label"], batch_size=5, seed=1)
    for xb, label in both:
        assert torch.equal(xb, torch.from_numpy(x[label.numpy()]))

    records = np.zeros(20, dtype=[("a", np.float32), ("b", np.int64)])
    records["b"] = np.arange(20)
    np.save(tmp_path / "rec.npy", records)
    assert data.load(tmp_path / "rec.npy").fields == ("a", "b")


def test_npy_source_is_memory_mapped_not_loaded(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((100, 4)))
    source = open_source(tmp_path / "x.npy")
    assert isinstance(source.array("x"), np.memmap)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "missing.h5", "does not exist"),
        (lambda p: (p / "notes.txt").write_text("hello") and p / "notes.txt", "cannot tell what"),
        (lambda p: (p / "bad.npy").write_bytes(b"garbage") and p / "bad.npy", "not a NumPy .npy"),
        (lambda p: [1, 2, 3], "cannot read a list"),
    ],
)
def test_unreadable_sources_say_what_is_accepted(tmp_path, make, message):
    with pytest.raises(SourceError, match=message):
        data.load(make(tmp_path))


def test_query_with_a_path_suggests_a_url(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(SourceError, match="sqlite:///"):
        data.load(tmp_path / "x.npy", query="SELECT 1")


def test_each_source_names_its_kind(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros(3))
    assert open_source(tmp_path / "x.npy").kind == "numpy"
    assert open_source({"x": np.zeros(3)}).kind == "dict"
