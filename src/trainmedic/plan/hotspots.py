"""Name the user's lines that hold the peak, with the closed form of their size and the fix.

A hotspot is a group of storages live at the peak that one op at one user line made. Its
formula is its most telling tensor's own shape and dtype, so the product printed is the bytes
printed: a square trailing pair is attention scores (``B·H·S²``), an elementwise op whose output
is much larger than every input is a broadcast pairwise tensor (``N·M·D``), anything else is its
axes. Which axes are the batch is measured where a second trace paired each tensor with its twin
(``scaling.py``): ``B``, ``(B·S)`` for batch and sequence folded into one axis; the others are
their sizes, named ``S`` or ``V`` where the build says what they are. Without a second trace
the batch axis is read off the shape, and the advice says less.
"""

from __future__ import annotations

import math
from collections import defaultdict
from fractions import Fraction

from trainmedic.plan.hotspot_advice import LineGrowth, advise
from trainmedic.plan.model import Hotspot
from trainmedic.plan.scaling import FASTER, LINEAR, NONE, Growth
from trainmedic.plan.tracker import Allocation
from trainmedic.units import format_bytes
from trainmedic.userfiles import shown_path

#: A hotspot must hold at least this share of the peak to be listed.
MIN_SHARE = 0.02
LIMIT = 5

_ELEMENTWISE = {
    "sub",
    "add",
    "mul",
    "div",
    "pow",
    "abs",
    "sub_",
    "add_",
    "mul_",
    "exp",
    "square",
    "neg",
    "rsub",
    "where",
    "clone",
}
_ATTENTION = {
    "bmm",
    "mm",
    "baddbmm",
    "_softmax",
    "_softmax_backward_data",
    "mul",
    "div",
    "add",
    "sub",
    "exp",
    "masked_fill",
    "native_dropout",
    "clone",
    "where",
    "_to_copy",
}


def find_hotspots(
    live_at_peak: dict[int, int],
    allocations: dict[int, Allocation],
    exclude: set[int],
    batch_size: int,
    peak: int,
    growths: dict[int, Growth] | None = None,
    sizes: dict[int, str] | None = None,
    precision: str = "fp32",
) -> list[Hotspot]:
    """The largest groups of storages live at the peak, by (user line, op), largest first.

    ``growths``: how each storage grows with the batch, measured against a second trace
    (:mod:`trainmedic.plan.scaling`); without it the batch axis is read off the shapes.
    ``sizes``: the axis sizes with a name in this build (``S``, ``V``)."""
    growths, sizes = growths or {}, sizes or {}
    groups: dict[str, list[tuple[int, Allocation]]] = defaultdict(list)
    for sid, nbytes in live_at_peak.items():
        if sid in exclude:
            continue
        alloc = allocations[sid]
        if alloc.phase == "workspace":
            continue  # fixed library workspaces: counted in temporaries, nothing at a user line
        # One user line is one thing to change: `((x[:, None] - y[None]).abs() ** 2)` makes a
        # sub, an abs and a pow, and the user reads them as the one pairwise cost.
        groups[alloc.where or f"<{alloc.op}>"].append((nbytes, alloc))
    ranked = sorted(groups.items(), key=lambda kv: -sum(n for n, _ in kv[1]))
    hotspots = []
    for where, members in ranked[:LIMIT]:
        total = sum(n for n, _ in members)
        if peak and total < MIN_SHARE * peak:
            break
        kinds = {id(a): formula_of(a, batch_size, growths.get(a.sid), sizes)[0] for _, a in members}
        # The member that explains the line best: attention or pairwise before plain batch
        # tensors, then the largest.
        _, representative = max(members, key=lambda m: (_RANK[kinds[id(m[1])]], m[0]))
        # Only tensors of the same shape and dtype are "n of these": the product printed is then
        # the bytes printed, and the rest of the line is said as the line's total.
        count = sum(
            1 for _, a in members if (a.shape, a.dtype) == (representative.shape, representative.dtype)
        )
        kind, formula = formula_of(representative, batch_size, growths.get(representative.sid), sizes, count)
        if count * tensor_bytes(representative) < 0.9 * total:
            formula = f"{formula}; {format_bytes(total)} at this line in all"
        line = line_growth(members, growths, batch_size, sizes, representative, precision)
        hotspots.append(
            Hotspot(
                _ops(members),
                _shown(where),
                total,
                formula,
                advise(kind, representative, batch_size, total, line),
            )
        )
    return hotspots


