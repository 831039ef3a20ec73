"""How long `trainmedic lint` takes on 14,500 lines of training code (goal: under 2 s).

The input is real Python: the precision corpus (tests/lint/corpus), the bottleneck zoo
(tests/scenarios) and trainmedic's own source, copied into a temporary folder until it holds
--lines lines (the copying stops there, so the input keeps its size as the source grows). Three
timings, each the median of --repeats runs, interleaved:

- ``lint (in-process)``: ``lint_paths`` over the folder, all rules;
- ``trainmedic lint (process)``: the whole command as a user or pre-commit runs it, start-up included;
- baselines: ``ast.parse`` of every file (the floor any AST linter pays) and, when installed,
  ``ruff check`` over the same folder (a compiled linter, for scale).

    python benchmarks/lint_speed.py              # ~20 s; exit 0 when the goal is met
    python benchmarks/lint_speed.py --no-write
"""

from __future__ import annotations

import argparse
import ast
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _env

GOAL_SECONDS = 2.0
SOURCES = ("tests/lint/corpus", "tests/scenarios", "src/trainmedic")


def build_tree(root: Path, min_lines: int) -> tuple[int, int]:
    """Copy the sources, training code first, until ``min_lines`` is passed: the tree stays the
    same size as trainmedic's own source grows, so results of different dates compare."""
    files = [p for folder in SOURCES for p in sorted((_env.REPO / folder).rglob("*.py"))]
    lines = copies = 0
    while lines < min_lines:
        for path in files:
            target = root / f"copy{copies}" / path.relative_to(_env.REPO)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target)
            lines += path.read_text(encoding="utf-8").count("\n")
            if lines >= min_lines:
                break
        copies += 1
    return lines, sum(1 for _ in root.rglob("*.py"))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", type=int, default=14_500)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    from trainmedic.lint import lint_paths

    with tempfile.TemporaryDirectory(prefix="lint-speed-") as folder:
        root = Path(folder)
        lines, files = build_tree(root, args.lines)
        paths = sorted(str(p) for p in root.rglob("*.py"))
        ruff = shutil.which("ruff") or (
            str(Path(sys.executable).parent / "ruff")
            if (Path(sys.executable).parent / "ruff").exists()
            else None
        )
        arms = {
            "lint (in-process)": lambda: lint_paths([folder]),
            "trainmedic lint (process)": lambda: subprocess.run(
                [sys.executable, "-m", "trainmedic", "lint", "--json", folder],
                capture_output=True,
                check=False,
            ),
            "ast.parse only (floor)": lambda: [ast.parse(Path(p).read_bytes(), p) for p in paths],
        }
        if ruff:
            arms["ruff check (compiled, for scale)"] = lambda: subprocess.run(
                [ruff, "check", "--no-cache", "--select", "E,F,B", "--quiet", folder],
                capture_output=True,
                check=False,
            )
        findings = len(lint_paths([folder]).violations)
        samples: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(args.repeats):
            for name, fn in arms.items():
                samples[name].append(timed(fn))

    medians = {name: statistics.median(values) for name, values in samples.items()}
    print(f"{lines:,} lines in {files} files, {findings} findings; median of {args.repeats} runs")
    print(f"{'arm':<34} {'median s':>9} {'min s':>7} {'max s':>7} {'lines/s':>10}")
    for name, values in samples.items():
        median = medians[name]
        print(f"{name:<34} {median:9.3f} {min(values):7.3f} {max(values):7.3f} {lines / median:10,.0f}")
    verdict = medians["trainmedic lint (process)"] < GOAL_SECONDS
    print(
        f"goal: the whole command under {GOAL_SECONDS:.0f} s on {lines:,} lines -> {'met' if verdict else 'NOT met'}"
    )

    result = {
        "benchmark": "lint_speed",
        "environment": _env.environment(),
        "lines": lines,
        "files": files,
        "findings": findings,
        "repeats": args.repeats,
        "seconds": {name: {"median": medians[name], "samples": samples[name]} for name in samples},
        "goal_seconds": GOAL_SECONDS,
        "goal_met": verdict,
        "load_average_after": _env.load_average(),
    }
    if not args.no_write:
        path = _env.results_path("lint_speed")
        path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"written: {path.relative_to(_env.REPO)}")
    return 0 if verdict else 1


if __name__ == "__main__":
    sys.exit(main())
