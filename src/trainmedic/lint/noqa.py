"""``# noqa: TM101`` on a finding's line silences that code there; a bare ``# noqa`` silences all.

Codes may be separated by commas or spaces, as flake8 and ruff accept them. Other tools' codes in
the same comment (``# noqa: E501, TM107``) are ignored, not misread.
"""

from __future__ import annotations

import re

_NOQA = re.compile(
    r"#\s*noqa(?P<colon>\s*:\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.IGNORECASE
)

#: Sentinel for a bare ``# noqa``: every code is silenced.
ALL = frozenset({"*"})


def noqa_codes(line: str) -> frozenset[str]:
    """The codes a line's ``# noqa`` comment silences (empty when it has none)."""
    if "noqa" not in line.lower():
        return frozenset()
    match = _NOQA.search(line)
    if match is None:
        return frozenset()
    if not match.group("codes"):
        return ALL
    return frozenset(code.upper() for code in re.split(r"[\s,]+", match.group("codes").strip()) if code)


def is_silenced(line: str, code: str) -> bool:
    codes = noqa_codes(line)
    return codes is ALL or code in codes
