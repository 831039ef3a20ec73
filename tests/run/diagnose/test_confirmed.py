"""The confirmation read into the findings: a measured gain replaces the estimate in the ranking,
a fix that bought nothing refutes its finding, and where nothing was tried the notes say so."""

from __future__ import annotations

from trainmedic.run.diagnose.confirmed import apply
from trainmedic.run.probe.confirm import Confirmation
from trainmedic.run.report.model import Finding


def _finding(category: str, share: float, expected: float, where: str) -> Finding:
    return Finding(
        category=category,
        share=share,
        title=f"{category} at {where}",
        evidence="",
        where=where,
        fix="",
        expected_speedup=expected,
        ceiling=1 / (1 - share),
    )


DATA = _finding("data", 0.6, 2.0, "train.py:20")
COMPUTE = _finding("compute", 0.3, 1.1, "train.py:30")
HOST = _finding("host_other", 0.1, 1.05, "train.py:40")


def _tried(as_is: float, fixed: float, pairs: list[float]) -> Confirmation:
    return Confirmation(
        category="data",
        where="train.py:20",
        change="batches replayed from memory",
        as_is=[as_is] * 4,
        fixed=[fixed] * 4,
        pair_gains=pairs,
        used=8,
    )


def test_a_confirmed_fix_carries_its_measured_gain_and_keeps_the_lead():
    findings, notes = apply([DATA, COMPUTE, HOST], _tried(0.060, 0.016, [3.6, 3.9]), step_limit=50)
    top = findings[0]
    assert top.category == "data" and top.measured is not None
    assert (top.measured.gain, top.measured.low, top.measured.high) == (3.75, 3.6, 3.9)
    assert top.measured.estimated == 2.0 and top.expected_speedup == 2.0 and top.gain == 3.75
    assert (top.measured.as_is_steps, top.measured.fixed_steps) == (4, 4)
    assert notes[0].startswith("Confirmed in this run: with batches replayed from memory, 4 steps took")
    assert "×3.75 measured" in notes[0] and "×2.00 estimated" in notes[0]


def test_a_fix_that_buys_nothing_refutes_its_finding_and_the_next_one_leads():
    findings, notes = apply([DATA, COMPUTE, HOST], _tried(0.050, 0.049, [1.0, 1.05]), step_limit=50)
    assert [f.category for f in findings] == ["compute", "host_other", "data"]
    assert findings[-1].measured is not None and findings[-1].measured.gain == 1.02
    assert "is not what the step waits for" in notes[1] and "on compute (30% sampled)" in notes[1]


def test_a_noisy_small_gain_with_one_large_pair_is_not_a_refutation():
    findings, notes = apply([DATA, HOST], _tried(0.050, 0.047, [1.0, 1.4]), step_limit=50)
    assert findings[0].category == "data"  # ×1.06 measured still buys more than ×1.05 estimated
    assert len(notes) == 1 and "not what the step waits for" not in notes[0]


def test_a_measured_gain_below_an_estimate_of_another_finding_ranks_behind_it():
    second = _finding("host_other", 0.35, 1.5, "train.py:40")
    findings, _ = apply([DATA, second], _tried(0.050, 0.040, [1.2, 1.3]), step_limit=50)
    assert [f.category for f in findings] == ["host_other", "data"]


def test_no_counterfactual_says_the_gains_are_estimated_and_why():
    nothing = Confirmation(category="compute", where="train.py:30", problem="a compute fix cannot be tried")
    findings, notes = apply([COMPUTE, DATA], nothing, step_limit=50)
    assert findings == [COMPUTE, DATA]
    assert notes == ["What each fix buys is estimated from its sampled share: a compute fix cannot be tried."]


def test_a_full_run_is_told_how_to_get_a_confirmation_and_a_steps_run_without_one_is_not():
    _, notes = apply([DATA], None, step_limit=None)
    assert "trainmedic run --steps 50" in notes[0] and "never changes what it trains" in notes[0]
    assert apply([DATA], None, step_limit=50) == ([DATA], [])
    assert apply([], _tried(0.05, 0.01, [5.0]), step_limit=50) == ([], [])
