"""
Train a small decoder-only transformer on pre-tokenized ids (data/<dataset>/{train,val}.bin).

    python gpt_train.py --batch_size=16 --compile=False
    torchrun --standalone --nproc_per_node=8 gpt_train.py
"""
import ast
import math
import os
import pickle
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


# ---------------------------------------------------------------------------
# model

@dataclass
class ModelArgs:
    block_size: int = 256
    vocab_size: int = 50304
    n_layer: int = 6
    n_head: int = 6
    n_embd: int = 384
    dropout: float = 0.0
    bias: bool = False


class SelfAttention(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        assert args.n_embd % args.n_head == 0
        self.n_head = args.n_head
        self.n_embd = args.n_embd
        self.to_qkv = nn.Linear(args.n_embd, 3 * args.n_embd, bias=args.bias)
        self.out = nn.Linear(args.n_embd, args.n_embd, bias=args.bias)
        self.p_drop = args.dropout
        self.drop = nn.Dropout(args.dropout)

    def forward(self, x):
        bsz, seqlen, dim = x.shape
        q, k, v = self.to_qkv(x).split(self.n_embd, dim=2)
        head_dim = dim // self.n_head
        q = q.view(bsz, seqlen, self.n_head, head_dim).transpose(1, 2)
        k = k.view(bsz, seqlen, self.n_head, head_dim).transpose(1, 2)
        v = v.view(bsz, seqlen, self.n_head, head_dim).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.p_drop if self.training else 0.0, is_causal=True
        )
        y = y.transpose(1, 2).contiguous().view(bsz, seqlen, dim)
        return self.drop(self.out(y))


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.up = nn.Linear(args.n_embd, 4 * args.n_embd, bias=args.bias)
        self.down = nn.Linear(4 * args.n_embd, args.n_embd, bias=args.bias)
        self.drop = nn.Dropout(args.dropout)

    def forward(self, x):
        return self.drop(self.down(F.gelu(self.up(x))))


class Block(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.norm1 = nn.LayerNorm(args.n_embd, bias=args.bias)
        self.attn = SelfAttention(args)
        self.norm2 = nn.LayerNorm(args.n_embd, bias=args.bias)
        self.ff = FeedForward(args)

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.ff(self.norm2(x))


class GPT(nn.Module):
    def __init__(self, args: ModelArgs):
        super().__init__()
        self.args = args
        self.tok_emb = nn.Embedding(args.vocab_size, args.n_embd)
        self.pos_emb = nn.Embedding(args.block_size, args.n_embd)
        self.drop = nn.Dropout(args.dropout)
        self.blocks = nn.ModuleList([Block(args) for _ in range(args.n_layer)])
        self.norm_f = nn.LayerNorm(args.n_embd, bias=args.bias)
        self.head = nn.Linear(args.n_embd, args.vocab_size, bias=False)
        self.tok_emb.weight = self.head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():
            if name.endswith("out.weight") or name.endswith("down.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * args.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        _, t = idx.shape
        assert t <= self.args.block_size, f"sequence of {t} is longer than block_size"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.tok_emb(idx) + self.pos_emb(pos))
        for block in self.blocks:
            x = block(x)
        x = self.norm_f(x)
        if targets is None:
            return self.head(x[:, [-1], :]), None
        logits = self.head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        return logits, loss

    def make_optimizer(self, weight_decay, lr, betas, device_type):
        params = [p for p in self.parameters() if p.requires_grad]
        groups = [
            {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
        ]
        fused = device_type == "cuda"
        return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.args.block_size else idx[:, -self.args.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("inf")
            probs = F.softmax(logits, dim=-1)
            idx = torch.cat((idx, torch.multinomial(probs, num_samples=1)), dim=1)
        return idx


# ---------------------------------------------------------------------------
# config: defaults, overridable as --key=value on the command line

out_dir = "out"
eval_interval = 500
log_interval = 10
eval_iters = 100
always_save_checkpoint = False
init_from = "scratch"  # or "resume"
dataset = "shakespeare_char"
gradient_accumulation_steps = 4
batch_size = 16
block_size = 256
n_layer, n_head, n_embd, dropout = 6, 6, 384, 0.1
learning_rate = 1e-3
max_iters = 5000
weight_decay = 0.1
beta1, beta2 = 0.9, 0.95
grad_clip = 1.0
warmup_iters = 100
lr_decay_iters = 5000
min_lr = 1e-4
dtype = "bfloat16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "float16"
compile = True

for arg in sys.argv[1:]:
    key, _, val = arg.lstrip("-").partition("=")
    if key not in globals():
        raise ValueError(f"unknown config key: {key}")
    try:
        val = ast.literal_eval(val)
    except (SyntaxError, ValueError):
        pass
    globals()[key] = val

ddp = int(os.environ.get("RANK", -1)) != -1
if ddp:
    init_process_group(backend="nccl")
    ddp_rank = int(os.environ["RANK"])
    ddp_local_rank = int(os.environ["LOCAL_RANK"])
    device = f"cuda:{ddp_local_rank}"
    torch.cuda.set_device(device)
    master_process = ddp_rank == 0
    seed_offset = ddp_rank
    gradient_accumulation_steps //= int(os.environ["WORLD_SIZE"])
else:
    device = "cuda" if torch.cuda.is_available() else "cpu"
    master_process = True
    seed_offset = 0

os.makedirs(out_dir, exist_ok=True)
torch.manual_seed(1337 + seed_offset)
torch.backends.cuda.matmul.allow_tf32 = True
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
ctx = nullcontext() if device_type == "cpu" else torch.autocast(device_type=device_type, dtype=ptdtype)

# ---------------------------------------------------------------------------
# data: the .bin files are memory-mapped once; slicing them only touches the pages we read

data_dir = os.path.join("data", dataset)
meta_path = os.path.join(data_dir, "meta.pkl")
vocab_size = None
if os.path.exists(meta_path):
    with open(meta_path, "rb") as f:
        vocab_size = pickle.load(f)["vocab_size"]
token_dtype = np.uint8 if vocab_size is not None and vocab_size <= 256 else np.uint16
token_files = {
    split: np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=token_dtype, mode="r")
    for split in ("train", "val")
}


def get_batch(split):
    data = token_files[split]
    starts = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in starts])
    y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64)) for i in starts])
    if device_type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


