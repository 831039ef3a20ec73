"""A torch training loop that a checkpointed, killed and resumed run must reproduce bit for bit.

Every variant trains an MLP with dropout, AdamW, a scheduler and an enabled GradScaler("cpu")
under bf16 autocast, and draws from Python's ``random``, NumPy's global RNG and torch's RNG in
each step. Variants:
- ``tmdata``: batches from a shuffled ``trainmedic.data`` loader (12 per epoch), OneCycleLR, saved
  every 5 steps: a resume replays the steps after the last save, mid-epoch.
- ``sdl``: the same with a shuffled torchdata ``StatefulDataLoader`` (8 batches per epoch, no
  explicit generator: the common way to build one).
- ``epochs``: a plain DataLoader over a DistributedSampler (set_epoch), StepLR, the same scaler;
  saved at epoch ends only (a plain DataLoader cannot resume mid-epoch).

``--mode plain`` runs both variants without any Checkpointer (the uninterrupted reference) and
writes ``<out>-<variant>.pt``; ``--mode ckpt`` runs one variant with a Checkpointer, logs
``restored <step> ...`` and ``step <n>``, and blocks after step ``--hold-at`` until killed.
"""

from __future__ import annotations

import argparse
import random
import sys

import numpy as np
import torch
import torch.nn.functional as F
from childkit import Progress, hold
from torch import nn
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
from torchdata.stateful_dataloader import StatefulDataLoader

import trainmedic.data
from trainmedic.checkpoint import Checkpointer

N = 192  # samples: 12 batches of 16 (tmdata, epochs) or 8 batches of 24 (sdl) per epoch
TOTAL = {"tmdata": 60, "sdl": 40, "epochs": 48}
EPOCH_STEPS = 12


def seed_everything() -> None:
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)


def data(seed: int) -> tuple[np.ndarray, np.ndarray]:
    g = np.random.default_rng(seed)
    x = g.standard_normal((N, 8)).astype(np.float32)
    return x, (x @ g.standard_normal((8, 1)).astype(np.float32) + 0.1).astype(np.float32)


def build(total: int, scheduler: str):
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.25), nn.Linear(32, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    if scheduler == "onecycle":
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.05, total_steps=total)
    else:
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.8)
    # growth_interval=3: the scale changes during the run, so its state matters on resume.
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**8, growth_interval=3)
    return model, opt, sched, scaler


def train_step(model, opt, sched, scaler, x, y) -> None:
    noise = 0.01 * (random.random() + float(np.random.rand()))
    x = x + 0.01 * torch.randn_like(x) + noise
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(x)
    loss = F.mse_loss(out.float(), y)
    opt.zero_grad(set_to_none=True)
    scaler.scale(loss).backward()
    scaler.step(opt)
    scaler.update()
    sched.step()


def endless(loader):
    while True:
        yield from loader


def final_state(model, opt, sched, scaler, extra: dict) -> dict:
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "scheduler": sched.state_dict(),
        "scaler": scaler.state_dict(),
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        **extra,
    }


def run_stepwise(ckpt, progress: Progress, hold_at: int, which: str) -> dict:
    """Batches from one resumable loader; saved every 5 steps, so a resume replays a few steps."""
    total = TOTAL[which]
    seed_everything()
    x, y = data(1 if which == "tmdata" else 2)
    if which == "tmdata":
        loader = trainmedic.data.load({"x": x, "y": y}, batch_size=16, shuffle=True, seed=7, progress=False)
    else:
        loader = StatefulDataLoader(
            TensorDataset(torch.from_numpy(x), torch.from_numpy(y)), batch_size=24, shuffle=True
        )
    model, opt, sched, scaler = build(total, "onecycle")
    objects = {"model": model, "optimizer": opt, "scheduler": sched, "scaler": scaler, "loader": loader}
    start = 0
    if ckpt is not None:
        start = ckpt.restore(**objects)
        progress.log("restored", start, ",".join(ckpt.resumed.loaded), ",".join(ckpt.resumed.missing))
    batches = endless(loader)
    for step in range(start, total):
        xb, yb = next(batches)
        train_step(model, opt, sched, scaler, xb, yb)
        if ckpt is not None:
            ckpt.save(step + 1, **objects)
            progress.log("step", step + 1)
            if step + 1 == hold_at:
                hold()
    # The data position: the batch that would come next must be the same too.
    return final_state(model, opt, sched, scaler, {"next_batch": next(batches)})


def run_tmdata(ckpt, progress: Progress, hold_at: int) -> dict:
    return run_stepwise(ckpt, progress, hold_at, "tmdata")


def run_sdl(ckpt, progress: Progress, hold_at: int) -> dict:
    return run_stepwise(ckpt, progress, hold_at, "sdl")


def run_epochs(ckpt, progress: Progress, hold_at: int) -> dict:
    total = TOTAL["epochs"]
    seed_everything()
    x, y = data(3)
    dataset = TensorDataset(torch.from_numpy(x), torch.from_numpy(y))
    sampler = DistributedSampler(dataset, num_replicas=1, rank=0, shuffle=True, seed=3)
    loader = DataLoader(dataset, batch_size=16, sampler=sampler)
    model, opt, sched, scaler = build(total, "step")
    objects = {"model": model, "optimizer": opt, "scheduler": sched, "scaler": scaler, "loader": loader}
    start = 0
    if ckpt is not None:
        start = ckpt.restore(**objects)
        progress.log("restored", start, sampler.epoch)
    assert start % EPOCH_STEPS == 0, f"restored step {start} is not an epoch boundary"
    step = start
    for epoch in range(start // EPOCH_STEPS, total // EPOCH_STEPS):
        sampler.set_epoch(epoch)
        for xb, yb in loader:
            train_step(model, opt, sched, scaler, xb, yb)
            step += 1
            if ckpt is not None:
                progress.log("step", step)
                if step == hold_at:
                    hold()
        if ckpt is not None:
            ckpt.save(step, **objects)
    sampler.set_epoch(total // EPOCH_STEPS)
    return final_state(model, opt, sched, scaler, {"next_batch": next(iter(loader))})


RUNS = {"tmdata": run_tmdata, "sdl": run_sdl, "epochs": run_epochs}


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("plain", "ckpt"), required=True)
    p.add_argument("--variant", choices=tuple(RUNS))
    p.add_argument("--dir")
    p.add_argument("--progress")
    p.add_argument("--out", required=True)
    p.add_argument("--hold-at", type=int, default=-1)
    args = p.parse_args()
    torch.set_num_threads(1)
    progress = Progress(args.progress)
    if args.mode == "plain":
        for variant, run in RUNS.items():
            torch.save(run(None, progress, -1), f"{args.out}-{variant}.pt")
        return 0
    every = 1 if args.variant == "epochs" else 5
    ckpt = Checkpointer(args.dir, keep_last=2, every=every)
    torch.save(RUNS[args.variant](ckpt, progress, args.hold_at), f"{args.out}-{args.variant}.pt")
    progress.log("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
