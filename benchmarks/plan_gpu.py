"""Hold `trainmedic plan` to real training steps on this machine's GPU, and keep them as ground truth.

For every case, the plan for this card (``--device``, found from the card's name) is held against
two real steps run in a child process (``trainmedic.plan.verify``, what `trainmedic plan --verify`
runs): peak allocated and reserved, the phase of each peak, the first divergence of the planned
allocations from the card's. The cases are the 17 of the recorded set (tests/plan/gpu_truth)
and 5 kinds of model the planner was never held to (``workloads/plan_models.py``: a ViT with
SDPA in bf16, a channels-last ResNet with batch norm, a GRU, a diffusion U-Net with attention, an
MLP with dropout); then three ``--max-batch`` answers are run for real under the capacity they
were asked for, at the answer and 15 % above it.

It writes a folder like tests/plan/gpu_truth/h200-2026-11-26 (``traces/``, ``plan_vs_real.json``,
the cuDNN workspaces the traces show in ``cudnn_workspaces.json``, a ``README.md`` with the
table) and ``benchmarks/results/plan_gpu-<device>-<date>.json``.

    python benchmarks/plan_gpu.py                          # on a card: every case (~5 min on an H200)
    python benchmarks/plan_gpu.py --only gru vit_sdpa      # some of them
    python benchmarks/plan_gpu.py --plan-only --device h200   # no GPU: the plans alone (checks every build)
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import _env

sys.path.insert(0, str(_env.REPO / "src"))

TRUTH = _env.REPO / "tests" / "plan" / "gpu_truth"
MODELS = "tests/plan/gpu_truth/h200-2026-11-26/models"
ZOO, NEW = "benchmarks/plan_zoo.py", "benchmarks/workloads/plan_models.py"

#: name -> (spec relative to the repository, batch, precision): the recorded set, then the new kinds.
CASES: dict[str, tuple[str, int, str]] = {
    "mlp_adam": (f"{ZOO}:build_mlp_adam", 4096, "fp32"),
    "cnn_sgd": (f"{ZOO}:build_cnn_sgd", 128, "fp32"),
    "cnn_sgd_bf16": (f"{ZOO}:build_cnn_sgd", 128, "bf16"),
    "transformer_eager": (f"{ZOO}:build_transformer_eager", 16, "fp32"),
    "transformer_sdpa": (f"{ZOO}:build_transformer_sdpa", 16, "fp32"),
    "transformer_sdpa_bf16": (f"{ZOO}:build_transformer_sdpa", 16, "bf16"),
    "lstm": (f"{ZOO}:build_lstm", 128, "fp32"),
    "embedding_mlp": (f"{ZOO}:build_embedding_mlp", 128, "fp32"),
    "sinkhorn_pairwise": (f"{ZOO}:build_sinkhorn_pairwise", 1024, "fp32"),
    "unet3d": ("benchmarks/workloads/unet3d.py:build", 4, "fp32"),
    "unet3d_bf16": ("benchmarks/workloads/unet3d.py:build", 4, "bf16"),
    "ho_mlp_adam": (f"{MODELS}/mlp_adam.py:build", 4096, "fp32"),
    "ho_convnet": (f"{MODELS}/convnet.py:build", 128, "fp32"),
    "ho_convnet_bf16": (f"{MODELS}/convnet.py:build", 128, "bf16"),
    "ho_seed000_attention": (f"{MODELS}/seed000_attention.py:build", 2, "fp32"),
    "ho_gpt1b_b2": (f"{MODELS}/gpt1b.py:build", 2, "fp32"),
    "ho_gpt1b_bf16_b4": (f"{MODELS}/gpt1b.py:build", 4, "bf16"),
    "vit_sdpa": (f"{NEW}:build_vit_sdpa", 64, "bf16"),
    "resnet_cl": (f"{NEW}:build_resnet_cl", 64, "fp32"),
    "gru": (f"{NEW}:build_gru", 64, "fp32"),
    "diffusion_unet": (f"{NEW}:build_diffusion_unet", 16, "bf16"),
    "dropout_mlp": (f"{NEW}:build_dropout_mlp", 1024, "fp32"),
}
#: --max-batch answers checked for real: name -> (case, capacity in GiB).
MAX_BATCH = {
    "maxb_seed000": ("ho_seed000_attention", 12),
    "maxb_convnet": ("ho_convnet", 8),
    "maxb_transformer_sdpa_bf16": ("transformer_sdpa_bf16", 8),
}
GiB, MiB = 2**30, 2**20


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--only", nargs="+", metavar="NAME", choices=sorted(CASES) + sorted(MAX_BATCH), help="cases to run"
    )
    parser.add_argument(
        "--device", metavar="KEY", help="catalog key of the card (default: this machine's GPU)"
    )
    parser.add_argument("--plan-only", action="store_true", help="plan every case and stop: no GPU needed")
    parser.add_argument(
        "--out", type=Path, help="the folder to write (default tests/plan/gpu_truth/<device>-<date>)"
    )
    parser.add_argument("--no-write", action="store_true", help="print the table, write nothing")
    args = parser.parse_args()

    from trainmedic.devices import get_device
    from trainmedic.plan.verify import gpu_problem

    problem = None if args.plan_only else gpu_problem()
    if problem:
        print(f"plan_gpu.py: {problem}; --plan-only plans the cases without one", file=sys.stderr)
        return 2
    device = get_device(args.device) if args.device else _this_card()
    names = [n for n in CASES if not args.only or n in args.only]
    checks = [n for n in MAX_BATCH if not args.only or n in args.only]
    out = args.out or TRUTH / f"{device.key}-{_env.today()}"
    if not args.no_write and not args.plan_only:
        (out / "traces").mkdir(parents=True, exist_ok=True)

    rows, learned = {}, []
    for name in names:
        rows[name], entries = _case(
            name, device, args.plan_only, None if args.no_write or args.plan_only else out
        )
        learned += entries
        _print_row(name, rows[name])
    for name in checks if not args.plan_only else []:
        rows[name] = _max_batch(name, device)
        print(
            f"{name:28s} answer {rows[name]['answer']}: {rows[name]['at_answer']}; 15 % above: {rows[name]['above']}",
            flush=True,
        )
    if args.no_write or args.plan_only:
        return 0
    _write(out, device, rows, learned)
    return 0


def _this_card():
    import torch

    from trainmedic.devices import get_device

    return get_device(torch.cuda.get_device_name(0))


def _case(name: str, device, plan_only: bool, out: Path | None) -> tuple[dict[str, Any], list[dict]]:
    from trainmedic.plan import load_build
    from trainmedic.plan.from_trace import plan_from_trace
    from trainmedic.plan.learn import learn_workspaces
    from trainmedic.plan.recorded import write_recorded
    from trainmedic.plan.trace import trace_step
    from trainmedic.plan.verify import record_on_gpu, verify_against

    spec, batch, precision = CASES[name]
    started = time.perf_counter()
    trace = trace_step(load_build(str(_env.REPO / spec)), batch, device, precision)
    plan = plan_from_trace(trace, device, device.memory_bytes, precision, 0.1)
    row: dict[str, Any] = {
        "spec": spec,
        "batch": batch,
        "precision": precision,
        "plan_s": round(time.perf_counter() - started, 2),
        "plan": plan.to_dict(),
    }
    if plan_only:
        return row, []
    record = out / "traces" / f"{name}.json.gz" if out is not None else None
    try:
        recorded = record_on_gpu(str(_env.REPO / spec), batch, precision, record=record)
    except Exception as exc:  # noqa: BLE001 - one case failing on the card is a row, not the end
        row["error"] = str(exc)
        return row, []
    recorded.result["spec"] = spec  # as the repository names it, not this machine's path
    if record is not None:
        write_recorded(recorded, record)
    verification = verify_against(trace, recorded, name)
    row.update({"real": recorded.result, **verification.to_dict()})
    entries, _ = learn_workspaces(trace, recorded) if trace.conv_passes else ([], 0)
    return row, entries


def _max_batch(name: str, device) -> dict[str, Any]:
    from trainmedic.plan import load_build, plan_memory
    from trainmedic.plan.verify import record_on_gpu

    case, gib = MAX_BATCH[name]
    spec, _, precision = CASES[case]
    plan = plan_memory(
        load_build(str(_env.REPO / spec)),
        device=device,
        capacity=f"{gib}GiB",
        precision=precision,
        max_batch=True,
    )
    row: dict[str, Any] = {
        "case": case,
        "capacity_gib": gib,
        "answer": plan.max_batch,
        "plan": plan.to_dict(),
    }
    for key, batch in (
        ("at_answer", plan.max_batch),
        ("above", max(plan.max_batch + 1, round(plan.max_batch * 1.15))),
    ):
        if not batch:
            row[key] = "no batch fits"
            continue
        try:
            result = record_on_gpu(str(_env.REPO / spec), batch, precision, cap_bytes=gib * GiB).result
            row[key] = (
                f"batch {batch} {'ran out of memory' if result['oom'] else 'fits'} (peak {result['peak_bytes'] / MiB:.1f} MiB)"
            )
            row[f"{key}_result"] = result
        except Exception as exc:  # noqa: BLE001
            row[key] = f"batch {batch} failed: {exc}"
    return row


def _print_row(name: str, row: dict[str, Any]) -> None:
    plan = row["plan"]
    if "peak_error" not in row:
        level = plan.get("confidence", {}).get("level", "")
        why = f" ({row['error']})" if "error" in row else ""
        print(
            f"{name:28s} plan {plan['peak_bytes'] / MiB:10.1f} MiB, reserved {plan['reserved_bytes'] / MiB:10.1f} MiB, {level}{why}",
            flush=True,
        )
        return
    print(
        f"{name:28s} peak {row['planned']['peak_bytes'] / MiB:10.1f} vs {row['recorded']['peak_bytes'] / MiB:10.1f} MiB "
        f"{row['peak_error']:+7.2%}  reserved {row['reserved_error']:+7.2%}  peak in {row['planned']['peak_phase']}/"
        f"{row['recorded']['peak_phase']}",
        flush=True,
    )


def _write(out: Path, device, rows: dict[str, Any], learned: list[dict]) -> None:
    gpu = _env.gpu()
    (out / "plan_vs_real.json").write_text(
        json.dumps({"device": gpu, "environment": _env.environment(), "cases": rows}, indent=1)
    )
    (out / "cudnn_workspaces.json").write_text(
        json.dumps(
            {device.key: {"device": gpu and gpu["name"], "torch": _env.version("torch"), "passes": learned}},
            indent=1,
        )
    )
    models = out / "models"
    if not models.exists():
        shutil.copytree(TRUTH / "h200-2026-11-26" / "models", models)
    lines = [
        f"# {gpu and gpu['name']} ({_env.today()})",
        "",
        "`benchmarks/plan_gpu.py`: planned against two real steps.",
        "",
        "| case | batch | precision | real peak MiB | error | real reserved MiB | error | peak phase (plan/card) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, row in rows.items():
        if "peak_error" in row:
            lines.append(
                f"| {name} | {row['batch']} | {row['precision']} | {row['recorded']['peak_bytes'] / MiB:.1f} | "
                f"{row['peak_error']:+.1%} | {row['recorded']['reserved_bytes'] / MiB:.0f} | {row['reserved_error']:+.1%} | "
                f"{row['planned']['peak_phase']}/{row['recorded']['peak_phase']} |"
            )
    (out / "README.md").write_text("\n".join(lines) + "\n")
    result = _env.results_path("plan_gpu", device.key)
    result.write_text(
        json.dumps(
            {
                "environment": _env.environment(),
                "device": gpu,
                "folder": str(out.relative_to(_env.REPO)),
                "cases": {
                    n: {k: v for k, v in r.items() if k not in ("plan", "real")} for n, r in rows.items()
                },
            },
            indent=1,
        )
    )
    print(f"wrote {out} and {result}")


if __name__ == "__main__":
    sys.exit(main())
