"""The repairs behind ``trainmedic lint --fix``, one module per repair, named for what it does.

A rule module imports its fixer (``Rule(..., fixer=fix)``); a fixer never imports a rule. What a
rule and its fixer both need to know of the code (which calls open a file, where a shuffled index
came from, how a list grows) lives in a module of ``trainmedic.lint`` that both import, and the
edits themselves are built with :mod:`trainmedic.lint.fixing`. TM102's small fixer stays in its
rule module.
"""
