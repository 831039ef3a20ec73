"""Data-bound findings end in the exact data.load(...) call for the script's own source.

Each test reads a real file the way a starved script does, under the real source recorder; the
measured split is built by hand (``measure``); the suggested call is then run for real.
"""

from __future__ import annotations

import json
import os
import sqlite3

import h5py
import numpy as np
import pytest

from trainmedic import data
from trainmedic.run.diagnose import diagnose
from trainmedic.run.diagnose.suggest import suggest
from trainmedic.run.probe.source_facts import Sources
from trainmedic.run.probe.sources import SourceRecorder
from trainmedic.run.report.model import Report

STEPS = 20


def _data_bound(kind: str) -> dict:
    return {
        ("data", kind, "train.py:12", "train.py:10:next_batch"): 0.9 * STEPS,
        ("compute", "forward", "train.py:20", "train.py:18:forward"): 0.1 * STEPS,
    }


def _recorded(read, model_batch=None) -> Sources:
    recorder = SourceRecorder()
    recorder.install()
    try:
        read()
    finally:
        recorder.uninstall()
    return recorder.snapshot(model_batch=model_batch)


def _run_call(call: str, tmp_path) -> tuple:
    with eval(call, {"data": data}) as loader:  # the point: the suggestion runs as written
        assert loader.tier == "ram"
        return next(iter(loader))


@pytest.fixture
def signals_db(tmp_path):
    path = tmp_path / "signals.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, split TEXT, features BLOB, label INTEGER)")
    rng = np.random.default_rng(0)
    conn.executemany(
        "INSERT INTO samples VALUES (?, ?, ?, ?)",
        [
            (i, "val" if i % 4 == 0 else "train", rng.standard_normal(32, dtype=np.float32).tobytes(), i % 10)
            for i in range(400)
        ],
    )
    conn.commit()
    conn.close()
    return path


def _starve_on_random_batches(db):
    conn = sqlite3.connect(db)
    for _ in range(STEPS):
        rows = conn.execute("SELECT features, label FROM samples ORDER BY RANDOM() LIMIT ?", (64,)).fetchall()
        np.stack([np.frombuffer(f, dtype=np.float32) for f, _ in rows])
    conn.close()


def test_a_per_batch_sqlite_query_becomes_one_whole_table_data_load(completed, measure, signals_db, tmp_path):
    sources = _recorded(lambda: _starve_on_random_batches(signals_db), model_batch=64)
    report = diagnose(
        measure(_data_bound("database"), [0.05] * STEPS, sources=sources), ["train.py"], completed
    )
    top = report.findings[0]
    assert top.kind == "database"
    assert top.suggestion == (
        f'data.load("sqlite:///{signals_db}", query="SELECT features, label FROM samples", '
        'schema={"features": ("float32", (32,))}, batch_size=64)'
    )
    assert "Dropped the per-batch `ORDER BY RANDOM()` and `LIMIT ?`" in top.fix
    assert "`for features, label in loader:`" in top.fix
    features, label = _run_call(top.suggestion, tmp_path)
    assert tuple(features.shape) == (64, 32) and str(features.dtype) == "torch.float32"
    assert tuple(label.shape) == (64,)
    # The suggestion travels in the JSON report and back (an optional key of trainmedic.report/1).
    back = Report.from_dict(json.loads(report.to_json()))
    assert back.findings[0].suggestion == top.suggestion


def test_ids_drawn_from_a_split_keep_the_split_as_the_filter(completed, measure, signals_db, tmp_path):
    def read():
        conn = sqlite3.connect(signals_db)
        ids = [r[0] for r in conn.execute("SELECT id FROM samples WHERE split = ?", ("train",))]
        rng = np.random.default_rng(0)
        for _ in range(STEPS):
            batch = [int(i) for i in rng.choice(ids, 32, replace=False)]
            conn.execute(
                f"SELECT features, label FROM samples WHERE id IN ({','.join('?' * 32)})", batch
            ).fetchall()
        conn.close()

    sources = _recorded(read, model_batch=32)
    report = diagnose(
        measure(_data_bound("database"), [0.05] * STEPS, sources=sources), ["train.py"], completed
    )
    top = report.findings[0]
    assert "query=\"SELECT features, label FROM samples WHERE split = 'train'\"" in top.suggestion
    assert "Kept `split = 'train'` from the query that listed the ids" in top.fix
    features, _ = _run_call(top.suggestion, tmp_path)
    assert features.shape[0] == 32


