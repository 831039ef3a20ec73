"""Sizes people type: binary and SI units, bare letters as binary, helpful errors."""

import pytest

from trainmedic.units import format_bytes, parse_bytes


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