_RANK = {"attention": 3, "pairwise": 2, "batch": 1, "fixed": 0}


def _ops(members: list[tuple[int, Allocation]]) -> str:
    """The line's ops by bytes held, with the module they ran in: "sub, abs in blocks.0"."""
    by_op: dict[str, int] = defaultdict(int)
    for nbytes, alloc in members:
        by_op[f"{alloc.op} in {alloc.module}" if alloc.module else alloc.op] += nbytes
    names = sorted(by_op, key=lambda op: -by_op[op])
    return ", ".join(names[:3]) + (f" (+{len(names) - 3} more)" if len(names) > 3 else "")


def line_growth(
    members: list[tuple[int, Allocation]],
    growths: dict[int, Growth],
    batch_size: int,
    sizes: dict[int, str],
    representative: Allocation,
    precision: str,
) -> LineGrowth:
    """How a hotspot's bytes follow the batch, from its tensors' twins at the other traced batch."""
    total = sum(n for n, _ in members)
    measured = [(n, growths[a.sid]) for n, a in members if a.sid in growths]
    low_precision = precision in ("bf16", "fp16")
    # The loss's fp32 copies of bf16/fp16 tensors (autocast runs cross-entropy in fp32).
    upcast = (
        sum(n for n, a in members if a.op.startswith("_to_copy") and a.dtype == "float32")
        if low_precision
        else 0
    )
    parts = [
        _symbol(d, f, batch_size, sizes)[0]
        for d, f in zip(
            representative.shape, _axes(representative, batch_size, growths.get(representative.sid))
        )
    ]
    names = frozenset(name for name in ("S", "V") if any(name in part for part in parts))
    if not measured or sum(n for n, _ in measured) < 0.5 * total:
        return LineGrowth(None, names=names, upcast_bytes=upcast)
    # What the other fixes act on: the vocabulary-wide tensors (a fused or chunked loss never
    # holds them whole) and the forward's tensors still alive (checkpointing recomputes them).
    vocabulary = next((d for d, name in sizes.items() if name == "V"), None)
    wide = sum(n for n, a in members if vocabulary is not None and vocabulary in a.shape)
    saved_for_backward = sum(n for n, a in members if a.phase == "forward")
    other = measured[0][1].other_batch
    mine = sum(n for n, _ in measured)
    at_other = sum(g.other_bytes for _, g in measured)
    by_kind: dict[str, int] = defaultdict(int)
    for n, g in measured:
        by_kind[g.kind] += n
    if by_kind[FASTER] >= 0.5 * mine:
        kind = FASTER
    elif by_kind[NONE] >= 0.9 * mine or abs(at_other - mine) <= 0.01 * mine:
        kind = NONE
    else:
        kind = LINEAR
    half = math.ceil(batch_size / 2)
    # The measured tensors on the line through their two traced sizes, read at the accumulation
    # batch (exact when the other trace ran at that batch); the rest held as they are.
    at_half = total - mine + round(mine + (at_other - mine) * (half - batch_size) / (other - batch_size))
    return LineGrowth(kind, other, at_half, names, upcast, at_other, mine, wide, saved_for_backward)


def tensor_bytes(alloc: Allocation) -> int:
    """The tensor's own bytes, from its shape and dtype (its storage can be larger: a view)."""
    return math.prod(alloc.shape) * itemsize(alloc.dtype) if alloc.shape else alloc.nbytes


def itemsize(dtype: str) -> int:
    import torch

    found = getattr(torch, dtype, None)
    return found.itemsize if isinstance(found, torch.dtype) else 1


