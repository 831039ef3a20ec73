"""
Flow matching with minibatch optimal-transport couplings.

Phase 1 draws source/target batches, couples them with entropic OT (Sinkhorn on the squared
Euclidean cost) and keeps the coupled pairs in a pool. Phase 2 regresses a velocity field on
straight-line interpolants between the pooled pairs. Samples are integrated with Euler steps
from an EMA copy of the network and saved as scatter plots.
"""
import copy
import logging
import math
import os
from functools import partial

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

log = logging.getLogger("otfm")

CONFIG = {
    "dataset": "moons",        # moons | gaussians8 | file
    "points_file": "data/points.npz",
    "dim": 2,
    "hidden": 256,
    "n_layers": 4,
    "pool_batches": 256,
    "ot_batch": 1024,
    "sinkhorn_eps": 0.05,
    "sinkhorn_iters": 200,
    "sigma": 0.01,
    "batch_size": 512,
    "lr": 2e-4,
    "warmup": 1000,
    "total_steps": 40_000,
    "ema_decay": 0.9995,
    "log_every": 200,
    "sample_every": 5_000,
    "n_sample_steps": 100,
    "seed": 0,
    "out_dir": "results/otfm",
}


# ---------------------------------------------------------------------------
# data

def sample_source(n, dim, device):
    return torch.randn(n, dim, device=device)


def load_points(path, device):
    arr = np.load(path)["points"].astype(np.float32)
    points = []
    for row in arr:
        points.append(torch.from_numpy(row).to(device))  # expect: TM108
    return torch.stack(points)


def sample_target(n, cfg, device, cache={}):
    name = cfg["dataset"]
    if name == "moons":
        t = torch.rand(n, device=device) * math.pi
        upper = torch.rand(n, device=device) < 0.5
        x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
        y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
        return torch.stack([x, y], dim=1) * 2 + 0.05 * torch.randn(n, 2, device=device)
    if name == "gaussians8":
        angles = torch.randint(0, 8, (n,), device=device) * (2 * math.pi / 8)
        centers = torch.stack([torch.cos(angles), torch.sin(angles)], dim=1) * 4
        return centers + 0.3 * torch.randn(n, 2, device=device)
    if "points" not in cache:
        cache["points"] = load_points(cfg["points_file"], device)
    pts = cache["points"]
    return pts[torch.randint(0, len(pts), (n,), device=device)]


# ---------------------------------------------------------------------------
# optimal transport

@torch.no_grad()
def sinkhorn_log(cost, eps, n_iters):
    """Entropic OT plan between two uniform empirical measures, computed in the log domain."""
    n, m = cost.shape
    log_a = torch.full((n,), -math.log(n), device=cost.device)
    log_b = torch.full((m,), -math.log(m), device=cost.device)
    f = torch.zeros(n, device=cost.device)
    g = torch.zeros(m, device=cost.device)
    for _ in range(n_iters):
        f = eps * (log_a - torch.logsumexp((g[None, :] - cost) / eps, dim=1))
        g = eps * (log_b - torch.logsumexp((f[:, None] - cost) / eps, dim=0))
    return torch.exp((f[:, None] + g[None, :] - cost) / eps)


@torch.no_grad()
def ot_couple(x0, x1, eps, n_iters):
    cost = torch.cdist(x0, x1) ** 2
    scale = cost.max()
    plan = sinkhorn_log(cost / scale, eps, n_iters)
    # one target per source point, drawn from the conditional of the plan
    j = torch.multinomial(plan / plan.sum(dim=1, keepdim=True), 1).squeeze(1)
    return x0, x1[j], (plan * cost).sum()


def build_pool(cfg, device):
    xs0, xs1, costs = [], [], []
    for b in range(cfg["pool_batches"]):
        x0 = sample_source(cfg["ot_batch"], cfg["dim"], device)
        x1 = sample_target(cfg["ot_batch"], cfg, device)
        x0, x1, cost = ot_couple(x0, x1, cfg["sinkhorn_eps"], cfg["sinkhorn_iters"])
        xs0.append(x0)
        xs1.append(x1)
        costs.append(cost)
        if b % 64 == 0:
            log.info("pool %d/%d  transport cost %.4f", b, cfg["pool_batches"], cost.item())
    pool0, pool1 = torch.cat(xs0), torch.cat(xs1)
    log.info("pool ready: %d pairs, mean cost %.4f", len(pool0), torch.stack(costs).mean().item())
    return pool0, pool1


# ---------------------------------------------------------------------------
# model

