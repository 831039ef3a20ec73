"""The public API: one sorted __all__, every name importable, nothing private leaking."""

import sys

import trainmedic


def test_all_is_sorted_and_complete():
    assert trainmedic.__all__ == sorted(trainmedic.__all__)
    for name in trainmedic.__all__:
        assert hasattr(trainmedic, name), name
    public = {
        n
        for n in vars(trainmedic)
        if not n.startswith("_") and not isinstance(getattr(trainmedic, n), type(trainmedic))
    }
    assert public <= set(trainmedic.__all__), public - set(trainmedic.__all__)


def test_plan_api_is_one_sorted_all():
    import trainmedic.plan as plan

    assert plan.__all__ == sorted(plan.__all__)
    assert all(hasattr(plan, name) for name in plan.__all__)


def test_checkpoint_api_is_one_sorted_all_and_imports_no_torch():
    import subprocess

    import trainmedic.checkpoint as checkpoint

    assert checkpoint.__all__ == sorted(checkpoint.__all__)
    assert all(hasattr(checkpoint, name) for name in checkpoint.__all__)
    # A NumPy-only training script must not pay for importing torch through the Checkpointer.
    code = "import sys, trainmedic.checkpoint; print('torch' in sys.modules)"
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "False"
    )


def test_importing_trainmedic_leaves_the_global_random_stream_alone():
    import subprocess

    # rich draws a seed from `random` when imported; a script seeded before `from trainmedic import
    # checkpoint` must draw what it would draw without trainmedic, or a resume cannot be exact.
    code = (
        "import random; random.seed(0); a = random.random(); random.seed(0); "
        "import trainmedic.checkpoint, trainmedic.cli.main; print(random.random() == a)"
    )
    assert (
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
        == "True"
    )


def test_batch_api_is_one_sorted_all():
    import trainmedic.batch as batch

    assert batch.__all__ == sorted(batch.__all__)
    assert all(hasattr(batch, name) for name in batch.__all__)
