"""TM105: a file or database connection opened for every sample or every step."""

import ast
import textwrap

from trainmedic.lint import get_rule, lint_source
from trainmedic.lint.context import ModuleContext


def test_hdf5_reopened_in_getitem(lint):
    source = """
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
                with h5py.File(self.h5_path, "r") as f:
                    x = torch.from_numpy(f[self.split]["x"][idx])
                    y = int(f[self.split]["y"][idx])
                return x, y
    """
    [(line, message)] = lint(source, "TM105")
    assert line == 17
    assert message.startswith(
        "h5py.File(self.h5_path) opens the same file on every SignalDataset.__getitem__ call"
    )
    assert "lazily once per worker" in message and "data.load(" in message and not message.endswith(".")


def test_seed_003_database_session_per_item_through_a_helper(lint):
    source = """
        import psycopg2
        from sqlalchemy import create_engine
        from sqlalchemy.orm import sessionmaker
        from torch.utils.data import Dataset

        class TriangulationDataset(Dataset):
            def __init__(self, url, ids):
                self.ids = ids
                self.SessionLocal = sessionmaker(bind=create_engine(url))

            def __len__(self):
                return len(self.ids)

            def _get_db_session(self):
                return self.SessionLocal()

            def __getitem__(self, idx):
                session = self._get_db_session()
                row = session.execute(QUERY, {"id": self.ids[idx]}).fetchone()
                session.close()
                return encode(row)

        class LabelDataset(Dataset):
            def __len__(self):
                return 10

            def __getitem__(self, i):
                conn = psycopg2.connect(dsn=DSN)
                return conn.cursor().execute("SELECT label FROM t WHERE id = %s", (i,))
    """
    found = lint(source, "TM105")
    assert [line for line, _ in found] == [16, 29]
    assert "self.SessionLocal() opens a new database connection" in found[0][1]
    assert "through self._get_db_session() at line 19" in found[0][1]
    assert found[1][1].startswith("psycopg2.connect() opens a new database connection on every LabelDataset")


def test_same_label_file_and_table_read_per_sample(lint):
    source = """
        import json
        import os
        import numpy as np
        import pandas as pd
        from PIL import Image
        from torch.utils.data import Dataset

        class ImageDataset(Dataset):
            def __init__(self, root, files):
                self.root, self.files = root, files

            def __len__(self):
                return len(self.files)

            def __getitem__(self, idx):
                image = Image.open(os.path.join(self.root, self.files[idx])).convert("RGB")
                with open(os.path.join(self.root, "classes.json")) as f:
                    classes = json.load(f)
                meta = pd.read_csv(self.root + "/meta.csv")
                table = pd.read_sql("SELECT * FROM labels", self.engine)
                row = pd.read_sql(f"SELECT * FROM labels WHERE id = {idx}", self.engine)
                stats = np.load(os.path.join(self.root, "mean_std.npy"))
                return image, classes[self.files[idx]], meta, stats, table, row
    """
    found = lint(source, "TM105")
    assert [line for line, _ in found] == [18, 20, 21, 23]
    assert "pd.read_sql('SELECT * FROM labels') runs the same query on every ImageDataset" in found[2][1]


def test_one_file_per_sample_and_lazy_handles_are_fine(lines):
    source = """
        import os
        import h5py
        import numpy as np
        import sqlite3
        import torch
        from torch.utils.data import Dataset

        class Shards(Dataset):
            def __init__(self, paths, db_path):
                self.paths = paths
                self.db_path = db_path
                self.h5 = None
                self.conn = None
                self.labels = np.load("labels.npy")

            def __len__(self):
                return len(self.paths)

            def _connect(self):
                return sqlite3.connect(self.db_path)

            def __getitem__(self, idx):
                if self.h5 is None:
                    self.h5 = h5py.File("features.h5", "r")
                if not hasattr(self, "db"):
                    self.db = self._connect()
                self.conn = self.conn or sqlite3.connect(self.db_path)
                self.h6 = self.h6 if self.h6 is not None else h5py.File("more.h5", "r")
                path = self.paths[idx]
                x = np.load(path)
                with open(f"{path}.txt") as f:
                    caption = f.read()
                mm = np.load("big.npy", mmap_mode="r")[idx]
                t = torch.load(os.path.join("cache", f"{idx:06d}.pt"))
                with open("debug.log", "a") as log:
                    log.write(str(idx))
                return x, caption, mm, t, self.h5["f"][idx]

        class PerWorker(Dataset):
            def __len__(self):
                return 10

            def __getitem__(self, i):
                info = torch.utils.data.get_worker_info()
                wid = info.id if info else 0
                if wid not in self.handles:
                    self.handles[wid] = h5py.File(self.path, "r")
                return self.handles[wid]["x"][i]

        class NotADataset:
            def __getitem__(self, key):
                with open("table.json") as f:
                    return f.read()[key]
    """
    assert lines(source, "TM105") == []


