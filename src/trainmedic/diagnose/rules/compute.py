"""compute: the model's own work. The healthy state; the levers left are cheaper arithmetic."""

from __future__ import annotations

from trainmedic.diagnose.rules.base import Advice, Context, at, is_keras

#: Where the measured answer to "which batch, precision and compile" comes from.
TUNE = ("`trainmedic tune model.py:build` measures batch size × precision × compile and says which is "
        "fastest and why (roofline); `trainmedic tune --script train.py --set batch_size=2,4,8` for this script.")


def advise(kind: str, ctx: Context) -> Advice:
    if is_keras(ctx):
        where = "the GPU is busy with the model" if ctx.device == "cuda" else "the time goes to the model itself"
        fix = (f"Healthy: {where}. Next levers in Keras: "
               "`keras.mixed_precision.set_global_policy(\"mixed_bfloat16\")` (or \"mixed_float16\" on older GPUs), "
               "`model.compile(..., jit_compile=True)`, and the batch size; do not assume the largest that fits is "
               "fastest: `trainmedic tune --script train.py --set batch_size=2,4,8` measures it for this script.")
        return Advice(f"The model's forward, backward and optimizer step{at(ctx)}", fix, 2.0 if ctx.device == "cuda" else 1.3)
    if ctx.device == "cuda":
        fix = ("Healthy: the GPU is busy with the model. Next levers: bf16 autocast "
               "(`torch.autocast('cuda', dtype=torch.bfloat16)`), `torch.compile(model)`, and the "
               f"batch size; do not assume the largest that fits is fastest. {TUNE}")
        factor = 2.0  # tensor-core bf16 over fp32 matmuls, conservatively
    else:
        fix = ("Healthy for a CPU run: the time goes to the model itself. The big lever is a GPU; "
               f"on the CPU, `torch.compile(model)` and bf16 autocast on CPUs with AVX512-BF16 or AMX. {TUNE}")
        factor = 1.3
    return Advice(f"The model's forward, backward and optimizer step{at(ctx)}", fix, factor)
