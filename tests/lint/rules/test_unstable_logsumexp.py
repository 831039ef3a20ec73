"""TM210: log(sum(exp(x), dim)) written out by hand, in function and method spellings."""


def test_function_method_and_mixed_spellings(lines):
    source = """
        import torch
        import torch as th

        def scores(logits, energy, q, k):
            a = torch.log(torch.sum(torch.exp(logits), 1))
            b = torch.log(torch.sum(torch.exp(-energy), dim=-1, keepdim=True))
            c = logits.exp().sum(-1).log()
            d = torch.log(torch.exp(q @ k.T / 8).sum(dim=(1, 2)))
            e = th.sum(th.exp(logits * 2), axis=0).log()
            return a, b, c, d, e
    """
    assert lines(source, "TM210") == [6, 7, 8, 9, 10]


def test_the_message_says_what_overflows_and_the_fix(lint):
    [(line, message)] = lint(
        """
        import torch
        lse = torch.log(torch.sum(torch.exp(x), 1))
        """,
        "TM210",
    )
    assert line == 3
    assert "about 88 in float32" in message and "torch.logsumexp(x, dim)" in message


def test_no_dim_or_something_added_is_not_logsumexp(lines):
    source = """
        import numpy as np
        import torch

        total = torch.log(torch.sum(torch.exp(x)))
        whole = torch.log(torch.sum(torch.exp(x), None))
        every = torch.log(x.exp().sum(dim=None, keepdim=True))
        smoothed = torch.log(torch.sum(torch.exp(x), 1) + 1e-8)
        shifted = torch.log(torch.sum(torch.exp(x) + 1.0, 1))
        typed = torch.log(torch.sum(torch.exp(x), 1, dtype=torch.float64))
        inverse = torch.exp(torch.sum(torch.log(x), 1))
        plain = torch.sum(torch.log(torch.exp(x)), 1)
        host = np.log(np.sum(np.exp(a), axis=1))
    """
    assert lines(source, "TM210") == []


def test_the_max_already_subtracted_by_hand_is_left_alone(lines):
    source = """
        import torch

        m = x.max(dim=1, keepdim=True).values
        stable = m.squeeze(1) + torch.log(torch.sum(torch.exp(x - m), dim=1))
        again = torch.log((x - x.amax(1, keepdim=True)).exp().sum(1))
        offset = torch.log(torch.sum(torch.exp(x - 1.0), 1))
    """
    assert lines(source, "TM210") == [7]
