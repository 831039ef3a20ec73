"""No verdict: the script fails before its first step.

A training script whose configuration check raises before the loop is reached (here, at import
time of the script). Nothing was measured but imports: `trainmedic run` must say the script
failed at its line, before any step, and name no bottleneck -- a verdict drawn from `import
torch` would send the user after the wrong line.
"""

EXPECT = {"bottleneck": None, "outcome": "exception", "exit_code": 1}

import torch

LEARNING_RATE = -0.1
if LEARNING_RATE <= 0:
    raise ValueError(f"lr={LEARNING_RATE}: expected a positive learning rate")  # expect-where
model = torch.nn.Linear(4, 1)
