"""compute: the model's own work. The healthy state; the levers left are cheaper arithmetic."""

from __future__ import annotations

from trainmedic.diagnose.rules.base import Advice, Context, at


def advise(kind: str, ctx: Context) -> Advice:
    if ctx.device == "cuda":
        fix = ("Healthy: the GPU is busy with the model. Next levers: bf16 autocast "
               "(`torch.autocast('cuda', dtype=torch.bfloat16)`), `torch.compile(model)`, and the "
               "largest batch that fits (`trainmedic plan`).")
        factor = 2.0  # tensor-core bf16 over fp32 matmuls, conservatively
    else:
        fix = ("Healthy for a CPU run: the time goes to the model itself. The big lever is a GPU; "
               "on the CPU, `torch.compile(model)` and bf16 autocast on CPUs with AMX.")
        factor = 1.3
    return Advice(f"The model's forward, backward and optimizer step{at(ctx)}", fix, factor)
