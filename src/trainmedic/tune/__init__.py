"""trainmedic.tune: find the fastest training configuration by measurement, and say why.

``tune(build, device="auto")`` builds ``build(batch_size)`` (the same build function
``trainmedic plan`` takes) for real, and measures samples/s of full training steps over batch
size × precision × memory format × ``torch.compile``, skipping what the plan says cannot fit.
It returns a ``TuneResult``: every configuration's median and spread, a roofline verdict per
configuration (FLOPs and bytes per step against the device's ceilings), the winner or a tie, and
the code change that gets there.
"""

from trainmedic.errors import require

require("torch", "torch", "trainmedic tune")  # tune runs real training steps

from trainmedic.tune.model import SCHEMA, Ceilings, Config, Measurement, Roofline, Row, TuneResult  # noqa: E402

__all__ = [
    "SCHEMA",
    "Callbacks",
    "Ceilings",
    "Config",
    "Measurement",
    "Roofline",
    "Row",
    "TuneResult",
    "tune",
]


def __getattr__(name: str):
    # The search pulls in the planner, the step runner and the roofline; the model alone (what
    # renderers and readers of a JSON result need) stays light.
    if name in ("Callbacks", "tune"):
        from trainmedic.tune import search

        return getattr(search, name)
    raise AttributeError(f"module 'trainmedic.tune' has no attribute {name!r}")
