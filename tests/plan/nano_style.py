"""A small decoder in nanoGPT's style, written here: token and position tables, pre-norm blocks
with causal attention, the output layer tied to the token table, and the loss taken in forward
as ``F.cross_entropy(logits.view(-1, V), targets.view(-1))`` -- which folds batch and sequence
into one axis, the shape that hid the logits' growth with the batch."""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.nn import functional as F

VOCAB, BLOCK, WIDTH, HEADS, LAYERS = 2048, 128, 64, 4, 2


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(WIDTH, 3 * WIDTH, bias=False)
        self.proj = nn.Linear(WIDTH, WIDTH, bias=False)
        self.register_buffer("causal", torch.tril(torch.ones(BLOCK, BLOCK)).view(1, 1, BLOCK, BLOCK))

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(WIDTH, dim=2)
        q, k, v = (z.view(b, t, HEADS, c // HEADS).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(c // HEADS)  # SCORES LINE
        scores = scores.masked_fill(self.causal[:, :, :t, :t] == 0, float("-inf")).softmax(dim=-1)
        return self.proj((scores @ v).transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln_1, self.attn = nn.LayerNorm(WIDTH), Attention()
        self.ln_2 = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoStyle(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(VOCAB, WIDTH), nn.Embedding(BLOCK, WIDTH)
        self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
        self.ln_f = nn.LayerNorm(WIDTH)
        self.lm_head = nn.Linear(WIDTH, VOCAB, bias=False)
        self.lm_head.weight = self.wte.weight  # tied, as nanoGPT ties them

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # LOGITS LINE
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))  # LOSS LINE
        return logits, loss


def build(batch_size: int) -> dict:
    idx = torch.randint(0, VOCAB, (batch_size, BLOCK))
    return dict(
        model=NanoStyle(),
        inputs=(idx, torch.roll(idx, -1, dims=1)),
        optimizer=lambda p: torch.optim.AdamW(p, 6e-4),
        loss_fn=lambda out: out[1],
    )
