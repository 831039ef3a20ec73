"""TM105's repair: the file or sqlite3 connection a Dataset opened for every sample is kept on the
Dataset, opened on first use in each process (each DataLoader worker opens its own)."""

from __future__ import annotations

import importlib
import os
import pickle
import sqlite3
import textwrap

import h5py
import numpy as np
import pytest
import torch
from lint_fix_kit import repaired, run_module, unfixable
from torch.utils.data import DataLoader, default_collate, get_worker_info

from trainmedic.lint import get_rule, lint_source

SIGNALS = """
    import h5py
    import torch
    from torch.utils.data import Dataset

    class SignalDataset(Dataset):
        def __init__(self, h5_path, split="train"):
            self.h5_path = h5_path
            self.split = split
            with h5py.File(h5_path, "r") as f:
                self.length = len(f[split]["x"])

        def __len__(self):
            return self.length

        def __getitem__(self, idx):
            with h5py.File(self.h5_path, "r") as f:  # x and its label
                x = torch.from_numpy(f[self.split]["x"][idx])
                y = int(f[self.split]["y"][idx])
            return x, y
"""

LABELS = '''
    import sqlite3
    from torch.utils.data import Dataset


    class Labels(Dataset):
        """Labels and weights from an sqlite database, one row per sample."""

        def __init__(self, db_path, ids):
            self.db_path = db_path
            self.ids = ids

        def __len__(self):
            return len(self.ids)

        def __getitem__(self, idx):
            conn = sqlite3.connect(self.db_path)
            row = conn.execute("SELECT label, weight FROM samples WHERE id = ?", (self.ids[idx],)).fetchone()
            conn.close()
            return row
'''


@pytest.fixture
def signals(tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(24, 3)).astype("f4"), rng.integers(0, 5, size=24)
    path = tmp_path / "signals.h5"
    with h5py.File(path, "w") as f:
        f["train/x"], f["train/y"] = x, y
    return str(path)


@pytest.fixture
def database(tmp_path):
    path = tmp_path / "labels.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, label TEXT, weight REAL)")
        conn.executemany("INSERT INTO samples VALUES (?, ?, ?)", [(i, f"c{i % 3}", i / 7) for i in range(30)])
    return str(path)


def _imported(source, folder, name, monkeypatch):
    """The module ``source`` imported under ``name``: its classes pickle by reference, as a
    DataLoader started with "spawn" or "forkserver" pickles its Dataset."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(folder))
    return importlib.import_module(name)


def _through_workers(dataset, batch_size=4):
    """Batches read by a DataLoader with two forked workers, each with the process id of the
    worker that read it and the process id its dataset copy's handle was opened in."""

    def collate(samples):
        copy = get_worker_info().dataset
        kept = getattr(copy, "_file_pid", None) or getattr(copy, "_conn_pid", None)
        return default_collate(samples), os.getpid(), kept

    loader = DataLoader(
        dataset, batch_size=batch_size, num_workers=2, multiprocessing_context="fork", collate_fn=collate
    )
    return list(loader)


def test_an_hdf5_file_opened_in_getitem_is_kept_and_opened_once_per_process():
    after = repaired(SIGNALS, "TM105")
    assert after == textwrap.dedent(
        """
        import h5py
        import torch
        from torch.utils.data import Dataset
        import os

        class SignalDataset(Dataset):
            def __init__(self, h5_path, split="train"):
                self._file = None  # opened in __getitem__() on first use in each process
                self._file_pid = None
                self.h5_path = h5_path
                self.split = split
                with h5py.File(h5_path, "r") as f:
                    self.length = len(f[split]["x"])

            def __getstate__(self):
                # Open files and connections cannot be pickled: each DataLoader worker opens its own.
                return {**self.__dict__, "_file": None}

            def __len__(self):
                return self.length

            def __getitem__(self, idx):
                if self._file is None or self._file_pid != os.getpid():  # first use in this process
                    self._file = h5py.File(self.h5_path, "r")
                    self._file_pid = os.getpid()
                f = self._file  # x and its label
                x = torch.from_numpy(f[self.split]["x"][idx])
                y = int(f[self.split]["y"][idx])
                return x, y
        """
    )


