"""Data-bound, nanoGPT-style: the next batch is re-read and re-tokenized from raw text every time.

Reproduces a nanoGPT-shaped loop whose author skipped the "prepare" step: the loop sits at module
level, two accumulation micro-steps per optimizer step, a small weight-tied GPT, and -- as in
nanoGPT -- the next batch is fetched between the forward and the backward. But ``get_batch``
opens the raw character-level corpus on every call and encodes it one character at a time
(a Python dict lookup per character) before it cuts random windows out of it. That encode is
most of the step; the fetch's position (after the forward, before the backward) does not make
it compute.
Fix: tokenize once (nanoGPT's prepare.py writes train.bin) and slice the in-memory uint16 array,
or ``data.load(...)`` it once into a cache tier.
"""

EXPECT = {"bottleneck": "data", "kind": ""}

import argparse
import math
import os
import tempfile

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=16)
args, _ = parser.parse_known_args()

CHARS = "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
VOCAB, BLOCK, BATCH, N_EMBD, N_HEAD, N_LAYER = len(CHARS), 64, 4, 64, 4, 2
ACCUMULATION, GRAD_CLIP, CORPUS_CHARS = 2, 1.0, 500_000


class SelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(N_EMBD, 3 * N_EMBD)
        self.out = nn.Linear(N_EMBD, N_EMBD)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(N_EMBD, dim=2)
        q, k, v = (z.view(b, t, N_HEAD, c // N_HEAD).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).contiguous().view(b, t, c))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(N_EMBD), nn.LayerNorm(N_EMBD)
        self.attn = SelfAttention()
        self.mlp = nn.Sequential(nn.Linear(N_EMBD, 4 * N_EMBD), nn.GELU(), nn.Linear(4 * N_EMBD, N_EMBD))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyGPT(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, N_EMBD)
        self.pos = nn.Embedding(BLOCK, N_EMBD)
        self.blocks = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(N_EMBD)
        self.lm_head = nn.Linear(N_EMBD, VOCAB, bias=False)
        self.tok.weight = self.lm_head.weight  # weight tying

    def forward(self, idx, targets):
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        loss = F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))
        return logits, loss


tmp = tempfile.TemporaryDirectory()
corpus_path = os.path.join(tmp.name, "input.txt")
rng = np.random.default_rng(0)
with open(corpus_path, "w", encoding="utf-8") as f:
    f.write("".join(np.array(list(CHARS))[rng.integers(0, VOCAB, size=CORPUS_CHARS)]))
stoi = {ch: i for i, ch in enumerate(CHARS)}


def get_batch():
    with open(corpus_path, encoding="utf-8") as f:
        text = f.read()
    data = np.array([stoi[ch] for ch in text], dtype=np.uint16)  # expect-where
    starts = torch.randint(len(data) - BLOCK, (BATCH,))
    x = torch.stack([torch.from_numpy(data[i : i + BLOCK].astype(np.int64)) for i in starts.tolist()])
    y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + BLOCK].astype(np.int64)) for i in starts.tolist()])
    return x, y


torch.manual_seed(0)
model = TinyGPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, betas=(0.9, 0.99), weight_decay=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=False)  # enabled only for float16

X, Y = get_batch()
for it in range(args.steps):
    lr = 1e-3 * 0.5 * (1 + math.cos(math.pi * it / args.steps))  # cosine decay
    for group in optimizer.param_groups:
        group["lr"] = lr
    for _micro_step in range(ACCUMULATION):
        logits, loss = model(X, Y)
        loss = loss / ACCUMULATION
        X, Y = get_batch()  # the next batch, fetched while the device would run the forward
        scaler.scale(loss).backward()
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
tmp.cleanup()
print(f"data_after_backward: {args.steps} steps, final loss {loss.item() * ACCUMULATION:.4f}")
