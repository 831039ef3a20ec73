"""host_other: logging, printing, checkpoint writes and other host bookkeeping."""

from __future__ import annotations

from trainmedic.run.diagnose.resolve import OWN_CODE
from trainmedic.run.diagnose.rules.base import Advice, Context, at


def advise(kind: str, ctx: Context) -> Advice:
    if kind == OWN_CODE:
        # Read from outside: what the code does is not known, so no fix is promised (factor 1).
        return Advice(
            f"Your own code, with no library under it{at(ctx)}",
            "Sampled from outside, tiny tensor ops, NumPy work and plain Python look alike here. Run the "
            "script under `trainmedic run` (its op census tells them apart) or read this function.",
            factor=1.0,
        )
    if kind == "checkpoint":
        return Advice(
            f"Writing a checkpoint every step{at(ctx)}",
            "Checkpoint every N steps or minutes instead of every step, and write it from a "
            "background thread after copying the state to host memory.",
            factor=20.0,
        )
    what = {
        "logging": "Logging",
        "print": "Printing",
        "progress bar": "Refreshing a progress bar",
        "file write": "Writing to a file",
        "serialisation": "Serialising metrics",
    }.get(kind, "Host bookkeeping")
    return Advice(
        f"{what} every step{at(ctx)}",
        "Do it every N steps (`if step % 50 == 0:`), keep per-step metrics as tensors and "
        "reduce them at log time, and hand file writes to a background thread. Printing every batch "
        "stalls the loop for the same reason.",
        factor=20.0,
    )
