"""The process-wide random streams a training step draws from: Python, NumPy, torch CPU and CUDA.

Dropout, ``torch.randn``, ``np.random.rand``, ``random.shuffle`` and a DataLoader's sampler seed
all read one of these; an exact resume needs every one of them back where it was.
"""

from __future__ import annotations

import random
import sys
from typing import Any


def capture() -> dict[str, Any]:
    """The state of every global generator the process has loaded (torch/NumPy are not imported)."""
    state: dict[str, Any] = {"python": random.getstate()}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        state["numpy"] = numpy.random.get_state()
    torch = sys.modules.get("torch")
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        # Only once CUDA is up: asking earlier would initialise it (and its context) for nothing,
        # and a process that never touched CUDA never drew from its generators.
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore(state: dict[str, Any]) -> list[str]:
    """Put every saved stream back; return notes for those that cannot be (fewer GPUs, no CUDA)."""
    notes = []
    random.setstate(state["python"])
    if "numpy" in state:
        import numpy

        numpy.random.set_state(state["numpy"])
    if "torch" in state or "cuda" in state:
        import torch

        if "torch" in state:
            torch.set_rng_state(state["torch"])
        if "cuda" in state:
            saved = state["cuda"]
            have = torch.cuda.device_count() if torch.cuda.is_available() else 0
            for index in range(min(have, len(saved))):
                torch.cuda.set_rng_state(saved[index], index)
            if have < len(saved):
                notes.append(
                    f"the checkpoint holds the CUDA random state of {len(saved)} GPU(s) and this process sees {have}: "
                    f"the random draws on the missing ones will differ from the interrupted run."
                )
    return notes
