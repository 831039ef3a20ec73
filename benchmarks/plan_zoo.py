"""Models whose memory `trainmedic plan` predicts, and a real CPU run that measures it.

Each ``build_*(batch_size)`` returns what ``trainmedic plan`` takes from a user's ``build``:
``dict(model=..., inputs=..., optimizer=..., loss_fn=...)``. The same function serves both sides
of the comparison: the planner runs it under fake tensors, and ``measure`` below runs it on real
CPU tensors in a fresh process, with nothing from trainmedic imported.

    python benchmarks/plan_zoo.py mlp_adam 1024              # peak RSS of the real step, as JSON
    python benchmarks/plan_zoo.py mlp_adam 1024 4096         # both batches, one after the other
    python benchmarks/plan_zoo.py --allocated mlp_adam 1024  # peak of torch's CPU allocations

Sizes are chosen so that the larger batch of each entry stays under ~1.5 GB of resident memory
and ~2 s a step on one core.
"""

from __future__ import annotations

import ctypes
import gc
import json
import math
import os
import resource
import sys
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

# -- the models --------------------------------------------------------------------------------


def build_mlp_adam(batch_size: int) -> dict[str, Any]:
    """A 512-1024-1024-1024-10 MLP with cross-entropy, trained with Adam."""
    model = nn.Sequential(
        nn.Linear(512, 1024),
        nn.ReLU(),
        nn.Linear(1024, 1024),
        nn.ReLU(),
        nn.Linear(1024, 1024),
        nn.ReLU(),
        nn.Linear(1024, 10),
    )
    x = torch.randn(batch_size, 512)
    y = torch.randint(0, 10, (batch_size,))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return {
        "model": model,
        "inputs": x,
        "optimizer": optimizer,
        "loss_fn": lambda out: F.cross_entropy(out, y),
    }


def build_cnn_sgd(batch_size: int) -> dict[str, Any]:
    """Conv-BN-ReLU blocks with pooling on 3x32x32 images, SGD with momentum."""

    def block(c_in: int, c_out: int) -> list[nn.Module]:
        return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU()]

    model = nn.Sequential(
        *block(3, 32),
        *block(32, 32),
        nn.MaxPool2d(2),
        *block(32, 64),
        *block(64, 64),
        nn.MaxPool2d(2),
        *block(64, 128),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(128, 10),
    )
    x = torch.randn(batch_size, 3, 32, 32)
    y = torch.randint(0, 10, (batch_size,))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    return {
        "model": model,
        "inputs": x,
        "optimizer": optimizer,
        "loss_fn": lambda out: F.cross_entropy(out, y),
    }


class _Block(nn.Module):
    """A pre-norm transformer block; ``sdpa`` picks F.scaled_dot_product_attention over q @ k^T."""

    def __init__(self, dim: int, heads: int, sdpa: bool) -> None:
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, s, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
            a = scores.softmax(dim=-1) @ v
        x = x + self.proj(a.transpose(1, 2).reshape(b, s, d))
        return x + self.mlp(self.norm2(x))


def _transformer(batch_size: int, sdpa: bool) -> dict[str, Any]:
    dim, heads, seq, vocab = 256, 4, 256, 1000
    model = nn.Sequential(
        nn.Embedding(vocab, dim), _Block(dim, heads, sdpa), _Block(dim, heads, sdpa), nn.Linear(dim, vocab)
    )
    tokens = torch.randint(0, vocab, (batch_size, seq))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return {
        "model": model,
        "inputs": tokens,
        "optimizer": optimizer,
        "loss_fn": lambda out: F.cross_entropy(out.flatten(0, 1), tokens.flatten()),
    }


def build_transformer_eager(batch_size: int) -> dict[str, Any]:
    """Two transformer blocks, attention written out as softmax(q @ k^T) @ v, AdamW."""
    return _transformer(batch_size, sdpa=False)


def build_transformer_sdpa(batch_size: int) -> dict[str, Any]:
    """The same two blocks with F.scaled_dot_product_attention."""
    return _transformer(batch_size, sdpa=True)


