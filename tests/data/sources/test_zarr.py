"""Zarr directory stores as sources, on real stores written with zarr."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import numpy as np
import pytest
import zarr

from trainmedic.data.sources import zarr_store
from trainmedic.data.sources.base import read_rows
from trainmedic.data.sources.zarr_store import ZarrSource
from trainmedic.errors import FieldError, SourceError

RNG = np.random.default_rng(11)


def write(path, zarr_format=3, **arrays):
    """Write ``name=array`` (or ``name=(array, create_array kwargs)``); '__' in a name nests a group."""
    root = zarr.open_group(str(path), mode="w", zarr_format=zarr_format)
    for name, value in arrays.items():
        array, options = value if isinstance(value, tuple) else (value, {})
        options = {"chunks": array.shape or (), "dtype": array.dtype, **options}
        target = root.create_array(name.replace("__", "/"), shape=array.shape, **options)
        target[...] = array
    return path


@pytest.fixture
def mixed(tmp_path):
    data = {
        "b": RNG.standard_normal((40, 3)).astype(np.float32),
        "a": np.arange(40, dtype=np.int64),
        "grp__x": RNG.integers(0, 100, (40, 2, 5), dtype=np.int16),
    }
    path = write(
        tmp_path / "mixed.zarr",
        b=(data["b"], {"chunks": (16, 3)}),
        a=(data["a"], {"chunks": (8,)}),
        grp__x=(data["grp__x"], {"chunks": (10, 2, 5)}),
        meta=np.array(3.5),
    )
    return path, data


def test_fields_none_finds_every_array_sorted_nested_by_path_and_skips_scalars(mixed):
    path, _ = mixed
    source = ZarrSource(path)
    assert source.fields == ("a", "b", "grp/x")
    assert [s.describe() for s in source.specs] == ["a: int64 scalar", "b: float32 3", "grp/x: int16 2×5"]
    assert (source.kind, source.description, source.length) == ("zarr", str(path), 40)
    assert source.random_access and source.chunk_length == 16


def test_fields_keep_the_order_asked(mixed):
    path, data = mixed
    source = ZarrSource(path, fields=["grp/x", "a"])
    assert source.fields == ("grp/x", "a") and source.chunk_length == 10
    chunk = next(source.iter_chunks(100))
    assert list(chunk) == ["grp/x", "a"]
    np.testing.assert_array_equal(chunk["grp/x"], data["grp__x"])


@pytest.mark.parametrize(
    "arrays, fields, message",
    [
        (
            {"x": np.zeros(4), "y": np.zeros(4)},
            ["z"],
            r"field 'z' is not in Zarr store .* it has \['x', 'y'\]",
        ),
        ({"x": np.zeros(10), "y": np.zeros(9)}, None, r"field 'y' has 9 samples but 'x' has 10"),
        (
            {"x": np.zeros(3), "names": (np.array(["a", "bb", "c"]), {"dtype": str})},
            None,
            r"field 'names' .*dtype",
        ),
        ({"x": np.zeros(3), "meta": np.array(1.0)}, ["x", "meta"], r"field 'meta' .*0-d array"),
    ],
    ids=["unknown", "lengths", "strings", "scalar"],
)
def test_bad_fields_are_named(tmp_path, arrays, fields, message):
    path = write(tmp_path / "bad.zarr", **arrays)
    with pytest.raises(FieldError, match=message):
        ZarrSource(path, fields=fields)


def test_missing_path_a_file_and_a_plain_folder_are_not_stores(tmp_path):
    with pytest.raises(SourceError, match=r"nope\.zarr does not exist"):
        ZarrSource(tmp_path / "nope.zarr")
    (tmp_path / "file.zarr").write_text("x")
    with pytest.raises(SourceError, match=r"file\.zarr is not a directory"):
        ZarrSource(tmp_path / "file.zarr")
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "notes.txt").write_text("x")
    with pytest.raises(SourceError, match=r"plain is not a Zarr store"):
        ZarrSource(tmp_path / "plain")


def index_sets(n):
    return {
        "random": np.sort(RNG.choice(n, 50, replace=False)),
        "dense-window": 300 + np.sort(RNG.choice(200, 90, replace=False)),
        "whole-chunks": np.arange(64, 192),
        "one": np.array([n - 1]),
        "all": np.arange(n),
        "none": np.array([], dtype=np.int64),
    }


@pytest.mark.parametrize("compressed", [False, True], ids=["raw", "zstd"])
@pytest.mark.parametrize("dtype, sample", [(np.float32, (5,)), (np.int16, (3, 4)), (np.float64, ())])
def test_read_equals_numpy_fancy_indexing(tmp_path, compressed, dtype, sample, monkeypatch):
    n = 1000
    array = (RNG.standard_normal((n,) + sample) * 100).astype(dtype)
    options = {"chunks": (64,) + sample, "compressors": "auto" if compressed else None}
    source = ZarrSource(write(tmp_path / "r.zarr", x=(array, options)))
    # Small reads too: neighbouring chunks are split into several requests.
    for max_bytes in (zarr_store.MAX_READ_BYTES, 1):
        monkeypatch.setattr(zarr_store, "MAX_READ_BYTES", max_bytes)
        for name, indices in index_sets(n).items():
            out = np.empty((len(indices),) + sample, dtype=dtype)
            source.read("x", indices.astype(np.int64), out)
            np.testing.assert_array_equal(out, array[indices], err_msg=f"{name} {max_bytes}")


def test_chunk_ranges_group_neighbouring_chunks_and_cap_their_length():
    chunk_ids = np.array([0, 0, 1, 2, 2, 5, 7, 8, 9, 10, 11])
    assert zarr_store._chunk_ranges(chunk_ids, 100) == [(0, 2), (5, 5), (7, 11)]
    assert zarr_store._chunk_ranges(chunk_ids, 2) == [(0, 1), (2, 2), (5, 5), (7, 8), (9, 10), (11, 11)]


def test_read_rows_serves_a_shuffled_batch_with_repeats(tmp_path):
    array = RNG.standard_normal((500, 4)).astype(np.float32)
    source = ZarrSource(write(tmp_path / "s.zarr", x=(array, {"chunks": (32, 4)})))
    indices = np.array([400, 3, 3, 250, 17, 499, 0, 17, 251])
    out = np.empty((len(indices), 4), dtype=np.float32)
    read_rows(source, "x", indices, out)
    np.testing.assert_array_equal(out, array[indices])


def test_read_checks_the_request(tmp_path):
    source = ZarrSource(write(tmp_path / "f.zarr", x=np.zeros((10, 2))))
    with pytest.raises(ValueError, match=r"needs \(2, 2\)"):
        source.read("x", np.array([0, 1]), np.empty((2, 3)))
    with pytest.raises(IndexError, match="has 10 rows"):
        source.read("x", np.array([5, 10]), np.empty((2, 2)))


def test_iter_chunks_covers_every_row_once_in_order(tmp_path):
    x, y = np.arange(53 * 2).reshape(53, 2), np.arange(53, dtype=np.uint8)
    source = ZarrSource(write(tmp_path / "c.zarr", x=(x, {"chunks": (8, 2)}), y=y))
    chunks = list(source.iter_chunks(16))
    assert [len(c["x"]) for c in chunks] == [16, 16, 16, 5]
    np.testing.assert_array_equal(np.concatenate([c["x"] for c in chunks]), x)
    np.testing.assert_array_equal(np.concatenate([c["y"] for c in chunks]), y)


def test_format_2_stores_root_arrays_and_shards(tmp_path):
    array = RNG.standard_normal((100, 3)).astype(np.float32)
    v2 = ZarrSource(write(tmp_path / "v2.zarr", zarr_format=2, grp__x=(array, {"chunks": (7, 3)})))
    assert v2.fields == ("grp/x",) and v2.chunk_length == 7
    zarr.save_array(str(tmp_path / "single.zarr"), array)
    single = ZarrSource(tmp_path / "single.zarr")
    assert single.fields == ("single",) and single.length == 100
    sharded = ZarrSource(write(tmp_path / "sh.zarr", x=(array, {"chunks": (5, 3), "shards": (50, 3)})))
    assert sharded.chunk_length == 50  # a sequential reader asks for whole shards
    indices = np.sort(RNG.choice(100, 30, replace=False))
    for source, field in ((v2, "grp/x"), (single, "single"), (sharded, "x")):
        out = np.empty((30, 3), dtype=np.float32)
        source.read(field, indices, out)
        np.testing.assert_array_equal(out, array[indices])


def test_fingerprint_follows_the_chunk_files(tmp_path):
    path = write(tmp_path / "f.zarr", x=(np.zeros((64, 2)), {"chunks": (16, 2)}))
    source = ZarrSource(path)
    first = source.fingerprint()
    source.read("x", np.arange(3), np.empty((3, 2)))
    assert source.fingerprint() == first == ZarrSource(path).fingerprint()
    zarr.open_array(str(path / "x"), mode="r+")[20:24] = RNG.standard_normal((4, 2))
    assert source.fingerprint() != first


def _read_in_child(source, indices, conn):
    out = np.empty((len(indices), 3), dtype=np.float32)
    source.read("x", indices, out)
    conn.send((out, source.handle_pid, os.getpid()))
    conn.close()


def test_a_forked_child_opens_its_own_arrays(tmp_path):
    array = RNG.standard_normal((300, 3)).astype(np.float32)
    source = ZarrSource(write(tmp_path / "f.zarr", x=(array, {"chunks": (16, 3)})))
    source.read("x", np.arange(5), np.empty((5, 3), dtype=np.float32))
    assert source.handle_pid == os.getpid()

    indices = np.sort(RNG.choice(300, 40, replace=False))
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_read_in_child, args=(source, indices, sender))
    child.start()
    assert receiver.poll(30), "the child did not answer: zarr hung after fork"
    rows, child_handle_pid, child_pid = receiver.recv()
    child.join(timeout=30)

    assert child.exitcode == 0
    assert child_handle_pid == child_pid != os.getpid()
    np.testing.assert_array_equal(rows, array[indices])
    assert source.handle_pid == os.getpid()


def test_pickled_source_reopens(tmp_path):
    array = np.arange(20.0)
    source = ZarrSource(write(tmp_path / "f.zarr", x=array))
    source.read("x", np.array([0]), np.empty(1))
    clone = pickle.loads(pickle.dumps(source))
    assert clone.handle_pid is None
    out = np.empty(3)
    clone.read("x", np.array([1, 5, 19]), out)
    np.testing.assert_array_equal(out, array[[1, 5, 19]])
