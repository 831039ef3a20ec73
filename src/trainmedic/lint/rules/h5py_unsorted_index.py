"""TM104: an h5py dataset indexed with a shuffled index array that was never sorted."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from trainmedic.lint.context import ModuleContext
from trainmedic.lint.fixers.unique_index import fix
from trainmedic.lint.h5py_reads import shuffled_reads
from trainmedic.lint.model import Rule


def check(context: ModuleContext) -> Iterator[tuple[ast.AST, str]]:
    for sub, index, source in shuffled_reads(context):
        shown = ast.unparse(index)
        yield (
            sub,
            (
                f"h5py dataset {ast.unparse(sub.value)} is indexed with {shown}, which is shuffled ({source}) "
                f"and not sorted: h5py raises TypeError: Indexing elements must be in increasing order; "
                f"read the sorted, unique indices and put the rows back in order (u, inv = np.unique({shown}, "
                "return_inverse=True), then dset[u][inv]; np.sort alone fails on repeated indices), read a "
                "contiguous block, "
                "or serve shuffled batches with trainmedic.data.load"
            ),
        )


RULE = Rule(
    code="TM104",
    name="h5py-unsorted-index",
    summary="An h5py dataset indexed with a shuffled (permuted, randomly chosen) index array that is not sorted.",
    why=(
        "h5py fancy indexing needs indices in increasing order (and unique); a shuffled index fails\n"
        "at the first batch with `TypeError: Indexing elements must be in increasing order` (a Keras\n"
        "generator that shuffles its indices and reads `f['y_received'][batch]` does this).\n"
        "Even sorted, a long list of scattered indices is slow: h5py reads them one selection each,\n"
        "and a per-batch HDF5 read like this has measured 37 s a step with the GPU at 0 %."
    ),
    fix=(
        "Sort the batch's indices before reading (`np.sort(idx)`), and reorder the rows after if\n"
        "the order matters; `trainmedic lint --fix` does both, repeated indices included:\n"
        "`u, inv = np.unique(idx, return_inverse=True)`, then `dset[u][inv]`. Or shuffle whole\n"
        "blocks and read contiguous slices; or load the file once with trainmedic.data\n"
        "(`data.load(path, fields=[...], batch_size=...)`), which serves shuffled batches from RAM or VRAM."
    ),
    before="""
import h5py
import numpy as np

with h5py.File("signals.h5", "r") as f:
    perm = np.random.permutation(len(f["y"]))
    for i in range(0, len(perm), batch_size):
        batch = perm[i:i + batch_size]
        y = f["y"][batch]
""",
    after="""
import h5py
import numpy as np

with h5py.File("signals.h5", "r") as f:
    perm = np.random.permutation(len(f["y"]))
    for i in range(0, len(perm), batch_size):
        batch = np.sort(perm[i:i + batch_size])
        y = f["y"][batch]
""",
    check=check,
    fixer=fix,
)
