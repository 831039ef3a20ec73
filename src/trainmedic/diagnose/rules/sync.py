"""sync: the host blocks on the device every step, so the device runs dry."""

from __future__ import annotations

from trainmedic.diagnose.rules.base import Advice, Context, at


def advise(kind: str, ctx: Context) -> Advice:
    return Advice(
        f"The host waits for the GPU every step{at(ctx)}",
        "Keep the loss and metrics on the device and read them every N steps "
        "(`if step % 50 == 0: print(loss.item())`); accumulate with `running += loss.detach()` "
        "so the GPU queue never drains.",
        factor=5.0,
    )
