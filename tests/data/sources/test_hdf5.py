"""HDF5 files as sources, on real files written with h5py."""

from __future__ import annotations

import multiprocessing
import os
import pickle

import h5py
import numpy as np
import pytest

from trainmedic.data.sources.base import read_rows
from trainmedic.data.sources.hdf5 import SLICE_MIN_ROWS, Hdf5Source, _plan
from trainmedic.errors import FieldError, SourceError

RNG = np.random.default_rng(7)


def write(path, **datasets):
    """Write ``name=array`` (or ``name=(array, create_dataset kwargs)``); names may hold '/'."""
    with h5py.File(path, "w") as f:
        for name, value in datasets.items():
            array, options = value if isinstance(value, tuple) else (value, {})
            f.create_dataset(name.replace("__", "/"), data=array, **options)
    return path


@pytest.fixture
def mixed(tmp_path):
    """Fields out of name order, one nested, one scalar that is not a field."""
    data = {
        "b": RNG.standard_normal((40, 3)).astype(np.float32),
        "a": np.arange(40, dtype=np.int64),
        "grp__x": RNG.integers(0, 100, (40, 2, 5), dtype=np.int16),
        "meta": np.float64(3.5),
    }
    return write(tmp_path / "mixed.h5", **data), data


def test_fields_none_finds_every_array_sorted_nested_by_path_and_skips_scalars(mixed):
    path, _ = mixed
    source = Hdf5Source(path)
    assert source.fields == ("a", "b", "grp/x")
    assert [s.describe() for s in source.specs] == ["a: int64 scalar", "b: float32 3", "grp/x: int16 2×5"]
    assert (source.kind, source.description, source.length) == ("hdf5", str(path), 40)
    assert source.random_access and source.chunk_length == 1


def test_fields_keep_the_order_asked(mixed):
    path, data = mixed
    source = Hdf5Source(path, fields=["grp/x", "a"])
    assert source.fields == ("grp/x", "a")
    chunk = next(source.iter_chunks(100))
    assert list(chunk) == ["grp/x", "a"]
    np.testing.assert_array_equal(chunk["grp/x"], data["grp__x"])


@pytest.mark.parametrize(
    "datasets, fields, message",
    [
        (
            {"x": np.zeros(4), "y": np.zeros(4)},
            ["z"],
            r"field 'z' is not in HDF5 file .* it has \['x', 'y'\]",
        ),
        ({"x": np.zeros(10), "y": np.zeros(9)}, None, r"field 'y' has 9 samples but 'x' has 10"),
        ({"x": np.zeros(3), "names": np.array([b"a", b"b", b"c"])}, None, r"field 'names' .*dtype \|S1"),
        (
            {"x": (np.array(["a", "bb"], dtype=object), {"dtype": h5py.string_dtype()})},
            None,
            r"field 'x' .*object",
        ),
        ({"x": np.zeros(3), "meta": np.float32(1)}, ["x", "meta"], r"field 'meta' .*scalar"),
    ],
    ids=["unknown", "lengths", "bytes", "vlen-str", "scalar"],
)
def test_bad_fields_are_named(tmp_path, datasets, fields, message):
    path = write(tmp_path / "bad.h5", **datasets)
    with pytest.raises(FieldError, match=message):
        Hdf5Source(path, fields=fields)


def test_a_string_field_can_be_left_out(tmp_path):
    path = write(tmp_path / "f.h5", x=np.arange(3.0), names=np.array([b"a", b"b", b"c"]))
    assert Hdf5Source(path, fields=["x"]).fields == ("x",)


def test_missing_path_and_files_that_are_not_hdf5(tmp_path):
    with pytest.raises(SourceError, match=r"nope\.h5 does not exist"):
        Hdf5Source(tmp_path / "nope.h5")
    text = tmp_path / "notes.h5"
    text.write_text("not hdf5")
    with pytest.raises(SourceError, match=r"notes\.h5 is not an HDF5 file"):
        Hdf5Source(text)
    with pytest.raises(SourceError, match="is not a file"):
        Hdf5Source(tmp_path)


LAYOUTS = {
    "contiguous": {},
    "chunked": {"chunks": True},
    "gzip": {"chunks": True, "compression": "gzip", "compression_opts": 1, "shuffle": True},
}


