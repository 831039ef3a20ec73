"""Disk-cache build of a gzip'd HDF5 file: serial ``data.load(tier="disk")`` vs ``data.build_cache`` on Ray.

Workload: one HDF5 file, ``x`` float32 rows of 512 values (smooth signals plus noise, quantised
to 1/256: what a sensor writes) and ``y`` int64 labels, chunks of 1,024 rows, gzip level 4 with
the byte-shuffle filter (``h5py``'s ``compression="gzip", shuffle=True``). Decoding a chunk is
inflate + unshuffle on one core (~270 MB/s of raw rows per core on the dev VM, h5py 3.16), and
the raw rows are only copied into the page cache after that, so the build is CPU-bound: the case
``build_cache`` is for. Default ``--rows 500000``: ~1.03 GB raw, ~300 MB on disk (3.5x).

Arms, in one run, each into a fresh cache folder (the source file stays in the page cache for
all of them, written just before):

* ``serial``: ``data.load(path, tier="disk")`` — the named baseline, one process;
* ``ray-1`` / ``ray-2``: ``data.build_cache(path, workers=k)`` on a local Ray started with
  ``num_cpus=k`` beforehand (its start-up is timed separately, ``ray_init_s``); the first build on
  a fresh Ray includes starting its worker processes, as a user's first call does.

Every Ray-built cache is checked against the serial one (manifest with all CRC-32 blocks).
Rounds are interleaved (serial, ray-1, ray-2, then again); medians are reported.

    .venv/bin/python benchmarks/ray_cache_build.py                 # ~1-2 min on the 2-vCPU dev VM, 1 GB of free disk
    .venv/bin/python benchmarks/ray_cache_build.py --quick         # 20k rows, 1 round: a smoke check, writes nothing
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _env
import numpy as np

ROW_VALUES = 512
CHUNK_ROWS = 1024


def write_source(path: Path, rows: int) -> dict:
    import h5py

    rng = np.random.default_rng(0)
    t = np.linspace(0, 8 * np.pi, ROW_VALUES, dtype=np.float32)
    with h5py.File(path, "w") as f:
        x = f.create_dataset(
            "x",
            (rows, ROW_VALUES),
            "float32",
            chunks=(CHUNK_ROWS, ROW_VALUES),
            compression="gzip",
            compression_opts=4,
            shuffle=True,
        )
        y = f.create_dataset("y", (rows,), "int64", chunks=(CHUNK_ROWS,), compression="gzip", shuffle=True)
        for a in range(0, rows, 16 * CHUNK_ROWS):
            n = min(16 * CHUNK_ROWS, rows - a)
            freq = rng.uniform(0.5, 4.0, (n, 1)).astype(np.float32)
            block = np.sin(freq * t) + 0.05 * rng.standard_normal((n, ROW_VALUES), dtype=np.float32)
            x[a : a + n] = np.round(block * 256) / 256
            y[a : a + n] = rng.integers(0, 10, n)
    raw = rows * (ROW_VALUES * 4 + 8)
    return {
        "rows": rows,
        "raw_bytes": raw,
        "file_bytes": path.stat().st_size,
        "compression": "gzip level 4 + shuffle, chunks of 1024 rows",
    }


def crcs(folder: Path) -> list:
    manifest = json.loads((folder / "manifest.json").read_text())
    return [(e["file"], e["crc32_blocks"]) for e in manifest["fields"]]


def run_serial(path: Path, root: Path) -> tuple[float, Path]:
    from trainmedic import data

    started = time.perf_counter()
    data.load(path, tier="disk", cache_dir=root, progress=False)
    seconds = time.perf_counter() - started
    return seconds, next(p for p in root.iterdir() if not p.name.startswith("."))


def run_ray(path: Path, root: Path, workers: int) -> tuple[float, Path, int]:
    from trainmedic import data

    started = time.perf_counter()
    built = data.build_cache(path, cache_dir=root, workers=workers, progress=False)
    return time.perf_counter() - started, built.folder, built.partitions


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rows",
        type=int,
        help="rows of the HDF5 file (default 500,000: ~1 GB raw, ~300 MB gzip'd; --quick 20,000)",
    )
    parser.add_argument("--rounds", type=int, help="interleaved rounds (default 2; --quick 1)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="small file, one round: a smoke check; writes nothing unless --out",
    )
    parser.add_argument(
        "--workdir", type=Path, help="where the file and caches go (default: a temporary folder, removed)"
    )
    parser.add_argument("--no-write", action="store_true", help="print only; write no result file")
    parser.add_argument(
        "--out", type=Path, help="result file (default benchmarks/results/ray_cache_build-cpu-<date>.json)"
    )
    args = parser.parse_args()
    try:
        import h5py  # noqa: F401
        import ray
    except ImportError as exc:
        print(f"ray_cache_build: {exc.name} is missing; pip install -e '.[hdf5,ray]'", file=sys.stderr)
        return 2
    rows = args.rows or (20_000 if args.quick else 500_000)
    rounds = args.rounds or (1 if args.quick else 2)
    work = args.workdir or Path(tempfile.mkdtemp(prefix="ray-cache-build-"))
    work.mkdir(parents=True, exist_ok=True)
    began = time.perf_counter()
    try:
        source = work / "signals.h5"
        workload = write_source(source, rows)
        arms = ["serial", "ray-1", "ray-2"]
        seconds: dict[str, list[float]] = {arm: [] for arm in arms}
        inits: dict[str, list[float]] = {arm: [] for arm in arms[1:]}
        partitions = {}
        reference = None
        for r in range(rounds):
            for arm in arms:
                root = work / f"cache-{arm}-{r}"
                if arm == "serial":
                    s, folder = run_serial(source, root)
                else:
                    k = int(arm.split("-")[1])
                    started = time.perf_counter()
                    ray.init(num_cpus=k, include_dashboard=False, log_to_driver=False)
                    inits[arm].append(time.perf_counter() - started)
                    try:
                        s, folder, partitions[arm] = run_ray(source, root, k)
                    finally:
                        ray.shutdown()
                seconds[arm].append(s)
                if reference is None:
                    reference = crcs(folder)
                elif crcs(folder) != reference:
                    print(f"ray_cache_build: the {arm} cache differs from the serial one", file=sys.stderr)
                    return 1
                shutil.rmtree(root)
                print(f"[round {r + 1}/{rounds}] {arm}: {s:.2f} s", file=sys.stderr, flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(work, ignore_errors=True)
    serial = statistics.median(seconds["serial"])
    result_arms = []
    for arm in arms:
        median = statistics.median(seconds[arm])
        result_arms.append(
            {
                "name": arm,
                "workers": 1 if arm == "serial" else int(arm.split("-")[1]),
                "partitions": partitions.get(arm, 1),
                "seconds": seconds[arm],
                "median_s": median,
                "raw_mb_per_s": workload["raw_bytes"] / median / 1e6,
                "speedup_vs_serial": serial / median,
                "ray_init_s": inits.get(arm),
            }
        )
    header = f"{'arm':<8} {'workers':>7} {'parts':>5} {'median s':>9} {'raw MB/s':>9} {'vs serial':>9} {'ray.init s':>10}"
    print(
        f"\n{rows:,} rows, {workload['raw_bytes'] / 1e6:.0f} MB raw, {workload['file_bytes'] / 1e6:.0f} MB on disk "
        f"({workload['compression']}); {rounds} round(s), medians"
    )
    print(header)
    print("-" * len(header))
    for a in result_arms:
        init = f"{statistics.median(a['ray_init_s']):.2f}" if a["ray_init_s"] else "-"
        print(
            f"{a['name']:<8} {a['workers']:>7} {a['partitions']:>5} {a['median_s']:>9.2f} {a['raw_mb_per_s']:>9.0f} "
            f"{a['speedup_vs_serial']:>8.2f}x {init:>10}"
        )
    result = {
        "benchmark": "ray_cache_build",
        "environment": _env.environment(),
        "ray": _env.version("ray"),
        "h5py": _env.version("h5py"),
        "workload": workload,
        "rounds": rounds,
        "baseline": "serial data.load(path, tier='disk') in one process, same run",
        "arms": result_arms,
        "benchmark_seconds": time.perf_counter() - began,
    }
    if (args.quick and args.out is None) or args.no_write:
        return 0
    _env.write_result(result, args.out or _env.results_path("ray_cache_build", "cpu"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
