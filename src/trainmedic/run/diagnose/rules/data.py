"""data: the step waits for its next batch.

Where the script's source was recorded, the advice ends in the exact ``data.load(...)`` call
that serves the same data from memory (``diagnose/suggest.py``); a script already on
``trainmedic.data`` is told what its tier costs instead.
"""

from __future__ import annotations

import math

from trainmedic.run.diagnose.rules.base import Advice, Context, at, is_keras
from trainmedic.run.diagnose.suggest import Suggestion, suggest
from trainmedic.units import format_seconds


def advise(kind: str, ctx: Context) -> Advice:
    if kind == "loader" and ctx.sources is not None and ctx.sources.loaders:
        return _tiered(ctx)
    if kind == "loader" and ctx.loader_items is not None and ctx.loader_items.measured:
        return _workers(ctx)
    advice = _advise(kind, ctx)
    suggestion = suggest(kind, ctx.sources, ctx.device)
    if suggestion is None:
        return advice
    return Advice(
        advice.title,
        f"{advice.fix} {_using(kind, suggestion, is_keras(ctx))}",
        advice.factor,
        suggestion.call,
    )


def _using(kind: str, suggestion: Suggestion, keras: bool = False) -> str:
    if keras:
        loop = f"`model.fit({_keras_feed(suggestion.fields)}, epochs=...)`"
    elif suggestion.fields:
        loop = f"`for {', '.join(suggestion.fields)} in loader:`"
    else:
        loop = "`for batch in loader:`"
    if kind == "transform":
        what = (
            "trainmedic.data serves the stored samples in one call (suggested below), one gather per batch:"
        )
    else:
        what = "trainmedic.data does that in one call (suggested below):"
    text = (
        f"{what} `from trainmedic import data`, `loader = data.load(...)` once before training, "
        f"then {loop} instead of the per-step read."
    )
    return " ".join([text, *suggestion.notes])


def _keras_feed(fields: tuple[str, ...]) -> str:
    """``loader.keras(...)`` naming the model's inputs and targets among the loader's fields."""
    if len(fields) < 2:
        return "loader.keras()"
    inputs = f'"{fields[0]}"' if len(fields) == 2 else "[" + ", ".join(f'"{f}"' for f in fields[:-1]) + "]"
    return f'loader.keras(inputs={inputs}, targets="{fields[-1]}")'


def _tiered(ctx: Context) -> Advice:
    use = ctx.sources.loaders[-1]  # type: ignore[union-attr]
    if use.tier in ("stream", "disk"):
        how = (
            "reads storage while training"
            if use.tier == "stream"
            else "gathers from a memory-mapped cache on disk"
        )
        fix = (
            f'The {use.tier} tier {how}. If the data fits in RAM, pass tier="ram" to data.load (or free '
            'memory for tier="auto"); on a GPU, device="cuda" lets the VRAM tier gather on the device. '
            "`loader.explain()` shows the sizes behind the choice."
        )
        factor = 5.0
    else:
        fix = (
            f"The batches already come from {'VRAM' if use.tier == 'vram' else 'RAM'}: the wait is the gather "
            'itself, one index per field per batch. A larger batch amortises it; on a GPU, device="cuda" '
            "serves from VRAM with no host-to-device copy."
        )
        factor = 2.0
    return Advice(f"Waiting for trainmedic.data batches (tier {use.tier}){at(ctx)}", fix, factor)


#: What a fix of a worker-bound loader is credited with at most (the wait need not reach zero).
WORKERS_MAX_FACTOR = 20.0
#: Per-sample CPU work in the pipeline moved off the loop, vectorised or cached.
PIPELINE_FACTOR = 4.0


