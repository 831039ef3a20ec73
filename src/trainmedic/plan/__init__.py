"""trainmedic.plan: predict peak GPU memory of a training step before any GPU is touched.

``plan_memory(build, batch_size, device="t4")`` runs the user's ``build(batch_size)`` and one
full training step (twice) on fake tensors, replays every allocation through a model of the
target's CUDA caching allocator, and returns a ``Plan``: the peak, its breakdown, the hotspots
in the user's code with their closed form and fix, and with ``max_batch=True`` the largest batch
that fits.
"""

from trainmedic.errors import require

require("torch", "torch", "trainmedic plan")  # the planner traces with torch's fake tensors

from trainmedic.plan.model import SCHEMA, Breakdown, Hotspot, Plan  # noqa: E402
from trainmedic.plan.planner import plan_memory  # noqa: E402
from trainmedic.plan.spec import load_build  # noqa: E402

__all__ = ["Breakdown", "Hotspot", "Plan", "SCHEMA", "load_build", "plan_memory"]
