"""Name the user's lines that hold the peak, with the closed form of their size and the fix.

A hotspot is a group of storages live at the peak that one op at one user line made. Its
formula is read off the largest tensor's shape: a square trailing pair is attention scores
(``B·H·S²``), an elementwise op whose output is much larger than every input is a broadcast
pairwise tensor (``N·M·D``), anything else is its dimensions with the batch named ``B``.
"""

from __future__ import annotations

import math
from collections import defaultdict

from trainmedic.plan.hotspot_advice import advise
from trainmedic.plan.model import Hotspot
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
) -> list[Hotspot]:
    """The largest groups of storages live at the peak, by (user line, op), largest first."""
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
        kinds = {id(a): formula_of(a, batch_size) for _, a in members}
        # The member that explains the line best: attention or pairwise before plain batch
        # tensors, then the largest.
        _, representative = max(members, key=lambda m: (_RANK[kinds[id(m[1])][0]], m[0]))
        kind, formula = kinds[id(representative)]
        count = sum(1 for _, a in members if a.shape == representative.shape)
        if count > 1:
            formula = f"{count} × {formula}"
        if count * representative.nbytes < 0.9 * total:
            formula = f"{formula}; {format_bytes(total)} at this line in all"
        hotspots.append(
            Hotspot(
                _ops(members), _shown(where), total, formula, advise(kind, representative, batch_size, total)
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


def formula_of(alloc: Allocation, batch_size: int) -> tuple[str, str]:
    """``(kind, formula)``: what the tensor is and its size in closed form with the numbers filled in."""
    shape = alloc.shape
    itemsize = alloc.nbytes // max(1, math.prod(shape)) if shape and math.prod(shape) else 0
    base_op = alloc.op.split(" ")[0]
    if len(shape) >= 3 and shape[-1] == shape[-2] and shape[-1] >= 64 and base_op in _ATTENTION:
        lead = shape[:-2]
        symbols = _lead_symbols(lead, batch_size, ("H",), fold=True)
        return "attention", _render(
            symbols + ["S²"], [*map(str, lead), f"{shape[-1]}²"], itemsize, alloc.nbytes
        )
    if base_op in _ELEMENTWISE and len(shape) >= 3 and alloc.input_shapes:
        biggest_input = max(math.prod(s) for s in alloc.input_shapes)
        if math.prod(shape) >= 8 * max(1, biggest_input):
            symbols = _lead_symbols(shape[:-3], batch_size, ()) + ["N", "M", "D"]
            return "pairwise", _render(symbols, [str(d) for d in shape], itemsize, alloc.nbytes)
    symbols = _lead_symbols(shape, batch_size, (), fold=len(shape) >= 3)
    return ("batch" if "B" in symbols else "fixed"), _render(
        symbols, [str(d) for d in shape], itemsize, alloc.nbytes
    )


def _lead_symbols(
    dims: tuple[int, ...], batch_size: int, names: tuple[str, ...], fold: bool = False
) -> list[str]:
    # ``fold``: a leading axis that is a multiple of the batch is batch × heads folded together;
    # only believed for attention-like and 3-D+ tensors (a flat workspace is not a batch).
    symbols: list[str] = []
    named = iter(names)
    for d in dims:
        if d == batch_size and "B" not in symbols:
            symbols.append("B")
        elif (
            fold
            and batch_size > 1
            and d % batch_size == 0
            and d != batch_size
            and "B" not in symbols
            and not symbols
        ):
            symbols.append(f"(B·{d // batch_size})")  # batch and heads folded into one axis
        else:
            symbols.append(next(named, str(d)))
    return symbols


def _render(symbols: list[str], numbers: list[str], itemsize: int, nbytes: int) -> str:
    symbolic = "·".join(symbols + ["bytes"])
    numeric = "·".join(numbers + [str(itemsize)])
    if symbolic.replace("bytes", str(itemsize)) == numeric:
        return f"{numeric} = {format_bytes(nbytes)}"
    return f"{symbolic} = {numeric} = {format_bytes(nbytes)}"


def _shown(where: str) -> str:
    """``model.py:12`` as the user reads it (relative under the working folder), for the CLI and the JSON alike."""
    if not where or where.startswith("<"):
        return "<unknown>:0"
    path, _, line = where.rpartition(":")
    return f"{shown_path(path)}:{line}"
