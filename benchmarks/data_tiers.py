"""How fast does ``trainmedic.data.load`` serve batches, against what users write instead?

Every comparison runs its arms in the same process, in interleaved rounds (the order rotated every
round, so with two arms A-B then B-A), each arm timed over a block of about ``--block-seconds``.
A noisy shared machine then slows both sides alike; per arm the median over rounds is reported
with its min..max, and the verdict is the median of the per-round paired ratios (min..max shown).

Sections (``--only`` / ``--skip`` pick them; all by default):

``h5py``    ram tier on an HDF5 file (rows of 64 float32 + an int64 label) vs the usual
            ``DataLoader`` over a per-sample h5py ``Dataset`` (``__getitem__`` reads one row;
            batch 256, num_workers=0, default collate). samples/s; goal >= 50x.
``tensor``  ram tier vs ``DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True)``.
            samples/s; goal >= 10x.
``gather``  bytes/s of the ram tier's per-batch gather (iterating a loader over an in-RAM dict
            of 4 KiB rows, so bytes dominate) vs a bare ``np.take(x, idx, axis=0, out=buf)`` of
            the same indices; goal >= 70 % of the bare take. ``torch.index_select`` (fresh
            output, and into a preallocated ``out=``) is reported as context.
``gather_busy``  the same while a child process spins on one core (a shared machine, a second
            job): torch's intra-op threads then wait on a descheduled thread, NumPy's one does not.
``ring``    the CUDA path's host half (``HostToDevice`` ring and gather threads, ``transfer.py``)
            with the copy stage replaced by nothing (``NoCopy``): 16 KiB rows, 4 MiB batches as in
            data_gpu.py's h2d section, into plain buffers (pinning needs CUDA). Arms: one-thread
            ``np.take`` into two buffers in turn (the old path's gather) and into one, the ring
            inline, with the thread count its sizing picks here, and with two threads; then the
            old path and the ring each followed by a 1 ms sleep standing for a device step. Goals:
            the ring's pick >= 90 % of the old gather, and faster than it with the step.
``ring_busy``  the same with one core kept busy by another process.
``sql``     a per-batch query loop (seed 003: ``SELECT x, y FROM samples WHERE id IN (...)`` of
            256 random ids per batch, on one open sqlite3 connection) vs
            ``data.load("sqlite:///...", query=...)``: steady samples/s (goal >= 10x, seed 003's
            lower figure) and time to first batch including the one-time materialisation, which
            must pay for itself within one epoch.
``disk``    disk tier: time to first batch when the run builds its cache vs when a second run
            reuses it (the reuse must be faster), and steady samples/s vs the ram tier (>= 70 %
            expected: with a hot page cache both gather from memory).
``stream``  stream tier vs ram tier, whole epochs, on a chunked HDF5 file (1,024-row chunks)
            larger than one stream window, with shuffle_block=1 and shuffle_block=chunk length.
            Context only, plus one expectation: chunk-aligned blocks beat a full shuffle.

    python benchmarks/data_tiers.py                 # ~2 minutes; writes benchmarks/results/data_tiers-<date>.json
    python benchmarks/data_tiers.py --quick         # smoke check, ~20 s, writes nothing unless --out
    python benchmarks/data_tiers.py --only gather --profile    # one section, with a cProfile of the loader

Exit status: 0 when every threshold is met, 1 when one is missed (the numbers are still printed
and written; a missed comparison's loader arm is profiled with cProfile into the result), 2 when
a needed package is missing.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import os
import pstats
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _env

SECTIONS = ("h5py", "tensor", "gather", "gather_busy", "ring", "ring_busy", "sql", "disk", "stream")
BATCH = 256
FEATURES = 64  # small rows: 64 float32 + one int64 label = 264 B a sample
GATHER_FEATURES = 1024  # 4 KiB rows for the bandwidth section
RING_FEATURES = 4096  # 16 KiB rows, 4 MiB batches: data_gpu.py's h2d shape
RING_STEP_S = 0.001  # a device step the host waits on (GIL released), to show what gathering ahead hides
CHUNK_ROWS = 1024  # HDF5 chunk length of the stream section's file


@dataclass
class Size:
    rows: int
    gather_rows: int
    stream_rows: int
    sql_rows: int
    rounds: int
    block_s: float
    ttfb_rounds: int


FULL = Size(
    rows=150_000,
    gather_rows=131_072,
    stream_rows=1_500_000,
    sql_rows=150_000,
    rounds=9,
    block_s=0.4,
    ttfb_rounds=3,
)
QUICK = Size(
    rows=50_000,
    gather_rows=16_384,
    stream_rows=200_000,
    sql_rows=30_000,
    rounds=3,
    block_s=0.12,
    ttfb_rounds=1,
)


# -- measuring --------------------------------------------------------------------------------


@dataclass
class Arm:
    """One side of a comparison: ``run(n)`` processes ``n`` units (batches or epochs) and returns
    (samples, bytes) served; the harness times it."""

    name: str
    run: Callable[[int], tuple[int, int]]
    unit: str = "batch"
    describe: str = ""
    units: int = 0
    blocks: list[tuple[int, int, float]] = field(default_factory=list)


def calibrate(arm: Arm, block_s: float) -> None:
    arm.run(1)  # warm-up: lazy imports, first allocations, page cache
    n = 1
    while True:
        started = time.perf_counter()
        arm.run(n)
        elapsed = time.perf_counter() - started
        if elapsed >= block_s / 4 or n >= 1 << 16:
            break
        n *= 4
    arm.units = max(1, round(n * block_s / max(elapsed, 1e-9)))


def interleave(arms: list[Arm], rounds: int, block_s: float) -> None:
    """Time every arm once per round, the order rotated each round."""
    for arm in arms:
        calibrate(arm, block_s)
    for r in range(rounds):
        k = r % len(arms)
        for arm in arms[k:] + arms[:k]:
            gc.collect()
            started = time.perf_counter()
            samples, nbytes = arm.run(arm.units)
            arm.blocks.append((samples, nbytes, time.perf_counter() - started))


def rates(arm: Arm, what: str = "samples") -> list[float]:
    i = 0 if what == "samples" else 1
    return [b[i] / b[2] for b in arm.blocks]


def arm_summary(arm: Arm, what: str = "samples") -> dict[str, Any]:
    values = rates(arm, what)
    samples = sum(b[0] for b in arm.blocks)
    return {
        "describe": arm.describe,
        "unit": arm.unit,
        "units_per_block": arm.units,
        "blocks": len(arm.blocks),
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "per_round": values,
        "samples_per_block": samples // max(1, len(arm.blocks)),
        "block_seconds_median": statistics.median(b[2] for b in arm.blocks),
    }


def compare(
    name: str,
    fast: Arm,
    base: Arm,
    *,
    what: str,
    threshold: float,
    source: str,
    goal: str,
    percent: bool = False,
) -> dict[str, Any]:
    """Median of per-round paired ratios fast/base, against ``threshold``."""
    ratios = [f / b for f, b in zip(rates(fast, what), rates(base, what))]
    ratio = statistics.median(ratios)
    return {
        "name": name,
        "measure": "bytes/s" if what == "bytes" else "samples/s",
        "loader": fast.name,
        "baseline": base.name,
        "loader_median": statistics.median(rates(fast, what)),
        "baseline_median": statistics.median(rates(base, what)),
        "ratio": ratio,
        "ratio_min": min(ratios),
        "ratio_max": max(ratios),
        "ratio_per_round": ratios,
        "threshold": threshold,
        "threshold_source": source,
        "goal": goal,
        "pass": ratio >= threshold,
        "show": "percent" if percent else "times",
    }


def batches(make: Callable[[], Any]) -> Iterator[Any]:
    """An endless stream of batches over epochs (an epoch is one ``iter(make())``)."""
    while True:
        yield from make()


def pull(stream: Iterator[Any], sample_bytes: int) -> Callable[[int], tuple[int, int]]:
    def run(n: int) -> tuple[int, int]:
        samples = 0
        for _ in range(n):
            samples += next(stream)[0].shape[0]
        return samples, samples * sample_bytes

    return run


def whole_epochs(loader: Any, sample_bytes: int) -> Callable[[int], tuple[int, int]]:
    def run(n: int) -> tuple[int, int]:
        samples = 0
        for _ in range(n):
            for batch in loader:
                samples += batch[0].shape[0]
        return samples, samples * sample_bytes

    return run


def profile(arm: Arm, blocks: int = 3, top: int = 14) -> dict[str, Any]:
    """cProfile of a few blocks of ``arm``: the functions with the most own time."""
    profiler = cProfile.Profile()
    started = time.perf_counter()
    profiler.enable()
    samples = 0
    for _ in range(blocks):
        samples += arm.run(arm.units)[0]
    profiler.disable()
    elapsed = time.perf_counter() - started
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = stats.total_tt or 1e-12
    rows = []
    for (filename, line, func), (_cc, nc, tt, ct, _) in stats.stats.items():  # type: ignore[attr-defined]
        rows.append(
            {
                "function": func,
                "where": f"{_short_path(filename)}:{line}",
                "calls": nc,
                "own_s": tt,
                "cumulative_s": ct,
                "own_share": tt / total,
                "own_us_per_batch": 1e6 * tt / max(1, samples / BATCH) if arm.unit == "batch" else None,
            }
        )
    rows.sort(key=lambda r: r["own_s"], reverse=True)
    return {
        "arm": arm.name,
        "samples": samples,
        "wall_s": elapsed,
        "profiled_s": total,
        "top_own_time": rows[:top],
    }


def _short_path(filename: str) -> str:
    for marker in ("/src/", "/site-packages/", "/lib/python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return filename


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    started = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - started


# -- data -------------------------------------------------------------------------------------


def write_h5(path: Path, rows: int, seed: int, chunks: int | None = None) -> None:
    import h5py
    import numpy as np

    rng = np.random.default_rng(seed)
    with h5py.File(path, "w") as f:
        step = 1 << 18
        x = f.create_dataset(
            "x", (rows, FEATURES), dtype="float32", chunks=(chunks, FEATURES) if chunks else None
        )
        y = f.create_dataset("y", (rows,), dtype="int64", chunks=(chunks,) if chunks else None)
        for start in range(0, rows, step):
            stop = min(rows, start + step)
            x[start:stop] = rng.standard_normal((stop - start, FEATURES), dtype=np.float32)
            y[start:stop] = rng.integers(0, 10, stop - start)


def h5_row_dataset(path: Path) -> Any:
    """The usual map-style Dataset over HDF5: one row per ``__getitem__``, the file opened lazily
    once per process (the worker-safe pattern), dataset handles kept (kinder than a lookup per row)."""
    import h5py
    import torch
    from torch.utils.data import Dataset

    class H5RowDataset(Dataset):
        def __init__(self) -> None:
            self.file = None
            with h5py.File(path, "r") as f:
                self.n = len(f["y"])

        def __len__(self) -> int:
            return self.n

        def __getitem__(self, i: int) -> Any:
            if self.file is None:
                self.file = h5py.File(path, "r")
                self.x, self.y = self.file["x"], self.file["y"]
            return torch.from_numpy(self.x[i]), torch.tensor(self.y[i])

    return H5RowDataset()


def sample_bytes_of(loader: Any) -> int:
    return int(loader._source.sample_bytes)


# -- sections ---------------------------------------------------------------------------------


def section_h5py(ctx: Context) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader

    from trainmedic import data

    path = ctx.small_h5()
    loader = data.load(path, fields=["x", "y"], batch_size=BATCH, tier="ram", progress=False)
    sb = sample_bytes_of(loader)
    dataset = h5_row_dataset(path)
    baseline = DataLoader(
        dataset, batch_size=BATCH, shuffle=True, num_workers=0, generator=torch.Generator().manual_seed(0)
    )
    fast = Arm(
        "data.load ram",
        pull(batches(lambda: loader), sb),
        describe=f"data.load({path.name}, tier='ram', batch_size={BATCH})",
    )
    base = Arm(
        "DataLoader(h5py per-sample)",
        pull(batches(lambda: baseline), sb),
        describe="DataLoader(Dataset whose __getitem__ reads one row with h5py, batch_size=256, shuffle=True, num_workers=0)",
    )
    interleave([fast, base], ctx.size.rounds, ctx.size.block_s)
    comparison = compare(
        "ram tier vs per-sample h5py DataLoader",
        fast,
        base,
        what="samples",
        threshold=50.0,
        source="brief goal",
        goal=">= 50x samples/s",
    )
    return {
        "rows": ctx.size.rows,
        "sample_bytes": sb,
        "arms": [fast, base],
        "comparisons": [comparison],
        "loader_load_seconds": loader._tier.load_seconds,
    }


def section_tensor(ctx: Context) -> dict[str, Any]:
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    from trainmedic import data

    path = ctx.small_h5()
    loader = data.load(path, fields=["x", "y"], batch_size=BATCH, tier="ram", progress=False)
    sb = sample_bytes_of(loader)
    arrays = loader._tier.arrays
    x, y = torch.from_numpy(arrays["x"].copy()), torch.from_numpy(arrays["y"].copy())
    baseline = DataLoader(
        TensorDataset(x, y), batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(0)
    )
    fast = Arm(
        "data.load ram",
        pull(batches(lambda: loader), sb),
        describe=f"data.load({path.name}, tier='ram', batch_size={BATCH})",
    )
    base = Arm(
        "DataLoader(TensorDataset)",
        pull(batches(lambda: baseline), sb),
        describe="DataLoader(TensorDataset(x, y), batch_size=256, shuffle=True), default collate",
    )
    interleave([fast, base], ctx.size.rounds, ctx.size.block_s)
    comparison = compare(
        "ram tier vs DataLoader(TensorDataset)",
        fast,
        base,
        what="samples",
        threshold=10.0,
        source="brief goal",
        goal=">= 10x samples/s",
    )
    return {"rows": ctx.size.rows, "sample_bytes": sb, "arms": [fast, base], "comparisons": [comparison]}


def section_gather(ctx: Context, busy_neighbour: bool = False) -> dict[str, Any]:
    import numpy as np
    import torch

    from trainmedic import data
    from trainmedic.data.order import epoch_order

    n = ctx.size.gather_rows
    rng = np.random.default_rng(3)
    x = rng.standard_normal((n, GATHER_FEATURES), dtype=np.float32)
    y = rng.integers(0, 10, n)
    loader = data.load({"x": x, "y": y}, batch_size=BATCH, tier="ram", progress=False)
    sb = sample_bytes_of(loader)
    orders = [epoch_order(n, shuffle=True, seed=0, epoch=e) for e in range(4)]

    def index_batches() -> Iterator[np.ndarray]:
        while True:
            for order in orders:
                for start in range(0, n, BATCH):
                    yield order[start : start + BATCH]

    def bare(step: Callable[[np.ndarray], None]) -> Callable[[int], tuple[int, int]]:
        indices = index_batches()

        def run(k: int) -> tuple[int, int]:
            samples = 0
            for _ in range(k):
                idx = next(indices)
                step(idx)
                samples += len(idx)
            return samples, samples * sb

        return run

    out_x, out_y = np.empty((BATCH, GATHER_FEATURES), np.float32), np.empty(BATCH, y.dtype)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    tout_x, tout_y = torch.from_numpy(out_x.copy()), torch.from_numpy(out_y.copy())

    def take(idx: np.ndarray) -> None:
        m = len(idx)
        np.take(x, idx, axis=0, out=out_x[:m])
        np.take(y, idx, axis=0, out=out_y[:m])

    def select(idx: np.ndarray) -> None:
        i = torch.from_numpy(idx)
        torch.index_select(tx, 0, i)
        torch.index_select(ty, 0, i)

    def select_out(idx: np.ndarray) -> None:
        i, m = torch.from_numpy(idx), len(idx)
        torch.index_select(tx, 0, i, out=tout_x[:m])
        torch.index_select(ty, 0, i, out=tout_y[:m])

    fast = Arm(
        "data.load ram (iterate)",
        pull(batches(lambda: loader), sb),
        describe=f"for x, y in data.load({{'x': float32 [{n}, {GATHER_FEATURES}], 'y': int64}}, tier='ram')",
    )
    base = Arm(
        "np.take out=",
        bare(take),
        describe="np.take(x, idx, axis=0, out=preallocated), same for y, same indices",
    )
    sel = Arm(
        "torch.index_select",
        bare(select),
        describe="torch.index_select(x, 0, idx), fresh output (what the tier does)",
    )
    sel_out = Arm(
        "torch.index_select out=",
        bare(select_out),
        describe="torch.index_select(x, 0, idx, out=preallocated)",
    )
    arms = [fast, base, sel, sel_out]
    tag = ", one core busy" if busy_neighbour else ""
    neighbour = start_neighbour() if busy_neighbour else None
    try:
        interleave(arms, ctx.size.rounds, ctx.size.block_s)
    finally:
        stop_neighbour(neighbour)
    comparisons = [
        compare(
            f"ram tier gather vs bare np.take{tag}",
            fast,
            base,
            what="bytes",
            threshold=0.70,
            source="brief goal" + (" (with a busy neighbour)" if busy_neighbour else ""),
            goal=">= 70 % of the bare np.take's GB/s",
            percent=True,
        )
    ]
    context = [
        compare(
            f"context: {a.name} vs bare np.take{tag}",
            a,
            base,
            what="bytes",
            threshold=0.0,
            source="context",
            goal="-",
            percent=True,
        )
        for a in (sel, sel_out)
    ]
    for c in context:
        c["pass"] = None
    return {
        "rows": n,
        "sample_bytes": sb,
        "batch_bytes": BATCH * sb,
        "data_bytes": x.nbytes + y.nbytes,
        "arms": arms,
        "what": "bytes",
        "comparisons": comparisons,
        "context": context,
        "busy_neighbour": "one child process spinning a pure-Python loop for the whole section"
        if busy_neighbour
        else None,
    }


def section_gather_busy(ctx: Context) -> dict[str, Any]:
    """The gather section again while another process keeps one core busy (a shared machine,
    a second job, the training process's own threads): what a parallel gather then costs."""
    return section_gather(ctx, busy_neighbour=True)


class NoCopy:
    """HostToDevice's copier with no device: staging in plain memory, a copy that hands the slot
    itself back (the arms below never keep a batch), so only the host pipeline is timed."""

    def staging(self, shape: tuple[int, ...], dtype: Any) -> Any:
        import torch

        from trainmedic.data.transfer import torch_dtype

        return torch.empty(shape, dtype=torch_dtype(dtype))

    def copy(self, staged: list[Any]) -> tuple[tuple[Any, ...], None]:
        return tuple(staged), None

    def wait(self, event: Any) -> None:
        pass


def section_ring(ctx: Context, busy_neighbour: bool = False) -> dict[str, Any]:
    import numpy as np

    from trainmedic.data.gather_ahead import gather_threads, usable_cores
    from trainmedic.data.order import epoch_order
    from trainmedic.data.sources.base import FieldSpec
    from trainmedic.data.transfer import HostToDevice

    n = ctx.size.gather_rows * GATHER_FEATURES // RING_FEATURES  # the gather section's bytes
    x = np.random.default_rng(5).standard_normal((n, RING_FEATURES), dtype=np.float32)
    sb = x[0].nbytes
    orders = [epoch_order(n, shuffle=True, seed=0, epoch=e) for e in range(4)]

    def index_batches() -> Iterator[np.ndarray]:
        while True:
            for order in orders:
                for start in range(0, n - BATCH + 1, BATCH):
                    yield order[start : start + BATCH]

    outs = [np.empty((BATCH, RING_FEATURES), np.float32) for _ in range(8)]
    bare_indices = index_batches()

    def bare(buffers: int, step_s: float = 0.0) -> Callable[[int], tuple[int, int]]:
        def run(k: int) -> tuple[int, int]:
            for i in range(k):
                np.take(x, next(bare_indices), axis=0, out=outs[i % buffers], mode="clip")
                if step_s:
                    time.sleep(step_s)
            return k * BATCH, k * BATCH * sb

        return run

    streams: list[Any] = []  # closed at the end: their gather threads stop

    def ring(threads: int | None, step_s: float = 0.0) -> Callable[[int], tuple[int, int]]:
        mover = HostToDevice(
            [FieldSpec("x", x.dtype, x.shape[1:])], torch_cpu(), BATCH, copier=NoCopy(), threads=threads
        )
        streams.append(mover.batches({"x": x}, index_batches()))
        stream = streams[-1]

        def run(k: int) -> tuple[int, int]:
            for _ in range(k):
                next(stream)
                if step_s:
                    time.sleep(step_s)
            return k * BATCH, k * BATCH * sb

        return run

    picked = gather_threads(BATCH * sb, usable_cores())
    slots = HostToDevice([FieldSpec("x", x.dtype, x.shape[1:])], torch_cpu(), BATCH, copier=NoCopy()).slots
    step = f"+ {RING_STEP_S * 1e3:g} ms step"
    mine_step = Arm(
        f"ring, its pick {step}",
        ring(None, RING_STEP_S),
        describe=f"the ring's batches, then time.sleep({RING_STEP_S}) as a device step the host waits on",
    )
    old_step = Arm(f"old path {step}", bare(2, RING_STEP_S), describe="the old gather, then the same sleep")
    old = Arm(
        "np.take, 2 buffers in turn",
        bare(2),
        describe="np.take(x, idx, axis=0, out=buf[i % 2], mode='clip'): the old path's gather",
    )
    hot = Arm(
        "np.take, one buffer",
        bare(1),
        describe="the same into one (cache-hot) buffer: data_gpu.py's gather arm",
    )
    same = Arm(
        f"np.take, {slots} buffers in turn",
        bare(slots),
        describe="the same into as many buffers as the ring "
        "has slots: the ring's gather without its machinery",
    )
    inline = Arm(
        "ring, inline (0 threads)", ring(0), describe="HostToDevice(copier=NoCopy(), threads=0).batches()"
    )
    mine = Arm(
        f"ring, its pick ({picked} threads)", ring(None), describe="HostToDevice(copier=NoCopy()).batches()"
    )
    two = Arm("ring, 2 threads", ring(2), describe="HostToDevice(copier=NoCopy(), threads=2).batches()")
    arms = [mine_step, old_step, mine, same, old, hot, inline, two]
    tag = ", one core busy" if busy_neighbour else ""
    neighbour = start_neighbour() if busy_neighbour else None
    try:
        interleave(arms, ctx.size.rounds, ctx.size.block_s)
    finally:
        stop_neighbour(neighbour)
    comparisons = [
        compare(
            f"ring gather ({picked} threads) vs np.take into {slots} buffers{tag}",
            mine,
            same,
            what="bytes",
            threshold=0.90,
            source="expectation",
            goal=">= 90 %: the machinery costs little",
            percent=True,
        ),
        compare(
            f"ring {step} vs old path {step}{tag}",
            mine_step,
            old_step,
            what="bytes",
            threshold=1.0,
            source="expectation",
            goal="> 1x: the gather hides under the step",
        ),
    ]
    context = [
        compare(
            f"context: {a.name} vs the old gather{tag}",
            a,
            old,
            what="bytes",
            threshold=0.0,
            source="context",
            goal="-",
            percent=True,
        )
        for a in (mine, same, hot, inline, two)
    ]
    for c in context:
        c["pass"] = None
    return {
        "rows": n,
        "sample_bytes": sb,
        "batch_bytes": BATCH * sb,
        "data_bytes": x.nbytes,
        "arms": arms,
        "what": "bytes",
        "comparisons": comparisons,
        "context": context,
        "usable_cores": usable_cores(),
        "threads_picked": picked,
        "step_s": RING_STEP_S,
        "cleanup": [s.close for s in streams],
        "busy_neighbour": "one child process spinning a pure-Python loop for the whole section"
        if busy_neighbour
        else None,
    }


def torch_cpu() -> Any:
    import torch

    return torch.device("cpu")


def section_ring_busy(ctx: Context) -> dict[str, Any]:
    return section_ring(ctx, busy_neighbour=True)


def start_neighbour() -> Any:
    import subprocess

    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def stop_neighbour(process: Any) -> None:
    if process is not None:
        process.kill()
        process.wait()


def section_sql(ctx: Context) -> dict[str, Any]:
    import numpy as np
    import torch

    from trainmedic import data
    from trainmedic.data.order import epoch_order

    db = ctx.sqlite_db()
    n = ctx.size.sql_rows
    query = "SELECT x, y FROM samples"
    url = f"sqlite:///{db}"
    schema = {"x": ("float32", (FEATURES,))}
    sb = FEATURES * 4 + 8

    def open_loader() -> Any:
        return data.load(url, query=query, schema=schema, batch_size=BATCH, progress=False)

    def baseline_batches() -> Iterator[tuple[Any, Any]]:
        # Seed 003's loop: one query per batch of shuffled ids, rows decoded and stacked in Python.
        conn = sqlite3.connect(db)
        try:
            epoch = 0
            while True:
                order = epoch_order(n, shuffle=True, seed=0, epoch=epoch) + 1  # ids are 1-based
                for start in range(0, n, BATCH):
                    ids = order[start : start + BATCH].tolist()
                    rows = conn.execute(
                        f"SELECT x, y FROM samples WHERE id IN ({','.join('?' * len(ids))})", ids
                    ).fetchall()
                    xb = torch.from_numpy(np.stack([np.frombuffer(r[0], dtype=np.float32) for r in rows]))
                    yb = torch.tensor([r[1] for r in rows])
                    yield xb, yb
                epoch += 1
        finally:
            conn.close()

    def raw_read() -> None:
        # The floor for a materialisation: the same rows through bare sqlite3, decoded in one go.
        conn = sqlite3.connect(db)
        rows = conn.execute(query).fetchall()
        conn.close()
        np.frombuffer(b"".join(r[0] for r in rows), dtype=np.float32).reshape(-1, FEATURES)
        np.fromiter((r[1] for r in rows), dtype=np.int64, count=len(rows))

    # Time to first batch, alternating: a fresh loader (query read + materialised) vs a fresh
    # connection's first per-batch query; and the bare read of the whole table as a floor.
    def load_without_gc() -> None:
        # Diagnostic: the same materialisation with the cyclic GC paused (150k Row tuples alive
        # at once trigger full collections that walk every object of the process).
        gc.disable()
        try:
            open_loader().close()
        finally:
            gc.enable()

    ttfb_loader, ttfb_base, materialise, floor, no_gc = [], [], [], [], []
    for r in range(ctx.size.ttfb_rounds):
        for which in ("loader", "base", "raw", "nogc") if r % 2 == 0 else ("nogc", "raw", "base", "loader"):
            gc.collect()
            if which == "raw":
                floor.append(timed(raw_read)[1])
            elif which == "nogc":
                no_gc.append(timed(load_without_gc)[1])
            elif which == "loader":
                started = time.perf_counter()
                loader = open_loader()
                loaded = time.perf_counter()
                next(iter(loader))
                ttfb_loader.append(time.perf_counter() - started)
                materialise.append(loaded - started)
                tier = loader.tier
                loader.close()
                del loader
            else:
                started = time.perf_counter()
                gen = baseline_batches()
                next(gen)
                ttfb_base.append(time.perf_counter() - started)
                gen.close()

    loader = open_loader()
    fast = Arm(
        "data.load sqlite (ram)",
        pull(batches(lambda: loader), sb),
        describe=f"data.load('sqlite:///…', query={query!r}, schema={schema}) → tier {loader.tier}",
    )
    base = Arm(
        "per-batch query",
        pull(baseline_batches(), sb),
        describe="sqlite3, one open connection, SELECT x, y FROM samples WHERE id IN (256 shuffled ids) per batch",
    )
    interleave([fast, base], ctx.size.rounds, ctx.size.block_s)
    steady = compare(
        "sql: data.load steady vs per-batch query",
        fast,
        base,
        what="samples",
        threshold=10.0,
        source="seed 003 (10-30x from preloading)",
        goal=">= 10x samples/s (steady state)",
    )
    # Break-even: the loader's one-time cost is repaid after B batches, where
    # ttfb_loader + B/r_loader = ttfb_base + B/r_base (rates in batches/s).
    r_fast, r_base = steady["loader_median"] / BATCH, steady["baseline_median"] / BATCH
    extra = statistics.median(ttfb_loader) - statistics.median(ttfb_base)
    per_batch_gain = 1 / r_base - 1 / r_fast
    breakeven_batches = extra / per_batch_gain if per_batch_gain > 0 else float("inf")
    epoch_batches = -(-n // BATCH)
    payback = {
        "name": "sql: one-time materialisation repaid within one epoch",
        "measure": "epochs",
        "loader": fast.name,
        "baseline": base.name,
        "loader_ttfb_s": statistics.median(ttfb_loader),
        "baseline_ttfb_s": statistics.median(ttfb_base),
        "breakeven_batches": breakeven_batches,
        "breakeven_epochs": breakeven_batches / epoch_batches,
        "ratio": breakeven_batches / epoch_batches,
        "threshold": 1.0,
        "threshold_source": "expectation",
        "goal": "break-even <= 1 epoch",
        "pass": breakeven_batches <= epoch_batches,
        "lower_is_better": True,
    }
    return {
        "rows": n,
        "sample_bytes": sb,
        "arms": [fast, base],
        "comparisons": [steady, payback],
        "tier": tier,
        "ttfb": {
            "loader_s": ttfb_loader,
            "loader_load_s": materialise,
            "baseline_s": ttfb_base,
            "raw_sqlite3_fetchall_decode_s": floor,
            "loader_load_gc_disabled_s": no_gc,
        },
        "db_bytes": db.stat().st_size,
    }


def section_disk(ctx: Context) -> dict[str, Any]:
    from trainmedic import data

    path = ctx.small_h5()
    caches = ctx.work / "disk-cache"
    build, reuse, facts = [], [], []
    for _ in range(ctx.size.ttfb_rounds):
        shutil.rmtree(caches, ignore_errors=True)
        for which in ("build", "reuse"):
            gc.collect()
            started = time.perf_counter()
            loader = data.load(
                path, fields=["x", "y"], batch_size=BATCH, tier="disk", cache_dir=caches, progress=False
            )
            next(iter(loader))
            (build if which == "build" else reuse).append(time.perf_counter() - started)
            facts.append(f"{which}: {loader._tier.facts[0]}")
            loader.close()
    # How the reuse scales: the same build + reuse on the larger chunked file (stream section's).
    scaling = []
    if ctx.size.stream_rows > ctx.size.rows:
        big = ctx.chunked_h5()
        big_caches = ctx.work / "disk-cache-big"
        for which in ("build", "reuse"):
            gc.collect()
            started = time.perf_counter()
            loader = data.load(
                big, fields=["x", "y"], batch_size=BATCH, tier="disk", cache_dir=big_caches, progress=False
            )
            next(iter(loader))
            seconds = time.perf_counter() - started
            cache = loader._tier.cache
            scaling.append(
                {
                    "file": big.name,
                    "rows": ctx.size.stream_rows,
                    "bytes": ctx.size.stream_rows * sample_bytes_of(loader),
                    "run": which,
                    "ttfb_s": seconds,
                    "build_s": cache.seconds if which == "build" else None,
                    "verify_s": cache.verify_seconds if which == "reuse" else None,
                }
            )
            facts.append(f"{which} ({big.name}): {loader._tier.facts[0]}")
            loader.close()
        shutil.rmtree(big_caches, ignore_errors=True)
    disk = data.load(path, fields=["x", "y"], batch_size=BATCH, tier="disk", cache_dir=caches, progress=False)
    ram = data.load(path, fields=["x", "y"], batch_size=BATCH, tier="ram", progress=False)
    sb = sample_bytes_of(ram)
    fast = Arm(
        "data.load disk",
        pull(batches(lambda: disk), sb),
        describe="tier='disk', cache reused (memory-mapped, hot page cache)",
    )
    base = Arm("data.load ram", pull(batches(lambda: ram), sb), describe="tier='ram'")
    interleave([fast, base], ctx.size.rounds, ctx.size.block_s)
    first = {
        "name": "disk: second run's time to first batch vs first run's",
        "measure": "seconds to first batch",
        "loader": "second run (reuses the cache)",
        "baseline": "first run (builds the cache)",
        "build_ttfb_s": build,
        "reuse_ttfb_s": reuse,
        "loader_median": statistics.median(reuse),
        "baseline_median": statistics.median(build),
        "ratio": statistics.median(build) / statistics.median(reuse),  # speed-up of the second run
        "threshold": 1.0,
        "threshold_source": "expectation",
        "goal": "the reuse is faster (build/reuse > 1)",
    }
    first["pass"] = first["ratio"] > first["threshold"]
    steady = compare(
        "disk tier steady vs ram tier",
        fast,
        base,
        what="samples",
        threshold=0.70,
        source="expectation",
        goal=">= 70 % of ram samples/s (hot page cache)",
        percent=True,
    )
    return {
        "rows": ctx.size.rows,
        "sample_bytes": sb,
        "arms": [fast, base],
        "comparisons": [first, steady],
        "facts": facts,
        "reuse_scaling": scaling,
        "cleanup": [disk.close, ram.close],
    }


def section_stream(ctx: Context) -> dict[str, Any]:
    from trainmedic import data

    path = ctx.chunked_h5()
    ram, ram_s = timed(
        lambda: data.load(path, fields=["x", "y"], batch_size=BATCH, tier="ram", progress=False)
    )
    sb = sample_bytes_of(ram)
    streams = {}
    for block in (1, CHUNK_ROWS):
        streams[block] = data.load(
            path, fields=["x", "y"], batch_size=BATCH, tier="stream", shuffle_block=block, progress=False
        )
    ttfb = {"ram_load_s": ram_s}
    for block, loader in streams.items():
        _, seconds = timed(lambda loader=loader: next(iter(loader)))
        ttfb[f"stream_block{block}_first_batch_s"] = seconds
        loader.set_epoch(loader.epoch + 1)  # drop the half-served epoch; rounds serve whole epochs
    base = Arm("data.load ram", whole_epochs(ram, sb), unit="epoch", describe="tier='ram', shuffle_block=1")
    s1 = Arm(
        "data.load stream, shuffle_block=1",
        whole_epochs(streams[1], sb),
        unit="epoch",
        describe="tier='stream', full shuffle",
    )
    sc = Arm(
        f"data.load stream, shuffle_block={CHUNK_ROWS}",
        whole_epochs(streams[CHUNK_ROWS], sb),
        unit="epoch",
        describe=f"tier='stream', shuffle_block={CHUNK_ROWS} (the chunk length)",
    )
    interleave([base, s1, sc], ctx.size.rounds, ctx.size.block_s)
    comparisons = [
        compare(
            "context: stream (shuffle_block=1) vs ram",
            s1,
            base,
            what="samples",
            threshold=0.0,
            source="context",
            goal="-",
        ),
        compare(
            f"context: stream (shuffle_block={CHUNK_ROWS}) vs ram",
            sc,
            base,
            what="samples",
            threshold=0.0,
            source="context",
            goal="-",
        ),
        compare(
            f"stream: shuffle_block={CHUNK_ROWS} vs shuffle_block=1",
            sc,
            s1,
            what="samples",
            threshold=1.0,
            source="expectation",
            goal="chunk-aligned blocks faster than a full shuffle",
        ),
    ]
    for c in comparisons[:2]:
        c["pass"] = None
    facts = {f"stream_block{b}": loader._tier.facts for b, loader in streams.items()}
    return {
        "rows": ctx.size.stream_rows,
        "sample_bytes": sb,
        "data_bytes": ctx.size.stream_rows * sb,
        "chunk_rows": CHUNK_ROWS,
        "arms": [base, s1, sc],
        "comparisons": comparisons,
        "ttfb": ttfb,
        "facts": facts,
        "cleanup": [loader.close for loader in (ram, *streams.values())],
        "profile_arm": 2,
    }  # the chunk-aligned stream (its reader thread is not in the profile)


RUNNERS = {
    "h5py": section_h5py,
    "tensor": section_tensor,
    "gather": section_gather,
    "gather_busy": section_gather_busy,
    "ring": section_ring,
    "ring_busy": section_ring_busy,
    "sql": section_sql,
    "disk": section_disk,
    "stream": section_stream,
}


class Context:
    def __init__(self, work: Path, size: Size) -> None:
        self.work = work
        self.size = size
        self._small: Path | None = None
        self._chunked: Path | None = None
        self._db: Path | None = None

    def small_h5(self) -> Path:
        if self._small is None:
            self._small = self.work / "small.h5"
            _progress(
                f"writing {self._small.name}: {self.size.rows:,} rows of {FEATURES} float32 + int64 label"
            )
            write_h5(self._small, self.size.rows, seed=1)
        return self._small

    def chunked_h5(self) -> Path:
        if self._chunked is None:
            self._chunked = self.work / "chunked.h5"
            _progress(
                f"writing {self._chunked.name}: {self.size.stream_rows:,} rows, {CHUNK_ROWS}-row chunks"
            )
            write_h5(self._chunked, self.size.stream_rows, seed=2, chunks=CHUNK_ROWS)
        return self._chunked

    def sqlite_db(self) -> Path:
        if self._db is None:
            import numpy as np

            self._db = self.work / "samples.db"
            n = self.size.sql_rows
            _progress(f"writing {self._db.name}: {n:,} rows (x BLOB of {FEATURES} float32, y INTEGER)")
            rng = np.random.default_rng(4)
            x = rng.standard_normal((n, FEATURES), dtype=np.float32)
            y = rng.integers(0, 10, n)
            conn = sqlite3.connect(self._db)
            conn.execute("CREATE TABLE samples (id INTEGER PRIMARY KEY, x BLOB NOT NULL, y INTEGER NOT NULL)")
            conn.executemany(
                "INSERT INTO samples (id, x, y) VALUES (?, ?, ?)",
                ((i + 1, x[i].tobytes(), int(y[i])) for i in range(n)),
            )
            conn.commit()
            conn.close()
        return self._db


# -- output -----------------------------------------------------------------------------------


def _rate(value: float, what: str) -> str:
    if what == "bytes":
        return f"{value / 1e9:.2f} GB/s"
    if value >= 1e6:
        return f"{value / 1e6:.2f} M/s"
    return f"{value / 1e3:.1f} k/s"


def print_section(name: str, result: dict[str, Any]) -> None:
    what = result.get("what", "samples")
    print(
        f"\n[{name}] {result['rows']:,} rows x {result['sample_bytes']} B; "
        f"{len(result['arms'][0]['per_round'])} interleaved rounds"
    )
    header = f"{'arm':<38} {'median':>12} {'min..max':>23} {'block':>10}"
    print(header)
    print("-" * len(header))
    for arm in result["arms"]:
        spread = f"{_rate(arm['min'], what)}..{_rate(arm['max'], what)}"
        block = f"{arm['units_per_block']} {arm['unit'][:5]}{'s' if arm['units_per_block'] != 1 else ''}"
        print(f"{arm['name']:<38} {_rate(arm['median'], what):>12} {spread:>23} {block:>10}")
    cpu = result.get("cpu")
    if cpu:
        other = cpu["other_processes_cores"]
        print(
            f"cores busy: this process {cpu['own_cores']:.2f}, children {cpu['children_cores']:.2f}, "
            f"other processes {other:.2f}"
            if other is not None
            else ""
        )
    if "ttfb" in result:
        shown = {k: (statistics.median(v) if isinstance(v, list) else v) for k, v in result["ttfb"].items()}
        print("time to first batch / load: " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in shown.items()))
    for fact in result.get("facts", []) if isinstance(result.get("facts"), list) else []:
        print(f"  {fact}")


def comparison_row(c: dict[str, Any]) -> str:
    verdict = {True: "PASS", False: "FAIL", None: "-"}[c["pass"]]
    if c["measure"] == "epochs":
        ratio = f"{c['ratio']:.3f} ep"
        spread = f"ttfb {c['loader_ttfb_s'] * 1e3:.0f} vs {c['baseline_ttfb_s'] * 1e3:.0f} ms"
    elif c["measure"].startswith("seconds"):
        ratio = f"{c['ratio']:.2f}x"
        spread = f"{c['loader_median'] * 1e3:.0f} vs {c['baseline_median'] * 1e3:.0f} ms"
    else:
        if c.get("show") == "percent":
            ratio = f"{100 * c['ratio']:.1f} %"
            spread = f"{100 * c['ratio_min']:.0f}..{100 * c['ratio_max']:.0f} %"
        else:
            ratio = f"{c['ratio']:.2f}x"
            spread = f"{c['ratio_min']:.2f}..{c['ratio_max']:.2f}x"
    return f"{c['name']:<62} {ratio:>10} {spread:>26} {c['goal']:<42} {verdict}"


def print_summary(comparisons: list[dict[str, Any]]) -> None:
    print()
    header = f"{'comparison':<62} {'result':>10} {'spread (per round)':>26} {'goal':<42} verdict"
    print(header)
    print("-" * len(header))
    for c in comparisons:
        print(comparison_row(c))


def print_profile(p: dict[str, Any]) -> None:
    print(
        f"\ncProfile of '{p['arm']}': {p['samples']:,} samples, {p['wall_s']:.2f} s wall under the profiler"
    )
    print(f"{'own s':>7} {'share':>6} {'us/batch':>9} {'calls':>9}  function")
    for row in p["top_own_time"]:
        per = f"{row['own_us_per_batch']:.1f}" if row["own_us_per_batch"] is not None else "-"
        print(
            f"{row['own_s']:7.3f} {100 * row['own_share']:5.1f}% {per:>9} {row['calls']:>9}  {row['function']} ({row['where']})"
        )


def own_cpu_s() -> tuple[float, float]:
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime, kids.ru_utime + kids.ru_stime


def cpu_use(
    before: tuple[float, float | None, float, float], after: tuple[float, float | None, float, float]
) -> dict[str, Any]:
    """Cores kept busy during a section: by this process, its children, and everything else."""
    wall = after[0] - before[0]
    own, kids = (after[2] - before[2]) / wall, (after[3] - before[3]) / wall
    other = None
    if before[1] is not None and after[1] is not None:
        other = max(0.0, (after[1] - before[1]) / wall - own - kids)
    return {"wall_s": wall, "own_cores": own, "children_cores": kids, "other_processes_cores": other}


def cpu_snapshot() -> tuple[float, float | None, float, float]:
    return (time.perf_counter(), _env.system_busy_s(), *own_cpu_s())


def _progress(message: str) -> None:
    print(f"[data_tiers] {message}", file=sys.stderr, flush=True)


# -- main -------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only",
        nargs="+",
        choices=SECTIONS,
        metavar="SECTION",
        help=f"run only these sections ({', '.join(SECTIONS)})",
    )
    parser.add_argument(
        "--skip", nargs="+", choices=SECTIONS, metavar="SECTION", default=[], help="leave these sections out"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small data, 3 short rounds: a smoke check in < 60 s; writes nothing unless --out",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds per comparison (default 9; --quick 3)")
    parser.add_argument(
        "--block-seconds", type=float, help="seconds per arm per round (default 0.4; --quick 0.12)"
    )
    parser.add_argument(
        "--rows", type=int, help="rows of the small-row HDF5 file (h5py, tensor, disk; default 150,000)"
    )
    parser.add_argument(
        "--stream-rows",
        type=int,
        help="rows of the chunked HDF5 file (default 1,500,000: ~400 MB, 3 stream windows)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="cProfile the loader arm of every section run (missed goals are always profiled)",
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        help="where the generated files go (default: a temporary folder, removed at the end)",
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no result file")
    parser.add_argument(
        "--out", type=Path, help="result file (default benchmarks/results/data_tiers-<date>.json)"
    )
    args = parser.parse_args()

    missing = [m for m in ("torch", "numpy", "h5py", "sqlalchemy", "psutil") if _missing(m)]
    if missing:
        print(
            f"data_tiers: missing {', '.join(missing)}; install the project with its data extras "
            f"(pip install -e '.[hdf5,sql]') into the virtualenv you run this with.",
            file=sys.stderr,
        )
        return 2
    import torch

    base = QUICK if args.quick else FULL
    size = Size(
        rows=args.rows or base.rows,
        gather_rows=base.gather_rows,
        stream_rows=args.stream_rows or base.stream_rows,
        sql_rows=base.sql_rows,
        rounds=args.rounds or base.rounds,
        block_s=args.block_seconds or base.block_s,
        ttfb_rounds=base.ttfb_rounds,
    )
    chosen = [s for s in (args.only or SECTIONS) if s not in args.skip]
    work = args.workdir or Path(tempfile.mkdtemp(prefix="trainmedic-data-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    env = _env.environment()
    env["versions"].update({d: _env.version(d) for d in ("h5py", "zarr", "sqlalchemy")})
    result: dict[str, Any] = {
        "benchmark": "data_tiers",
        **env,
        "device": "cpu",
        "torch_threads": torch.get_num_threads(),
        "settings": {
            "quick": args.quick,
            "sections": chosen,
            "batch_size": BATCH,
            **size.__dict__,
            "features": FEATURES,
            "gather_features": GATHER_FEATURES,
            "chunk_rows": CHUNK_ROWS,
        },
        "sections": {},
    }
    ctx = Context(work, size)
    everything: list[dict[str, Any]] = []
    try:
        for name in chosen:
            _progress(f"section {name} ...")
            section_started = time.perf_counter()
            snapshot = cpu_snapshot()
            raw = RUNNERS[name](ctx)
            cpu = cpu_use(snapshot, cpu_snapshot())
            arms: list[Arm] = raw.pop("arms")
            cleanup = raw.pop("cleanup", [])
            profiled = arms[raw.pop("profile_arm", 0)]
            what = raw.get("what", "samples")
            section = {**raw, "arms": [{"name": a.name, **arm_summary(a, what)} for a in arms]}
            missed = [c for c in raw["comparisons"] if c["pass"] is False]
            if args.profile or missed:
                section["profile"] = profile(profiled)
            for close in cleanup:
                close()
            section["seconds"] = time.perf_counter() - section_started
            section["cpu"] = cpu
            result["sections"][name] = section
            print_section(name, section)
            if "profile" in section:
                print_profile(section["profile"])
            everything += raw["comparisons"] + raw.get("context", [])
            del arms, raw
            gc.collect()
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    verdicts = [c["pass"] for c in everything if c["pass"] is not None]
    result["summary"] = [
        {k: c[k] for k in ("name", "measure", "ratio", "threshold", "threshold_source", "goal", "pass")}
        for c in everything
    ]
    result["pass"] = all(verdicts)
    result["load_average_after"] = _env.load_average()
    result["benchmark_seconds"] = time.perf_counter() - started
    print_summary(everything)
    print(
        f"\n{sum(bool(v) for v in verdicts)} of {len(verdicts)} thresholds met; {result['benchmark_seconds']:.0f} s; "
        f"torch threads {result['torch_threads']}, load average after {result['load_average_after']}"
    )
    if args.out or not (args.no_write or args.quick):
        path = args.out or _env.results_path("data_tiers")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2, default=_json_default) + "\n", encoding="utf-8")
        print(f"written: {os.path.relpath(path, _env.REPO)}")
    return 0 if result["pass"] else 1


def _json_default(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    return str(value)


def _missing(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is None


if __name__ == "__main__":
    sys.exit(main())
