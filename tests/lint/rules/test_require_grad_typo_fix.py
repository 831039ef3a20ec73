"""TM209's repair: the attribute renamed to ``requires_grad``, checked on real parameters."""

from __future__ import annotations

import textwrap

import torch
from lint_fix_kit import repaired, run_module


def test_every_shape_is_renamed_in_place():
    after = repaired(
        """
        for p in layer.parameters():
            p.require_grad = False  # freeze
        emb.weight.requires_grad_ = False
        (head
            .bias).requires_grads = True
        setattr(head.weight, 'require_grad', False)
        model.backbone.require_grad_(True)
        """,
        "TM209",
    )
    assert after == textwrap.dedent(
        """
        for p in layer.parameters():
            p.requires_grad = False  # freeze
        emb.weight.requires_grad = False
        (head
            .bias).requires_grad = True
        setattr(head.weight, 'requires_grad', False)
        model.backbone.requires_grad_(True)
        """
    )


def test_the_repaired_freeze_leaves_the_frozen_layer_untouched(tmp_path):
    source = textwrap.dedent(
        """
        import torch
        from torch import nn

        torch.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
        start = model[0].weight.detach().clone()
        for p in model[0].parameters():
            p.require_grad = False
        trainable = [p for p in model.parameters() if p.requires_grad]
        opt = torch.optim.SGD(trainable, lr=0.1)
        model(torch.randn(8, 4)).pow(2).sum().backward()
        opt.step()
        """
    )
    after = repaired(source, "TM209")
    broken = run_module(source, tmp_path / "broken")
    fixed = run_module(after, tmp_path / "fixed")
    # Broken: the "frozen" layer is in the optimizer and moved.
    assert len(broken["trainable"]) == 4 and not torch.equal(broken["model"][0].weight, broken["start"])
    assert len(fixed["trainable"]) == 2 and torch.equal(fixed["model"][0].weight, fixed["start"])
    assert fixed["model"][0].weight.grad is None