def index_sets(n):
    """Sorted unique rows that reach every read path: loose rows, spans, spans with gaps, mixes."""
    window = 200 + np.sort(RNG.choice(120, 60, replace=False))
    runs = np.concatenate([np.arange(s, s + 3 * SLICE_MIN_ROWS) for s in (10, 700, 1500)])
    return {
        "random": np.sort(RNG.choice(n, 50, replace=False)),
        "dense-window": window,
        "runs-and-loose": np.unique(np.concatenate([runs, RNG.choice(n, 40, replace=False)])),
        "one": np.array([n - 1]),
        "all": np.arange(n),
        "none": np.array([], dtype=np.int64),
    }


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype, sample", [(np.float32, (5,)), (np.int16, (3, 4)), (np.float64, ())])
def test_read_equals_numpy_fancy_indexing(tmp_path, layout, dtype, sample):
    n = 2000
    array = (RNG.standard_normal((n,) + sample) * 100).astype(dtype)
    path = write(tmp_path / "r.h5", x=(array, LAYOUTS[layout]))
    source = Hdf5Source(path)
    for name, indices in index_sets(n).items():
        out = np.empty((len(indices),) + sample, dtype=dtype)
        source.read("x", indices.astype(np.int64), out)
        np.testing.assert_array_equal(out, array[indices], err_msg=f"{layout} {name}")


def test_read_into_a_strided_out_and_of_a_big_endian_dataset(tmp_path):
    array = np.arange(300, dtype=">f4").reshape(100, 3)
    path = write(tmp_path / "be.h5", x=(array, {"chunks": (10, 3)}))
    source = Hdf5Source(path)
    assert source.specs[0].dtype == np.dtype("=f4")  # a tensor cannot hold big-endian data
    indices = np.arange(0, 100, 3)
    out = np.zeros((2 * len(indices), 3), dtype=np.float32)[::2]
    source.read("x", indices, out)
    np.testing.assert_array_equal(out, array[indices])


def test_read_checks_the_request(tmp_path):
    source = Hdf5Source(write(tmp_path / "f.h5", x=np.zeros((10, 2))))
    with pytest.raises(ValueError, match=r"needs \(2, 2\)"):
        source.read("x", np.array([0, 1]), np.empty((2, 3)))
    with pytest.raises(IndexError, match="has 10 rows"):
        source.read("x", np.array([5, 10]), np.empty((2, 2)))
    with pytest.raises(FieldError, match="'y' is not served"):
        source.read("y", np.array([0]), np.empty((1, 2)))


def test_read_rows_serves_a_shuffled_batch_with_repeats_that_h5py_refuses(tmp_path):
    array = RNG.standard_normal((500, 4)).astype(np.float32)
    path = write(tmp_path / "s.h5", x=(array, {"chunks": (32, 4), "compression": "gzip"}))
    indices = np.array([400, 3, 3, 250, 17, 499, 0, 17, 251])
    with h5py.File(path, "r") as f, pytest.raises(TypeError, match="increasing order"):
        f["x"][indices]
    out = np.empty((len(indices), 4), dtype=np.float32)
    read_rows(Hdf5Source(path), "x", indices, out)
    np.testing.assert_array_equal(out, array[indices])


def test_plan_reads_every_row_once_and_slices_only_dense_groups():
    for _ in range(50):
        indices = np.unique(RNG.choice(5000, RNG.integers(1, 800)))
        spans, loose = _plan(indices, gap_rows=8)
        covered = [np.arange(a, b) for _, _, a, b in spans] + [loose]
        assert np.array_equal(np.sort(np.concatenate(covered)), np.arange(indices.size))
        for first, stop, a, b in spans:
            assert (first, stop) == (indices[a], indices[b - 1] + 1)
            assert b - a >= SLICE_MIN_ROWS and np.all(np.diff(indices[a:b]) <= 9)


