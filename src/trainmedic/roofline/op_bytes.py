"""Bytes one unfused kernel moves: the roofline's memory-traffic count of a single aten op."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._pytree import tree_flatten

# Not marked ``is_view`` in their schema, yet they move no data: a view of a fresh tensor, an
# allocation, a constant lifted into the graph.
_NO_TRAFFIC = {
    "_unsafe_view",
    "lift_fresh",
    "lift_fresh_copy",
    "alias",
    "detach",
    "_record_function_enter_new",
    "_record_function_exit",
}
# Ops that overwrite their first argument without reading it.
_WRITE_ONLY_TARGET = {"copy_", "fill_", "zero_"}


def _writes(argument: torch._C.Argument) -> bool:
    """Whether the op writes this argument in place (``Tensor(a!)``)."""
    alias = argument.alias_info
    return alias is not None and alias.is_write


def op_bytes(func: torch._ops.OpOverload, args: tuple, outputs: Any) -> int:
    """Bytes one unfused kernel of ``func`` reads and writes: its tensor inputs and its fresh
    or mutated outputs, each as the tensor passed (numel x element size), not its storage."""
    name = func.__name__.split(".")[0]
    if func.is_view or name in _NO_TRAFFIC or name.startswith(("empty", "new_empty")):
        return 0
    schema = func._schema
    # zeros_like(x), new_zeros: the input gives only a shape and a dtype, it is never read.
    metadata_inputs = name.endswith("_like") or name.startswith("new_")
    written = [
        index < len(schema.arguments) and _writes(schema.arguments[index]) for index in range(len(args))
    ]
    if not any(written) and _tensor_bytes(outputs) == 0:
        return 0  # a query of metadata (prim.device, sym_size): no kernel runs
    moved = 0
    for arg, mutated in zip(args, written):
        read = not metadata_inputs and not (mutated and name in _WRITE_ONLY_TARGET)
        moved += _tensor_bytes(arg) * (int(read) + int(mutated))
    # In-place results alias an argument already counted as written above; views move nothing.
    returns = schema.returns
    if len(returns) == 1:
        if returns[0].alias_info is None:
            moved += _tensor_bytes(outputs)
    elif isinstance(outputs, (tuple, list)):
        moved += sum(_tensor_bytes(out) for out, ret in zip(outputs, returns) if ret.alias_info is None)
    return moved


def _tensor_bytes(value: Any) -> int:
    leaves = tree_flatten(value)[0] if isinstance(value, (tuple, list, dict)) else [value]
    return sum(t.numel() * t.element_size() for t in leaves if isinstance(t, torch.Tensor))
