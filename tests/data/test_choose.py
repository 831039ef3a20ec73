"""The tier decision: seed 000's half-the-RAM rule, VRAM with headroom, disk, stream; forced tiers."""

import pytest

from trainmedic.data.choose import Resources, choose_tier
from trainmedic.errors import TierError

GiB = 1024**3
BOX = Resources(
    ram_available=64 * GiB, vram_free=78 * GiB, vram_total=80 * GiB, disk_free=500 * GiB, cache_root="/cache"
)


def pick(nbytes, cuda=True, random_access=True, resources=BOX, **kw):
    return choose_tier("auto", nbytes, cuda=cuda, random_access=random_access, resources=resources, **kw)


def test_fits_vram_with_headroom_on_cuda():
    decision = pick(30 * GiB)
    assert decision.tier == "vram"
    assert any("78.0 GiB free of 80.0 GiB" in line and "38.0 GiB" in line for line in decision.lines)


def test_too_big_for_the_vram_budget_but_under_half_the_ram():
    assert pick(31 * GiB, vram_headroom=0.7).tier == "ram"  # 78 - 56 = 22 GiB for data
    assert pick(20 * GiB, vram_headroom=60 * GiB).tier == "ram"  # headroom in bytes: 18 GiB left


def test_a_plan_of_the_training_step_sets_the_vram_headroom():
    import torch

    from trainmedic.plan import plan_memory

    def build(b):
        return dict(
            model=torch.nn.Linear(4096, 4096), inputs=torch.randn(b, 4096), optimizer=torch.optim.Adam
        )

    plan = plan_memory(build, 64, device="a100-80gb")
    decision = pick(78 * GiB - plan.reserved_bytes - 1, vram_headroom=plan)
    assert decision.tier == "vram"
    assert any("planned training step (trainmedic plan, batch 64)" in line for line in decision.lines)
    big_ram = Resources(
        ram_available=400 * GiB,
        vram_free=78 * GiB,
        vram_total=80 * GiB,
        disk_free=500 * GiB,
        cache_root="/cache",
    )
    assert pick(78 * GiB - plan.reserved_bytes + 1, vram_headroom=plan, resources=big_ram).tier == "ram"


def test_half_of_available_ram_is_the_ram_line():
    assert pick(32 * GiB, cuda=False).tier == "ram"
    assert pick(32 * GiB + 1, cuda=False).tier == "disk"
    assert pick(10 * GiB, cuda=False, ram_budget=5 * GiB).tier == "disk"


def test_ranks_on_one_node_share_the_half_of_the_ram():
    # 4 torchrun ranks on a 64 GiB node would each hold a 10 GiB RAM tier: 40 GiB, past the half.
    decision = pick(10 * GiB, cuda=False, local_ranks=4)
    assert decision.tier == "disk"
    assert "half of the available RAM shared by 4 ranks on this node: 8.0 GiB" in decision.lines[0]
    assert pick(7 * GiB, cuda=False, local_ranks=4).tier == "ram"


def test_larger_than_disk_streams_when_the_source_allows():
    assert pick(1000 * GiB, cuda=False).tier == "stream"
    with pytest.raises(TierError, match="cannot be streamed"):
        pick(1000 * GiB, cuda=False, random_access=False)


def test_forced_tier_that_does_not_fit_gives_sizes_and_the_tier_that_would():
    with pytest.raises(TierError) as excinfo:
        choose_tier("ram", 100 * GiB, cuda=False, random_access=True, resources=BOX)
    message = str(excinfo.value)
    assert "100.0 GiB" in message and "64.0 GiB" in message and "tier='disk' would fit" in message
    with pytest.raises(TierError, match="not CUDA.*tier='ram' would fit"):
        choose_tier("vram", GiB, cuda=False, random_access=True, resources=BOX)
    with pytest.raises(TierError, match="read front to back"):
        choose_tier("stream", GiB, cuda=False, random_access=False, resources=BOX)


def test_forced_tier_that_fits_is_kept_and_auto_is_named():
    decision = choose_tier("disk", GiB, cuda=False, random_access=True, resources=BOX)
    assert decision.tier == "disk"
    assert "auto would pick 'ram'" in decision.lines[-1]


def test_unknown_tier_lists_the_known():
    with pytest.raises(TierError, match="'gpu' is not a tier.*'vram', 'ram', 'disk', 'stream'"):
        choose_tier("gpu", 1, cuda=False, random_access=True, resources=BOX)