def test_the_kept_hdf5_file_reads_the_same_samples_in_this_process_and_in_forked_workers(
    signals, tmp_path, monkeypatch
):
    broken = run_module(textwrap.dedent(SIGNALS), tmp_path / "broken")["SignalDataset"](signals)
    fixed = run_module(repaired(SIGNALS, "TM105"), tmp_path / "fixed")["SignalDataset"](signals)
    expected = [broken[i] for i in range(len(broken))]
    for i, (x, y) in enumerate(expected):
        got_x, got_y = fixed[i]
        assert torch.equal(got_x, x) and got_y == y
    assert fixed._file_pid == os.getpid()  # opened here, by the reads above

    # The parent's handle is open; each forked worker opens its own and reads the same rows.
    batches = _through_workers(fixed)
    assert torch.equal(torch.cat([x for (x, _), _, _ in batches]), torch.stack([x for x, _ in expected]))
    assert torch.equal(torch.cat([y for (_, y), _, _ in batches]), torch.tensor([y for _, y in expected]))
    workers = {pid for _, pid, _ in batches}
    assert len(workers) == 2 and os.getpid() not in workers
    assert all(kept == pid for _, pid, kept in batches)

    # Pickled for a spawned worker: the open handle stays behind, the copy opens its own.
    module = _imported(repaired(SIGNALS, "TM105"), tmp_path / "importable", "signals_fixed", monkeypatch)
    dataset = module.SignalDataset(signals)
    assert torch.equal(dataset[5][0], expected[5][0])
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(dataset.__dict__)  # what pickling would send without __getstate__
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy._file is None and torch.equal(copy[5][0], expected[5][0]) and copy[5][1] == expected[5][1]
    assert dataset._file.id.valid  # the original's handle is still open


def test_an_sqlite_connection_opened_and_closed_in_getitem_is_kept():
    after = repaired(LABELS, "TM105")
    assert after == textwrap.dedent(
        '''
        import sqlite3
        from torch.utils.data import Dataset
        import os


        class Labels(Dataset):
            """Labels and weights from an sqlite database, one row per sample."""

            def __init__(self, db_path, ids):
                self._conn = None  # opened in __getitem__() on first use in each process
                self._conn_pid = None
                self.db_path = db_path
                self.ids = ids

            def __getstate__(self):
                # Open files and connections cannot be pickled: each DataLoader worker opens its own.
                return {**self.__dict__, "_conn": None}

            def __len__(self):
                return len(self.ids)

            def __getitem__(self, idx):
                if self._conn is None or self._conn_pid != os.getpid():  # first use in this process
                    self._conn = sqlite3.connect(self.db_path)
                    self._conn_pid = os.getpid()
                conn = self._conn
                row = conn.execute("SELECT label, weight FROM samples WHERE id = ?", (self.ids[idx],)).fetchone()
                return row
        '''
    )


def test_the_kept_connection_reads_the_same_rows_in_this_process_and_in_forked_workers(
    database, tmp_path, monkeypatch
):
    ids = list(range(29, -1, -3))
    broken = run_module(textwrap.dedent(LABELS), tmp_path / "broken")["Labels"](database, ids)
    fixed = run_module(repaired(LABELS, "TM105"), tmp_path / "fixed")["Labels"](database, ids)
    expected = [broken[i] for i in range(len(ids))]
    assert [fixed[i] for i in range(len(ids))] == expected
    assert expected[0] == ("c2", 29 / 7)

    batches = _through_workers(fixed, batch_size=3)
    labels = [label for (label, _weight), _, _ in batches for label in label]
    weights = [w for (_label, weight), _, _ in batches for w in weight.tolist()]
    assert list(zip(labels, weights)) == expected
    assert all(kept == pid != os.getpid() for _, pid, kept in batches)

    module = _imported(repaired(LABELS, "TM105"), tmp_path / "importable", "labels_fixed", monkeypatch)
    dataset = module.Labels(database, ids)
    assert dataset[3] == expected[3]
    with pytest.raises(TypeError, match="sqlite3.Connection"):
        pickle.dumps(dataset.__dict__)
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy._conn is None and copy[4] == expected[4]


def test_an_open_used_inline_and_a_second_open_of_the_same_file_share_one_handle():
    after = repaired(
        """
        import os
        import h5py
        from torch.utils.data import Dataset

        class Frames(Dataset):
            def __len__(self):
                return 100

            def __getitem__(self, i):
                frame = h5py.File(os.path.join("data", "frames.h5"), "r")["frames"][i]
                with h5py.File(os.path.join("data", "frames.h5"), "r") as f:
                    label = f.attrs["labels"][i]
                return frame, label
        """,
        "TM105",
    )
    assert after == textwrap.dedent(
        """
        import os
        import h5py
        from torch.utils.data import Dataset

        class Frames(Dataset):
            _file = None  # opened in __getitem__() on first use in each process
            _file_pid = None

            def __getstate__(self):
                # Open files and connections cannot be pickled: each DataLoader worker opens its own.
                return {**self.__dict__, "_file": None}

            def __len__(self):
                return 100

            def __getitem__(self, i):
                if self._file is None or self._file_pid != os.getpid():  # first use in this process
                    self._file = h5py.File(os.path.join("data", "frames.h5"), "r")
                    self._file_pid = os.getpid()
                frame = self._file["frames"][i]
                f = self._file
                label = f.attrs["labels"][i]
                return frame, label
        """
    )


