"""Seed 001's generation job: one sample per call against ``trainmedic.batch``.

Workload: ``workloads/iq_generator.py``, complex baseband IQ of one transmitter at 7 receivers
(FM carrier, path delay, 3-tap multipath, Rayleigh fading, path loss, AWGN), ``--samples``
transmitters (10,000 by default), at several IQ lengths per receiver.

Arms, interleaved per round, order rotated, medians reported (samples/s):

* ``loop``: the per-sample function called once per sample in a Python loop, drawing from
  torch's global generator (the user's code before trainmedic: the fastest per-sample form);
* ``loop_rng``: the same loop with the per-sample ``rng`` streams (what ``vectorize`` reproduces);
* ``vectorize``: ``batch.vectorize(fn)`` called in chunks of the size ``generate`` picks;
* ``vectorize_global``: the same for the global-generator function (vmap's
  ``randomness="different"``): batching alone, without reproducible per-sample draws;
* ``generate``: the whole ``batch.generate`` job, shards written (fsync'ed) to a temporary folder.

The speedup is against ``loop``, the faster baseline. The goal (8x, seed 001's) is for the
batched computation, ``vectorize`` against ``loop`` at 128 IQ samples a receiver; ``generate``
adds the job's own costs (tracing the call's memory, writing and fsync'ing every shard) that the
loop, which keeps nothing, does not pay. A sweep of call sizes shows what the automatic size
leaves on the table. Batched and per-sample outputs are compared (max relative
difference) on the first 64 samples.

    python benchmarks/batch_generate.py             # ~4 min on the 2-vCPU dev VM; writes results/batch_generate-<date>.json
    python benchmarks/batch_generate.py --quick     # smoke run; writes nothing unless --out
"""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _env

sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))

import iq_generator as workload
import torch

from trainmedic import batch
from trainmedic.batch.generate import _size
from trainmedic.batch.params import as_params

GOAL_SPEEDUP = 8.0


def columns(params: dict) -> dict[str, torch.Tensor]:
    return {k: torch.as_tensor(v) for k, v in params.items()}


def time_loop(fn, cols: dict, samples: int, with_rng: bool) -> float:
    vf = batch.vectorize(fn)
    started = time.perf_counter()
    for i in range(samples):
        row = {k: v[i] for k, v in cols.items()}
        vf.one(i, **row, seed=0) if with_rng else fn(**row)
    return samples / (time.perf_counter() - started)


def time_vectorized(fn, cols: dict, samples: int, call: int) -> float:
    vf = batch.vectorize(fn)
    vf(**{k: v[:2] for k, v in cols.items()})  # vmap decided outside the timing
    started = time.perf_counter()
    for first in range(0, samples, call):
        vf(**{k: v[first : first + call] for k, v in cols.items()}, seed=0, start=first)
    return samples / (time.perf_counter() - started)