class _Sinkhorn(nn.Module):
    """A generator scored by an entropic optimal-transport loss against a data batch (seed 004)."""

    def __init__(self, dim: int, iterations: int = 10, eps: float = 0.1) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 256), nn.ReLU(), nn.Linear(256, dim))
        self.iterations, self.eps = iterations, eps

    def forward(self, noise: torch.Tensor, data: torch.Tensor) -> torch.Tensor:
        x = self.net(noise)
        cost = (x[:, None, :] - data[None, :, :]).pow(2).sum(-1)  # the N x N x D intermediate
        log_k = -cost / self.eps
        u = torch.zeros(x.shape[0])
        v = torch.zeros(data.shape[0])
        for _ in range(self.iterations):
            u = -torch.logsumexp(log_k + v[None, :], dim=1)
            v = -torch.logsumexp(log_k + u[:, None], dim=0)
        plan = torch.exp(log_k + u[:, None] + v[None, :])
        return (plan * cost).sum()


def build_sinkhorn_pairwise(batch_size: int) -> dict[str, Any]:
    """Pairwise squared distances (x[:, None] - y[None]).pow(2).sum(-1), Sinkhorn iterations, Adam."""
    dim = 64
    model = _Sinkhorn(dim)
    inputs = (torch.randn(batch_size, dim), torch.randn(batch_size, dim))
    return {"model": model, "inputs": inputs, "optimizer": torch.optim.Adam(model.parameters(), lr=1e-3)}


class _Recurrent(nn.Module):
    def __init__(self, features: int, hidden: int) -> None:
        super().__init__()
        self.lstm = nn.LSTM(features, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out)


