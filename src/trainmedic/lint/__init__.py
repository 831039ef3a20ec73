"""``trainmedic lint``: training pitfalls as static rules, aware of training loops.

The linter parses code with :mod:`ast`; it never imports or runs it, so it works on code whose
dependencies (TensorFlow, Lightning, a GPU) are not installed.

    >>> from trainmedic.lint import lint_source
    >>> source = "for x in loader:\\n    loss = model(x.cuda())\\n    loss.backward()\\n    print(loss)\\n"
    >>> [v.code for v in lint_source(source)]
    ['TM107', 'TM111']
"""

from trainmedic.lint.config import LintConfig, find_config, load_config
from trainmedic.lint.engine import lint_paths, lint_source
from trainmedic.lint.formats import FORMATS, format_result
from trainmedic.lint.model import FileProblem, LintResult, Rule, Violation
from trainmedic.lint.rules import all_rules, get_rule, select_rules

__all__ = [
    "FORMATS",
    "FileProblem",
    "LintConfig",
    "LintResult",
    "Rule",
    "Violation",
    "all_rules",
    "find_config",
    "format_result",
    "get_rule",
    "lint_paths",
    "lint_source",
    "load_config",
    "select_rules",
]