class TimeEmbedding(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.register_buffer("freqs", torch.exp(torch.linspace(0, math.log(1000), dim // 2)))

    def forward(self, t):
        arg = t[:, None] * self.freqs[None, :]
        return torch.cat([arg.sin(), arg.cos()], dim=1)


class VelocityNet(nn.Module):
    def __init__(self, dim, hidden, n_layers):
        super().__init__()
        self.temb = TimeEmbedding(64)
        layers = [nn.Linear(dim + 64, hidden), nn.SiLU()]
        for _ in range(n_layers - 1):
            layers += [nn.Linear(hidden, hidden), nn.SiLU()]
        layers.append(nn.Linear(hidden, dim))
        self.net = nn.Sequential(*layers)

    def forward(self, x, t):
        return self.net(torch.cat([x, self.temb(t)], dim=1))


@torch.no_grad()
def ema_update(ema, model, decay):
    for pe, p in zip(ema.parameters(), model.parameters()):
        pe.lerp_(p, 1.0 - decay)


# ---------------------------------------------------------------------------
# sampling

@torch.no_grad()
def euler_sample(model, x0, n_steps, return_traj=False):
    ts = torch.linspace(0.0, 1.0, n_steps + 1, device=x0.device)
    x, traj = x0, [x0]
    for i in range(n_steps):
        x = x + (ts[i + 1] - ts[i]) * model(x, ts[i].expand(x.shape[0]))
        if return_traj:
            traj.append(x)
    return torch.stack(traj) if return_traj else x


@torch.no_grad()
def midpoint_sample(model, x0, n_steps):
    h = 1.0 / n_steps
    x = x0
    for i in range(n_steps):
        t = torch.full((x.shape[0],), i * h, device=x.device)
        x_mid = x + 0.5 * h * model(x, t)
        x = x + h * model(x_mid, t + 0.5 * h)
    return x


def make_samplers(model, cfg):
    samplers = {}
    for n_steps in (1, 4, 16, cfg["n_sample_steps"]):
        samplers[f"euler{n_steps}"] = lambda x0: euler_sample(model, x0, n_steps)  # expect: TM101
        samplers[f"midpoint{n_steps}"] = partial(midpoint_sample, model, n_steps=n_steps)
    return samplers


def save_samples(samplers, cfg, step, device):
    x0 = sample_source(2000, cfg["dim"], device)
    fig, axes = plt.subplots(1, len(samplers), figsize=(3 * len(samplers), 3), squeeze=False)
    for ax, (name, fn) in zip(axes[0], sorted(samplers.items(), key=lambda kv: kv[0])):
        xs = fn(x0).cpu().numpy()
        ax.scatter(xs[:, 0], xs[:, 1], s=1, alpha=0.4)
        ax.set_title(name)
        ax.set_aspect("equal")
    fig.tight_layout()
    fig.savefig(os.path.join(cfg["out_dir"], f"samples_{step:07d}.png"), dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------
# main

def train(cfg):
    torch.manual_seed(cfg["seed"])
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(cfg["out_dir"], exist_ok=True)

    model = VelocityNet(cfg["dim"], cfg["hidden"], cfg["n_layers"]).to(device)
    ema = copy.deepcopy(model).eval().requires_grad_(False)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / cfg["warmup"]))
    samplers = make_samplers(ema, cfg)

    log.info("phase 1: building the coupled pool")
    pool0, pool1 = build_pool(cfg, device)
    n, bs = len(pool0), cfg["batch_size"]

    log.info("phase 2: regression on %d pairs", n)
    perm, cursor = torch.randperm(n, device=device), 0
    losses, grad_norms = [], []
    for step in range(1, cfg["total_steps"] + 1):
        if cursor + bs > n:
            perm, cursor = torch.randperm(n, device=device), 0
        idx = perm[cursor:cursor + bs]
        cursor += bs

        x0, x1 = pool0[idx], pool1[idx]
        t = torch.rand(bs, device=device)
        xt = (1 - t[:, None]) * x0 + t[:, None] * x1 + cfg["sigma"] * torch.randn_like(x0)
        loss = F.mse_loss(model(xt, t), x1 - x0)

        opt.zero_grad(set_to_none=True)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        ema_update(ema, model, cfg["ema_decay"])

        losses.append(loss.item())  # expect: TM107
        grad_norms.append(gn)
        gn_ratio = gn / torch.stack(grad_norms).mean()  # expect: TM106
        log.info("step %d  lr %.2e", step, sched.get_last_lr()[0])  # expect: TM111

        if step % cfg["log_every"] == 0:
            window = losses[-cfg["log_every"]:]
            log.info("step %d  loss %.5f  gnorm %.3f (x%.2f of mean)",
                     step, float(np.mean(window)), gn.item(), gn_ratio.item())
        if step % cfg["sample_every"] == 0 or step == cfg["total_steps"]:
            save_samples(samplers, cfg, step, device)
            torch.save({"model": model.state_dict(), "ema": ema.state_dict(), "step": step, "cfg": cfg},
                       os.path.join(cfg["out_dir"], "ckpt.pt"))

    traj = euler_sample(ema, sample_source(256, cfg["dim"], device), cfg["n_sample_steps"], return_traj=True)
    np.save(os.path.join(cfg["out_dir"], "trajectories.npy"), traj.cpu().numpy())
    return ema


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    train(CONFIG)
