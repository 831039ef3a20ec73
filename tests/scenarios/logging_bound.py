"""Host-bookkeeping-bound: a huge JSON metrics record is logged (and flushed) every step.

Reproduces seed 002, optimisation #5 ("Reduced logging": the OpenKBP trainer printed every
batch, 100x per epoch, and only printing once per epoch was part of the fix). Here the "debug
everything" version: each step serialises per-sample losses, logits and probabilities plus
per-parameter statistics with ``.tolist()`` into a dict, ``json.dumps`` it and writes it through
a ``logging.FileHandler`` (which flushes every record). The model itself is small, so the step
is dominated by float-to-text conversion. Fix: log scalars every N steps; keep big arrays for
occasional ``torch.save`` snapshots.
"""

EXPECT = {"bottleneck": "host_other", "kind": "logging"}

import argparse
import json
import logging
import os
import tempfile

import torch
from torch import nn

torch.set_num_threads(1)  # stable timings on a small machine

parser = argparse.ArgumentParser()
parser.add_argument("--steps", type=int, default=40)
args, _ = parser.parse_known_args()

FEATURES, CLASSES, BATCH = 128, 100, 256


def collect_metrics(step, model, logits, per_sample_loss):
    metrics = {"step": step, "loss": per_sample_loss.mean().item(),
               "per_sample_loss": per_sample_loss.tolist(),
               "logits": logits.tolist(), "probs": logits.softmax(-1).tolist(), "params": {}}
    for name, p in model.named_parameters():
        metrics["params"][name] = {"norm": p.norm().item(), "grad_norm": p.grad.norm().item(),
                                   "row_norms": p.detach().reshape(len(p), -1).norm(dim=1).tolist(),
                                   "grad_hist": torch.histc(p.grad, bins=64).tolist()}
    return metrics


torch.manual_seed(0)
X = torch.randn(8192, FEATURES)
Y = (X[:, :CLASSES] + 0.5 * torch.randn(8192, CLASSES)).argmax(1)
model = nn.Sequential(nn.Linear(FEATURES, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, CLASSES))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)

with tempfile.TemporaryDirectory() as tmp:
    logger = logging.getLogger("trainer.metrics")
    logger.setLevel(logging.INFO)
    logger.propagate = False
    handler = logging.FileHandler(os.path.join(tmp, "metrics.log"))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger.addHandler(handler)
    try:
        for step in range(args.steps):
            idx = torch.randint(0, len(X), (BATCH,))
            logits = model(X[idx])
            per_sample_loss = nn.functional.cross_entropy(logits, Y[idx], reduction="none")
            optimizer.zero_grad()
            per_sample_loss.mean().backward()
            optimizer.step()
            metrics = collect_metrics(step, model, logits.detach(), per_sample_loss.detach())
            logger.info(json.dumps(metrics))  # expect-where
    finally:
        logger.removeHandler(handler)
        handler.close()
    print(f"logging_bound: {args.steps} steps, final loss {metrics['loss']:.4f}")
