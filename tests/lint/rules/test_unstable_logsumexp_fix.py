"""TM210's repair: torch.logsumexp(x, dim[, keepdim=...]) with x and dim as written, checked to
give the same values where the hand-written form is finite and finite values where it is not."""

from __future__ import annotations

import textwrap

import torch
from lint_fix_kit import repaired, run_module, unfixable


def test_each_spelling_becomes_logsumexp_with_its_own_text():
    after = repaired(
        """
        import torch as th

        a = th.log(th.sum(th.exp(logits / temperature), 1, keepdim=True))
        b = th.log(th.sum(th.exp(-energy), dim=-1))
        c = scores[:, 1:].exp().sum(dim=(1, 2), keepdim=False).log()
        d = th.log(
            th.exp(q @ k.T).sum(-1)
        )
        """,
        "TM210",
    )
    assert after == textwrap.dedent(
        """
        import torch as th

        a = th.logsumexp(logits / temperature, 1, keepdim=True)
        b = th.logsumexp(-energy, dim=-1)
        c = th.logsumexp(scores[:, 1:], dim=(1, 2), keepdim=False)
        d = th.logsumexp(q @ k.T, -1)
        """
    )


def test_a_file_with_only_the_method_form_gets_the_import():
    after = repaired(
        """
        def log_partition(energies):
            return (-energies).exp().sum(-1).log()
        """,
        "TM210",
    )
    assert after == textwrap.dedent(
        """
        import torch
        def log_partition(energies):
            return torch.logsumexp(-energies, -1)
        """
    )


def test_the_repaired_code_is_finite_where_the_original_overflows(tmp_path):
    source = textwrap.dedent(
        """
        import torch

        def lse(x):
            return torch.log(torch.sum(torch.exp(x), dim=1, keepdim=True))

        small = torch.randn(4, 7, generator=torch.Generator().manual_seed(0))
        large = torch.tensor([[100.0, 101.0]], requires_grad=True)
        SMALL = lse(small)
        LARGE = lse(large)
        LARGE.sum().backward()
        GRAD = large.grad
        """
    )
    after = repaired(source, "TM210")
    assert "return torch.logsumexp(x, dim=1, keepdim=True)" in after
    broken = run_module(source, tmp_path / "broken")
    fixed = run_module(after, tmp_path / "fixed")
    assert torch.allclose(broken["SMALL"], fixed["SMALL"]) and fixed["SMALL"].shape == (4, 1)
    assert torch.isinf(broken["LARGE"]).all() and torch.isnan(broken["GRAD"]).all()
    assert torch.allclose(fixed["LARGE"], torch.tensor([[101.3133]]))
    assert torch.allclose(fixed["GRAD"], torch.softmax(torch.tensor([[100.0, 101.0]]), dim=1))


def test_a_comment_that_would_be_lost_is_left_to_the_user():
    reasons = unfixable(
        """
        import torch
        lse = torch.log(
            torch.sum(torch.exp(x), 1)  # over classes
        )
        """,
        "TM210",
    )
    assert reasons == ["a comment inside the expression would be lost; rewrite it by hand"]
