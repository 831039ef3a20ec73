"""Two ranks of one node loading the same HDF5 file with ``tier="disk"``: the cache built once under
its build lock (both ranks share one cache_dir: one builds, the other waits and maps the same
files) against one build per rank (each rank its own cache_dir: what N ranks did before the lock,
N copies on disk).

Each arm starts two real rank processes (RANK/WORLD_SIZE set as torchrun does, so
``shard="auto"`` shards), lets them import everything, then releases both at once through a go
file; each reports the wall time from the go to its first batch, the bytes it passed to
``write()`` (``/proc/self/io`` ``wchar``) and those that reached the block layer
(``write_bytes``). After both finish, the disk used by the cache folders is summed from their
allocated blocks. The source's pages are evicted (``posix_fadvise(DONTNEED)``) before every arm,
so every arm reads the file from disk once; arms alternate over rounds, medians reported.

    python benchmarks/cache_build_ranks.py           # ~330 MB file, 3 rounds; writes results/cache_build_ranks-cpu-<date>.json
    python benchmarks/cache_build_ranks.py --quick   # ~40 MB, 1 round: a smoke check; writes nothing unless --out
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _env
from _rank_gate import run_ranks, wait_for_go, write_rank_result

HERE = Path(__file__).resolve()
FEATURES = 1024  # float32: 4 KiB a row
CHUNK_ROWS = 512
BATCH = 256
ARMS = ("lock", "per_rank")
WORLD = 2


def make_source(path: Path, rows: int) -> None:
    import h5py
    import numpy as np

    rng = np.random.default_rng(0)
    with h5py.File(path, "w") as f:
        x = f.create_dataset(
            "x",
            (rows, FEATURES),
            dtype="float32",
            chunks=(CHUNK_ROWS, FEATURES),
            compression="gzip",
            compression_opts=1,
        )
        for start in range(0, rows, 8192):
            stop = min(rows, start + 8192)
            x[start:stop] = rng.standard_normal((stop - start, FEATURES), dtype=np.float32)
        f.create_dataset("y", data=np.arange(rows, dtype=np.int64), chunks=(CHUNK_ROWS * 8,))


def disk_used(folder: Path) -> int:
    return sum(p.stat().st_blocks * 512 for p in folder.rglob("*") if p.is_file())


def run_arm(arm: str, source: Path, work: Path) -> dict[str, Any]:
    gate = work / "gate"
    caches = [work / "cache"] * WORLD if arm == "lock" else [work / f"cache-rank{r}" for r in range(WORLD)]
    _env.evict_pages(source)
    os.sync()  # the previous arm's writeback must not land in this one's time
    ranks = run_ranks(
        lambda rank: [
            sys.executable,
            str(HERE),
            "--worker",
            str(source),
            str(caches[rank]),
            str(gate),
            str(rank),
        ],
        gate,
        WORLD,
        f"arm {arm}",
    )
    folders = sorted(set(caches))
    return {
        "arm": arm,
        "first_batch_s": max(r["first_batch_s"] for r in ranks),
        "first_batch_s_per_rank": [r["first_batch_s"] for r in ranks],
        "builds": sum(r["built"] for r in ranks),
        "waited_s_per_rank": [r["waited_s"] for r in ranks],
        "wchar_bytes": sum(r["wchar"] for r in ranks),
        "write_bytes": sum(r["write_bytes"] for r in ranks),
        "disk_used_bytes": sum(disk_used(f) for f in folders),
        "cache_folders": len(folders),
    }


def worker(source: str, cache: str, gate: str, rank: int) -> None:
    import h5py  # noqa: F401 - imported before the gate: the arms time the cache, not imports
    import torch  # noqa: F401

    from trainmedic import data
    from trainmedic.data.tiers import disk  # noqa: F401

    go = wait_for_go(Path(gate), rank)
    loader = data.load(
        source, fields=["x", "y"], batch_size=BATCH, seed=0, tier="disk", cache_dir=cache, progress=False
    )
    next(iter(loader))
    first = time.time() - go
    io = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    result = {
        "first_batch_s": first,
        "built": loader._tier.cache.rebuilt_because is not None,
        "waited_s": loader._tier.cache.waited,
        "wchar": int(io["wchar"]),
        "write_bytes": int(io["write_bytes"]),
        "world_size": loader.world_size,
    }
    write_rank_result(Path(gate), rank, result)


def gib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def parse_options(description: str, name: str, worker: tuple[str, ...]) -> argparse.Namespace:
    """The command line of the 2-rank HDF5 benchmarks; ``rows`` and ``rounds`` filled in."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--quick", action="store_true", help="~40 MB, 1 round: a smoke check; writes nothing unless --out"
    )
    parser.add_argument(
        "--rows", type=int, help="rows of the HDF5 file (default 80,000: ~330 MB decoded; --quick 10,000)"
    )
    parser.add_argument("--rounds", type=int, help="rounds, arms alternating (default 3; --quick 1)")
    parser.add_argument(
        "--workdir", type=Path, help="where the files go (default: a temporary folder, removed)"
    )
    parser.add_argument(
        "--out", type=Path, help=f"result file (default benchmarks/results/{name}-cpu-<date>.json)"
    )
    parser.add_argument("--worker", nargs=len(worker), metavar=worker, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.rows = args.rows or (10_000 if args.quick else 80_000)
    args.rounds = args.rounds or (1 if args.quick else 3)
    return args


def main() -> int:
    args = parse_options(__doc__.split("\n\n")[0], "cache_build_ranks", ("SOURCE", "CACHE", "GATE", "RANK"))
    if args.worker:
        source, cache, gate, rank = args.worker
        worker(source, cache, gate, int(rank))
        return 0

    rows, rounds = args.rows, args.rounds
    work = args.workdir or Path(tempfile.mkdtemp(prefix="trainmedic-cache-ranks-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "benchmark": "cache_build_ranks",
        **_env.environment(),
        "device": "cpu",
        "settings": {
            "quick": args.quick,
            "rows": rows,
            "features": FEATURES,
            "chunk_rows": CHUNK_ROWS,
            "compression": "gzip 1",
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
                folder = work / f"round{round_}-{arm}"
                run = run_arm(arm, source, folder)
                run["round"] = round_
                runs.append(run)
                print(
                    f"  round {round_} {arm:9s} first batch {run['first_batch_s']:.2f} s, builds {run['builds']}",
                    flush=True,
                )
                shutil.rmtree(folder, ignore_errors=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    summary = {}
    for arm in ARMS:
        mine = [r for r in runs if r["arm"] == arm]
        summary[arm] = {
            key: statistics.median(r[key] for r in mine)
            for key in (
                "first_batch_s",
                "builds",
                "wchar_bytes",
                "write_bytes",
                "disk_used_bytes",
                "cache_folders",
            )
        }
    summary["speedup_first_batch"] = summary["per_rank"]["first_batch_s"] / summary["lock"]["first_batch_s"]
    result.update(
        runs=runs,
        summary=summary,
        load_average_after=_env.load_average(),
        benchmark_seconds=time.perf_counter() - started,
    )

    print(
        f"\n2 ranks, {gib(result['source_bytes'])} HDF5 (gzip 1), {rows} rows decoded to {gib(rows * (FEATURES * 4 + 8))}; "
        f"medians of {rounds} round(s)"
    )
    header = ("first batch (both ranks)", "builds", "written (wchar)", "to disk", "disk used")
    print(f"{'arm':10s} {header[0]:>25s} {header[1]:>7s} {header[2]:>16s} {header[3]:>10s} {header[4]:>10s}")
    for arm in ARMS:
        s = summary[arm]
        print(
            f"{arm:10s} {s['first_batch_s']:>23.2f} s {s['builds']:>7.0f} {gib(s['wchar_bytes']):>16s} "
            f"{gib(s['write_bytes']):>10s} {gib(s['disk_used_bytes']):>10s}"
        )
    print(
        f"per-rank builds take {summary['speedup_first_batch']:.2f}x as long to the first batch on both ranks; "
        f"{result['benchmark_seconds']:.0f} s, load average after {result['load_average_after']}"
    )
    if args.out or not args.quick:
        _env.write_result(result, args.out or _env.results_path("cache_build_ranks", "cpu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
