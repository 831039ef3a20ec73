"""The source recorder on real files: SQLite, SQLAlchemy, HDF5, NumPy, Zarr, DataLoader, data.load."""

from __future__ import annotations

import os
import sqlite3
import sys

import h5py
import numpy as np
import pytest
import torch

from trainmedic import data
from trainmedic.run.probe import sources as sources_module
from trainmedic.run.probe.queries import MAX_TEXTS, lift_literals
from trainmedic.run.probe.source_facts import Column
from trainmedic.run.probe.sources import SourceRecorder


@pytest.fixture
def recorder():
    rec = SourceRecorder()
    rec.install()
    yield rec
    rec.uninstall()


@pytest.fixture
def database(tmp_path):
    path = tmp_path / "signals.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, split TEXT, features BLOB, label INTEGER)")
    rows = [
        (i, "val" if i % 5 == 0 else "train", np.full(16, i, np.float32).tobytes(), i % 3) for i in range(200)
    ]
    conn.executemany("INSERT INTO samples VALUES (?, ?, ?, ?)", rows)
    conn.commit()
    conn.close()
    return path


def test_sqlite_queries_are_counted_with_which_parameters_vary(database, recorder):
    conn = sqlite3.connect(str(database))
    ids = [r[0] for r in conn.execute("SELECT id FROM samples WHERE split = ?", ("train",)).fetchall()]
    rng = np.random.default_rng(0)
    for _ in range(5):
        batch = [int(i) for i in rng.choice(ids, 8, replace=False)]
        marks = ",".join("?" * len(batch))
        conn.execute(
            f"SELECT features, label FROM samples WHERE split = ? AND id IN ({marks})", ["train", *batch]
        ).fetchall()
    conn.close()

    (db,) = recorder.snapshot().databases
    assert db.url == f"sqlite:///{os.path.abspath(database)}"
    assert (db.connects, db.via) == (1, "sqlite3")
    hot, ids_query = db.queries
    assert hot.count == 5 and hot.text.startswith(
        "SELECT features, label FROM samples WHERE split = ? AND id IN (?,"
    )
    assert hot.params[0] == "train"
    assert hot.varying == frozenset(range(1, 9))  # the ids change every batch, the split never
    assert hot.caller == os.path.abspath(__file__)
    # The second run peeked at one row on a read-only connection: a BLOB of 16 float32 values.
    assert hot.columns == (Column("features", "blob", 64), Column("label", "integer", 0))
    assert (ids_query.text, ids_query.params, ids_query.count) == (
        "SELECT id FROM samples WHERE split = ?",
        ("train",),
        1,
    )


def test_cursor_execute_is_recorded_and_executemany_is_not(database, recorder):
    conn = sqlite3.connect(database)
    cursor = conn.cursor()
    for offset in (0, 16, 32):
        cursor.execute("SELECT features FROM samples LIMIT ? OFFSET ?", (16, offset)).fetchall()
    conn.executemany("UPDATE samples SET label = ? WHERE id = ?", [(1, 1), (2, 2)])
    conn.close()
    (db,) = recorder.snapshot().databases
    (query,) = db.queries
    assert (query.count, query.params, query.varying) == (3, (16, 0), frozenset({1}))


def test_formatted_sql_is_counted_by_its_template(database, recorder):
    conn = sqlite3.connect(database)
    for start in range(0, 100, 2):
        conn.execute(f"SELECT features FROM samples WHERE id BETWEEN {start} AND {start + 1}").fetchall()
    conn.close()
    (db,) = recorder.snapshot().databases
    top = db.queries[0]
    assert top.lifted and top.text == "SELECT features FROM samples WHERE id BETWEEN ? AND ?"
    assert top.count == 50 - MAX_TEXTS
    assert top.varying == frozenset({0, 1})


def test_lift_literals_keeps_identifiers_and_unquotes_strings():
    assert lift_literals("SELECT x1 FROM t2 WHERE id IN (3, 17) AND name = 'o''k' AND v > 1.5") == (
        "SELECT x1 FROM t2 WHERE id IN (?, ?) AND name = ? AND v > ?",
        (3, 17, "o'k", 1.5),
    )


def test_a_users_own_factory_is_kept_and_not_recorded(database, recorder):
    class Mine(sqlite3.Connection):
        pass

    conn = sqlite3.connect(database, factory=Mine)
    assert type(conn) is Mine
    conn.execute("SELECT 1").fetchall()
    conn.close()
    assert recorder.snapshot().databases == ()


def test_sqlalchemy_engines_are_recorded_through_their_event(database, recorder):
    import sqlalchemy as sa

    engine = sa.create_engine(f"sqlite:///{database}")
    with engine.connect() as conn:
        for offset in (0, 10):
            conn.execute(sa.text("SELECT label FROM samples LIMIT 10 OFFSET :o"), {"o": offset}).fetchall()
    engine.dispose()
    (db,) = recorder.snapshot().databases
    assert (db.url, db.via) == (f"sqlite:///{os.path.abspath(database)}", "sqlalchemy")
    query = next(q for q in db.queries if "OFFSET" in q.text)
    assert query.count == 2 and query.varying


