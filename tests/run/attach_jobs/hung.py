"""A hung job: after its warm-up batches the loop waits for a batch that never comes.

Batches come from a loader thread through a queue, as from a prefetching reader; the loader
serves the warm-up batches and then puts nothing more (as one whose remote store stopped
answering), so the main thread blocks in ``fetch_batch()`` on ``queue.get()`` (marked
``# expect-where``). From outside that is no step, no bottleneck, and a note starting ``Stuck:``
that names the line; a stack dump shows the main thread there. The stop file releases it (a
``None`` batch), so the job still ends cleanly.
"""

import queue
import threading

import torch
from jobctl import Job
from torch import nn

torch.set_num_threads(1)  # one core for the job, the other for the sampler

job = Job("hung")
FEATURES, CLASSES, BATCH = 64, 4, 32
batches = queue.Queue(maxsize=4)


def load(count):
    """The loader: serves ``count`` batches, then stalls (nothing more is ever put)."""
    generator = torch.Generator().manual_seed(1)
    for _ in range(count):
        x = torch.randn(BATCH, FEATURES, generator=generator)
        batches.put((x, x[:, :CLASSES].argmax(1)))


def fetch_batch():
    return batches.get()  # expect-where


torch.manual_seed(0)
model = nn.Linear(FEATURES, CLASSES)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
threading.Thread(target=load, args=(job.args.warmup,), name="loader", daemon=True).start()
job.on_stop(lambda: batches.put(None))
step = 0
loss = torch.zeros(())
while job.running(step):
    batch = fetch_batch()
    if batch is None:  # released by the stop file
        break
    x, y = batch
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    step += 1
job.finish(steps=step, loss=f"{loss.item():.6f}")
