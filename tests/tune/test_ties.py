from __future__ import annotations

from trainmedic.tune.model import Config, Measurement, Row
from trainmedic.tune.ties import changes, pick_best, within_noise


def row(config: Config, *speeds: float) -> Row:
    return Row(config, "measured", Measurement(tuple(speeds), 1, 0.1))


def test_a_gap_inside_both_spreads_is_a_tie():
    a = row(Config(2), 100, 104, 108)  # median 104, spread 3.8 %
    b = row(Config(4), 94, 96, 98)  # spread 2.1 %: 7.7 % slower, outside 5.9 %
    assert not within_noise(a, b)
    c = row(Config(8), 97, 100, 103)  # spread 3 %: 3.8 % slower, inside 6.8 %
    assert within_noise(a, c)


def test_the_floor_makes_near_identical_steady_speeds_a_tie():
    a = row(Config(2), 100, 100, 100)
    b = row(Config(4), 97.5, 97.5, 97.5)
    assert within_noise(a, b)  # 2.5 % apart with no spread: under the 3 % floor
    assert not within_noise(a, row(Config(8), 96, 96, 96))


def test_a_clear_winner_is_picked_and_has_no_ties():
    rows = [row(Config(1), 50, 51, 52), row(Config(2), 100, 101, 102), row(Config(4), 80, 81, 82)]
    assert pick_best(rows, Config(4)) == (Config(2), [])


def test_among_tied_configurations_the_smallest_change_from_the_baseline_is_recommended():
    baseline = Config(8)
    rows = [
        row(Config(2, "bf16", compile=True), 101, 102, 103),
        row(Config(2, "bf16"), 100, 101, 102),
        row(Config(8), 60, 60, 60),
    ]
    best, ties = pick_best(rows, baseline)
    assert best == Config(2, "bf16")  # two changes, not three: compile bought nothing measurable
    assert ties == [Config(2, "bf16", compile=True)]
    assert changes(Config(2, "bf16", compile=True), baseline) == 3


def test_nothing_measured_picks_nothing():
    assert pick_best([], None) == (None, [])


def test_a_script_change_counts_each_option_that_differs():
    baseline = Config(2, overrides=(("batch_size", "2"), ("lr", "0.1"), ("amp", "0")))
    assert changes(Config(8, overrides=(("batch_size", "8"), ("lr", "0.1"), ("amp", "1"))), baseline) == 2
    assert changes(baseline, baseline) == 0
