"""data.build_cache: Ray tasks over a source's partitions write the very cache data.load builds.

Every build here is compared with a serial ``data.load(..., tier="disk")`` of the same source:
same folder name, same files, byte-identical field files, same manifest (CRC-32 blocks included;
only the build time differs), and a later ``data.load`` reuses the Ray-built cache. The sources
are big enough that 4 MiB CRC blocks straddle partition boundaries.
"""

import itertools
import json
import sqlite3
import uuid
import zlib

import numpy as np
import pytest

from trainmedic import data
from trainmedic.data.partition_write import OwnedBlocks, block_crcs
from trainmedic.data.partitions import split_rows
from trainmedic.errors import DataError, FieldError, SourceError

ray = pytest.importorskip("ray")
h5py = pytest.importorskip("h5py")


@pytest.fixture(scope="module")
def local_ray():
    # One local Ray for the whole module: starting one costs seconds.
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def assert_same_cache(built, ray_root, serial_root):
    [serial] = [p for p in serial_root.iterdir() if not p.name.startswith(".")]
    assert built.folder.parent == ray_root and built.folder.name == serial.name
    assert sorted(p.name for p in built.folder.iterdir()) == sorted(p.name for p in serial.iterdir())
    ours, theirs = (json.loads((f / "manifest.json").read_text()) for f in (built.folder, serial))
    for manifest in (ours, theirs):
        del manifest["built"], manifest["build_seconds"]
    assert ours == theirs
    for entry in ours["fields"]:
        assert (built.folder / entry["file"]).read_bytes() == (serial / entry["file"]).read_bytes()
    assert not [p for p in ray_root.iterdir() if p.name.startswith(".")]  # no build folder left
    assert not list(ray_root.glob("*.lock"))  # the build lock data.load's builders share is released


def assert_reused(source, root, **kwargs):
    loader = data.load(source, tier="disk", cache_dir=root, shuffle=False, **kwargs)
    assert "reused the cache" in loader.explain()
    return loader


def compare(tmp_path, source, partitions, partition_by=None, **kwargs):
    built = data.build_cache(
        source,
        cache_dir=tmp_path / "ray",
        partitions=partitions,
        partition_by=partition_by,
        progress=False,
        **kwargs,
    )
    data.load(source, tier="disk", cache_dir=tmp_path / "serial", progress=False, **kwargs)
    assert_same_cache(built, tmp_path / "ray", tmp_path / "serial")
    assert_reused(source, tmp_path / "ray", **kwargs)
    return built


@pytest.mark.ray
def test_hdf5_gzip_chunks_match_the_serial_cache_and_are_reused(tmp_path, local_ray):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((20000, 64)).astype(np.float32)  # 5.1 MB: two 4 MiB blocks
    with h5py.File(tmp_path / "s.h5", "w") as f:
        f.create_dataset("x", data=x, chunks=(256, 64), compression="gzip")
        f.create_dataset("y", data=np.arange(20000), chunks=(1000,), compression="gzip")
    built = compare(tmp_path, tmp_path / "s.h5", partitions=5)
    assert (built.rows, built.bytes, built.partitions, built.reused) == (20000, 20000 * 264, 5, False)
    assert built.reason == "no cache yet"
    again = data.build_cache(tmp_path / "s.h5", cache_dir=tmp_path / "ray")
    assert (again.reused, again.folder, again.partitions) == (True, built.folder, 0)
    assert ray.is_initialized()  # the caller's Ray is left running


@pytest.mark.ray
def test_zarr_chunks_match_the_serial_cache(tmp_path, local_ray):
    zarr = pytest.importorskip("zarr")
    group = zarr.open_group(str(tmp_path / "s.zarr"), mode="w")
    x = np.random.default_rng(1).standard_normal((9000, 128)).astype(np.float32)
    group.create_array("x", shape=x.shape, chunks=(500, 128), dtype="float32")[:] = x
    group.create_array("label", shape=(9000,), chunks=(700,), dtype="int32")[:] = np.arange(9000) % 7
    assert compare(tmp_path, tmp_path / "s.zarr", partitions=3, fields=["x", "label"]).partitions == 3


@pytest.mark.ray
def test_npy_folder_matches_and_a_changed_file_is_rebuilt(tmp_path, local_ray):
    src = tmp_path / "src"
    src.mkdir()
    np.save(src / "x.npy", np.random.default_rng(2).standard_normal((200_000, 3)))  # 24 B rows
    np.save(src / "y.npy", np.arange(200_000, dtype=np.int16))
    compare(tmp_path, src, partitions=7)
    np.save(src / "y.npy", np.arange(200_000, dtype=np.int16)[::-1].copy())
    rebuilt = data.build_cache(src, cache_dir=tmp_path / "ray", partitions=2)
    assert not rebuilt.reused and rebuilt.reason == "the source changed since the cache was built"
    loader = assert_reused(src, tmp_path / "ray", batch_size=200_000)
    assert np.array_equal(next(iter(loader))[1].numpy(), np.arange(200_000, dtype=np.int16)[::-1])


def sqlite_table(path, n=6000):
    x = np.random.default_rng(3).standard_normal((n, 200)).astype(np.float32)  # 4.8 MB of BLOBs
    k = np.arange(n)
    ids = 10**6 + np.where(k < n // 3, k, k + n * 2 // 3)  # a gap: one key range holds no rows
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, w REAL, x BLOB)")
        conn.executemany(
            "INSERT INTO t VALUES (?, ?, ?, ?)",
            [(int(i), f"n{i % 3}", float(i) / 8, x[r].tobytes()) for r, i in enumerate(ids)],
        )
    return ids


