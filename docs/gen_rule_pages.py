"""One page per lint rule, written at build time from the rule's own card (``Rule`` in
``trainmedic.lint.model``), so a page can never say something the rule's ``--explain`` does not.

mkdocs-gen-files runs this during ``mkdocs build``; the pages exist only in the built site.
"""

from __future__ import annotations

import mkdocs_gen_files

from trainmedic.lint.model import Rule
from trainmedic.lint.rules import all_rules


def rule_page(rule: Rule) -> str:
    return "\n".join(
        [
            f"# {rule.code} {rule.name}",
            "",
            rule.summary,
            "",
            "## Why it matters",
            "",
            rule.why.strip(),
            "",
            "## Fix",
            "",
            rule.fix.strip(),
            "",
            "## Automatic fix",
            "",
            rule.automatic_fix,
            "",
            "## Example",
            "",
            "Before:",
            "",
            "```python",
            rule.before.strip("\n"),
            "```",
            "",
            "After:",
            "",
            "```python",
            rule.after.strip("\n"),
            "```",
            "",
            "## Turning it off",
            "",
            f"`# noqa: {rule.code}` on the line the finding is reported at silences it there; "
            f'`ignore = ["{rule.code}"]` under `[tool.trainmedic.lint]` in `pyproject.toml`, or '
            f"`trainmedic lint --ignore {rule.code}`, turns it off. `trainmedic lint --explain "
            f"{rule.code}` prints this page in the terminal.",
            "",
        ]
    )


#: The code's first digit says what a rule's finding costs.
FAMILIES = (
    (
        "TM1",
        "Time a step loses",
        "The step waits on the host, on the disk or on the device for work it need not do.",
    ),
    (
        "TM2",
        "Training that is silently wrong, or leaks memory",
        "The run finishes, but it trained on the wrong thing, or its memory grows until it dies.",
    ),
    (
        "TM3",
        "Calls that are unsafe, deprecated or about to change",
        "The code works today on one torch version and behaves differently, or stops, on another.",
    ),
)


def index_page(rules: tuple[Rule, ...]) -> str:
    lines = [
        "# Lint rules",
        "",
        "Every rule `trainmedic lint` checks, with what it finds and whether `--fix` repairs it. "
        "Each page is the rule's own card, as `trainmedic lint --explain CODE` prints it.",
        "",
    ]
    for prefix, title, what in FAMILIES:
        lines += [
            f"## {prefix}xx: {title}",
            "",
            what,
            "",
            "| code | name | finds | `--fix` |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| [{rule.code}]({rule.code}.md) | {rule.name} | {_cell(rule.summary)} | "
            f"{'yes' if rule.fixer is not None else '—'} |"
            for rule in rules
            if rule.code.startswith(prefix)
        ]
        lines.append("")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def main() -> None:
    rules = all_rules()
    with mkdocs_gen_files.open("rules/index.md", "w") as page:
        page.write(index_page(rules))
    for rule in rules:
        with mkdocs_gen_files.open(f"rules/{rule.code}.md", "w") as page:
            page.write(rule_page(rule))
    with mkdocs_gen_files.open("rules/SUMMARY.md", "w") as nav:
        nav.write("* [All rules](index.md)\n")
        nav.writelines(f"* [{rule.code} {rule.name}]({rule.code}.md)\n" for rule in rules)


main()
