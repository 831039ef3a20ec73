import math

import pytest

from trainmedic.run.diagnose.amdahl import ceiling, expected_speedup


def test_seed_000_hdf5_wait_has_a_70x_ceiling():
    share = 36.0 / 36.5  # seed 000: 36 s of a 36.5 s step waiting on HDF5
    assert ceiling(share) == pytest.approx(73.0)
    assert expected_speedup(share, 80.0) == pytest.approx(1 / (1 - share + share / 80))


def test_edges():
    assert ceiling(0.0) == 1.0
    assert math.isinf(ceiling(1.0))
    assert expected_speedup(0.5, 1.0) == 1.0
    with pytest.raises(ValueError, match="share=1.5"):
        ceiling(1.5)
    with pytest.raises(ValueError, match="factor=0"):
        expected_speedup(0.5, 0)
