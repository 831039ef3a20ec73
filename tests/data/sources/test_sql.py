"""SqlSource against real SQLite files and a real PostgreSQL server (tests/data/conftest.py)."""

from __future__ import annotations

import contextlib
import gc
import re
import socket
import sqlite3
import sys
import uuid

import numpy as np
import pytest
import torch
from sqlalchemy import event
from sqlalchemy.engine import Engine, make_url

from trainmedic.data.sources.sql import SqlSource
from trainmedic.errors import FieldError, MissingExtraError, SourceError

PASSWORD = "s3cret-Pw"


def sqlite_db(tmp_path, ddl: str, rows: list[tuple], name: str = "data.db") -> str:
    path = tmp_path / name
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(ddl)
        marks = ", ".join("?" * len(rows[0])) if rows else ""
        conn.executemany(f"INSERT INTO t VALUES ({marks})", rows)
    return f"sqlite:///{path}"


def read_all(source: SqlSource, rows: int = 1000) -> dict[str, np.ndarray]:
    chunks = list(source.iter_chunks(rows))
    return {name: np.concatenate([c[name] for c in chunks]) for name in chunks[0]}


@contextlib.contextmanager
def executed_statements():
    """Every statement any SQLAlchemy engine sends, with the class of the cursor it used."""
    seen: list[tuple[str, str]] = []

    def record(conn, cursor, statement, parameters, context, executemany):
        seen.append((statement, type(cursor).__name__))

    event.listen(Engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(Engine, "before_cursor_execute", record)


def assert_no_password(exc: BaseException) -> None:
    chain = [exc, exc.__cause__, exc.__context__]
    assert not any(PASSWORD in str(e) for e in chain if e is not None)


# -- SQLite ----------------------------------------------------------------------------------


def test_numeric_columns_round_trip_with_inferred_and_declared_dtypes(tmp_path):
    rows = [(i, i * 0.5, i % 2, -i) for i in range(10)]
    url = sqlite_db(tmp_path, "CREATE TABLE t (id INTEGER, x REAL, flag INTEGER, y INTEGER)", rows)
    source = SqlSource(url, "SELECT id, x, flag, y FROM t ORDER BY id", schema={"flag": "bool", "y": "int16"})
    assert (source.length, source.specs, source.random_access) == (None, (), False)
    data = read_all(source)
    assert [(s.name, s.dtype, s.shape) for s in source.specs] == [
        ("id", np.int64, ()),
        ("x", np.float64, ()),
        ("flag", np.bool_, ()),
        ("y", np.int16, ()),
    ]
    np.testing.assert_array_equal(data["id"], np.arange(10))
    np.testing.assert_array_equal(data["x"], np.arange(10) * 0.5)
    np.testing.assert_array_equal(data["flag"], np.arange(10) % 2 == 1)
    assert data["y"].dtype == np.int16 and source.length == 10


def test_specs_are_known_after_the_first_chunk_and_length_after_the_last(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER, b REAL)", [(i, float(i)) for i in range(10)])
    source = SqlSource(url, "SELECT a, b FROM t")
    assert source.chunk_rows() > 0 and source.nbytes is None
    chunks = source.iter_chunks(4)
    first = next(chunks)
    assert source.fields == ("a", "b") and source.length is None
    rest = list(chunks)
    assert [len(c["a"]) for c in [first, *rest]] == [4, 4, 2]
    assert source.length == 10 and source.nbytes == 10 * 16
    np.testing.assert_array_equal(np.concatenate([first["a"]] + [c["a"] for c in rest]), np.arange(10))


def test_a_full_read_of_10k_rows_in_small_chunks_is_one_statement(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (id INTEGER, v REAL)", [(i, i / 3) for i in range(10_000)])
    query = "SELECT id, v FROM t ORDER BY id"
    with executed_statements() as seen:
        source = SqlSource(url, query)
        chunks = list(source.iter_chunks(256))
    assert [s for s, _ in seen] == [query]
    assert len(chunks) == 40 and all(len(c["id"]) == 256 for c in chunks[:-1])
    np.testing.assert_array_equal(np.concatenate([c["id"] for c in chunks]), np.arange(10_000))
    assert source.length == 10_000


def test_blob_column_decodes_with_the_declared_dtype_and_shape(tmp_path):
    x = np.arange(5 * 12, dtype=np.float32).reshape(5, 3, 4)
    url = sqlite_db(tmp_path, "CREATE TABLE t (x BLOB, y INTEGER)", [(x[i].tobytes(), i) for i in range(5)])
    source = SqlSource(url, "SELECT x, y FROM t", schema={"x": ("float32", (3, 4))})
    data = read_all(source, rows=2)
    assert source.specs[0].shape == (3, 4) and source.specs[0].dtype == np.float32
    np.testing.assert_array_equal(data["x"], x)
    assert data["x"].flags.writeable


def test_blob_without_a_schema_entry_says_how_to_declare_it(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (features BLOB)", [(b"\0" * 8,)])
    with pytest.raises(FieldError, match=r"'features'.*schema=\{'features': \(dtype, shape\)\}"):
        list(SqlSource(url, "SELECT features FROM t").iter_chunks(10))


def test_blob_of_the_wrong_size_names_field_row_and_byte_counts(tmp_path):
    rows = [(np.zeros(4, np.float32).tobytes(),)] * 5 + [(np.zeros(3, np.float32).tobytes(),)]
    url = sqlite_db(tmp_path, "CREATE TABLE t (x BLOB)", rows)
    source = SqlSource(url, "SELECT x FROM t", schema={"x": ("float32", (4,))})
    with pytest.raises(FieldError) as err:
        list(source.iter_chunks(4))
    assert "'x'" in str(err.value) and "row 5 " in str(err.value)
    assert "12 bytes" in str(err.value) and "16 bytes" in str(err.value)


def test_null_names_field_and_row_and_suggests_coalesce(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER, b REAL)", [(1, 1.0), (2, None), (3, 3.0)])
    with pytest.raises(FieldError, match=r"'b' is NULL in row 1 .*COALESCE\(b, 0\).*WHERE b IS NOT NULL"):
        list(SqlSource(url, "SELECT a, b FROM t").iter_chunks(10))


def test_string_column_is_rejected_by_name_and_fields_can_leave_it_out(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER, name TEXT)", [(1, "x"), (2, "y")])
    with pytest.raises(FieldError, match=r"'name'.*unicode strings.*fields=.*SELECT list"):
        list(SqlSource(url, "SELECT a, name FROM t").iter_chunks(10))
    data = read_all(SqlSource(url, "SELECT a, name FROM t", fields=["a"]))
    assert list(data) == ["a"]


def test_fields_select_and_reorder_and_an_unknown_name_lists_the_columns(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER, b REAL, c INTEGER)", [(1, 2.0, 3)])
    source = SqlSource(url, "SELECT * FROM t", fields=["c", "a"])
    assert list(read_all(source)) == ["c", "a"] and source.fields == ("c", "a")
    with pytest.raises(FieldError, match=r"'z'.*\['a', 'b', 'c'\]"):
        list(SqlSource(url, "SELECT * FROM t", fields=["z"]).iter_chunks(10))


def test_schema_naming_a_column_the_query_lacks_is_refused(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER)", [(1,)])
    with pytest.raises(FieldError, match=r"schema= declares 'b'.*\['a'\]"):
        list(SqlSource(url, "SELECT a FROM t", schema={"b": "int64"}).iter_chunks(10))


def test_floats_after_ints_in_a_later_chunk_ask_for_a_declared_dtype(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (v NUMERIC)", [(1,), (2,), (2.5,)])
    with pytest.raises(FieldError, match=r"'v'.*int64.*float64.*rows 2-2.*schema=\{'v': 'float64'\}"):
        list(SqlSource(url, "SELECT v FROM t").iter_chunks(2))
    data = read_all(SqlSource(url, "SELECT v FROM t", schema={"v": "float64"}), rows=2)
    np.testing.assert_array_equal(data["v"], [1.0, 2.0, 2.5])


def test_a_missing_query_says_to_pass_one(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER)", [(1,)])
    for query in (None, "  "):
        with pytest.raises(SourceError, match=r'pass query="SELECT \.\.\."'):
            SqlSource(url, query)


def test_a_query_without_rows_is_an_error_that_shows_the_query(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER)", [(1,)])
    with pytest.raises(SourceError, match=r"no rows.*SELECT a FROM t WHERE a > 5"):
        list(SqlSource(url, "SELECT a FROM t WHERE a > 5").iter_chunks(10))


def test_a_bad_table_name_gives_the_database_message_and_the_query(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER)", [(1,)])
    with pytest.raises(SourceError, match=r"no such table: nope") as err:
        list(SqlSource(url, "SELECT a FROM nope").iter_chunks(10))
    assert url in str(err.value) and "SELECT a FROM nope" in str(err.value)


def test_a_missing_sqlite_file_is_named_and_not_created(tmp_path):
    path = tmp_path / "missing.db"
    with pytest.raises(SourceError, match="does not exist"):
        list(SqlSource(f"sqlite:///{path}", "SELECT 1").iter_chunks(10))
    assert not path.exists()


def test_connections_close_when_iteration_stops_early(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER)", [(i,) for i in range(10)])
    source = SqlSource(url, "SELECT a FROM t")
    chunks = source.iter_chunks(3)
    next(chunks)
    assert source._conn is not None
    chunks.close()
    assert source._conn is None and source.length is None
    assert len(read_all(source)["a"]) == 10  # usable again after close


def test_description_and_fingerprint_hide_the_password():
    source = SqlSource(f"postgresql+psycopg://me:{PASSWORD}@db.example:5432/train", "SELECT 1 AS a")
    assert PASSWORD not in source.description and "me:***@db.example" in source.description
    assert PASSWORD not in source.fingerprint() and PASSWORD not in repr(source)
    other_password = SqlSource("postgresql+psycopg://me:other@db.example:5432/train", "SELECT 1 AS a")
    other_query = SqlSource("postgresql+psycopg://me@db.example:5432/train", "SELECT 2 AS a")
    assert source.fingerprint() == other_password.fingerprint() != other_query.fingerprint()


def test_a_sqlite_fingerprint_changes_when_the_file_does(tmp_path):
    url = sqlite_db(tmp_path, "CREATE TABLE t (a INTEGER)", [(1,)])
    before = SqlSource(url, "SELECT a FROM t").fingerprint()
    with contextlib.closing(sqlite3.connect(tmp_path / "data.db")) as conn, conn:
        conn.executemany("INSERT INTO t VALUES (?)", [(i,) for i in range(1000)])
    assert SqlSource(url, "SELECT a FROM t").fingerprint() != before


def test_an_unparseable_url_is_a_source_error_without_the_password():
    with pytest.raises(SourceError, match="not a database URL") as err:
        SqlSource(f"me:{PASSWORD}@db.example/train", "SELECT 1")
    assert_no_password(err.value)


def test_a_missing_driver_names_the_postgres_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "psycopg", None)  # as if psycopg were not installed
    monkeypatch.setitem(sys.modules, "psycopg2", None)
    for scheme in ("postgresql+psycopg", "postgresql"):
        with pytest.raises(MissingExtraError, match=r"trainmedic\[postgres\]") as err:
            SqlSource(f"{scheme}://me:{PASSWORD}@127.0.0.1:1/train", "SELECT 1")
        assert err.value.extra == "postgres"
        assert_no_password(err.value)


# -- PostgreSQL ------------------------------------------------------------------------------


class Pg:
    """A fresh schema per test, written ``s.`` in SQL; setup SQL runs outside SQLAlchemy."""

    def __init__(self, url: str, schema: str, conn) -> None:
        self.url, self.schema, self.conn = url, schema, conn

    def q(self, sql: str) -> str:
        return re.sub(r"\bs\.", f"{self.schema}.", sql)

    def run(self, sql: str, params=None) -> None:
        self.conn.execute(self.q(sql), params)

    def many(self, sql: str, rows) -> None:
        with self.conn.cursor() as cursor:
            cursor.executemany(self.q(sql), rows)


@pytest.fixture
def pg(postgres_url):
    psycopg = pytest.importorskip("psycopg")
    conninfo = make_url(postgres_url).set(drivername="postgresql").render_as_string(hide_password=False)
    schema = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        try:
            yield Pg(postgres_url, schema, conn)
        finally:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")


def with_password(url: str) -> str:
    parsed = make_url(url)
    return url if parsed.password else parsed.set(password=PASSWORD).render_as_string(hide_password=False)


@pytest.mark.postgres
def test_postgres_numeric_bytea_and_bool_columns_round_trip(pg):
    x = np.random.default_rng(0).standard_normal((20, 8)).astype(np.float32)
    pg.run("CREATE TABLE s.t (id int8, small int2, w float8, r real, ok bool, name text, x bytea)")
    pg.many(
        "INSERT INTO s.t VALUES (%s, %s, %s, %s, %s, %s, %s)",
        [(i, i, i / 4, i / 2, i % 3 == 0, f"a{i}", x[i].tobytes()) for i in range(20)],
    )
    source = SqlSource(
        pg.url,
        pg.q("SELECT id, small, w, r, ok, x FROM s.t WHERE name LIKE 'a%' ORDER BY id"),
        schema={"r": "float32", "x": ("float32", (8,))},
    )
    data = read_all(source, rows=7)
    assert [(s.name, s.dtype, s.shape) for s in source.specs] == [
        ("id", np.int64, ()),
        ("small", np.int64, ()),
        ("w", np.float64, ()),
        ("r", np.float32, ()),
        ("ok", np.bool_, ()),
        ("x", np.float32, (8,)),
    ]
    np.testing.assert_array_equal(data["id"], np.arange(20))
    np.testing.assert_array_equal(data["ok"], np.arange(20) % 3 == 0)
    np.testing.assert_array_equal(data["x"], x)


@pytest.mark.postgres
def test_postgres_real_arrays_declared_and_inferred(pg):
    v = np.arange(30, dtype=np.float32).reshape(10, 3) / 8
    pg.run("CREATE TABLE s.t (id int4, v real[], m int4[][])")
    pg.many(
        "INSERT INTO s.t VALUES (%s, %s, %s)",
        [(i, v[i].tolist(), [[i, i + 1], [i + 2, i + 3]]) for i in range(10)],
    )
    query = pg.q("SELECT v, m FROM s.t ORDER BY id")
    inferred = SqlSource(pg.url, query)
    data = read_all(inferred, rows=4)
    assert [(s.dtype, s.shape) for s in inferred.specs] == [(np.float64, (3,)), (np.int64, (2, 2))]
    np.testing.assert_array_equal(data["v"], v)
    declared = SqlSource(pg.url, query, schema={"v": ("float32", (3,)), "m": "int32"})
    data = read_all(declared, rows=4)
    assert [(s.dtype, s.shape) for s in declared.specs] == [(np.float32, (3,)), (np.int32, (2, 2))]
    np.testing.assert_array_equal(data["v"], v)
    np.testing.assert_array_equal(data["m"][:, 1, 1], np.arange(10) + 3)


@pytest.mark.postgres
def test_postgres_ragged_array_names_field_and_row(pg):
    pg.run("CREATE TABLE s.t (id int4, v real[])")
    pg.many("INSERT INTO s.t VALUES (%s, %s)", [(i, [1.0] * (4 if i != 6 else 5)) for i in range(10)])
    source = SqlSource(pg.url, pg.q("SELECT v FROM s.t ORDER BY id"))
    with pytest.raises(FieldError, match=r"'v' is ragged: rows have length 4 .*row 6 .*length 5"):
        list(source.iter_chunks(4))
    declared = SqlSource(pg.url, pg.q("SELECT v FROM s.t ORDER BY id"), schema={"v": ("float32", (5,))})
    with pytest.raises(FieldError, match=r"length 5 \(declared in schema=\).*row 0 .*length 4"):
        list(declared.iter_chunks(4))


@pytest.mark.postgres
def test_postgres_full_read_is_one_statement_on_a_server_side_cursor(pg):
    pg.run("CREATE TABLE s.t (id int4, v real[])")
    pg.run("INSERT INTO s.t SELECT i, ARRAY[i, i * 2]::real[] FROM generate_series(0, 9999) i")
    query = pg.q("SELECT id, v FROM s.t ORDER BY id")
    with executed_statements() as seen:
        source = SqlSource(pg.url, query, schema={"v": "float32"})
        chunks = list(source.iter_chunks(500))
    assert seen == [(query, "ServerCursor")]
    assert len(chunks) == 20 and source.length == 10_000
    ids = np.concatenate([c["id"] for c in chunks])
    np.testing.assert_array_equal(ids, np.arange(10_000))
    np.testing.assert_array_equal(np.concatenate([c["v"] for c in chunks])[:, 1], ids * 2)


@pytest.mark.postgres
@pytest.mark.filterwarnings("error")  # a named cursor left open warns when collected
def test_postgres_cursor_closes_on_early_stop_and_on_a_mid_stream_error(pg):
    query = "SELECT i, i::numeric / 4 AS d FROM generate_series(1, 5000) i"
    source = SqlSource(pg.url, query)
    chunks = source.iter_chunks(100)
    np.testing.assert_array_equal(next(chunks)["d"][:2], [0.25, 0.5])
    chunks.close()
    assert source._conn is None and source.length is None
    with pytest.raises(SourceError, match=r"reading row 2 of the result failed.*division by zero"):
        list(SqlSource(pg.url, "SELECT 1 / (i - 3) AS x FROM generate_series(1, 5) i").iter_chunks(1))
    gc.collect()


@pytest.mark.postgres
def test_postgres_dates_and_nulls_are_refused_by_name(pg):
    pg.run("CREATE TABLE s.t (id int4, day date, score float8)")
    pg.run("INSERT INTO s.t VALUES (0, '2024-01-01', 1.0), (1, '2024-01-02', NULL)")
    with pytest.raises(FieldError, match=r"'day'.*datetime.*SELECT list"):
        list(SqlSource(pg.url, pg.q("SELECT id, day FROM s.t")).iter_chunks(10))
    with pytest.raises(FieldError, match=r"'score' is NULL in row 1"):
        list(SqlSource(pg.url, pg.q("SELECT score FROM s.t ORDER BY id")).iter_chunks(10))


@pytest.mark.postgres
def test_postgres_bad_table_gives_the_message_and_the_masked_url(pg):
    url = with_password(pg.url)
    with pytest.raises(SourceError) as err:
        list(SqlSource(url, pg.q("SELECT a FROM s.nope")).iter_chunks(10))
    text = str(err.value)
    assert "does not exist" in text and "nope" in text
    assert make_url(url).render_as_string(hide_password=True) in text
    assert_no_password(err.value)


@pytest.mark.postgres
def test_postgres_bad_credentials_are_a_source_error_without_the_password(pg):
    url = make_url(pg.url).set(username="nobody_" + uuid.uuid4().hex[:6], password=PASSWORD)
    with pytest.raises(SourceError, match="could not connect") as err:
        list(SqlSource(url.render_as_string(hide_password=False), "SELECT 1 AS a").iter_chunks(10))
    assert url.username in str(err.value)
    assert_no_password(err.value)


def test_an_unreachable_port_is_a_source_error():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: refused
        url = f"postgresql+psycopg://postgres:{PASSWORD}@127.0.0.1:{port}/postgres"
        with pytest.raises(SourceError, match=rf"could not connect to .*:{port}") as err:
            list(SqlSource(url, "SELECT 1 AS a").iter_chunks(10))
    assert_no_password(err.value)


def test_a_query_served_from_its_disk_cache_keeps_its_fields_and_rows(tmp_path):
    import sqlite3

    from trainmedic import data

    db = tmp_path / "rows.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (a REAL, b INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?)", [(i * 0.5, i) for i in range(1000)])
    url = f"sqlite:///{db}"
    for run in ("built", "reused"):
        loader = data.load(
            url,
            query="SELECT a, b FROM t",
            batch_size=1000,
            shuffle=False,
            tier="disk",
            cache_dir=tmp_path / "cache",
        )
        assert f"{run} the cache" in loader.explain()
        assert loader.fields == ("a", "b") and len(loader) == 1
        a, b = next(iter(loader))
        assert torch.equal(b, torch.arange(1000)) and torch.equal(a, torch.arange(1000) * 0.5)
