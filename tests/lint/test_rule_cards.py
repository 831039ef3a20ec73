"""Every rule's --explain card is complete and its own example is right: the 'before' code is
flagged by that rule and the 'after' code is not."""

import textwrap

import pytest

from trainmedic.lint import all_rules, lint_source

RULES = all_rules()


def test_the_rules_are_tm101_to_tm113_in_order():
    assert [rule.code for rule in RULES] == [f"TM{n}" for n in range(101, 114)]
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
