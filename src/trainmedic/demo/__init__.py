"""The embedded demo: a small SQLite dataset and a training script that starves on it.

The script makes one database round trip per batch (on a GPU such a loop keeps it 8-30 % busy);
with ``--trainmedic-data`` it runs the same loop on ``trainmedic.data.load`` (one read of the
table, then batches gathered from RAM), the call the diagnosis recommends.
"""

from __future__ import annotations

import importlib.util
import shutil
import sqlite3
from pathlib import Path

import numpy as np

SCRIPT = Path(__file__).with_name("starved_train.py")
FEATURES = 256
CLASSES = 10
BATCH_SIZE = 256
QUERY = "SELECT features, label FROM samples"


def make_dataset(path: Path, rows: int = 20_000, seed: int = 0) -> Path:
    """Write ``rows`` samples (float32 features as a BLOB, an integer label) to an SQLite file."""
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
    labels = rng.integers(0, CLASSES, size=rows)
    features = centers[labels] + rng.normal(scale=2.0, size=(rows, FEATURES)).astype(np.float32)
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    with sqlite3.connect(tmp) as conn:
        conn.execute(
            "CREATE TABLE samples (id INTEGER PRIMARY KEY, features BLOB NOT NULL, label INTEGER NOT NULL)"
        )
        conn.executemany(
            "INSERT INTO samples (features, label) VALUES (?, ?)",
            ((features[i].tobytes(), int(labels[i])) for i in range(rows)),
        )
    conn.close()
    tmp.replace(path)
    return path


def copy_script(folder: Path) -> Path:
    """Copy the demo script into ``folder`` so that it reads as the user's own code."""
    target = folder / SCRIPT.name
    shutil.copyfile(SCRIPT, target)
    return target


def fixed_call(db: Path) -> str:
    """The ``data.load`` call the script's ``--trainmedic-data`` path makes, as source text."""
    return (
        f'data.load("sqlite:///{db}", query="{QUERY}", schema={{"features": ("float32", ({FEATURES},))}}, '
        f"batch_size={BATCH_SIZE})"
    )


def can_use_trainmedic_data() -> bool:
    """``data.load`` reads SQL through SQLAlchemy, an optional extra (``trainmedic[sql]``)."""
    return importlib.util.find_spec("sqlalchemy") is not None