def test_a_file_and_a_connection_in_one_dataset_both_stay_out_of_the_pickle(
    signals, database, tmp_path, monkeypatch
):
    source = """
        import sqlite3
        import h5py
        import numpy as np
        from torch.utils.data import Dataset

        QUERY = "SELECT label FROM samples WHERE id = ?"

        class Both(Dataset):
            def __init__(self, h5_path, db_path):
                super().__init__()
                self.h5_path, self.db_path = h5_path, db_path

            def __len__(self):
                return 24

            def _label(self, idx):
                with sqlite3.connect(self.db_path) as conn:
                    conn.row_factory = sqlite3.Row
                    return conn.execute(QUERY, (idx,)).fetchone()["label"]

            def __getitem__(self, idx):
                x = np.asarray(h5py.File(self.h5_path, "r")["train"]["x"][idx])
                return x, self._label(idx)
    """
    after = repaired(source, "TM105")
    assert '        return {**self.__dict__, "_conn": None, "_file": None}\n' in after
    assert (
        "        super().__init__()\n        self._file = None  # opened in __getitem__() on first use"
        in after
    )
    assert "        self._conn = None  # opened in _label() on first use in each process\n" in after
    broken = run_module(textwrap.dedent(source), tmp_path / "broken")["Both"](signals, database)
    fixed = run_module(after, tmp_path / "fixed")["Both"](signals, database)
    for i in range(24):
        (bx, by), (fx, fy) = broken[i], fixed[i]
        np.testing.assert_array_equal(fx, bx)
        assert fy == by
    dataset = _imported(after, tmp_path / "importable", "both_fixed", monkeypatch).Both(signals, database)
    dataset[3]
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy._conn is None and copy._file is None and copy[7][1] == broken[7][1]


def test_opens_outside_a_dataset_and_other_kinds_of_files_are_left_with_a_reason():
    reasons = unfixable(
        """
        import json
        import os
        import sqlite3
        import h5py
        import numpy as np
        import pandas as pd
        import psycopg2
        from sqlalchemy import create_engine
        from sqlalchemy.orm import sessionmaker
        from tensorflow import keras
        from torch.utils.data import Dataset

        class Table(Dataset):
            def __init__(self, root, url):
                self.root = root
                self.SessionLocal = sessionmaker(bind=create_engine(url))

            def __len__(self):
                return 10

            def __getitem__(self, idx):
                with open(os.path.join(self.root, "classes.json")) as f:
                    classes = json.load(f)
                stats = np.load(os.path.join(self.root, "mean_std.npy"))
                meta = pd.read_csv(self.root + "/meta.csv")
                conn = psycopg2.connect(dsn="postgresql://db/train")
                session = self.SessionLocal()
                return classes, stats, meta, conn, session

        class Rows(keras.utils.Sequence):
            def __getitem__(self, i):
                with sqlite3.connect("rows.db") as db:
                    return db.execute("SELECT x FROM t WHERE id = ?", (i,)).fetchone()

        def batches(path, n, batch_size):
            while True:
                for start in range(0, n, batch_size):
                    with h5py.File(path, "r") as f:
                        x = f["x"][start:start + batch_size]
                    yield x

        for epoch in range(10):
            for step, x in enumerate(loader):
                conn = sqlite3.connect("runs.db")
                loss = model(x).mean()
                loss.backward()
                optimizer.step()
        """,
        "TM105",
    )
    assert reasons == [
        "a file object has a read position, so one kept across samples would need a seek before every read; "
        "read the file once in __init__ and keep its content",
        "np.load() loads the whole file into a new object every call; load it once in __init__ and keep it "
        "(not done automatically: the code may change the object it gets back)",
        "pd.read_csv() loads the whole file into a new object every call; load it once in __init__ and keep it "
        "(not done automatically: the code may change the object it gets back)",
        "psycopg2.connect() opens a connection to a database server, whose transactions and reconnects a kept "
        "connection must handle; open it once per worker by hand (if self.conn is None: ...) or load the rows "
        "once with trainmedic.data",
        "self.SessionLocal() opens a connection to a database server, whose transactions and reconnects a kept "
        "connection must handle; open it once per worker by hand (if self.conn is None: ...) or load the rows "
        "once with trainmedic.data",
        "Keras calls a Sequence's __getitem__ from several threads, and an sqlite3 connection works only in the "
        "thread that opened it; open one per thread by hand (threading.local) or load the rows once with "
        "trainmedic.data",
        "it is opened on every batch the generator batches() yields, not in a Dataset method whose object "
        "could keep it; open it once before the loop and pass the handle in",
        "it is opened on every training step, not in a Dataset method whose object could keep it; open it "
        "once before the loop and pass the handle in",
    ]


