"""Time how much of each optimizer step a zoo scenario spends on its `# expect-where` line.

    python tests/scenarios/tools/measure_share.py tests/scenarios/NAME.py \
        [--category TEXT ...] [--minus TEXT ...] [--lines A-B] [--steps N]

The scenario is compiled with the marked statement (and the statements named by --category,
--minus and --lines) wrapped in ``time.perf_counter()`` calls -- the file on disk is untouched
and runs as ``__main__`` -- and step boundaries come from a global optimizer step post-hook.
Shares are over the steady-state steps (the first max(2, 10 %) steps are dropped).

--category TEXT  statements whose source line contains TEXT make up the scenario's category
                 (e.g. the ``next(data)`` line); category share = union of their time and the
                 marked line's.
--minus TEXT     statements that are *not* the category (for fetches hidden in a ``for``
                 header): category share = 1 - their share.
--lines A-B      also print a per-statement profile of lines A..B.
Unknown arguments (``--steps N``) are passed to the scenario.
This is a measuring aid for tests/scenarios/README.md, not part of the test suite.
"""

from __future__ import annotations

import argparse
import ast
import json
import statistics
import sys
import time

MARK = "# expect-where"
COMPOUND = (ast.For, ast.While, ast.If, ast.With, ast.Try, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)


class Wrap(ast.NodeTransformer):
    """Wrap each simple statement whose first line is in `keys` in a perf_counter pair."""

    def __init__(self, keys: dict[int, str]):
        self.keys = keys

    def generic_visit(self, node):
        super().generic_visit(node)
        for field in ("body", "orelse", "finalbody"):
            stmts = getattr(node, field, None)
            if not isinstance(stmts, list) or not stmts or not isinstance(stmts[0], ast.stmt):
                continue
            new = []
            for s in stmts:
                key = self.keys.get(s.lineno)
                if key is None or isinstance(s, COMPOUND):
                    new.append(s)
                    continue
                pre = ast.parse("_zoo_t0 = _zoo_clock()").body[0]
                post = ast.parse(f"_zoo_add({key!r}, _zoo_t0)").body[0]
                for n in list(ast.walk(pre)) + list(ast.walk(post)):
                    ast.copy_location(n, s)
                new += [pre, ast.copy_location(ast.Try(body=[s], handlers=[], orelse=[], finalbody=[post]), s)]
            setattr(node, field, new)
        return node


def union_time(spans, lo, hi):
    spans = sorted((max(s, lo), min(e, hi)) for s, e in spans if e > lo and s < hi)
    total, end = 0.0, lo
    for s, e in spans:
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("script")
    ap.add_argument("--category", action="append", default=[])
    ap.add_argument("--minus", action="append", default=[])
    ap.add_argument("--lines", default="")
    a, rest = ap.parse_known_args()
    src = open(a.script, encoding="utf-8").read()
    lines = src.splitlines()
    marked = [i for i, line in enumerate(lines, 1) if line.rstrip().endswith(MARK)]
    assert len(marked) == 1, f"expected one {MARK!r} line, found {marked}"
    keys: dict[int, str] = {}
    if a.lines:
        lo, hi = map(int, a.lines.split("-"))
        keys.update({n: f"L{n}" for n in range(lo, hi + 1)})
    for group, texts in (("category", a.category), ("minus", a.minus)):
        for text in texts:
            hits = [i for i, line in enumerate(lines, 1) if text in line]
            assert hits, f"no line contains {text!r}"
            keys.update({n: group for n in hits})
    keys[marked[0]] = "marked"
    tree = ast.fix_missing_locations(Wrap(keys).visit(ast.parse(src, a.script)))
    code = compile(tree, a.script, "exec")

    from torch.optim.optimizer import register_optimizer_step_post_hook

    clock = time.perf_counter
    spans: dict[str, list[tuple[float, float]]] = {}
    steps: list[float] = []
    register_optimizer_step_post_hook(lambda *_: steps.append(clock()))
    sys.argv = [a.script] + rest
    t0 = clock()
    exec(code, {"__name__": "__main__", "__file__": a.script, "_zoo_clock": clock,
                "_zoo_add": lambda key, t: spans.setdefault(key, []).append((t, clock()))})
    wall = clock() - t0

    bounds = list(zip(steps[:-1], steps[1:]))
    steady = bounds[max(2, len(steps) // 10) - 1:]
    durs = [e - s for s, e in steady]

    def share(*groups, within=steady):
        sel = [sp for g in groups for sp in spans.get(g, [])]
        return sum(union_time(sel, s, e) for s, e in within) / sum(e - s for s, e in within)

    q = max(1, len(bounds) // 4)
    first, last = [e - s for s, e in bounds[:q]], [e - s for s, e in bounds[-q:]]
    result = {
        "script": a.script, "steps": len(steps), "exec_wall_s": round(wall, 2),
        "step_median_ms": round(statistics.median(durs) * 1e3, 1),
        "growth": round(statistics.median(last) / statistics.median(first), 2),
        "marked_line": marked[0], "marked_share": round(share("marked"), 3),
        "marked_share_first_quarter": round(share("marked", within=bounds[:q]), 3),
    }
    if a.category:
        result["category_share"] = round(share("marked", "category"), 3)
    if a.minus:
        result["category_share"] = round(1 - share("minus"), 3)
    print(json.dumps(result))
    for key in sorted((k for k in spans if k.startswith("L")), key=lambda k: -share(k)):
        if share(key) > 0.005:
            print(f"  {key}: {share(key) * 100:5.1f}%  {lines[int(key[1:]) - 1].strip()}")


if __name__ == "__main__":
    main()