def time_generate(fn, params: dict) -> tuple[float, dict]:
    folder = Path(tempfile.mkdtemp(prefix="batch-bench-"))
    try:
        started = time.perf_counter()
        result = batch.generate(fn, params, out=folder / "job", progress=False)
        seconds = time.perf_counter() - started
        return result.samples / seconds, {"batch_size": result.batch_size, "shard_size": result.shard_size, "sizing": result.sizing}
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def agreement(fn, cols: dict) -> float:
    vf = batch.vectorize(fn)
    head = {k: v[:64] for k, v in cols.items()}
    out = vf(**head, seed=0)
    worst = 0.0
    for i in range(64):
        one = vf.one(i, **{k: v[i] for k, v in head.items()}, seed=0)
        worst = max(worst, ((out[i] - one).abs().max() / one.abs().max()).item())
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--loop-samples", type=int, default=2_000, help="samples the per-sample loops time (they scale linearly)")
    parser.add_argument("--lengths", default="128,64,256,1024", help="IQ samples a receiver; the first is the goal's")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out")
    args = parser.parse_args()
    if args.quick:
        args.samples, args.loop_samples, args.lengths, args.rounds = 1_000, 200, "128", 1
    lengths = [int(x) for x in args.lengths.split(",")]
    params = workload.params(args.samples)
    cols = columns(params)
    rows = []
    for length in lengths:
        fn = functools.partial(workload.iq_sample, length=length)
        fn_global = functools.partial(workload.iq_sample_global, length=length)
        call = _size(batch.vectorize(fn), as_params(params), "auto", torch.device("cpu"), 0).batch_size
        arms = {
            "loop": functools.partial(time_loop, fn_global, cols, args.loop_samples, with_rng=False),
            "loop_rng": functools.partial(time_loop, fn, cols, args.loop_samples, with_rng=True),
            "vectorize": functools.partial(time_vectorized, fn, cols, args.samples, call),
            "vectorize_global": functools.partial(time_vectorized, fn_global, cols, args.samples, call),
            "generate": functools.partial(lambda f: time_generate(f, params)[0], fn),
        }
        rates: dict[str, list[float]] = {name: [] for name in arms}
        for r in range(args.rounds):
            names = list(arms)
            names = names[r % len(names) :] + names[: r % len(names)]
            for name in names:
                rates[name].append(arms[name]())
        _, layout = time_generate(fn, params)
        sweep = {size: time_vectorized(fn, cols, min(args.samples, 4096), size) for size in (16, 64, 256, 1024, 4096)}
        median = {name: statistics.median(v) for name, v in rates.items()}
        rows.append(
            {
                "iq_length": length,
                "samples": args.samples,
                "auto_call_size": call,
                "generate_layout": layout,
                "samples_per_s": median,
                "samples_per_s_all": rates,
                "speedup_vectorize_vs_loop": median["vectorize"] / median["loop"],
                "speedup_generate_vs_loop": median["generate"] / median["loop"],
                "speedup_vectorize_global_vs_loop": median["vectorize_global"] / median["loop"],
                "speedup_vectorize_vs_loop_rng": median["vectorize"] / median["loop_rng"],
                "call_size_sweep_samples_per_s": sweep,
                "max_relative_difference_batched_vs_per_sample": agreement(fn, cols),
            }
        )
    print(
        f"{'IQ length':>9} {'loop/s':>8} {'loop+rng/s':>10} {'vectorize/s':>11} {'vec global/s':>12} {'generate/s':>10} "
        f"{'call':>5} {'x vec':>6} {'x glob':>6} {'x gen':>6}"
    )
    for row in rows:
        m = row["samples_per_s"]
        print(
            f"{row['iq_length']:>9} {m['loop']:>8.0f} {m['loop_rng']:>10.0f} {m['vectorize']:>11.0f} {m['vectorize_global']:>12.0f} "
            f"{m['generate']:>10.0f} {row['auto_call_size']:>5} {row['speedup_vectorize_vs_loop']:>6.1f} "
            f"{row['speedup_vectorize_global_vs_loop']:>6.1f} {row['speedup_generate_vs_loop']:>6.1f}"
        )
    for row in rows:
        sweep = ", ".join(f"{k}: {v:.0f}" for k, v in row["call_size_sweep_samples_per_s"].items())
        print(f"  length {row['iq_length']}: samples/s by call size {{{sweep}}}; auto {row['auto_call_size']}; "
              f"batched vs per-sample max rel. diff {row['max_relative_difference_batched_vs_per_sample']:.1e}")
    headline = rows[0]
    met = headline["speedup_vectorize_vs_loop"] >= GOAL_SPEEDUP
    print(f"goal: vectorize >= {GOAL_SPEEDUP:.0f}x the per-sample loop at {headline['iq_length']} IQ samples: "
          f"{headline['speedup_vectorize_vs_loop']:.1f}x -> {'met' if met else 'NOT met'}")
    result = {"benchmark": "batch_generate", "environment": _env.environment(), "goal_speedup": GOAL_SPEEDUP, "goal_met": met, "rows": rows}
    out = Path(args.out) if args.out else (None if args.quick else _env.results_path("batch_generate"))
    if out is not None:
        out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {out}")
    return 0 if met else 1


if __name__ == "__main__":
    raise SystemExit(main())