# ---------------------------------------------------------------------------
# init
iter_num, best_val_loss = 0, 1e9
args = ModelArgs(block_size=block_size, vocab_size=vocab_size or 50304, n_layer=n_layer,
                 n_head=n_head, n_embd=n_embd, dropout=dropout)
if init_from == "resume":
    ckpt = torch.load(os.path.join(out_dir, "ckpt.pt"), map_location=device)
    args = ModelArgs(**ckpt["model_args"])
    model = GPT(args)
    model.load_state_dict({k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items()})
    iter_num, best_val_loss = ckpt["iter_num"], ckpt["best_val_loss"]
else:
    model = GPT(args)
model.to(device)

scaler = torch.cuda.amp.GradScaler(enabled=(dtype == "float16"))
optimizer = model.make_optimizer(weight_decay, learning_rate, (beta1, beta2), device_type)
if init_from == "resume":
    optimizer.load_state_dict(ckpt["optimizer"])
    ckpt = None
if compile:
    model = torch.compile(model)
if ddp:
    model = DDP(model, device_ids=[ddp_local_rank])
raw_model = model.module if ddp else model


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ("train", "val"):
        losses = torch.zeros(eval_iters)
        for k in range(eval_iters):
            X, Y = get_batch(split)
            with ctx:
                _, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean().item()
    model.train()
    return out


def get_lr(it):
    if it < warmup_iters:
        return learning_rate * (it + 1) / (warmup_iters + 1)
    if it > lr_decay_iters:
        return min_lr
    ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
    coeff = 0.5 * (1.0 + math.cos(math.pi * ratio))
    return min_lr + coeff * (learning_rate - min_lr)


# ---------------------------------------------------------------------------
# training loop

X, Y = get_batch("train")
t0, local_iter_num, grad_norm = time.time(), 0, 0.0
loss_history = []
while True:
    lr = get_lr(iter_num)
    for group in optimizer.param_groups:
        group["lr"] = lr

    if iter_num % eval_interval == 0 and master_process:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        if losses["val"] < best_val_loss or always_save_checkpoint:
            best_val_loss = losses["val"]
            if iter_num > 0:
                checkpoint = {
                    "model": raw_model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "model_args": vars(args),
                    "iter_num": iter_num,
                    "best_val_loss": best_val_loss,
                }
                print(f"saving checkpoint to {out_dir}")
                torch.save(checkpoint, os.path.join(out_dir, "ckpt.pt"))

    for micro_step in range(gradient_accumulation_steps):
        if ddp:
            model.require_backward_grad_sync = micro_step == gradient_accumulation_steps - 1
        with ctx:
            _, loss = model(X, Y)
            loss = loss / gradient_accumulation_steps
        # prefetch the next batch while the GPU is busy with the forward pass
        X, Y = get_batch("train")
        scaler.scale(loss).backward()

    if grad_clip != 0.0:
        scaler.unscale_(optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip))  # expect: TM107
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    loss_history.append(loss.detach() * gradient_accumulation_steps)
    running_loss = torch.stack(loss_history).mean()  # expect: TM106

    t1 = time.time()
    dt, t0 = t1 - t0, t1
    if iter_num % log_interval == 0 and master_process:
        lossf = loss.item() * gradient_accumulation_steps
        print(f"iter {iter_num}: loss {lossf:.4f} (mean {running_loss.item():.4f}), "
              f"lr {lr:.2e}, grad norm {grad_norm:.3f}, {dt * 1000:.1f}ms")
    iter_num += 1
    local_iter_num += 1

    if iter_num > max_iters:
        break

if master_process:
    prompt = torch.zeros((1, 1), dtype=torch.long, device=device)
    sample = raw_model.generate(prompt, max_new_tokens=200, top_k=200)
    print(sample[0].tolist())
if ddp:
    destroy_process_group()
