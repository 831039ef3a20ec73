"""Big states: a save does not hold a second copy of the state in memory (the peak RSS of the
saving process grows by a small fraction of the state), and it reports how long it took and how
many bytes it wrote. Checked for pickle (no torch in the process) and torch.save, with NumPy
arrays, a dict of tensors and a module."""

from __future__ import annotations

import json

import pytest
from ckpt_kit import Child, ForkedChild


@pytest.mark.slow
@pytest.mark.parametrize(
    "with_torch, kind, serializer",
    # With torch loaded, a NumPy state is still pickled: torch.save would copy every array.
    [
        (False, "numpy", "pickle"),
        (True, "module", "torch"),
        (True, "tensors", "torch"),
        (True, "numpy", "pickle"),
    ],
    ids=["pickle-numpy", "torch-module", "torch-dict-of-tensors", "torch-numpy"],
)
def test_a_big_state_is_saved_without_a_second_copy_in_memory(tmp_path, with_torch, kind, serializer):
    args = ["--dir", tmp_path / "ckpt", "--mb", 100, "--kind", kind]
    if with_torch:
        # Forked from the server that imported torch once (ckpt_kit.fork_server).
        child = ForkedChild("bigstate.py", [*args, "--torch"], tmp_path, "big")
    else:
        child = Child("bigstate.py", args, tmp_path, "big")
    assert child.finish(120) == 0, child.describe()
    facts = json.loads(child.stdout)
    assert facts["written"] is True and facts["serializer"] == serializer
    grown = facts["peak_after"] - facts["peak_before"]
    assert grown < 0.25 * facts["state_bytes"], (
        f"peak RSS grew by {grown / 1e6:.0f} MB while saving a {facts['state_bytes'] / 1e6:.0f} MB state "
        f"({serializer}, {kind}; the save took {facts['seconds']:.2f} s)"
    )
    assert facts["seconds"] > 0 and facts["latest_save_seconds"] > 0
    assert facts["state_bytes"] <= facts["bytes"] == facts["latest_bytes"] <= facts["state_bytes"] * 1.05