def build_lstm(batch_size: int) -> dict[str, Any]:
    """A two-layer LSTM (128 -> 256) over 64 steps with a regression head, Adam."""
    # On the CPU nn.LSTM runs oneDNN (aten.mkldnn_rnn_layer): its forward returns a workspace of
    # ~62.6 B per step x sample x hidden unit, saved for backward, that torch's meta kernel reports
    # as empty, and its backward allocates a ~16.4 B/unit scratchpad inside the kernel; only part of
    # the workspace's pages are ever written, so the resident set sees less than is allocated.
    model = _Recurrent(128, 256)
    x = torch.randn(batch_size, 64, 128)
    target = torch.randn(batch_size, 64, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return {
        "model": model,
        "inputs": x,
        "optimizer": optimizer,
        "loss_fn": lambda out: F.mse_loss(out, target),
    }


class _Bag(nn.Module):
    def __init__(self, vocab: int, dim: int) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.mlp = nn.Sequential(
            nn.Linear(dim, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(), nn.Linear(512, 2)
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.mlp(self.embed(tokens)).mean(dim=1)


def build_embedding_mlp(batch_size: int) -> dict[str, Any]:
    """An embedding table (50,000 x 128) feeding a per-token MLP, averaged per sequence; Adam."""
    model = _Bag(50_000, 128)
    tokens = torch.randint(0, 50_000, (batch_size, 128))
    labels = torch.randint(0, 2, (batch_size,))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    return {
        "model": model,
        "inputs": tokens,
        "optimizer": optimizer,
        "loss_fn": lambda out: F.cross_entropy(out, labels),
    }


#: name -> (build, smaller batch, larger batch) of the comparison.
ZOO: dict[str, tuple[Callable[[int], dict[str, Any]], int, int]] = {
    "mlp_adam": (build_mlp_adam, 1024, 4096),
    "cnn_sgd": (build_cnn_sgd, 32, 128),
    "transformer_eager": (build_transformer_eager, 4, 16),
    "transformer_sdpa": (build_transformer_sdpa, 4, 16),
    "sinkhorn_pairwise": (build_sinkhorn_pairwise, 256, 1024),
    "lstm": (build_lstm, 32, 128),
    "embedding_mlp": (build_embedding_mlp, 32, 128),
}

# -- the real run ------------------------------------------------------------------------------


def train_step(parts: dict[str, Any], optimizer: torch.optim.Optimizer | None) -> None:
    """The step the planner traces: forward, loss, backward, optimizer step, zero_grad(None)."""
    model, inputs, loss_fn = parts["model"], parts["inputs"], parts.get("loss_fn")
    if isinstance(inputs, dict):
        out = model(**inputs)
    elif isinstance(inputs, (tuple, list)):
        out = model(*inputs)
    else:
        out = model(inputs)
    loss = loss_fn(out) if loss_fn is not None else out.mean()
    loss.backward()
    del out, loss
    if optimizer is not None:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    else:
        model.zero_grad(set_to_none=True)


def make_optimizer(parts: dict[str, Any]) -> torch.optim.Optimizer | None:
    optimizer = parts.get("optimizer")
    if optimizer is None or isinstance(optimizer, torch.optim.Optimizer):
        return optimizer
    return optimizer(parts["model"].parameters())


def _status_kib(field: str) -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise KeyError(field)


def _reset_peak() -> bool:
    # Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0), so the peak of the
    # step is not hidden under the peak of `import torch` or of the warm-up.
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _release_free_heap() -> None:
    # Small blocks (< the mmap threshold) live on malloc's heap, which keeps freed pages resident;
    # malloc_trim hands them back, so one measurement does not lend its heap to the next.
    gc.collect()
    try:
        ctypes.CDLL(None).malloc_trim(0)
    except (OSError, AttributeError):  # not glibc
        pass


def measure(
    name: str, batch_sizes: list[int], steps: int = 2, warmup_batch: int | None = None
) -> list[dict[str, Any]]:
    """Peak resident memory of ``steps`` real training steps at each batch size, above the RSS
    just before that batch's ``build``.

    A warm-up builds the same model at the smallest batch (or ``warmup_batch``) and runs a step
    first, so the code pages of every kernel, the thread pool, oneDNN's primitive cache and MKL's
    GEMM buffers (~4 MiB for the MLP, kept by MKL after the first large matmul) are resident before
    the first baseline is read: what remains is the memory the step's tensors take, and a one-time
    library cache is not counted in one batch size's number and missed in the next. Run this in a
    fresh process with ``MALLOC_MMAP_THRESHOLD_`` low (big blocks are then mmap'ed and returned to
    the OS on free, so the resident set follows the live tensors).
    """
    build = ZOO[name][0]
    torch.manual_seed(0)
    warm = build(warmup_batch or min(batch_sizes))
    train_step(warm, make_optimizer(warm))
    del warm
    results = []
    for batch_size in batch_sizes:
        _release_free_heap()
        exact = _reset_peak()
        baseline = _status_kib("VmRSS") * 1024
        started = time.perf_counter()
        parts = build(batch_size)
        optimizer = make_optimizer(parts)
        for _ in range(steps):
            train_step(parts, optimizer)
        seconds = time.perf_counter() - started
        peak = (
            _status_kib("VmHWM") * 1024
            if exact
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        )
        del parts, optimizer
        results.append(
            {
                "model": name,
                "batch_size": batch_size,
                "baseline_rss_bytes": baseline,
                "peak_rss_bytes": peak,
                "step_bytes": peak - baseline,
                "peak_source": "VmHWM after clear_refs" if exact else "ru_maxrss",
                "seconds": round(seconds, 3),
                "threads": torch.get_num_threads(),
                "mmap_threshold": os.environ.get("MALLOC_MMAP_THRESHOLD_"),
            }
        )
    return results


def measure_allocated(name: str, batch_size: int, steps: int = 2) -> dict[str, Any]:
    """Peak bytes of live CPU tensor allocations, from the profiler's allocator events.

    A second lens on the same step: it counts what torch's CPU allocator handed out, kernel
    internals included (oneDNN workspaces and scratchpads), page residency excluded. Where it
    agrees with the plan and the resident set does not, the difference is outside the tensors.
    """
    from torch.profiler import ProfilerActivity, profile

    build = ZOO[name][0]
    torch.manual_seed(0)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        parts = build(batch_size)
        optimizer = make_optimizer(parts)
        for _ in range(steps):
            train_step(parts, optimizer)
        del parts, optimizer
    # kineto_results keeps every [memory] event (alloc > 0, free < 0); prof.events() drops most.
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return {
        "model": name,
        "batch_size": batch_size,
        "allocated_peak_bytes": peak,
        "allocator_events": len(events),
    }


if __name__ == "__main__":
    args = [a for a in sys.argv[1:] if a != "--allocated"]
    if len(args) < 2 or args[0] not in ZOO or not all(a.isdigit() for a in args[1:]):
        sys.exit(f"usage: plan_zoo.py [--allocated] NAME BATCH [BATCH ...]  (NAME one of {', '.join(ZOO)})")
    torch.set_num_threads(1)
    batches = [int(a) for a in args[1:]]
    if "--allocated" in sys.argv:
        print(json.dumps([measure_allocated(args[0], b) for b in batches]))
    else:
        print(json.dumps(measure(args[0], batches)))
    # The measurement is printed: skip the interpreter's teardown of torch (about 1.7 s of a 9 s
    # child on a 2-vCPU VM, which measures nothing).
    sys.stdout.flush()
    os._exit(0)
