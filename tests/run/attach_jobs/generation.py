"""A generation job with no model: synthetic radar returns made one sample at a time.

Each sample is a few dozen tiny torch ops on a 48-point signal (a chirp, echoes at random
delays, clutter, normalisation, noise), called once per sample in a Python loop. The time goes to
the calls' overhead inside ``make_return()``, in the job's own lines with no library under them,
which a sampler outside the process cannot break down: ``trainmedic attach`` names no
bottleneck and its hottest line lies inside ``make_return()``.
"""

import math

import torch
from jobctl import Job

torch.set_num_threads(1)  # one core for the job, the other for the sampler

job = Job("generation")
POINTS, ECHOES, BATCH = 48, 8, 64
T = torch.linspace(0.0, 1.0, POINTS)


def make_return():
    """One radar return and its range label, built op by op."""
    target = torch.rand(())
    chirp = torch.cos(2 * math.pi * (5.0 + 20.0 * target) * T * T)
    sig = chirp.clone()
    for _ in range(ECHOES):  # echoes off the clutter, each a shifted, scaled copy
        shift = int(torch.randint(1, POINTS // 2, ()))
        sig = sig + 0.2 * torch.randn(()) * torch.roll(chirp, shift)
    sig = sig * (1.0 + 0.1 * torch.randn(POINTS)).abs()  # clutter
    sig = (sig - sig.mean()) / (sig.std() + 1e-6)
    sig = sig + 0.05 * torch.randn(POINTS)
    return sig, target


torch.manual_seed(0)
step = 0
total = torch.zeros(())
while job.running(step):
    signals, targets = [], []
    for _ in range(BATCH):
        sig, target = make_return()
        signals.append(sig)
        targets.append(target)
    batch = torch.stack(signals)
    total = total + batch.abs().mean() + torch.stack(targets).mean()
    step += 1
job.finish(steps=step, checksum=f"{total.item() / max(step, 1):.6f}")
