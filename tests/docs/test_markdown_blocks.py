"""How a transcript's text is held against what a command printed."""

from markdown_blocks import first_mismatch, matches

REPORT = """Findings
 1. [data/hdf5] 92.8%  Reading the batch from HDF5 every step at train.py:40
    buys      ×11.1 estimated, ceiling ×13.9 (Amdahl)

Your lines by time per step
"""


def test_numbers_and_wrapping_may_differ():
    printed = (
        REPORT.replace("92.8", "95.1").replace("×11.1", "×24.0").replace("step at", "step\n          at")
    )
    assert matches(REPORT, printed)


def test_a_line_of_the_users_code_may_not():
    assert not matches(REPORT, REPORT.replace("train.py:40", "train.py:41"))
    assert first_mismatch(REPORT, REPORT.replace("train.py:40", "train.py:41")).endswith("train.py:40")


def test_a_category_or_a_word_may_not():
    assert not matches(REPORT, REPORT.replace("data/hdf5", "compute/model"))
    assert not matches(REPORT, REPORT.replace("Reading", "Writing"))


def test_an_ellipsis_line_stands_for_any_lines_none_included():
    want = "Findings\n 1. [data/hdf5] 92.8%  ...\n...\nYour lines by time per step\n"
    assert matches(want, REPORT)
    assert matches(want, REPORT.replace("Your lines", " 2. [compute/model] 5.1%  The model\n\nYour lines"))
    assert not matches(want, REPORT.replace("Your lines", "Their lines"))
