"""Every rule's --explain card is complete and its own example is right: the 'before' code is
flagged by that rule and the 'after' code is not."""

import re
import textwrap

import pytest

from trainmedic.lint import all_rules, lint_source

RULES = all_rules()


def test_the_rules_are_numbered_by_family_in_order():
    # TM1xx: time the step loses; TM2xx: training that is silently wrong or leaks memory;
    # TM3xx: calls that are unsafe, deprecated or about to change.
    codes = [rule.code for rule in RULES]
    assert codes == sorted(codes) and len(set(codes)) == len(codes)
    assert all(re.fullmatch(r"TM[123]\d\d", code) for code in codes), codes
    assert [c for c in codes if c.startswith("TM1")][:13] == [f"TM{n}" for n in range(101, 114)]
    assert len({rule.name for rule in RULES}) == len(RULES)


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_the_card_has_every_section(rule):
    text = rule.explain()
    assert text.startswith(f"{rule.code} {rule.name}: ")
    for heading in ("Why it matters", "Fix", "Before", "After"):
        assert f"\n{heading}\n" in text
    assert len(rule.why) > 80 and len(rule.fix) > 30


@pytest.mark.parametrize("rule", RULES, ids=lambda rule: rule.code)
def test_the_cards_before_is_flagged_and_after_is_not(rule):
    before = lint_source(textwrap.dedent(rule.before), "before.py", [rule])
    after = lint_source(textwrap.dedent(rule.after), "after.py", [rule])
    assert [v.code for v in before] == [rule.code], f"{rule.code}: the 'before' example gives {before}"
    assert after == [], f"{rule.code}: the 'after' example is flagged: {after}"
