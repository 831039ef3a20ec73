"""Imports only go down: no loop between files or packages, and each package imports only the
floors below its own (docs/architecture.md draws the same floors).

The graph is read from the source with ``ast`` (every ``import``, lazy ones inside functions
and ``TYPE_CHECKING`` blocks included: a lazy import is still a dependency, only a later one).
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

#: Lowest first. A package may import itself and anything on a lower floor; the base modules
#: (single files at the top of the package) sit on floor 0.
FLOORS: list[set[str]] = [
    {
        "_document",
        "_os",
        "_pyproject",
        "_version",
        "categories",
        "devices",
        "errors",
        "progress",
        "units",
        "userfiles",
    },
    {"checkpoint", "data", "lint", "plan", "roofline"},
    {"batch", "preflight", "run"},
    {"trainmedic", "tune"},  # "trainmedic": the top-level API of trainmedic/__init__.py
    {"demo"},
    {"cli"},
    {"__main__"},
]


def modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "trainmedic").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def _known(name: str, known: dict[str, Path]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The trainmedic modules ``name`` imports (``from pkg import sub`` names the submodule)."""
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [_known(alias.name, known) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join(package + ([base] if base else []))
            targets = [
                f"{base}.{a.name}" if f"{base}.{a.name}" in known else _known(base, known) for a in node.names
            ]
        else:
            continue
        out.update(t for t in targets if t and t != name and t != "trainmedic")
    return out


def package_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "trainmedic"


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


@pytest.mark.slow
def test_no_file_imports_itself_through_others(graph):
    assert cycles(graph) == []


@pytest.mark.slow
def test_no_package_loop(graph):
    edges = defaultdict(set)
    for module, targets in graph.items():
        edges[package_of(module)].update(
            package_of(t) for t in targets if package_of(t) != package_of(module)
        )
    assert cycles(edges) == []


def test_every_package_sits_on_a_floor():
    packages = {package_of(m) for m in modules()}
    placed = set().union(*FLOORS)
    assert packages - placed == set(), "add the new package to FLOORS here and to docs/architecture.md"
    assert placed - packages == set(), "a package in FLOORS no longer exists"


def test_imports_only_go_down(graph):
    floor = {package: level for level, members in enumerate(FLOORS) for package in members}
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in graph.items()
        for target in targets
        if package_of(target) != package_of(module)
        and floor.get(package_of(target), 0) >= floor.get(package_of(module), 0)
        and floor.get(package_of(module), 0) > 0
    )
    assert upward == []


def test_the_checks_see_a_loop():
    # The checks themselves: a planted two-file loop and a three-package loop are found.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"x": {"y"}, "y": {"z"}, "z": {"x"}}) == [["x", "y", "z"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
