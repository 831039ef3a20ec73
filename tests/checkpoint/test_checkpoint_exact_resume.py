"""A torch run killed with SIGKILL and resumed (twice) ends bit-identical to an uninterrupted one.

The uninterrupted reference runs without any Checkpointer in its own process (started once for
the module, in the background); the checkpointed runs are killed at a deterministic mid-epoch
point (the child blocks after logging the step, the parent SIGKILLs it) and resumed in fresh
processes. Every run is a process forked from a fork server that imported torch once
(ckpt_kit.fork_server), so the seven runs do not pay ~3 s of imports each. Model, optimizer, scheduler, GradScaler, the three global RNGs and the next batches of
each loader are compared with torch.equal / ==.
"""

from __future__ import annotations

import signal

import pytest
import torch
from ckpt_kit import ForkedChild, assert_same

# Every test here shares a module-scoped run or traces several models: seconds, not milliseconds.
pytestmark = pytest.mark.slow


class Reference:
    def __init__(self, directory):
        self.directory = directory
        self.child = ForkedChild(
            "torch_resume.py", ["--mode", "plain", "--out", directory / "plain"], directory, "plain"
        )

    def result(self, variant: str) -> dict:
        self.child.expect_success()
        return torch.load(self.directory / f"plain-{variant}.pt", weights_only=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ref = Reference(tmp_path_factory.mktemp("reference"))
    yield ref
    ref.child.kill()


def killed_at(tmp_path, variant: str, run: int, hold_at: int) -> ForkedChild:
    child = ForkedChild(
        "torch_resume.py",
        [
            "--mode",
            "ckpt",
            "--variant",
            variant,
            "--dir",
            tmp_path / "ckpt",
            "--out",
            tmp_path / f"run{run}",
            "--hold-at",
            hold_at,
        ],
        tmp_path,
        f"run{run}",
    )
    child.wait_for(lambda parts: parts == ["step", str(hold_at)], f"step {hold_at}")
    assert child.kill() == -signal.SIGKILL
    return child


def restored_step(child: ForkedChild) -> list[str]:
    return child.find("restored")[0][1:]


def resume(tmp_path, variant: str, run: int) -> ForkedChild:
    child = ForkedChild(
        "torch_resume.py",
        ["--mode", "ckpt", "--variant", variant, "--dir", tmp_path / "ckpt", "--out", tmp_path / f"run{run}"],
        tmp_path,
        f"run{run}",
    )
    child.expect_success()
    return child


def test_trainmedic_data_run_killed_twice_mid_epoch_ends_bit_identical(tmp_path, reference):
    # 12 batches per epoch: 23 and 43 are mid-epoch. Saved every 5 steps, so each resume starts
    # from an earlier step and replays a few: the replay must be exact too.
    first = killed_at(tmp_path, "tmdata", 1, 23)
    assert restored_step(first)[0] == "0"
    second = killed_at(tmp_path, "tmdata", 2, 43)
    step, loaded, missing = restored_step(second)
    assert 23 - 5 <= int(step) <= 23, f"restored step {step} after a kill at step 23 with every=5"
    assert set(loaded.split(",")) == {"model", "optimizer", "scheduler", "scaler", "loader"} and missing == ""
    third = resume(tmp_path, "tmdata", 3)
    assert 43 - 5 <= int(restored_step(third)[0]) <= 43
    resumed = torch.load(tmp_path / "run3-tmdata.pt", weights_only=False)
    assert_same(resumed, reference.result("tmdata"), "tmdata")


def test_stateful_dataloader_run_killed_mid_epoch_ends_bit_identical(tmp_path, reference):
    # 8 batches per epoch: killed at step 19 (mid-epoch), resumed from step 16 or later.
    # The pitfall: iter() of a DataLoader draws a base seed from torch's global RNG
    # (_BaseDataLoaderIter.__init__). The uninterrupted run drew it at the start of the epoch,
    # before the checkpoint; a resumed loop's first iter() draws it again after the restore, and
    # every dropout mask after that differs unless the Checkpointer accounts for the draw.
    killed_at(tmp_path, "sdl", 1, 19)
    second = resume(tmp_path, "sdl", 2)
    assert 19 - 5 <= int(restored_step(second)[0]) <= 19
    resumed = torch.load(tmp_path / "run2-sdl.pt", weights_only=False)
    assert_same(resumed, reference.result("sdl"), "sdl")


def test_plain_dataloader_with_a_distributed_sampler_resumes_at_the_epoch_boundary(tmp_path, reference):
    # 12 steps per epoch, saved at epoch ends: killed at step 18, the run resumes from step 12.
    killed_at(tmp_path, "epochs", 1, 18)
    second = resume(tmp_path, "epochs", 2)
    step, sampler_epoch = restored_step(second)
    assert step == "12"
    assert sampler_epoch == "0", "the sampler's epoch was not restored with the DataLoader"
    # A plain DataLoader cannot say where in an epoch it was: the restore warns and names the fix.
    assert "StatefulDataLoader" in second.stderr, second.stderr
    resumed = torch.load(tmp_path / "run2-epochs.pt", weights_only=False)
    assert_same(resumed, reference.result("epochs"), "epochs")
