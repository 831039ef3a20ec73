"""What a tiny-op loop's finding says of it: which loop, how much of its time batching removes, the evidence."""

from __future__ import annotations

from trainmedic.run.diagnose.resolve import TinyLoop


def loop_of(loops: dict[str, TinyLoop], function: str | None) -> TinyLoop | None:
    if function in loops:
        return loops[function]
    return max(loops.values(), key=lambda loop: loop.ops_per_step, default=None)


def overhead_share(loop: TinyLoop | None) -> float | None:
    """The part of a tiny-op loop's time that is not its calls' own work: what batching removes."""
    if loop is None or not loop.floor_s or loop.seconds_per_op <= 0:
        return None
    return min(max(1.0 - loop.work_per_op_s / loop.seconds_per_op, 0.0), 1.0)


def evidence(loop: TinyLoop, unit: str) -> str:
    text = f"{loop.ops_per_step:,.0f} torch calls per {unit} at {loop.seconds_per_op * 1e6:.1f} µs each"
    if loop.floor_s:
        text += (
            f" (this machine starts a call in {loop.floor_s * 1e6:.1f} µs; each call's own work is "
            f"{loop.work_per_op_s * 1e6:.2f} µs)"
        )
    return text
