"""A compute-bound job: pre-stacked tensors, one gather per batch, and a wide MLP to train.

Nothing but the model's own math is left in the step (forward, backward, SGD with momentum), so
``trainmedic attach`` should name ``compute`` at the heaviest line of the loop, ``loss.backward()``
(marked ``# expect-where``). Run with ``--steps N`` it trains exactly N steps and its result line
(the final loss) is the same on every run: the test compares a run read from outside with one
left alone.
"""

import torch
from jobctl import Job
from torch import nn

torch.set_num_threads(1)  # one core for the job, the other for the sampler

job = Job("compute_bound")
SAMPLES, FEATURES, HIDDEN, CLASSES, BATCH = 4096, 512, 1536, 10, 128

torch.manual_seed(0)
X = torch.randn(SAMPLES, FEATURES)  # the whole data set in memory, stacked once
Y = (X[:, :CLASSES] * torch.linspace(1.0, 2.0, CLASSES)).argmax(1)
model = nn.Sequential(
    nn.Linear(FEATURES, HIDDEN),
    nn.GELU(),
    nn.Linear(HIDDEN, HIDDEN),
    nn.GELU(),
    nn.Linear(HIDDEN, CLASSES),
)
optimizer = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
step = 0
while job.running(step):
    idx = torch.randint(0, SAMPLES, (BATCH,))
    x, y = X[idx], Y[idx]
    loss = nn.functional.cross_entropy(model(x), y)
    optimizer.zero_grad()
    loss.backward()  # expect-where
    optimizer.step()
    step += 1
job.finish(steps=step, loss=f"{loss.item():.6f}")
