"""`plan --device cpu` predicts how peak memory grows with batch size within 10 % of a real run.

The real run is ``benchmarks/plan_zoo.py`` in a fresh process: the same ``build`` on real CPU
tensors, the same step twice, its peak resident set with a low mmap threshold, nothing from
trainmedic imported. Growth, ``peak(B2) - peak(B1)``, is compared, so the process's constant
overheads cancel. ``benchmarks/plan_accuracy_cpu.py`` runs the whole zoo at larger sizes; here
four models at sizes that keep the test short.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the measurement reads /proc/self (Linux only)"
)


def _accuracy_module():
    # The benchmark imports its neighbours (_env, plan_zoo) as top-level modules.
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("plan_accuracy_cpu", BENCHMARKS / "plan_accuracy_cpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# (model, B1, B2): growths of ~30-250 MiB, far above the ~1 MiB the resident set wanders by.
CASES = [
    ("mlp_adam", 512, 2048),
    ("cnn_sgd", 16, 64),
    ("transformer_eager", 2, 8),
    ("sinkhorn_pairwise", 128, 512),
]


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    accuracy = _accuracy_module()
    return {row["model"]: row for row in accuracy.compare_many(CASES, repeats=1)}


@pytest.mark.slow
@pytest.mark.parametrize(("name", "b1", "b2"), CASES, ids=[c[0] for c in CASES])
def test_planned_growth_matches_a_real_cpu_run(rows: dict[str, dict], name: str, b1: int, b2: int) -> None:
    row = rows[name]
    planned, measured = row["planned_growth_bytes"], row["measured_growth_bytes"]
    assert measured > 16 * 2**20, (
        f"{name}: the measured growth {measured} B is too small to judge a 10 % error"
    )
    assert abs(row["growth_error"]) <= 0.10, (
        f"{name} B={b1}->{b2}: planned growth {planned / 2**20:.1f} MiB, measured {measured / 2**20:.1f} MiB "
        f"({row['growth_error']:+.1%}); planned peaks {row['planned']}, measured {row['measured_rss']}"
    )
