"""sync: the host blocks on the device every step, so the device runs dry."""

from __future__ import annotations

from trainmedic.run.diagnose.rules.base import Advice, Context, at


def advise(kind: str, ctx: Context) -> Advice:
    if kind == "collective":
        # A torchrun rank inside dist.all_reduce / barrier: waiting for the other ranks. The merged
        # report (diagnose/ranks.py) names the rank it waits for and why.
        return Advice(
            f"This rank waits for the other ranks in torch.distributed collectives{at(ctx)}",
            "Collectives end when the slowest rank arrives: even out the ranks' work (the merged report's straggler "
            "says which and why), call them less often (metrics every N steps, not every step), or with "
            "async_op=True and wait() only when the result is needed.",
            factor=4.0,
        )
    return Advice(
        f"The host waits for the GPU every step{at(ctx)}",
        "Keep the loss and metrics on the device and read them every N steps "
        "(`if step % 50 == 0: print(loss.item())`); accumulate with `running += loss.detach()` "
        "so the GPU queue never drains.",
        factor=5.0,
    )