def test_iter_chunks_covers_every_row_once_in_order(tmp_path):
    x, y = np.arange(53 * 2).reshape(53, 2), np.arange(53, dtype=np.uint8)
    source = Hdf5Source(write(tmp_path / "c.h5", x=(x, {"chunks": (8, 2)}), y=y))
    assert source.chunk_length == 8
    chunks = list(source.iter_chunks(16))
    assert [len(c["x"]) for c in chunks] == [16, 16, 16, 5]
    np.testing.assert_array_equal(np.concatenate([c["x"] for c in chunks]), x)
    np.testing.assert_array_equal(np.concatenate([c["y"] for c in chunks]), y)
    with pytest.raises(ValueError, match="at least 1 row"):
        next(source.iter_chunks(0))


def test_fingerprint_follows_the_file(tmp_path):
    path = write(tmp_path / "f.h5", x=np.zeros(10))
    source = Hdf5Source(path)
    first = source.fingerprint()
    source.read("x", np.arange(3), np.empty(3))
    assert source.fingerprint() == first == Hdf5Source(path).fingerprint()
    source.close()  # HDF5 refuses to truncate a file that is open in the same process
    write(path, x=np.ones(20))
    rewritten = source.fingerprint()
    assert rewritten != first
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))  # same size, later
    assert source.fingerprint() != rewritten


def _read_in_child(source, indices, conn):
    out = np.empty((len(indices), 3), dtype=np.float32)
    source.read("x", indices, out)
    conn.send((out, source.handle_pid, os.getpid()))
    conn.close()


def test_a_forked_child_opens_its_own_handle(tmp_path):
    array = RNG.standard_normal((300, 3)).astype(np.float32)
    source = Hdf5Source(write(tmp_path / "f.h5", x=(array, {"chunks": (16, 3), "compression": "gzip"})))
    parent_out = np.empty((5, 3), dtype=np.float32)
    source.read("x", np.arange(5), parent_out)
    parent_file = source.file
    assert source.handle_pid == os.getpid()

    indices = np.sort(RNG.choice(300, 40, replace=False))
    context = multiprocessing.get_context("fork")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_read_in_child, args=(source, indices, sender))
    child.start()
    assert receiver.poll(30), "the child did not answer: h5py hung after fork"
    rows, child_handle_pid, child_pid = receiver.recv()
    child.join(timeout=30)

    assert child.exitcode == 0
    assert child_handle_pid == child_pid != os.getpid()
    np.testing.assert_array_equal(rows, array[indices])
    # The parent's handle is untouched and still serves reads.
    assert source.file is parent_file and source.handle_pid == os.getpid()
    source.read("x", indices, rows)
    np.testing.assert_array_equal(rows, array[indices])


def test_pickled_source_reopens_and_close_releases_the_file(tmp_path):
    array = np.arange(20.0)
    source = Hdf5Source(write(tmp_path / "f.h5", x=array))
    handle = source.file
    clone = pickle.loads(pickle.dumps(source))
    assert clone.handle_pid is None
    out = np.empty(3)
    clone.read("x", np.array([1, 5, 19]), out)
    np.testing.assert_array_equal(out, array[[1, 5, 19]])
    source.close()
    assert not handle.id.valid and source.handle_pid is None
    source.read("x", np.array([2]), out[:1])  # reopens on use
    assert out[0] == 2.0 and source.handle_pid == os.getpid()


def test_chunk_cache_holds_several_large_compressed_chunks(tmp_path):
    chunk_bytes = 512 * 1024 * 4  # 2 MiB: the default 1 MiB cache could not hold one
    array = np.zeros((2048, 1024), dtype=np.float32)
    path = write(
        tmp_path / "big.h5",
        z=(array, {"chunks": (512, 1024), "compression": "gzip", "compression_opts": 1}),
        plain=(array, {"chunks": (512, 1024)}),
    )
    source = Hdf5Source(path)
    _, nslots, nbytes, _ = source.file.id.get_access_plist().get_cache()
    assert nbytes >= 4 * chunk_bytes > 1024 * 1024
    assert nslots >= 100 * (nbytes // chunk_bytes) and all(nslots % d for d in range(2, int(nslots**0.5) + 1))
    # Unfiltered chunks bypass the cache: HDF5 then reads only the rows asked for.
    source.read("plain", np.array([3]), np.empty((1, 1024), dtype=np.float32))
    assert source._dataset("plain").id.get_access_plist().get_chunk_cache()[1] == 0
    assert source._dataset("z").id.get_access_plist().get_chunk_cache()[1] == nbytes
