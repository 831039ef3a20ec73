"""Two ranks streaming one chunked, compressed HDF5 file (``tier="stream"``, ``shuffle_block`` =
the chunk length): each rank one contiguous stretch of the epoch order (``contiguous``, what
``data.load`` does for a blocked order) against every W-th position of it (``strided``, what
DistributedSampler's layout does, and what trainmedic did before): strided, every rank reads and
decompresses a few rows of every chunk, so the job decodes the file W times.

Each arm starts two real rank processes (RANK/WORLD_SIZE set as torchrun does), lets them import
everything and build their loaders, then releases both at once through a go file; each serves one
epoch and reports its wall time and the bytes it read (``/proc/self/io`` ``rchar``: what h5py asked
the kernel for, page cache hits included). The source's pages are evicted before every arm; arms
alternate over rounds, medians reported.

    python benchmarks/stream_ranks.py           # ~330 MB decoded, 3 rounds; writes results/stream_ranks-cpu-<date>.json
    python benchmarks/stream_ranks.py --quick   # ~40 MB, 1 round: a smoke check; writes nothing unless --out
"""

from __future__ import annotations

import dataclasses
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _env
from _rank_gate import run_ranks, wait_for_go, write_rank_result
from cache_build_ranks import CHUNK_ROWS, FEATURES, gib, make_source, parse_options

HERE = Path(__file__).resolve()
BATCH = 256
ARMS = ("contiguous", "strided")
WORLD = 2


def run_arm(arm: str, source: Path, gate: Path) -> dict[str, Any]:
    _env.evict_pages(source)
    ranks = run_ranks(
        lambda rank: [sys.executable, str(HERE), "--worker", arm, str(source), str(gate), str(rank)],
        gate,
        WORLD,
        f"arm {arm}",
    )
    return {
        "arm": arm,
        "epoch_s": max(r["epoch_s"] for r in ranks),
        "epoch_s_per_rank": [r["epoch_s"] for r in ranks],
        "rchar_bytes": sum(r["rchar"] for r in ranks),
        "samples": sum(r["samples"] for r in ranks),
        "distinct_samples": len(set().union(*(r["first_ids"] for r in ranks))),
    }


def worker(arm: str, source: str, gate: str, rank: int) -> None:
    import numpy as np

    from trainmedic import data

    loader = data.load(
        source,
        fields=["x", "y"],
        batch_size=BATCH,
        seed=0,
        tier="stream",
        shuffle_block=CHUNK_ROWS,
        progress=False,
    )
    if arm == "strided":  # the layout of a full shuffle, forced on the blocked order
        loader.shard = dataclasses.replace(loader.shard, contiguous=False)
    wait_for_go(Path(gate), rank)
    before = _rchar()
    started = time.perf_counter()
    ids = [batch[1].numpy() for batch in loader]
    elapsed = time.perf_counter() - started
    served = np.concatenate(ids)
    result = {
        "epoch_s": elapsed,
        "rchar": _rchar() - before,
        "samples": len(served),
        "first_ids": sorted(set(served.tolist())),
    }
    write_rank_result(Path(gate), rank, result)


def _rchar() -> int:
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(io["rchar"])


def main() -> int:
    args = parse_options(__doc__.split("\n\n")[0], "stream_ranks", ("ARM", "SOURCE", "GATE", "RANK"))
    if args.worker:
        arm, source, gate, rank = args.worker
        worker(arm, source, gate, int(rank))
        return 0

    rows, rounds = args.rows, args.rounds
    work = args.workdir or Path(tempfile.mkdtemp(prefix="trainmedic-stream-ranks-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "stream_ranks",
        **_env.environment(),
        "device": "cpu",
        "settings": {
            "quick": args.quick,
            "rows": rows,
            "features": FEATURES,
            "chunk_rows": CHUNK_ROWS,
            "compression": "gzip 1",
            "shuffle_block": CHUNK_ROWS,
            "batch_size": BATCH,
            "world_size": WORLD,
            "rounds": rounds,
        },
    }
    result["versions"]["h5py"] = _env.version("h5py")
    try:
        source = work / "source.h5"
        print(f"writing {source} ({rows} rows × {FEATURES} float32, gzip 1) ...", flush=True)
        make_source(source, rows)
        result["source_bytes"] = source.stat().st_size
        runs: list[dict[str, Any]] = []
        for round_ in range(rounds):
            for arm in ARMS if round_ % 2 == 0 else ARMS[::-1]:
                gate = work / f"round{round_}-{arm}"
                run = run_arm(arm, source, gate)
                if run["distinct_samples"] != rows:
                    raise SystemExit(
                        f"arm {arm}: the ranks served {run['distinct_samples']} of {rows} samples"
                    )
                run["round"] = round_
                runs.append(run)
                print(
                    f"  round {round_} {arm:10s} epoch {run['epoch_s']:.2f} s, read {gib(run['rchar_bytes'])}",
                    flush=True,
                )
                shutil.rmtree(gate, ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    summary: dict[str, Any] = {
        arm: {
            key: statistics.median(r[key] for r in runs if r["arm"] == arm)
            for key in ("epoch_s", "rchar_bytes")
        }
        for arm in ARMS
    }
    summary["speedup_epoch"] = summary["strided"]["epoch_s"] / summary["contiguous"]["epoch_s"]
    result.update(
        runs=runs,
        summary=summary,
        load_average_after=_env.load_average(),
        benchmark_seconds=time.perf_counter() - started,
    )

    print(
        f"\n2 ranks streaming {gib(result['source_bytes'])} of HDF5 (gzip 1, {CHUNK_ROWS}-row chunks, "
        f"shuffle_block={CHUNK_ROWS}), {rows} rows; medians of {rounds} round(s)"
    )
    print(f"{'layout':11s} {'epoch (both ranks)':>19s} {'read by both':>14s}")
    for arm in ARMS:
        s = summary[arm]
        print(f"{arm:11s} {s['epoch_s']:>17.2f} s {gib(s['rchar_bytes']):>14s}")
    print(
        f"contiguous stretches serve the epoch {summary['speedup_epoch']:.2f}x faster than strided positions; "
        f"{result['benchmark_seconds']:.0f} s, load average after {result['load_average_after']}"
    )
    if args.out or not args.quick:
        _env.write_result(result, args.out or _env.results_path("stream_ranks", "cpu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