def test_handles_that_escape_are_closed_or_written_through_are_left_with_a_reason():
    reasons = unfixable(
        """
        import sqlite3
        import h5py
        from torch.utils.data import Dataset

        class Escapes(Dataset):
            def __len__(self):
                return 10

            def set_split(self, split):
                self.split_path = split

            def __getitem__(self, i):
                with h5py.File(self.path, "r") as f:
                    x = read_sample(f, i)
                with h5py.File(self.path, "r") as f:
                    self.last = f
                with h5py.File(self.path, "r") as f:
                    y = f["y"][i]
                    f.close()
                g = h5py.File(self.path)
                try:
                    z = g["z"][i]
                finally:
                    g.close()
                with h5py.File(self.split_path, "r") as f:
                    w = f["w"][i]
                with sqlite3.connect(self.db) as conn:
                    conn.execute("INSERT INTO seen VALUES (?)", (i,))
                with sqlite3.connect(self.db) as conn:
                    row = conn.execute(self.query, (i,)).fetchone()
                with h5py.File(self.path, "r") as f, open(self.notes[i]) as notes:
                    v = f["v"][i], notes.read()
                with h5py.File(self.path, "r") as f:
                    later = lambda: f["u"][i]
                return x, y, z, w, row, v, later, [h5py.File(self.path)["x"][j] for j in range(3)]
        """,
        "TM105",
    )
    assert reasons == [
        "the handle is passed to read_sample(), which may keep or close it",
        "the handle leaves the block (self.last = f), so it may be kept or closed",
        "the code closes it (f.close())",
        "g.close() is alone in its block (a `finally:`), which would be left empty; use `with ... as g:` and "
        "run the fix again",
        "self.split_path is set again in set_split(), so a handle opened once would keep reading the first file",
        "it runs a query that writes or changes the connection (INSERT INTO seen ...)",
        "it runs a query that is not written out here (self.query), which may write",
        "it is opened in a `with` of several items or without `as name`, which is not rewritten automatically",
        "f is used in a nested function or lambda, which may outlive the call",
        "no line can go before the open: it is inside a comprehension, which evaluates it once per element",
    ]


def test_a_with_over_several_lines_in_a_try_keeps_its_layout_and_strings():
    after = repaired(
        '''
        import h5py
        from torch.utils.data import Dataset

        class Long(Dataset):
            def __init__(self, path):
                """Samples of one file."""
                self.path = path
                # more setup later

            def __len__(self):
                return 4

            def __getitem__(self, i):
                try:
                    with h5py.File(
                        self.path,
                        "r",
                        rdcc_nbytes=1024**2,
                    ) as f:  # a bigger chunk cache
                        doc = """line one
            line two"""
                        return f["x"][i], doc
                except KeyError:
                    return None
        ''',
        "TM105",
    )
    assert after == textwrap.dedent(
        '''
        import h5py
        from torch.utils.data import Dataset
        import os

        class Long(Dataset):
            def __init__(self, path):
                """Samples of one file."""
                self._file = None  # opened in __getitem__() on first use in each process
                self._file_pid = None
                self.path = path
                # more setup later

            def __getstate__(self):
                # Open files and connections cannot be pickled: each DataLoader worker opens its own.
                return {**self.__dict__, "_file": None}

            def __len__(self):
                return 4

            def __getitem__(self, i):
                try:
                    if self._file is None or self._file_pid != os.getpid():  # first use in this process
                        self._file = h5py.File(
                            self.path,
                            "r",
                            rdcc_nbytes=1024**2,
                        )
                        self._file_pid = os.getpid()
                    f = self._file  # a bigger chunk cache
                    doc = """line one
            line two"""
                    return f["x"][i], doc
                except KeyError:
                    return None
        '''
    )


def test_a_class_that_controls_its_own_pickling_is_left_with_a_reason():
    [reason] = unfixable(
        """
        import h5py
        from torch.utils.data import Dataset

        class Custom(Dataset):
            def __getstate__(self):
                return {"path": self.path}

            def __len__(self):
                return 10

            def __getitem__(self, i):
                with h5py.File(self.path, "r") as f:
                    return f["x"][i]
        """,
        "TM105",
    )
    assert reason == (
        "Custom defines its own __getstate__; keep the handle by hand and leave it out of the pickled state "
        "(an open handle cannot be pickled)"
    )


def test_the_cards_example_is_repaired_and_lints_clean():
    rule = get_rule("TM105")
    after = repaired(rule.before, "TM105")
    assert "        self._file = None  # opened in __getitem__() on first use in each process\n" in after
    assert '        return f["x"][idx], f["y"][idx]\n' in after
    assert lint_source(after, "after.py", [rule]) == []