def test_reopened_every_training_step(lint):
    source = """
        import h5py
        import numpy as np
        import sqlite3

        def get_batch(indices):
            with h5py.File("/data/train.h5", "r") as f:
                return f["x"][np.sort(indices)]

        for epoch in range(10):
            for step in range(steps_per_epoch):
                x = get_batch(order[step * bs:(step + 1) * bs])
                conn = sqlite3.connect("runs.db")
                loss = model(x).mean()
                loss.backward()
                optimizer.step()
                for shard in shards:
                    extra = np.load(shard)
                if step % 100 == 0:
                    table = np.load("/data/eval.npy")
    """
    found = lint(source, "TM105")
    assert [line for line, _ in found] == [7, 13]
    assert "called every step at line 12" in found[0][1]
    assert found[1][1].startswith("sqlite3.connect() opens a new database connection on every training step")


def test_files_that_change_every_step_or_open_once_are_fine(lines):
    source = """
        import numpy as np
        import torch

        data = np.load("train.npy")
        for epoch in range(epochs):
            ckpt = torch.load("last.pt")
            for i, path in enumerate(files):
                batch = torch.from_numpy(np.load(path))
                nxt = np.load(next(file_iter))
                loss = model(batch).mean()
                loss.backward()
                optimizer.step()
                with open("losses.txt", "a") as f:
                    f.write(str(loss.item()))
    """
    assert lines(source, "TM105") == []


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        import h5py
        from torch.utils.data import Dataset

        class D(Dataset):
            def __getitem__(self, i):
                a = h5py.File(self.path)  # noqa: TM105
                b = h5py.File(self.path)
                return a["x"][i], b["x"][i]
    """)
    assert [v.line for v in lint_source(source) if v.code == "TM105"] == [8]


def test_keras_sequence_and_batch_generators_reopen_per_batch(lint):
    source = """
        import h5py
        import numpy as np
        from tensorflow import keras

        class H5Batches(keras.utils.Sequence):
            def __init__(self, path, batch_size):
                self.path, self.batch_size = path, batch_size

            def __getitem__(self, i):
                with h5py.File(self.path, "r") as f:
                    return f["x"][i * self.batch_size:(i + 1) * self.batch_size]

        def batches(path, n, batch_size):
            while True:
                for start in range(0, n, batch_size):
                    with h5py.File(path, "r") as f:
                        x = f["x"][start:start + batch_size]
                    yield x

        def epochs(path, n, batch_size):
            while True:
                with h5py.File(path, "r") as f:
                    for start in range(0, n, batch_size):
                        yield f["x"][start:start + batch_size]

        def shards(paths):
            for p in paths:
                with h5py.File(p, "r") as f:
                    yield f["x"][:]
    """
    found = lint(source, "TM105")
    assert [line for line, _ in found] == [11, 17]
    assert "on every H5Batches.__getitem__ call" in found[0][1]
    assert "on every batch the generator batches() yields" in found[1][1]


def test_guard_that_does_not_keep_the_handle_is_still_flagged(lines):
    source = """
        import h5py
        from torch.utils.data import Dataset

        class H5Dataset(Dataset):
            def __init__(self, path):
                self.path = path
                self.dataset = None

            def __len__(self):
                return 100

            def __getitem__(self, idx):
                if self.dataset is None:
                    image = h5py.File(self.path, "r")["images"][str(idx)]
                return image
    """
    assert lines(source, "TM105") == [15]


def test_ensure_open_helpers_and_one_off_step_functions_are_fine(lines):
    source = """
        import tempfile
        import h5py
        import torch
        from torch.utils.data import Dataset

        class Lazy(Dataset):
            def __init__(self, path):
                self.path = path
                self._h5 = None

            def __len__(self):
                return 10

            def _ensure_open(self):
                if self._h5 is not None:
                    return
                self._h5 = h5py.File(self.path, "r")

            def __getitem__(self, i):
                self._ensure_open()
                return self._h5["x"][i]

        def test_save_and_reload(model, x):
            model(x).sum().backward()
            optimizer.step()
            reference = torch.load("reference.pt")
            with tempfile.TemporaryFile() as f:
                torch.save(model, f)
                f.seek(0)
                copy = torch.load(f)
            assert torch.equal(copy(x), reference)
    """
    assert lines(source, "TM105") == []


def _scope_walks(source: str) -> tuple[int, int]:
    """(findings, how many times TM105 walked a scope or loop body)."""
    context = ModuleContext(ast.parse(source), source, "train.py")
    walk, walks = context.walk_scope, []

    def counting(scope):
        walks.append(scope)
        return walk(scope)

    context.walk_scope = counting  # type: ignore[method-assign]
    return len(list(get_rule("TM105").check(context))), len(walks)


def test_each_loop_and_scope_is_analysed_once_however_many_opens_it_holds():
    head = textwrap.dedent("""
        import json
        import torch

        for step, x in enumerate(loader):
            loss = model(x)
            loss.backward()
            optimizer.step()
    """)
    body = "".join(
        f"    cfg{i} = json.load(open('config.json'))\n    v{i + 1} = compute(x, cfg{i}) + other(v{i})\n"
        for i in range(40)
    )
    few = head + body[: body.index("    cfg5")]
    (found_few, walks_few), (found_many, walks_many) = _scope_walks(few), _scope_walks(head + body)
    assert (found_few, found_many) == (5, 40)
    assert walks_few == walks_many