SQL = {"query": "SELECT id, w, x FROM t ORDER BY id", "schema": {"x": ("float32", (200,))}}


@pytest.mark.ray
def test_sqlite_key_ranges_match_the_serial_cache(tmp_path, local_ray):
    sqlite_table(tmp_path / "s.db")
    url = f"sqlite:///{tmp_path / 's.db'}"
    built = compare(tmp_path, url, partitions=5, partition_by="id", **SQL)
    assert built.rows == 6000 and built.partitions == 3  # the two empty key ranges are skipped


@pytest.mark.postgres
@pytest.mark.ray
def test_postgres_key_ranges_match_the_serial_cache(tmp_path, local_ray, postgres_url):
    psycopg = pytest.importorskip("psycopg")
    from sqlalchemy.engine import make_url

    conninfo = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    schema = "t_" + uuid.uuid4().hex[:12]
    x = np.random.default_rng(4).standard_normal((3000, 400)).astype(np.float32)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            conn.execute(f"CREATE TABLE {schema}.t (id int8 PRIMARY KEY, w float8, x bytea)")
            with conn.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {schema}.t VALUES (%s, %s, %s)",
                    [(3 * i, i / 4, x[i].tobytes()) for i in range(3000)],
                )
            query = f"SELECT id, w, x FROM {schema}.t ORDER BY id"
            built = compare(
                tmp_path,
                postgres_url,
                partitions=3,
                partition_by="id",
                query=query,
                schema={"x": ("float32", (400,))},
            )
            assert built.partitions == 3
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


@pytest.mark.ray
@pytest.mark.parametrize(
    "query, key, message",
    [
        ("SELECT id, w FROM t ORDER BY id", None, "partition_by= is missing"),
        ("SELECT id, w FROM t ORDER BY rowid", "rowid", "'rowid' is not a column of the query's result"),
        ("SELECT id, w FROM t ORDER BY w", "id", "does not end with ORDER BY id"),
        ("SELECT w, id FROM t ORDER BY w", "w", "holds float values"),
        ("SELECT id, name, w FROM t ORDER BY name", "name", "holds str values"),
        ("SELECT id / 3 AS k, w FROM t ORDER BY k", "k", "'k' is not unique"),
    ],
)
def test_a_bad_partition_key_is_named_with_the_fix(tmp_path, local_ray, query, key, message):
    sqlite_table(tmp_path / "s.db", n=300)
    with pytest.raises(SourceError, match=message):
        data.build_cache(
            f"sqlite:///{tmp_path / 's.db'}", query=query, partition_by=key, cache_dir=tmp_path / "c"
        )
    assert not (tmp_path / "c").exists() or not list((tmp_path / "c").iterdir())


def test_partition_by_and_in_memory_sources_are_refused_where_they_do_not_apply(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((10, 2)))
    with pytest.raises(SourceError, match="leave partition_by out"):
        data.build_cache(tmp_path / "x.npy", partition_by="id", cache_dir=tmp_path / "c")
    with pytest.raises(SourceError, match="lives in this process's memory"):
        data.build_cache({"x": np.zeros((10, 2))}, cache_dir=tmp_path / "c")
    with pytest.raises(DataError, match="workers=0 is not allowed"):
        data.build_cache(tmp_path / "x.npy", workers=0)


@pytest.mark.ray
def test_a_failing_partition_is_named_and_nothing_is_published(tmp_path, local_ray):
    ids = sqlite_table(tmp_path / "s.db")
    bad = int(ids[4500])  # NULL w in the last of 3 partitions
    with sqlite3.connect(tmp_path / "s.db") as conn:
        conn.execute("UPDATE t SET w = NULL WHERE id = ?", (bad,))
    with pytest.raises(FieldError) as caught:
        data.build_cache(
            f"sqlite:///{tmp_path / 's.db'}", partition_by="id", partitions=5, cache_dir=tmp_path / "c", **SQL
        )
    text = str(caught.value)
    assert "partition 2 of 3 (rows 4000-5999, id 1008000..1009999)" in text and "field 'w' is NULL" in text
    assert "Nothing was published" in text
    assert list((tmp_path / "c").iterdir()) == []  # neither a cache nor a .tmp- folder


def test_owned_blocks_and_read_back_ones_give_the_serial_crcs(tmp_path):
    rng = np.random.default_rng(5)
    payload = rng.integers(0, 256, 1000, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(payload)
    expected = [zlib.crc32(payload[i : i + 64]) for i in range(0, 1000, 64)]
    for _ in range(50):
        cuts = [0, *sorted(rng.choice(np.arange(1, 1000), rng.integers(1, 12), replace=False)), 1000]
        owned = {}
        for a, b in itertools.pairwise(cuts):
            blocks = OwnedBlocks(a, b, 1000, block=64)
            for piece in np.array_split(np.arange(a, b), 3):  # fed in uneven pieces
                blocks.update(memoryview(payload[piece[0] : piece[-1] + 1] if piece.size else b""))
            found = blocks.finish()
            assert all(a <= k * 64 and min(k * 64 + 64, 1000) <= b for k in found)  # only whole blocks
            assert not owned.keys() & found.keys()
            owned.update(found)
        assert block_crcs(tmp_path / "f", 1000, owned, block=64) == expected


def test_partitions_are_whole_chunks():
    parts = split_rows(10_050, 256, 4)
    assert [p.start % 256 for p in parts] == [0, 0, 0, 0] and parts[-1].stop == 10_050
    assert sum(p.rows for p in parts) == 10_050
    assert len(split_rows(300, 256, 8)) == 2  # never more partitions than chunks
