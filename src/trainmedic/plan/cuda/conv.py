"""cuDNN's convolution workspaces: measured where a card recorded them, estimated elsewhere.

A convolution on the card takes a workspace for the engine cuDNN's heuristics rank first, and
frees it when the kernel returns. Which engine, and so how much, is cuDNN's own choice per card,
cuDNN version, dtype and shape: on an H200 (cuDNN 9, torch 2.11) most forward and
backward-data passes took ``input + output + weight`` bytes (a layout-transforming engine),
some ``input + weight``, and backward-filter passes anything from that sum to 9x it (280 MiB
for a 32-channel 3x3 layer on 128 images of 32x32). No formula covers that, so the planner
looks each pass up in ``cudnn_workspaces.json`` (recorded on real cards by ``trainmedic plan
--verify``; see ``learn_workspaces``) and, for a pass no card has recorded, estimates
``input + output + weight`` and says so in the plan.

cuDNN falls back to an engine with a smaller workspace when the allocation fails, so a workspace
is the memory a step takes when the card has room, not a floor it needs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import torch

FORWARD, BACKWARD_DATA, BACKWARD_FILTER = "forward", "backward_data", "backward_filter"
TABLE = Path(__file__).with_name("cudnn_workspaces.json")


@dataclass(frozen=True)
class ConvPass:
    """One pass of one convolution, as cuDNN sees it: what its workspace depends on."""

    kind: str  # FORWARD, BACKWARD_DATA or BACKWARD_FILTER
    dtype: str
    input: tuple[int, ...]
    weight: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    transposed: bool
    channels_last: bool

    def key(self) -> str:
        return json.dumps(
            [
                self.kind,
                self.dtype,
                self.input[1:],
                self.weight,
                self.stride,
                self.padding,
                self.dilation,
                self.groups,
                self.transposed,
                self.channels_last,
            ]
        )

    @property
    def batch(self) -> int:
        return self.input[0]


def passes_of(name: str, args: tuple, out: Any) -> list[tuple[ConvPass, int]]:
    """The passes one ``convolution`` or ``convolution_backward`` op runs, with the estimate of
    each one's workspace (input + output + weight bytes)."""
    if name == "convolution":
        input, weight, _, stride, padding, dilation, transposed, _, groups = args[:9]
        kinds = [FORWARD]
        output = out
    else:  # convolution_backward(grad_output, input, weight, bias_sizes, stride, padding, dilation, transposed, ..., groups, mask)
        grad_output, input, weight = args[:3]
        stride, padding, dilation, transposed, groups, mask = (
            args[4],
            args[5],
            args[6],
            args[7],
            args[9],
            args[10],
        )
        kinds = [k for k, wanted in ((BACKWARD_DATA, mask[0]), (BACKWARD_FILTER, mask[1])) if wanted]
        output = grad_output
    channels_last = (
        input.dim() >= 4
        and not input.is_contiguous()
        and input.is_contiguous(memory_format=_channels_last(input))
    )
    estimate = sum(_bytes(t) for t in (input, output, weight))
    return [
        (
            ConvPass(
                kind,
                str(input.dtype).removeprefix("torch."),
                tuple(input.shape),
                tuple(weight.shape),
                tuple(stride),
                tuple(padding),
                tuple(dilation),
                int(groups),
                bool(transposed),
                channels_last,
            ),
            estimate,
        )
        for kind in kinds
    ]


def workspace(device_key: str, conv: ConvPass, estimate: int) -> tuple[int, str]:
    """``(bytes, how)``: how is "measured", "scaled" (the same layer recorded at another batch
    size, scaled by the batch) or "estimated"."""
    entries = measured(device_key).get(conv.key())
    if not entries:
        return estimate, "estimated"
    if conv.batch in entries:
        return entries[conv.batch], "measured"
    nearest = min(entries, key=lambda n: abs(n - conv.batch))
    return int(entries[nearest] * conv.batch / nearest), "scaled"


@cache
def measured(device_key: str) -> dict[str, dict[int, int]]:
    """The recorded workspaces of a card: pass key -> {batch: bytes}."""
    table = _table().get(device_key, {})
    found: dict[str, dict[int, int]] = {}
    for entry in table.get("passes", []):
        found.setdefault(entry["key"], {})[int(entry["batch"])] = int(entry["bytes"])
    return found


def conv_estimates(sources: dict[str, int]) -> list[str]:
    """The convolution workspaces that are estimates, as plan.confidence lists its reasons."""
    found = []
    if sources.get("estimated"):
        found.append(
            f"cuDNN workspaces of {sources['estimated']} convolution passes estimated, none recorded on this card"
        )
    if sources.get("scaled"):
        found.append(
            f"cuDNN workspaces of {sources['scaled']} convolution passes scaled from another batch size"
        )
    return found


def conv_notes(device, sources: dict[str, int]) -> list[str]:
    """What the plan says of its convolution workspaces: how many passes were measured on this card."""
    total = sum(sources.values())
    if not total:
        return []
    table = _table().get(device.key, {})
    recorded = ", ".join(str(table[k]) for k in ("device", "torch") if table.get(k))
    measured = sources.get("measured", 0)
    parts = [
        f"{measured} of {total} convolution passes take cuDNN workspaces measured on {device.key}"
        + (f" ({recorded})" if recorded and measured else "")
    ]
    if sources.get("scaled"):
        parts.append(f"{sources['scaled']} scaled from the same layer measured at another batch size")
    if sources.get("estimated"):
        parts.append(
            f"{sources['estimated']} estimated as input + output + weight bytes (cuDNN picks the engine, and so "
            "the workspace, per card and shape; `trainmedic plan --verify` on the card measures them)"
        )
    return ["; ".join(parts)]


@cache
def _table() -> dict[str, Any]:
    try:
        return json.loads(TABLE.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}


def _bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def _channels_last(t: torch.Tensor) -> torch.memory_format:
    return torch.channels_last if t.dim() == 4 else torch.channels_last_3d