def formula_of(
    alloc: Allocation,
    batch_size: int,
    growth: Growth | None = None,
    sizes: dict[int, str] | None = None,
    count: int = 1,
) -> tuple[str, str]:
    """``(kind, formula)``: what the tensor is and its size in closed form with the numbers filled
    in; the numbers multiply to the bytes stated (``count`` such tensors when more than one)."""
    shape, sizes = alloc.shape, sizes or {}
    size = itemsize(alloc.dtype)
    axes = _axes(alloc, batch_size, growth)
    base_op = alloc.op.split(" ")[0]
    if len(shape) >= 3 and shape[-1] == shape[-2] and shape[-1] >= 64 and base_op in _ATTENTION:
        lead = [_symbol(d, f, batch_size, sizes) for d, f in zip(shape[:-2], axes[:-2])]
        lead = _name_unmoved(lead, shape[:-2], axes[:-2], "H")
        symbols = [s for s, _ in lead] + ["S²"]
        return "attention", _render(symbols, [n for _, n in lead] + [f"{shape[-1]}²"], size, alloc, count)
    if base_op in _ELEMENTWISE and len(shape) >= 3 and alloc.input_shapes:
        biggest_input = max(math.prod(s) for s in alloc.input_shapes)
        if math.prod(shape) >= 8 * max(1, biggest_input):
            lead = [_symbol(d, f, batch_size, sizes) for d, f in zip(shape[:-3], axes[:-3])]
            symbols = [s for s, _ in lead] + ["N", "M", "D"]
            return "pairwise", _render(
                symbols, [n for _, n in lead] + [str(d) for d in shape[-3:]], size, alloc, count
            )
    parts = [_symbol(d, f, batch_size, sizes) for d, f in zip(shape, axes)]
    moved = any(f is not None for f in axes)
    return ("batch" if moved else "fixed"), _render(
        [s for s, _ in parts], [n for _, n in parts], size, alloc, count
    )


def _axes(alloc: Allocation, batch_size: int, growth: Growth | None) -> tuple[Fraction | None, ...]:
    """Per axis, the multiple of the batch it is: measured, or else read off the shape."""
    if growth is not None:
        return growth.per_axis
    shape = alloc.shape
    # A leading axis that is a multiple of the batch is batch × heads folded together; only
    # believed for 3-D+ tensors (a flat workspace is not a batch).
    axes: list[Fraction | None] = []
    for i, d in enumerate(shape):
        if d == batch_size and not any(axes):
            axes.append(Fraction(1))
        elif i == 0 and len(shape) >= 3 and batch_size > 1 and d % batch_size == 0 and d != batch_size:
            axes.append(Fraction(d, batch_size))
        else:
            axes.append(None)
    return tuple(axes)


def _symbol(d: int, factor: Fraction | None, batch_size: int, sizes: dict[int, str]) -> tuple[str, str]:
    """``(symbol, number)`` of one axis: ``("B", "12")``, ``("(B·S)", "12·1024")``, ``("V", "50304")``."""
    if factor is None:
        return sizes.get(d, str(d)), str(d)
    if factor == 1:
        return "B", str(batch_size)
    if factor > 0 and factor.denominator == 1:
        k = int(factor)
        return f"(B·{sizes.get(k, k)})", f"{batch_size}·{k}"
    return str(d), str(d)  # moved, but not as a whole multiple of the batch


def _name_unmoved(
    parts: list[tuple[str, str]], dims: tuple[int, ...], axes: tuple[Fraction | None, ...], name: str
) -> list[tuple[str, str]]:
    """The first unnamed axis that did not move takes ``name`` (the heads of attention scores)."""
    for i, (symbol, number) in enumerate(parts):
        if axes[i] is None and symbol == number:
            parts = [*parts[:i], (name, number), *parts[i + 1 :]]
            break
    return parts


def _render(symbols: list[str], numbers: list[str], size: int, alloc: Allocation, count: int) -> str:
    symbolic = "·".join([*symbols, "bytes"])
    numeric = "·".join([*numbers, str(size)])
    value = math.prod(alloc.shape) * size * count if alloc.shape else alloc.nbytes * count
    times = f"{count} × " if count > 1 else ""
    if symbolic.replace("bytes", str(size)) == numeric:
        return f"{times}{numeric} = {format_bytes(value)}"
    return f"{times}{symbolic} = {times}{numeric} = {format_bytes(value)}"


def _shown(where: str) -> str:
    """``model.py:12`` as the user reads it (relative under the working folder), for the CLI and the JSON alike."""
    if not where or where.startswith("<"):
        return "<unknown>:0"
    path, _, line = where.rpartition(":")
    return f"{shown_path(path)}:{line}"
