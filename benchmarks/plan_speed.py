"""How long `trainmedic plan` takes on a ~1B-parameter transformer, and how much memory it needs.

Goal (issue 4): under 10 s on a 2-core CPU with under 2 GB of resident memory; nothing the
model would allocate is materialised. Each arm runs in a fresh process (imports included in the
memory, not in the time) and is repeated; the median time and the largest peak RSS are kept:

- ``trainmedic plan``: ``plan_memory(build, 8, device="h100", precision="bf16")`` — build under
  fake tensors, two full steps (forward, backward, AdamW), allocator replay, hotspots;
- baseline: PyTorch's own ``MemTracker`` (``torch.distributed._tools.mem_tracker``) on the same
  fake model for the same two steps on the CPU, the reference the plan is checked against; its peak is printed
  next to ``--device cpu``'s for the same step.

    python benchmarks/plan_speed.py            # ~1 min; exit 0 when the goal is met
    python benchmarks/plan_speed.py --no-write
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

import _env

GOAL_SECONDS = 10.0
GOAL_RSS = 2 * 10**9
HERE = Path(__file__).resolve()

MODEL = """
import torch, torch.nn as nn, torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, vocab=50304, d=2048, layers=18, heads=16, context=1024):
        super().__init__()
        self.emb, self.pos = nn.Embedding(vocab, d), nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.ln, self.head = nn.LayerNorm(d), nn.Linear(d, vocab, bias=False)

    def forward(self, idx):
        x = self.emb(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def build(batch_size):
    idx = torch.randint(0, 50304, (batch_size, 1024))
    loss = lambda logits: F.cross_entropy(logits.view(-1, logits.size(-1)), idx.view(-1))
    return dict(model=GPT(), inputs=idx, optimizer=lambda p: torch.optim.AdamW(p, lr=3e-4), loss_fn=loss)
"""


def child(arm: str) -> dict:
    import resource
    import time

    namespace: dict = {}
    exec(compile(MODEL, "gpt_1b.py", "exec"), namespace)
    build = namespace["build"]
    start = time.perf_counter()
    if arm == "planner":
        from trainmedic.plan import plan_memory

        plan = plan_memory(build, 8, device="h100", precision="bf16")
        cpu = plan_memory(build, 8, device="cpu")
        seconds = time.perf_counter() - start
        result = {
            "peak_bytes_h100_bf16": plan.peak_bytes,
            "peak_bytes_cpu_fp32": cpu.peak_bytes,
            "parameters": plan.breakdown.parameters // 4,
            "fits_h100": plan.fits,
            "seconds_both": seconds,
        }
    else:
        import torch
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.distributed._tools.mem_tracker import MemTracker

        with FakeTensorMode(allow_non_fake_inputs=True):
            parts = build(8)
            model, inputs, loss_fn = parts["model"], parts["inputs"], parts["loss_fn"]
            optimizer = parts["optimizer"](model.parameters())
            tracker = MemTracker()
            tracker.track_external(model, optimizer)
            with tracker:
                for iteration in range(2):
                    loss_fn(model(inputs)).backward()
                    optimizer.step()
                    optimizer.zero_grad()
                    if iteration == 0:
                        tracker.reset_mod_stats()  # its per-module stats allow one iteration
            peak = tracker.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]
        seconds = time.perf_counter() - start
        result = {"peak_bytes_cpu_fp32": peak, "seconds": seconds}
    result["seconds"] = result.get("seconds", seconds)
    result["max_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return result


def run_child(arm: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", arm], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", choices=("planner", "memtracker"))
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0

    runs: dict[str, list[dict]] = {"planner": [], "memtracker": []}
    for _ in range(args.repeats):  # interleaved: a noisy neighbour hits both arms alike
        for arm in runs:
            runs[arm].append(run_child(arm))
    planner, baseline = runs["planner"], runs["memtracker"]
    # The planner arm plans twice (h100 bf16, then cpu fp32); one plan is half of it.
    one_plan = statistics.median(r["seconds_both"] for r in planner) / 2
    rows = {
        "parameters": planner[0]["parameters"],
        "plan_seconds_median": round(one_plan, 2),
        "plan_max_rss_bytes": max(r["max_rss_bytes"] for r in planner),
        "plan_peak_bytes_h100_bf16": planner[0]["peak_bytes_h100_bf16"],
        "plan_peak_bytes_cpu_fp32": planner[0]["peak_bytes_cpu_fp32"],
        "memtracker_seconds_median": round(statistics.median(r["seconds"] for r in baseline), 2),
        "memtracker_max_rss_bytes": max(r["max_rss_bytes"] for r in baseline),
        "memtracker_peak_bytes_cpu_fp32": baseline[0]["peak_bytes_cpu_fp32"],
    }
    ok = rows["plan_seconds_median"] < GOAL_SECONDS and rows["plan_max_rss_bytes"] < GOAL_RSS
    gib = 2**30
    print(f"{rows['parameters'] / 1e9:.2f}B-parameter GPT (d=2048, 18 layers, context 1024), batch 8, AdamW")
    print(f"{'arm':<34}{'time (median)':>14}{'max RSS':>12}{'peak (cpu fp32)':>18}")
    print(
        f"{'trainmedic plan':<34}{one_plan:>12.2f} s{rows['plan_max_rss_bytes'] / gib:>8.2f} GiB{rows['plan_peak_bytes_cpu_fp32'] / gib:>14.2f} GiB"
    )
    print(
        f"{'MemTracker (baseline)':<34}{rows['memtracker_seconds_median']:>12.2f} s{rows['memtracker_max_rss_bytes'] / gib:>8.2f} GiB"
        f"{rows['memtracker_peak_bytes_cpu_fp32'] / gib:>14.2f} GiB"
    )
    print(
        f"h100 bf16 plan: peak {rows['plan_peak_bytes_h100_bf16'] / gib:.2f} GiB; goal < {GOAL_SECONDS:.0f} s and < 2 GB: {'met' if ok else 'NOT met'}"
    )
    if not args.no_write:
        path = _env.results_path("plan_speed")
        path.write_text(
            json.dumps(
                {
                    "environment": _env.environment(),
                    "goal": {"seconds": GOAL_SECONDS, "rss_bytes": GOAL_RSS},
                    "results": rows,
                    "runs": runs,
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
