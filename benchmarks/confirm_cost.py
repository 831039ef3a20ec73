"""What the confirmation costs a diagnosis-only run, and what it measures beside the ablation truth.

Per workload, ``trainmedic run --steps N`` and the same with ``--no-confirm`` run in turn
(A B B A ..., so that a drifting machine slows both alike); the cost is the whole command's wall
time with the confirmation over the one without, pair by pair (median and range). The
confirmed gain is read from the report and set beside the truth: the same script with its data
fix applied by hand, run under plain ``python`` in the same rounds, its median step (CPU time;
each workload is single-threaded) over the as-is one's. Goal: at most 20 % more wall time.

    python benchmarks/confirm_cost.py             # ~3 min
    python benchmarks/confirm_cost.py --rounds 2 --no-write

Writes ``benchmarks/results/confirm_cost-cpu-<date>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _env

ROOT = Path(__file__).resolve().parents[1]
GOAL = 1.2

#: A clock for the truth runs: process CPU time between successive optimizer steps.
TIMER = """
import runpy, sys, time
from torch.optim.optimizer import register_optimizer_step_post_hook
marks = []
register_optimizer_step_post_hook(lambda *a: marks.append(time.process_time()))
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
steps = [b - a for a, b in zip(marks, marks[1:])][5:]
print("STEP", sorted(steps)[len(steps) // 2])
"""


def workloads(folder: Path) -> list[dict]:
    """The docs' HDF5 example and the demo's SQLite loop, each with its data fix by hand."""
    hdf5 = folder / "hdf5"
    shutil.copytree(ROOT / "docs" / "examples" / "run", hdf5)
    source = (hdf5 / "train.py").read_text()
    fixed = source.replace(
        'with h5py.File(path, "r") as f:\n',
        'with h5py.File(path, "r") as f:\n    X, Y = f["x"][:], f["y"][:]\n',
    )
    fixed = fixed.replace('torch.from_numpy(f["x"][idx])', "torch.from_numpy(X[idx])")
    fixed = fixed.replace('torch.from_numpy(f["y"][idx])', "torch.from_numpy(Y[idx])")
    assert fixed.count("X[idx]") == 1, "the HDF5 example changed: update the hand fix"
    (hdf5 / "fixed.py").write_text(fixed)
    subprocess.run([sys.executable, "train.py", "--steps", "1"], cwd=hdf5, check=True, capture_output=True)

    sql = folder / "sql"
    sql.mkdir()
    from trainmedic import demo

    db = demo.make_dataset(sql / "signals.db")
    demo.copy_script(sql)
    common = ["--db", str(db), "--batch-size", str(demo.BATCH_SIZE)]
    return [
        {
            "name": "hdf5 read per step (docs/examples/run)",
            "cwd": hdf5,
            "script": ["train.py", "--steps", "400"],
            "fixed": ["fixed.py", "--steps", "120"],
        },
        {
            "name": "SQLite query per step (the demo's loop)",
            "cwd": sql,
            "script": ["starved_train.py", *common, "--steps", "400"],
            "fixed": ["starved_train.py", *common, "--steps", "120", "--preload"],
        },
    ]


def run_tm(w: dict, confirm: bool, steps: int) -> tuple[float, dict]:
    out = Path(w["cwd"]) / f"report-{confirm}.json"
    command = [
        sys.executable,
        "-m",
        "trainmedic",
        "run",
        "--quiet",
        "--steps",
        str(steps),
        "--json",
        str(out),
    ]
    command += [] if confirm else ["--no-confirm"]
    started = time.perf_counter()
    subprocess.run([*command, *w["script"]], cwd=w["cwd"], check=True, capture_output=True)
    return time.perf_counter() - started, json.loads(out.read_text())


def truth_step(w: dict, argv: list[str]) -> float:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", TIMER, *argv],
        cwd=w["cwd"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout.split("STEP")[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4, help="ABBA rounds per workload")
    parser.add_argument("--steps", type=int, default=40, help="the --steps window")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainmedic-confirm-") as tmp:
        for w in workloads(Path(tmp)):
            ratios, gains, estimates, asis, fixed = [], [], [], [], []
            for r in range(args.rounds):
                order = (True, False) if r % 2 == 0 else (False, True)
                walls = {}
                for confirm in order:
                    walls[confirm], report = run_tm(w, confirm, args.steps)
                    top = report["findings"][0]
                    if confirm and top.get("measured"):
                        gains.append(top["measured"]["gain"])
                        estimates.append(top["expected_speedup"])
                ratios.append(walls[True] / walls[False])
                # The truth's two arms in the same round, in turn.
                arms = [(asis, w["script"]), (fixed, w["fixed"])]
                for bucket, script in arms if r % 2 == 0 else arms[::-1]:
                    bucket.append(truth_step(w, script))
            truth = statistics.median(asis) / statistics.median(fixed)
            row = {
                "workload": w["name"],
                "steps": args.steps,
                "rounds": args.rounds,
                "cost_median": round(statistics.median(ratios), 4),
                "cost_range": [round(min(ratios), 4), round(max(ratios), 4)],
                "measured_gain_median": round(statistics.median(gains), 2) if gains else None,
                "estimated_gain_median": round(statistics.median(estimates), 2) if estimates else None,
                "truth_gain": round(truth, 2),
                "measured_over_truth": round(statistics.median(gains) / truth, 3) if gains else None,
            }
            rows.append(row)
            print(
                f"{row['workload']:<42} cost x{row['cost_median']:.3f} ({row['cost_range'][0]:.3f}-"
                f"{row['cost_range'][1]:.3f})  measured x{row['measured_gain_median']}  "
                f"estimated x{row['estimated_gain_median']}  truth x{row['truth_gain']}",
                flush=True,
            )
    result = {
        "benchmark": "confirm_cost",
        **_env.environment(),
        "goal": f"the confirmation adds at most {GOAL - 1:.0%} to a --steps run's wall time",
        "rows": rows,
        "met": all(r["cost_median"] <= GOAL for r in rows),
    }
    if not args.no_write:
        _env.write_result(result, _env.results_path("confirm_cost", "cpu"))
    return 0 if result["met"] else 1


if __name__ == "__main__":
    sys.exit(main())
