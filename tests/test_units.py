"""Sizes people type: binary and SI units, bare letters as binary, helpful errors."""

import pytest

from trainmedic.units import format_bytes, format_duration, parse_bytes, parse_duration


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("48GiB", 48 * 2**30),
        ("48 GB", 48 * 10**9),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
        ("123456", 123456),
        ("80g", 80 * 2**30),
        ("80G", 80 * 2**30),
        ("  2 tib ", 2 * 2**40),
        ("1TB", 10**12),
        ("64k", 64 * 1024),
        ("64KB", 64_000),
        ("10MB", 10**7),
        ("100B", 100),
        (".5GiB", 2**29),
        ("0", 0),
    ],
)
def test_parses_sizes(text, expected):
    assert parse_bytes(text) == expected


def test_whole_numbers_pass_through():
    assert parse_bytes(48 * 2**30) == 48 * 2**30


@pytest.mark.parametrize("text", ["", "abc", "GiB", "-1GiB", "12 XB", "1e9", "1..5GB", "1.5", "1.5B", "nan"])
def test_bad_sizes_name_the_value_and_give_examples(text):
    with pytest.raises(ValueError) as info:
        parse_bytes(text)
    message = str(info.value)
    assert repr(text) in message
    assert "123456" in message


@pytest.mark.parametrize("value", [-1, 1.5, None, True])
def test_bad_types_are_refused(value):
    with pytest.raises(ValueError):
        parse_bytes(value)


def test_round_trips_through_format_bytes():
    assert parse_bytes(format_bytes(48 * 2**30).replace(" ", "")) == 48 * 2**30


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("8h45m", 31500),
        ("90s", 90),
        ("1.5h", 5400),
        ("2m30s", 150),
        ("500ms", 0.5),
        ("120", 120),
        ("1d", 86400),
        ("10 min", 600),
        (" 3H ", 10800),
        (7.5, 7.5),
        (0, 0),
    ],
)
def test_parses_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "5x", "-3", "h", "3h-5m", "1e3s"])
def test_bad_durations_name_the_value_and_give_examples(text):
    with pytest.raises(ValueError) as info:
        parse_duration(text)
    assert repr(text) in str(info.value) and "8h45m" in str(info.value)


def test_negative_duration_numbers_are_refused():
    with pytest.raises(ValueError, match="negative"):
        parse_duration(-1.0)


@pytest.mark.parametrize(
    ("seconds", "text"), [(31500, "8h45m"), (725, "12m05s"), (42, "42.00 s"), (0.5, "500.0 ms")]
)
def test_formats_durations(seconds, text):
    assert format_duration(seconds) == text


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_durations_are_refused(value):
    with pytest.raises(ValueError, match="finite"):
        parse_duration(value)
