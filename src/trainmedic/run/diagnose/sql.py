"""Turn the query a script runs per batch into the one query that returns the whole training set.

What is dropped is what selects *a batch*: ``LIMIT``/``OFFSET``/``FETCH``, ``ORDER BY RANDOM()``
(``data.load`` shuffles every epoch itself), and ``WHERE`` conditions whose parameters changed
from run to run — ``id IN (...)``, ``id BETWEEN ? AND ?``, ``id >= ?``, ``id = ?``. Conditions
whose parameters never changed (``split = ?`` with ``'train'`` every time) are filters: they are
kept, with the value written in. When a batch's ids came from another query of the same table
(``SELECT sample_id FROM t WHERE split = ?``), that query's filter is carried over, so the whole
set is the rows the ids were drawn from.

Anything else with a changing parameter (an expression, ``NOT IN``, an ``OR``) cannot be turned
into a whole-table query safely: the result then says so, and the caller shows a placeholder.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainmedic.run.probe.source_facts import Query

_TOKEN = re.compile(
    r"""(?P<string>'(?:[^']|'')*')
      | (?P<quoted>"(?:[^"]|"")*"|`[^`]*`|\[[^\]]*\])
      | (?P<param>\?|%\((?P<pyname>\w+)\)s|%s|(?<![:\w]):(?P<name>[A-Za-z_]\w*)|\$(?P<num>\d+))
      | (?P<word>[A-Za-z_][\w.]*)
      | (?P<open>\()
      | (?P<close>\))
      | (?P<space>\s+)
      | (?P<other>.)""",
    re.VERBOSE | re.DOTALL,
)
_CLAUSES = {"select", "from", "where", "group", "having", "order", "limit", "offset", "fetch", "window"}
_SET_OPERATORS = {"union", "intersect", "except"}
_KEYWORDS = {"group": "GROUP BY", "order": "ORDER BY"}
_RANDOM = re.compile(r"^\s*(random|rand|newid)\s*\(\s*\)\s*(asc|desc)?\s*$", re.IGNORECASE)
_COLUMN = r"[\w.\"`\[\]]+"
_SELECTOR = re.compile(
    rf"^\(?\s*(?P<col>{_COLUMN})\s+(?:in\s*\(\s*\?(?:\s*,\s*\?)*\s*\)|between\s+\?\s+and\s+\?|(?:=|>=|<=|>|<)\s*\?)\s*\)?$"
    rf"|^\(?\s*\?\s*(?:=|>=|<=|>|<)\s*(?P<col2>{_COLUMN})\s*\)?$",
    re.IGNORECASE,
)


@dataclass
class Derived:
    """The whole-table query, or as much of it as could be derived."""

    #: The SQL; ``None`` when the per-batch query could not be read at all.
    text: str | None
    #: True when ``text`` is complete; False when it holds a ``<...>`` placeholder to fill in.
    exact: bool
    #: What was dropped or carried over, in words, for the finding's fix text.
    changes: list[str] = field(default_factory=list)
    #: Why it is not exact.
    problem: str | None = None
    #: The WHERE conditions dropped as per-batch row selections.
    selectors: list[str] = field(default_factory=list)
    #: The filter carried over from the query that listed the ids, if any.
    carried: list[str] = field(default_factory=list)


@dataclass
class _Token:
    kind: str
    text: str
    depth: int
    key: Any = None  # a parameter's position or name


def whole_table_query(query: Query, others: tuple[Query, ...] = ()) -> Derived:
    """The query that returns every row ``query`` draws its batches from."""
    tokens = _tokens(query.text)
    if tokens is None:
        return Derived(None, False, problem="its SQL could not be read")
    consts = _constants(query)
    clauses = _clauses(tokens)
    if clauses is None:
        if not query.varying and not _has_limit(tokens):
            return Derived(_render(tokens, consts) or query.text, True)  # nothing per batch in it
        return Derived(None, False, problem="only a plain SELECT ... FROM ... [WHERE ...] can be rewritten")
    derived = Derived(None, True)
    parts: list[str] = []
    removed_columns: list[str] = []
    for name, body in clauses:
        if name in ("limit", "offset", "fetch"):
            derived.changes.append(f"`{name.upper()} {_show(body)}`")
            continue
        if name == "order":
            order = _render(body, consts)
            if order is not None and _RANDOM.match(order):
                derived.changes.append(f"`ORDER BY {order}`")
                continue
        if name == "where":
            kept, dropped, problem = _where(body, query.varying, consts)
            removed_columns += [col for _, col in dropped]
            derived.selectors += [text for text, _ in dropped]
            derived.changes += [f"`{text}`" for text, _ in dropped]
            if problem is not None:
                derived.exact, derived.problem = False, problem
                parts.append("WHERE <fill in: which rows to train on>")
                continue
            derived.carried = [c for c in _carried_filter(removed_columns, clauses, others) if c not in kept]
            kept += derived.carried
            if kept:
                parts.append("WHERE " + " AND ".join(kept))
            continue
        text = _render(body, consts)
        if text is None:
            return Derived(None, False, problem=f"its {name.upper()} clause changes from batch to batch")
        parts.append(f"{_KEYWORDS.get(name, name.upper())} {text}")
    derived.text = " ".join(parts)
    return derived


# -- pieces ------------------------------------------------------------------------------------


def _tokens(sql: str) -> list[_Token] | None:
    text = sql.strip().rstrip(";").strip()
    tokens: list[_Token] = []
    depth = 0
    position = 0
    for match in _TOKEN.finditer(text):
        kind = match.lastgroup
        if kind in ("pyname", "name", "num"):
            kind = "param"
        if match.group("param") is not None:
            kind = "param"
        token = _Token(kind or "other", match.group(0), depth)
        if kind == "param":
            if match.group("pyname"):
                token.key = match.group("pyname")
            elif match.group("name"):
                token.key = match.group("name")
            elif match.group("num"):
                token.key = int(match.group("num")) - 1
            else:
                token.key = position
                position += 1
        elif kind == "open":
            depth += 1
        elif kind == "close":
            depth -= 1
            token.depth = depth
            if depth < 0:
                return None
        tokens.append(token)
    return tokens if depth == 0 else None


def _clauses(tokens: list[_Token]) -> list[tuple[str, list[_Token]]] | None:
    """Top-level clauses in order, each without its keyword; None for anything but one SELECT."""
    clauses: list[tuple[str, list[_Token]]] = []
    for token in tokens:
        word = token.text.lower() if token.kind == "word" else None
        if token.depth == 0 and word in _SET_OPERATORS:
            return None
        # A FROM after WHERE is part of a condition (IS DISTINCT FROM), never a clause of its own.
        if (
            token.depth == 0
            and word in _CLAUSES
            and not (word == "from" and clauses and clauses[-1][0] == "where")
        ):
            if any(name == word for name, _ in clauses):
                return None
            clauses.append((word, []))
            continue
        if not clauses:
            if token.kind == "space":
                continue
            return None  # WITH ..., VALUES ..., a comment: not a plain SELECT
        clauses[-1][1].append(token)
    if not clauses or clauses[0][0] != "select" or not any(name == "from" for name, _ in clauses):
        return None
    out = []
    for name, body in clauses:
        if name in ("group", "order"):
            # BY belongs to the keyword: the body starts after it.
            words = [i for i, t in enumerate(body) if t.kind != "space"]
            if not words or body[words[0]].text.lower() != "by":
                return None
            body = body[words[0] + 1 :]
        out.append((name, body))
    return out


def _has_limit(tokens: list[_Token]) -> bool:
    return any(
        t.depth == 0 and t.kind == "word" and t.text.lower() in ("limit", "offset", "fetch") for t in tokens
    )


def _constants(query: Query) -> dict[Any, Any]:
    params = query.params
    if isinstance(params, dict):
        return {k: v for k, v in params.items() if k not in query.varying}
    if isinstance(params, tuple):
        return {i: v for i, v in enumerate(params) if i not in query.varying}
    return {}


def _render(tokens: list[_Token], consts: dict[Any, Any]) -> str | None:
    """The tokens as SQL with constant parameters written in; None if one changes per batch."""
    out = []
    for token in tokens:
        if token.kind == "param":
            if token.key not in consts:
                return None
            literal = _literal(consts[token.key])
            if literal is None:
                return None
            out.append(literal)
        elif token.kind == "space":
            out.append(" ")
        else:
            out.append(token.text)
    return "".join(out).strip()


def _literal(value: Any) -> str | None:
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return None  # bytes, dates, arrays: not written into SQL by hand


def _conjuncts(body: list[_Token]) -> list[list[_Token]] | None:
    """Split a WHERE body at its top-level ANDs; None when it has a top-level OR."""
    parts: list[list[_Token]] = [[]]
    between = False
    for token in body:
        word = token.text.lower() if token.kind == "word" and token.depth == 0 else None
        if word == "or":
            return None
        if word == "between":
            between = True
        elif word == "and":
            if between:
                between = False
            else:
                parts.append([])
                continue
        parts[-1].append(token)
    return [p for p in parts if any(t.kind != "space" for t in p)]


def _where(
    body: list[_Token], varying: frozenset, consts: dict[Any, Any]
) -> tuple[list[str], list[tuple[str, str]], str | None]:
    """(kept conditions, dropped (text, column) pairs, why it cannot be rewritten or None)."""
    conjuncts = _conjuncts(body)
    if conjuncts is None:
        if not any(t.kind == "param" and t.key in varying for t in body):
            whole = _render(body, consts)
            return (
                ([whole] if whole else []),
                [],
                None if whole is not None else "its WHERE clause has values that cannot be written into SQL",
            )
        return [], [], "its WHERE clause combines a per-batch condition with OR"
    kept: list[str] = []
    dropped: list[tuple[str, str]] = []
    for conjunct in conjuncts:
        keys = [t.key for t in conjunct if t.kind == "param"]
        shown = _show(conjunct)
        if not keys or not any(k in varying for k in keys):
            text = _render(conjunct, consts)
            if text is None:
                return [], [], f"`{shown}` has a value that cannot be written into SQL"
            kept.append(text)
            continue
        if not all(k in varying for k in keys):
            return [], [], f"`{shown}` mixes a per-batch value with fixed ones"
        match = _SELECTOR.match(_template(conjunct))
        if match is None:
            return [], [], f"`{shown}` changes from batch to batch but is not a plain id selection"
        dropped.append((shown, (match.group("col") or match.group("col2")).strip('"`[]')))
    return kept, dropped, None


def _template(tokens: list[_Token]) -> str:
    return "".join("?" if t.kind == "param" else " " if t.kind == "space" else t.text for t in tokens).strip()


def _show(tokens: list[_Token]) -> str:
    """A condition as a reader wants to see it: a long list of markers shown as ``(...)``."""
    text = _template(tokens)
    return re.sub(r"\(\s*\?(?:\s*,\s*\?)+\s*\)", "(...)", text)


def _carried_filter(
    columns: list[str], clauses: list[tuple[str, list[_Token]]], others: tuple[Query, ...]
) -> list[str]:
    """The fixed filter of the query that listed the ids a dropped selector picked from."""
    if not columns:
        return []
    source = _render(dict(clauses).get("from", []), {})
    for other in others:
        if other.varying:
            continue
        tokens = _tokens(other.text)
        parsed = _clauses(tokens) if tokens is not None else None
        if parsed is None:
            continue
        parts = dict(parsed)
        selected = _render(parts.get("select", []), {})
        if selected is None or selected.lower().replace("distinct ", "").strip() not in [
            c.lower() for c in columns
        ]:
            continue
        if _render(parts.get("from", []), {}) != source or "where" not in parts:
            continue
        kept, dropped, problem = _where(parts["where"], other.varying, _constants(other))
        if problem is None and not dropped:
            return kept
    return []
