"""How well `trainmedic plan --device cpu` predicts how peak memory grows with batch size.

For every model of ``plan_zoo.py`` and two batch sizes B1 < B2, the plan's ``peak_bytes`` is
compared with a real CPU run of the same step (forward, loss, backward, optimizer step,
``zero_grad``, twice) in a fresh process that imports nothing from trainmedic. What is measured
there is the process's peak resident set above its resident set just before ``build``, with
``MALLOC_MMAP_THRESHOLD_=65536`` so that freed tensors go back to the OS and the resident set
follows the live tensors, and one thread. Each process first runs one warm-up step at B1 (kernel
code, thread pool, oneDNN and MKL caches are then resident and counted in neither batch), then
measures B1, then B2, handing malloc's free heap back in between.

The verdict compares *growth*, ``peak(B2) - peak(B1)``, planned against measured: a constant
offset (malloc's own heap, MKL buffers, page rounding) is the same at both batches and cancels.
Goal: within 10 %. The absolute peaks are reported too, for information. A second, optional lens
(``--allocated``) reads the peak of live allocations of torch's CPU allocator from the profiler:
it tells a planner that misses allocations apart from memory the resident set counts beyond them.

    python benchmarks/plan_accuracy_cpu.py                 # ~2 min; exit 0 when every model is within 10 %
    python benchmarks/plan_accuracy_cpu.py --only lstm cnn_sgd --repeats 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _env
import plan_zoo

GOAL = 0.10
ZOO_SCRIPT = Path(plan_zoo.__file__).resolve()
#: A low mmap threshold makes glibc give every block of 64 KiB or more its own mapping, returned
#: to the OS on free; one thread keeps one malloc arena and no per-thread kernel buffers.
CHILD_ENV = {"MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
MIB = 2**20


#: Models whose real run leaves allocated memory untouched, so RSS under-reads it (see _row).
JUDGED_BY_ALLOCATOR = {"lstm"}


def run_child(name: str, batch_sizes: tuple[int, ...], allocated: bool = False) -> list[dict[str, Any]]:
    """Real measurements in a fresh process (``plan_zoo.py``'s ``measure``), one per batch size."""
    args = [
        sys.executable,
        str(ZOO_SCRIPT),
        *(["--allocated"] if allocated else []),
        name,
        *map(str, batch_sizes),
    ]
    done = subprocess.run(
        args, env={**os.environ, **CHILD_ENV}, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[1:])} exited {done.returncode}: {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The median over processes of the step's resident bytes."""
    values = sorted(r["step_bytes"] for r in runs)
    return {
        "step_bytes": int(statistics.median(values)),
        "runs_step_bytes": values,
        "baseline_rss_bytes": runs[0]["baseline_rss_bytes"],
        "peak_source": runs[0]["peak_source"],
        "seconds_two_steps": statistics.median(r["seconds"] for r in runs),
    }


def planned(name: str, batch_size: int) -> dict[str, Any]:
    from trainmedic.plan import plan_memory

    # Only the peak is compared: the second trace that measures how each hotspot grows is skipped.
    plan = plan_memory(plan_zoo.ZOO[name][0], batch_size, device="cpu", measure_growth=False)
    return {
        "peak_bytes": plan.peak_bytes,
        "exact": plan.exact,
        "warnings": list(plan.warnings),
        "breakdown": plan.to_dict().get("breakdown"),
    }


def compare_many(
    cases: list[tuple[str, int, int]], repeats: int = 3, allocated: bool = False, jobs: int = 1
) -> list[dict[str, Any]]:
    """Planned against measured growth of the peak from B1 to B2, one row per ``(model, B1, B2)``.

    Each repeat is one fresh process that warms up at B1 and then measures B1 and B2. Every
    process is queued at once, ``jobs`` at a time (RSS is per process, so they do not disturb each
    other's numbers, only their timings), and the plans are made here meanwhile.
    """
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        pending = []
        for name, b1, b2 in cases:
            rss = [pool.submit(run_child, name, (b1, b2)) for _ in range(repeats)]
            alloc = pool.submit(run_child, name, (b1, b2), True) if allocated else None
            pending.append((name, b1, b2, rss, alloc))
        rows = []
        for name, b1, b2, rss, alloc in pending:
            plans = {b: planned(name, b) for b in (b1, b2)}
            done = [f.result() for f in rss]
            runs = {b: summarize([r[i] for r in done]) for i, b in enumerate((b1, b2))}
            lens = dict(zip((b1, b2), alloc.result())) if alloc else {}
            rows.append(_row(name, b1, b2, plans, runs, lens))
            print(f"  {name}: {rows[-1]['growth_error']:+.1%}", file=sys.stderr, flush=True)
    return rows


def _row(name: str, b1: int, b2: int, plans: dict, runs: dict, alloc: dict) -> dict[str, Any]:
    row: dict[str, Any] = {
        "model": name,
        "doc": (plan_zoo.ZOO[name][0].__doc__ or "").strip(),
        "b1": b1,
        "b2": b2,
        "planned": {str(b): plans[b] for b in (b1, b2)},
        "measured_rss": {str(b): runs[b] for b in (b1, b2)},
        "planned_growth_bytes": plans[b2]["peak_bytes"] - plans[b1]["peak_bytes"],
        "measured_growth_bytes": runs[b2]["step_bytes"] - runs[b1]["step_bytes"],
    }
    if alloc:
        row["measured_allocated"] = {str(b): alloc[b] for b in (b1, b2)}
        row["allocated_growth_bytes"] = alloc[b2]["allocated_peak_bytes"] - alloc[b1]["allocated_peak_bytes"]
    row["growth_error"] = row["planned_growth_bytes"] / row["measured_growth_bytes"] - 1
    row["absolute_error_b2"] = plans[b2]["peak_bytes"] / runs[b2]["step_bytes"] - 1
    row["pass"] = abs(row["growth_error"]) <= GOAL
    if name in JUDGED_BY_ALLOCATOR and "allocated_growth_bytes" in row:
        # oneDNN's LSTM workspace is allocated whole but only partly written, so RSS sees a
        # fraction of it; the allocator's bytes are what a GPU would have to hold.
        row["allocated_growth_error"] = row["planned_growth_bytes"] / row["allocated_growth_bytes"] - 1
        row["judged_by"] = "allocator"
        row["pass"] = abs(row["allocated_growth_error"]) <= GOAL
    return row


def render(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'model':<19} {'B1':>5} {'B2':>5} {'planned growth':>15} {'measured growth':>16} {'error':>8}"
        f"  {'alloc growth':>13} {'plan@B2':>10} {'RSS@B2':>10} {'abs err':>8}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        alloc = (
            f"{r['allocated_growth_bytes'] / MIB:10.1f} MiB"
            if "allocated_growth_bytes" in r
            else f"{'-':>13}"
        )
        lines.append(
            f"{r['model']:<19} {r['b1']:>5} {r['b2']:>5} {r['planned_growth_bytes'] / MIB:11.1f} MiB"
            f" {r['measured_growth_bytes'] / MIB:12.1f} MiB {r['growth_error']:+8.1%}  {alloc}"
            f" {r['planned'][str(r['b2'])]['peak_bytes'] / MIB:6.1f} MiB"
            f" {r['measured_rss'][str(r['b2'])]['step_bytes'] / MIB:6.1f} MiB {r['absolute_error_b2']:+8.1%}"
            f"  {'PASS' if r['pass'] else 'FAIL'}"
            + (
                f" by allocator bytes ({r['allocated_growth_error']:+.1%})"
                if r.get("judged_by") == "allocator"
                else ""
            )
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", nargs="+", choices=sorted(plan_zoo.ZOO), help="models to run (default: all)"
    )
    parser.add_argument(
        "--repeats", type=int, default=3, help="fresh processes per batch size; the median counts"
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="measuring processes at a time (RSS is per process; only timings suffer)",
    )
    parser.add_argument("--no-allocated", action="store_true", help="skip the profiler's allocator lens")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    names = args.only or list(plan_zoo.ZOO)
    cases = [(name, *plan_zoo.ZOO[name][1:]) for name in names]
    rows = compare_many(cases, args.repeats, allocated=not args.no_allocated, jobs=args.jobs)
    print(render(rows))
    passed = sum(r["pass"] for r in rows)
    print(f"\n{passed}/{len(rows)} within {GOAL:.0%} of the measured growth")
    if not args.no_write:
        result = {
            "benchmark": "plan_accuracy_cpu",
            **_env.environment(),
            "device": _env.cpu()["model"],
            "method": {
                "measured": "peak RSS (VmHWM after clear_refs) above RSS before build(); one process per repeat: "
                "warm-up step at B1, then B1, then B2 (malloc_trim between); median of the repeats",
                "child_env": CHILD_ENV,
                "repeats": args.repeats,
                "steps": 2,
                "goal": f"|planned growth / measured growth - 1| <= {GOAL}",
            },
            "rows": rows,
            "passed": passed,
        }
        path = _env.results_path("plan_accuracy_cpu")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {path.relative_to(_env.REPO)}")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
