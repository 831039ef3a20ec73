"""Compute-bound, nanoGPT-style: a module-level loop with gradient accumulation and a GradScaler.

Reproduces the shape of nanoGPT's train.py (a healthy run that was misread): there is no
``def train()``, the loop sits at module level; a small GPT (token + position embeddings,
pre-norm blocks of causal self-attention and a GELU MLP, final LayerNorm, an lm_head whose weight
is tied to the token embedding) is trained with two accumulation micro-steps per optimizer step;
the loss goes through a ``torch.amp.GradScaler`` (disabled, as it is for float32 on a CPU), the
gradients are unscaled and clipped to norm 1.0 before ``scaler.step``; and -- as nanoGPT does to
overlap the host with the device -- the *next* batch is fetched between the forward and the
backward. That fetch is cheap: random windows of a pre-loaded uint16 token array, stacked.
Nothing is wrong here: the model's forward + backward + optimizer step are the step (99 %;
``scaler.scale(loss).backward()`` alone 57 %, the forward 33 %, ``scaler.step`` 6 %).
Fix: none needed (precision, compile or batch size would tune it).
"""

EXPECT = {"bottleneck": "compute", "kind": ""}

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
parser.add_argument("--steps", type=int, default=20)
args, _ = parser.parse_known_args()

VOCAB, BLOCK, BATCH, N_EMBD, N_HEAD, N_LAYER = 65, 64, 8, 96, 4, 3
ACCUMULATION, GRAD_CLIP = 2, 1.0


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


# The "prepare" step: a token file written once, loaded whole into RAM.
with tempfile.TemporaryDirectory() as tmp:
    rng = np.random.default_rng(0)
    rng.integers(0, VOCAB, size=200_000, dtype=np.uint16).tofile(os.path.join(tmp, "train.bin"))
    train_data = np.fromfile(os.path.join(tmp, "train.bin"), dtype=np.uint16)


def get_batch():
    starts = torch.randint(len(train_data) - BLOCK, (BATCH,))
    x = torch.stack([torch.from_numpy(train_data[i : i + BLOCK].astype(np.int64)) for i in starts.tolist()])
    y = torch.stack(
        [torch.from_numpy(train_data[i + 1 : i + 1 + BLOCK].astype(np.int64)) for i in starts.tolist()]
    )
    return x, y


torch.manual_seed(0)
model = TinyGPT()
optimizer = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=False)  # enabled only for float16

X, Y = get_batch()
for it in range(args.steps):
    lr = 6e-4 * 0.5 * (1 + math.cos(math.pi * it / args.steps))  # cosine decay
    for group in optimizer.param_groups:
        group["lr"] = lr
    for _micro_step in range(ACCUMULATION):
        logits, loss = model(X, Y)
        loss = loss / ACCUMULATION
        X, Y = get_batch()  # the next batch, fetched while the device would run the forward
        scaler.scale(loss).backward()  # expect-where
    scaler.unscale_(optimizer)
    torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
print(f"nanogpt_style_compute: {args.steps} steps, final loss {loss.item() * ACCUMULATION:.4f}")
