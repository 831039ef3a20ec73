"""``trainmedic tune`` on two workloads, checked by an independent re-measurement.

Workloads (``workloads/``):

* ``unet3d``: seed 002's shape, a 3D U-Net on 40³ volumes (instance norm, ReLU, trilinear
  upsampling, skip connection, L1 loss, Adam);
* ``mlp``: a wide MLP (3 × 1024², SGD with momentum), whose intensity grows with the batch.

For each, ``tune`` runs its staged search (batch ladder per precision, channels_last_3d on the
two fastest for the conv net, torch.compile on the two fastest). Then the check: the fastest
configurations it found (up to ``--contenders``, with its pick and its baseline) are built again
and measured in interleaved rounds (order rotated each round, ``measure`` with 3 trials each), so
the machine's drift hits every configuration alike. The pick passes when it is the fastest of the
re-measurement or tied with it under tune's own tie rule. The counted step of each pick is also
placed under two catalog GPUs' roofs, to show which verdict the same step gets on a card.

    python benchmarks/tune_grid.py                 # ~15 min on the 2-vCPU dev VM; writes results/tune_grid-<date>.json
    python benchmarks/tune_grid.py --quick         # MLP only, no compile; writes nothing unless --out
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import _env

sys.path.insert(0, str(Path(__file__).resolve().parent / "workloads"))

import mlp
import torch
import unet3d

from trainmedic.roofline.place import catalog_ceilings, roofline
from trainmedic.tune import tune
from trainmedic.tune.counting import count_step
from trainmedic.tune.measure import measure
from trainmedic.tune.model import Measurement, Row
from trainmedic.tune.step import TrainingStep
from trainmedic.tune.ties import within_noise

WORKLOADS = {"unet3d": unet3d.build, "mlp": mlp.build}
CARDS = ("rtx3090", "h100")


def remeasure(build, configs, device: torch.device, rounds: int) -> dict:
    """Each configuration's samples/s over ``rounds`` interleaved rounds, steps built once and kept."""
    steps = {c: TrainingStep(build, c, device) for c in configs}
    for step in steps.values():
        measure(step, trials=3, min_trial_s=0.2)  # warm-up, compilation included, not counted
    speeds: dict = {c: [] for c in configs}
    for r in range(rounds):
        order = configs[r % len(configs) :] + configs[: r % len(configs)]
        for config in order:
            speeds[config] += measure(steps[config], trials=3, min_trial_s=0.3).trials
    return speeds


def run_workload(name: str, device: torch.device, compile_modes, contenders: int, rounds: int) -> dict:
    build = WORKLOADS[name]
    started = time.monotonic()
    result = tune(
        build, target=f"benchmarks/workloads/{name}.py:build", device=str(device), compile=compile_modes
    )
    tune_s = time.monotonic() - started
    fastest = sorted(result.measured, key=lambda r: -(r.samples_per_s or 0.0))
    picked = {result.best, result.baseline, *(r.config for r in fastest[:contenders])}
    configs = [c for c in (r.config for r in fastest) if c in picked]
    speeds = remeasure(build, configs, device, rounds)
    rows = {c: Row(c, "measured", Measurement(tuple(s), 1, 0.0)) for c, s in speeds.items()}
    winner = max(rows.values(), key=lambda r: r.samples_per_s)
    best_row = rows[result.best]
    confirmed = best_row is winner or within_noise(winner, best_row)
    cost = count_step(
        build, result.best.batch_size, "fp32" if result.best.precision == "tf32" else result.best.precision
    )
    seconds = result.best.batch_size / result.row(result.best).samples_per_s
    on_cards = {}
    for card in CARDS:
        line = roofline(cost, catalog_ceilings(card), result.best.precision, seconds)
        on_cards[card] = (
            None
            if line is None
            else {
                "bound": line.bound,
                "bandwidth_share": line.bandwidth_share,
                "intensity": line.intensity,
                "ridge": line.ridge,
            }
        )
    return {
        "workload": name,
        "tune_seconds": tune_s,
        "tune": result.to_dict(),
        "remeasured": [
            {
                "config": c.to_dict(),
                "label": c.label,
                "samples_per_s": statistics.median(s),
                "low": min(s),
                "high": max(s),
                "trials": s,
                "tune_samples_per_s": result.row(c).samples_per_s,
            }
            for c, s in speeds.items()
        ],
        "remeasured_fastest": winner.config.to_dict(),
        "pick_confirmed": confirmed,
        "verdict": result.verdict,
        "why": result.why,
        "pick_bound": result.row(result.best).roofline.bound if result.row(result.best).roofline else None,
        "pick_on_catalog_gpus": on_cards,
    }


def print_workload(entry: dict) -> None:
    tuned = entry["tune"]
    print(
        f"\n== {entry['workload']}: tune took {entry['tune_seconds']:.0f} s, {len(tuned['rows'])} configurations"
    )
    print(
        f"{'config':44} {'samples/s':>10} {'±':>6} {'1st step':>9} {'FLOP/B':>7} {'bound':>9} {'bw share':>8}"
    )
    for row in tuned["rows"]:
        m, roof = row["measurement"], row["roofline"]
        if m is None:
            print(f"{row['label']:44} {row['status']:>10}  {row['reason'] or ''}")
            continue
        share = f"{roof['bandwidth_share']:.0%}" if roof and roof["bandwidth_share"] is not None else "-"
        print(
            f"{row['label']:44} {m['samples_per_s']:10.3g} {m['spread']:6.1%} {m['first_step_s']:8.2f}s "
            f"{(roof or {}).get('intensity', 0):7.1f} {(roof or {}).get('bound', '-'):>9} {share:>8}"
        )
    print(f"verdict: {entry['verdict']}")
    for line in entry["why"]:
        print(f"  - {line}")
    print("re-measured, interleaved:")
    for r in sorted(entry["remeasured"], key=lambda r: -r["samples_per_s"]):
        print(
            f"  {r['label']:44} {r['samples_per_s']:10.3g}  [{r['low']:.3g} .. {r['high']:.3g}]  (tune: {r['tune_samples_per_s']:.3g})"
        )
    print(
        f"pick confirmed by re-measurement: {entry['pick_confirmed']}; pick is {entry['pick_bound']}-bound here; "
        + ", ".join(
            f"on {k}: {v['bound']} ({v['bandwidth_share']:.0%} bandwidth time)"
            for k, v in entry["pick_on_catalog_gpus"].items()
            if v
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--device", default="auto")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--contenders", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    device = torch.device(
        "cuda"
        if args.device == "auto" and torch.cuda.is_available()
        else "cpu"
        if args.device == "auto"
        else args.device
    )
    names = ["mlp"] if args.quick else list(WORKLOADS)
    compile_modes = (False,) if args.quick else (False, True)
    entries = []
    for name in names:
        entry = run_workload(name, device, compile_modes, args.contenders, args.rounds)
        print_workload(entry)
        entries.append(entry)
    out = args.out or (
        None if args.quick else _env.results_path("tune_grid", "cuda" if device.type == "cuda" else "cpu")
    )
    if out is not None:
        payload = {
            "benchmark": "tune_grid",
            "environment": _env.environment(),
            "gpu": _env.gpu(),
            "device": str(device),
            "workloads": entries,
        }
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