def test_trainmedic_datas_own_reads_are_left_out(database, recorder, tmp_path):
    path = tmp_path / "x.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.arange(40, dtype=np.float32).reshape(20, 2)
    np.save(tmp_path / "y.npy", np.arange(20))
    for source, kwargs in (
        (f"sqlite:///{database}", {"query": "SELECT label FROM samples"}),
        (str(path), {}),
        (str(tmp_path / "y.npy"), {}),
    ):
        with data.load(source, batch_size=4, progress=False, cache_dir=tmp_path, **kwargs) as loader:
            next(iter(loader))
    snapshot = recorder.snapshot()
    assert (snapshot.databases, snapshot.numpy) == ((), ())
    assert [f.path for f in snapshot.hdf5] == [os.path.abspath(path)]  # only the write above
    assert snapshot.hdf5[0].datasets == ()
    assert [(u.source, u.tier, u.batch_size) for u in snapshot.loaders] == [
        (f"sqlite:///{database}", "ram", 4),
        (str(path), "ram", 4),
        (str(tmp_path / "y.npy"), "ram", 4),
    ]


def test_hdf5_files_and_the_datasets_opened_in_them(recorder, tmp_path):
    path = tmp_path / "signals.h5"
    with h5py.File(path, "w") as f:
        f["x"] = np.zeros((10, 3), np.float32)
        f.create_group("meta")["y"] = np.zeros(10)
    with h5py.File(path, "r") as f:
        for i in range(3):
            f["x"][i]
            f["meta"]["y"][i]
        f["/x"][0]
    record = next(r for r in recorder.snapshot().hdf5 if r.path == os.path.abspath(path))
    assert record.opens == 2
    assert record.datasets == (("x", 4), ("meta/y", 3))


def test_numpy_and_zarr_paths(recorder, tmp_path):
    import zarr

    np.save(tmp_path / "a.npy", np.arange(4))
    np.load(tmp_path / "a.npy")
    np.load(str(tmp_path / "a.npy"), mmap_mode="r")
    store = zarr.open(str(tmp_path / "s.zarr"), mode="w", shape=(4,), dtype="f4")
    store[:] = 1
    snapshot = recorder.snapshot()
    assert [(u.path, u.count, u.mapped) for u in snapshot.numpy] == [(str(tmp_path / "a.npy"), 2, False)]
    assert [u.path for u in snapshot.zarr] == [str(tmp_path / "s.zarr")]


def test_dataloader_datasets_are_named_as_the_caller_holds_them(recorder):
    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return torch.tensor([float(i)])

    train_rows = Rows()
    torch.utils.data.DataLoader(train_rows, batch_size=4, num_workers=0)
    torch.utils.data.DataLoader(Rows(), batch_size=3)
    uses = recorder.snapshot().datasets
    assert [(u.variable, u.batch_size, u.length) for u in uses] == [("train_rows", 4, 12), (None, 3, 12)]
    assert uses[0].type_name.endswith("Rows")


def test_uninstall_restores_every_patched_callable(database):
    import sqlalchemy
    import zarr
    from torch.utils.data import DataLoader

    before = (
        sqlite3.connect,
        np.load,
        h5py.File.__init__,
        h5py.Group.__getitem__,
        zarr.open,
        sqlalchemy.create_engine,
        DataLoader.__init__,
        data.load,
    )
    rec = SourceRecorder()
    rec.install()
    assert sqlite3.connect is not before[0] and data.load is not before[-1]
    rec.uninstall()
    after = (
        sqlite3.connect,
        np.load,
        h5py.File.__init__,
        h5py.Group.__getitem__,
        zarr.open,
        sqlalchemy.create_engine,
        DataLoader.__init__,
        data.load,
    )
    assert after == before
    assert sources_module._active is None


def test_modules_imported_after_install_are_recorded_too(tmp_path, monkeypatch):
    # A module the recorder hooks, imported for the first time while it runs: sqlite3 stands in,
    # removed from sys.modules so that the import really happens again.
    saved = {
        name: sys.modules.pop(name)
        for name in list(sys.modules)
        if name == "sqlite3" or name.startswith("sqlite3.")
    }
    rec = SourceRecorder()
    try:
        rec.install()
        import sqlite3 as fresh

        assert fresh is not saved["sqlite3"]
        conn = fresh.connect(tmp_path / "late.db")
        conn.execute("SELECT 1").fetchall()
        conn.close()
        assert [d.url for d in rec.snapshot().databases] == [f"sqlite:///{tmp_path / 'late.db'}"]
    finally:
        rec.uninstall()
        sys.modules.update(saved)