def test_a_query_that_cannot_be_rewritten_gets_a_placeholder_and_says_so(completed, measure, signals_db):
    def read():
        conn = sqlite3.connect(signals_db)
        for step in range(STEPS):
            conn.execute("SELECT label FROM samples WHERE id % 7 = ?", (step % 7,)).fetchall()
        conn.close()

    sources = _recorded(read)
    top = diagnose(
        measure(_data_bound("database"), [0.05] * STEPS, sources=sources), ["train.py"], completed
    ).findings[0]
    assert 'query="SELECT label FROM samples WHERE <fill in: which rows to train on>"' in top.suggestion
    assert "Fill in the WHERE clause" in top.fix
    assert "batch_size" not in top.suggestion  # unknown: data.load's default applies


def test_per_sample_hdf5_reads_become_one_data_load_of_the_fields_read(completed, measure, tmp_path):
    path = tmp_path / "receiver.h5"
    with h5py.File(path, "w") as f:
        f["y_received"] = np.random.default_rng(0).standard_normal((256, 14, 2), dtype=np.float32)
        f["bits"] = np.zeros((256, 14, 2), np.uint8)
        f["meta/snr_db"] = np.arange(4.0)  # not a per-sample field: never read below

    def read():
        with h5py.File(path, "r") as f:
            for step in range(4):
                for i in range(step * 16, step * 16 + 16):  # one sample at a time, like a Dataset
                    f["y_received"][i]
                    f["bits"][i]

    sources = _recorded(read, model_batch=16)
    report = diagnose(measure(_data_bound("hdf5"), [0.05] * STEPS, sources=sources), ["train.py"], completed)
    top = report.findings[0]
    assert (
        top.suggestion
        == f'data.load("{os.path.abspath(path)}", fields=["y_received", "bits"], batch_size=16)'
    )
    assert "`for y_received, bits in loader:`" in top.fix
    y, bits = _run_call(top.suggestion, tmp_path)
    assert tuple(y.shape) == (16, 14, 2) and tuple(bits.shape) == (16, 14, 2)


def test_a_dataloader_over_a_dataset_is_loaded_by_the_callers_name(completed, measure):
    import torch

    class Rows(torch.utils.data.Dataset):
        def __len__(self):
            return 100

        def __getitem__(self, i):
            return torch.full((4,), float(i)), i % 2

    def read():
        train_set = Rows()
        torch.utils.data.DataLoader(train_set, batch_size=20)

    sources = _recorded(read)
    top = diagnose(
        measure(_data_bound("collate"), [0.05] * STEPS, sources=sources), ["train.py"], completed
    ).findings[0]
    assert top.suggestion == "data.load(train_set, batch_size=20)"
    x, y = next(iter(eval(top.suggestion, {"data": data, "train_set": Rows()})))
    assert tuple(x.shape) == (20, 4) and tuple(y.shape) == (20,)


def test_no_recorded_source_means_no_call_and_the_old_advice(completed, measure):
    top = diagnose(measure(_data_bound("hdf5"), [0.05] * STEPS), ["train.py"], completed).findings[0]
    assert top.suggestion is None
    assert "data.load" not in top.fix


def test_a_script_already_on_trainmedic_data_is_told_about_its_tier(completed, measure):
    from trainmedic.run.probe.source_facts import LoaderUse

    sources = Sources(loaders=(LoaderUse("/data/big.h5", "stream", 256, "cpu"),))
    top = diagnose(
        measure(_data_bound("loader"), [0.05] * STEPS, sources=sources), ["train.py"], completed
    ).findings[0]
    assert top.title.startswith("Waiting for trainmedic.data batches (tier stream)")
    assert 'tier="ram"' in top.fix and top.suggestion is None


def test_on_a_gpu_the_call_asks_for_the_device():
    from trainmedic.run.probe.source_facts import Hdf5File

    sources = Sources(hdf5=(Hdf5File("/d/x.h5", 1, (("x", 3),)),), model_batch=8)
    assert (
        suggest("hdf5", sources, "cuda").call
        == 'data.load("/d/x.h5", fields=["x"], batch_size=8, device="cuda")'
    )