def _workers(ctx: Context) -> Advice:
    """A DataLoader whose worker processes cannot keep up with the step (probe/worker_items.py)."""
    items = ctx.loader_items
    assert items is not None
    workers, batch_s = items.num_workers, items.seconds_per_batch
    wait = ctx.seconds_per_step
    rest = max(ctx.step_median_s - wait, 1e-6)  # the step without the wait
    needed = max(workers + 1, math.ceil(batch_s / rest))
    usable = max(workers, items.cores - 1)  # a core stays with the training process
    raised = min(needed, usable)
    left = max(0.0, batch_s / raised - rest)
    factor = min(WORKERS_MAX_FACTOR, wait / left) if left > 0 else WORKERS_MAX_FACTOR
    if raised == workers:
        factor = PIPELINE_FACTOR  # no more workers to add: what a cheaper transform buys
    code = (
        f"{items.function}() at {items.where}" if items.where else "the dataset's __getitem__ and transforms"
    )
    plural = "s" if workers != 1 else ""
    if raised > workers:
        more = (
            f"Raise `num_workers` from {workers} to {raised} (about {needed} would hide it"
            + (f"; this process may use {items.cores} cores" if needed > usable else "")
            + "), with `persistent_workers=True`, or "
        )
    else:
        more = (
            f"More workers cannot help here (this process may use {items.cores} cores, one of them "
            "the training loop's): "
        )
    return Advice(
        f"The DataLoader's {workers} worker{plural} cannot keep up{at(ctx)}",
        f"Each batch takes a worker about {format_seconds(batch_s)} ({format_seconds(items.seconds_per_item)} "
        f"an item, {items.share:.0%} of it in {code}), so the step waits for it. {more}"
        f"make {code} cheaper: vectorise it over the batch, or precompute it once and cache the result.",
        factor=max(factor, 1.0),
    )


def _advise(kind: str, ctx: Context) -> Advice:
    if kind in ("hdf5", "zarr", "disk"):
        # An HDF5 read per batch: 37 s a step, against 0.46 s once the file sat in RAM.
        return Advice(
            f"Reading the batch from {_label(kind)} every step{at(ctx)}",
            "Load the dataset into memory once before training and index batches from it "
            "(e.g. `x = f['x'][:]`, then `x[idx]` per step); if it cannot fit, read sorted, "
            "contiguous index runs. A per-batch HDF5 reader went from 37 s to 0.46 s a step this way.",
            factor=50.0,
        )
    if kind == "database":
        # A database round trip per batch; preloading once is typically 10-30x faster.
        return Advice(
            f"One database round trip per batch{at(ctx)}",
            "Run one query before training (fetch the whole table, or stream it once with a "
            "server-side cursor), keep it as a tensor in RAM or VRAM and index batches from it: "
            "typically 10-30x faster than a query per batch.",
            factor=20.0,
        )
    if kind == "collate":
        # PyTorch PR #10260: per-sample fetch + collate ~15x slower than one batched index.
        return Advice(
            f"Per-sample fetch and collate{at(ctx)}",
            "Fetch whole batches with one index operation: give the DataLoader a BatchSampler "
            "as `sampler=` with `batch_size=None` and a dataset that indexes with a list, or "
            "index a pre-stacked tensor directly (~15x on small rows, PyTorch PR #10260).",
            factor=15.0,
        )
    if kind == "pool":
        # torch.cat of a 512K-row pool every step: 0.5 s against 0.05 s of compute.
        return Advice(
            f"Step time grows {ctx.growth:.1f}x over the run: a growing pool is re-concatenated every step{at(ctx)}",
            "Concatenate the pool once when it is built (or keep one preallocated tensor and "
            "write new entries into it) and sample by index: O(batch) per step instead of "
            "O(pool). Re-concatenating a 512K-row pool every step made a step 10x slower.",
            factor=100.0,
        )
    if kind == "batch preparation":
        return Advice(
            f"Building the batch in Python every step{at(ctx)}",
            "Pre-stack the data into one array or tensor before training and gather each "
            "batch with a single index operation: typically ~10x faster than assembling it in Python.",
            factor=10.0,
        )
    # loader, dataset, image decode, transform: per-sample CPU work inside __getitem__.
    if is_keras(ctx):
        return Advice(
            f"CPU work in the data pipeline ({kind or 'transforms'}){at(ctx)}",
            "Move the per-sample work off the training step: vectorise it over the batch, or "
            "precompute it once and cache the result; or let Keras prepare batches ahead on the free "
            "cores with `super().__init__(workers=N, use_multiprocessing=True)` in your PyDataset.",
            factor=PIPELINE_FACTOR,
        )
    return Advice(
        f"CPU work in the data pipeline ({kind or 'transforms'}){at(ctx)}",
        "Move the per-sample work off the training loop: `DataLoader(..., num_workers=N, "
        "persistent_workers=True, pin_memory=True)` with N up to the free cores, or vectorise "
        "it over the batch, or precompute it once and cache the result.",
        factor=PIPELINE_FACTOR,
    )


def _label(kind: str) -> str:
    return {"hdf5": "HDF5", "zarr": "Zarr", "disk": "disk"}[kind]
