"""What a step asks of the hardware and which roof it sits under, shared by ``run`` and ``tune``.

- ``model``: ``StepCost`` (FLOPs and bytes of a step, per op), ``Ceilings`` (a device's peak
  FLOP/s per precision and bandwidth), ``Roofline`` (a measured step placed under them);
- ``op_bytes``: the bytes one unfused kernel moves, from an aten op and its arguments;
- ``place``: a device's datasheet ceilings and the per-op roofline of a step.

Counting a whole step on fake tensors (``tune.counting``) and measuring a device's roofs
(``tune.ceilings``) stay with ``tune``; ``run`` counts the ops it watches (``run.probe.op_costs``).
Nothing here imports torch at package import.
"""
