from __future__ import annotations

from dataclasses import dataclass

from trainmedic.run.probe.source_facts import Sources
from trainmedic.run.probe.worker_items import ItemProfile


@dataclass(frozen=True)
class Context:
    """What a rule may use to word its advice."""

    where: str | None
    seconds_per_step: float
    step_median_s: float
    device: str  # "cpu" or "cuda"
    ops_per_step: float = 0.0
    growth: float = 1.0
    #: What the script read its data from (files, databases, datasets), when it was recorded.
    sources: Sources | None = None
    #: The user's function the time at ``where`` was spent in, as ``file:firstline:name``
    #: (``probe.recorder.function_key``), so advice can name the function to change.
    function: str | None = None
    #: What marked the steps (``probe.clock``: "keras" for a Keras ``fit``), so advice can be
    #: worded in the script's own framework.
    step_source: str | None = None
    #: With no step source of its own, the loop whose iterations were the steps (``gen.py:20``,
    #: probe/loops.py): advice says "iteration" and knows what repeats.
    loop: str | None = None
    #: The run's command as the report has it (``["train.py", "--epochs", "1"]``, or ``["-m",
    #: "pkg.train", ...]``), so advice can name the user's own script and options; () unknown.
    command: tuple[str, ...] = ()
    #: For a tiny-op loop, the part of its time that is call overhead rather than the calls'
    #: own work (measured against this machine's call floor): what batching the loop removes.
    overhead_share: float | None = None
    #: On a GPU, the device's busy time over the model's time per step (diagnose/launches.py).
    device_busy_share: float | None = None
    #: A DataLoader with worker processes: one item's cost and the user's code it is spent in.
    loader_items: ItemProfile | None = None

    @property
    def unit(self) -> str:
        return "iteration" if self.loop else "step"


@dataclass(frozen=True)
class Advice:
    title: str
    fix: str
    #: How many times faster the fix makes this cost (not the whole step).
    factor: float
    #: Code to paste, e.g. the exact ``data.load(...)`` call for the user's source.
    suggestion: str | None = None


def at(ctx: Context) -> str:
    return f" at {ctx.where}" if ctx.where else ""


def is_keras(ctx: Context) -> bool:
    """A Keras script: its steps were Keras training batches."""
    return ctx.step_source == "keras"
