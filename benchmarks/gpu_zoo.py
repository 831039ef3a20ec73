"""The bottleneck zoo on a real GPU: are the GPU-only verdicts right, at the right line?

``tests/scenarios/test_zoo.py`` checks every CPU scenario in CI; the scenarios whose ``EXPECT``
says ``"gpu_only": True`` (transfer-, sync- and memory-bandwidth-bound loops) can only be judged
where CUDA is. This runs each of them exactly as a user would, in a child process:

    python -m trainmedic run --quiet --json report.json SCENARIO.py      (cwd: the scenarios folder)

and compares the report with the scenario's declaration: the bottleneck, the top finding's
category and kind, its ``where`` against the line marked ``# expect-where``, the expected speed-up
and the step-time growth; the same checks as the CPU zoo test, plus "the report says CUDA".

    python benchmarks/gpu_zoo.py            # the gpu_only scenarios
    python benchmarks/gpu_zoo.py --all      # every scenario, the CPU ones too, on the GPU machine
    python benchmarks/gpu_zoo.py --only sync_item transfer_pageable

Writes ``benchmarks/results/gpu-zoo-<device-name>-<date>.json``. Exit codes: 0 every scenario
passed, 1 some failed, 2 no CUDA device (nothing is run or written), 3 nothing selected.
``--cpu`` runs the selection on this CPU to check the harness itself; it never writes a file.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _env

SCENARIOS = _env.REPO / "tests" / "scenarios"
MARK = "# expect-where"
GROWTH = 1.3  # as in tests/scenarios/test_zoo.py: last-quarter over first-quarter median step time

_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
try:
    import torch
except ImportError as exc:
    print(json.dumps({"error": f"torch is not installed ({exc})"}))
    raise SystemExit(0)
if not torch.cuda.is_available():
    build = "a CPU-only build" if torch.version.cuda is None else f"built for CUDA {torch.version.cuda}, but no device is visible"
    print(json.dumps({"error": f"torch {torch.__version__} is {build}"}))
    raise SystemExit(0)
import _env
print(json.dumps({"gpu": _env.gpu()}))
"""


# -- scenario declarations (the same rules as tests/scenarios/test_zoo.py, nothing imported) --


def expectation(script: Path) -> tuple[dict[str, Any], str]:
    """``EXPECT`` (a literal dict assigned at module level) and ``"<name>.py:<line>"`` of the marked line."""
    text = script.read_text(encoding="utf-8")
    tree = ast.parse(text, filename=str(script))
    expect = None
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and getattr(node.targets[0], "id", None) == "EXPECT"
        ):
            expect = ast.literal_eval(node.value)
            break
    if not isinstance(expect, dict) or "bottleneck" not in expect:
        raise ValueError(f"{script.name}: no module-level EXPECT = {{'bottleneck': ...}} dict")
    marked = [i for i, line in enumerate(text.splitlines(), 1) if line.rstrip().endswith(MARK)]
    if len(marked) != 1:
        raise ValueError(f"{script.name}: exactly one line must end with {MARK!r}, found {len(marked)}")
    lines = text.splitlines()
    # "or_at": the first words of other lines as right as the marked one (tests/scenarios/test_zoo.py)
    expect["or_at_lines"] = [
        next(i for i, line in enumerate(lines, 1) if line.lstrip().startswith(start))
        for start in expect.get("or_at", [])
    ]
    return expect, f"{script.name}:{marked[0]}"


def discover(folder: Path) -> list[Path]:
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith(("test_", "_", "conftest")))


def check(expect: dict[str, Any], where: str, report: dict[str, Any], want_cuda: bool) -> list[str]:
    """Every way ``report`` disagrees with the declaration; empty when it is right."""
    problems: list[str] = []
    if want_cuda and report.get("device", {}).get("kind") != "cuda":
        problems.append(f"ran on {report.get('device', {}).get('kind')!r}, not on CUDA")
    if report.get("bottleneck") != expect["bottleneck"]:
        problems.append(f"bottleneck {report.get('bottleneck')!r}, expected {expect['bottleneck']!r}")
    if expect["bottleneck"] is None:  # a script that ends before any step: its line, no verdict
        if report.get("evidence") != "none" or report.get("findings"):
            problems.append(
                f"evidence {report.get('evidence')!r} with {len(report.get('findings') or [])} finding(s)"
            )
        if f"(at {where})" not in (report.get("message") or ""):
            problems.append(f"message {report.get('message')!r} does not name {where}")
        return problems
    if expect.get("loop") and report.get("evidence") != "loop":
        problems.append(f"evidence {report.get('evidence')!r}, expected the loop's iterations as steps")
    findings = report.get("findings") or []
    if not findings:
        return problems + ["no findings"]
    top = findings[0]
    if top.get("category") != expect["bottleneck"]:
        problems.append(f"top finding is {top.get('category')!r}, expected {expect['bottleneck']!r}")
    if expect.get("kind") and top.get("kind") != expect["kind"]:
        problems.append(f"kind {top.get('kind')!r}, expected {expect['kind']!r}")
    also = [f"{where.rsplit(':', 1)[0]}:{n}" for n in expect.get("or_at_lines", [])]
    if top.get("where") not in [where, *also]:
        problems.append(f"where {top.get('where')!r}, expected {' or '.join([where, *also])!r}")
    if not (top.get("expected_speedup", 0) > 1.0 or expect["bottleneck"] == "compute"):
        problems.append(f"expected_speedup {top.get('expected_speedup')!r} is not > 1")
    steps = report.get("steps", {})
    growth = max(steps.get("growth") or 0.0, steps.get("cpu_growth") or 0.0)
    if expect.get("growth"):
        if growth < GROWTH:
            problems.append(f"step-time growth {growth:.2f} < {GROWTH}")
        if "grew" not in (top.get("evidence") or ""):
            problems.append("the evidence does not say the step time grew")
    else:
        # What the report claims, as the CPU zoo test checks it: a raw quarter ratio past 1.3 on
        # a short run is noise the report itself weighs (diagnose/growth.py), not a claim.
        claims = [f.get("where") for f in findings if "grew" in (f.get("evidence") or "")]
        if claims:
            problems.append(f"a finding claims growth ({', '.join(map(str, claims))}) where none is expected")
    return problems


# -- running --------------------------------------------------------------------------------


def run_scenario(script: Path, timeout: float, want_cuda: bool) -> dict[str, Any]:
    expect, where = expectation(script)
    with tempfile.TemporaryDirectory(prefix="trainmedic-gpu-zoo-") as tmp:
        out = Path(tmp) / "report.json"
        command = [sys.executable, "-m", "trainmedic", "run", "--quiet", "--json", str(out), script.name]
        started = time.perf_counter()
        try:
            done = subprocess.run(
                command,
                check=False,
                cwd=script.parent,
                capture_output=True,
                text=True,
                timeout=timeout,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )
            exit_code, stderr = done.returncode, done.stderr
        except subprocess.TimeoutExpired as exc:
            exit_code, stderr = None, f"timed out after {timeout:.0f} s\n{(exc.stderr or b'')[-2000:]!r}"
        wall = time.perf_counter() - started
        report = json.loads(out.read_text(encoding="utf-8")) if out.exists() else None
    result: dict[str, Any] = {
        "scenario": script.stem,
        "expect": expect,
        "expect_where": where,
        "exit_code": exit_code,
        "wall_s": wall,
    }
    if exit_code != expect.get("exit_code", 0) or report is None:
        result.update(
            passed=False,
            problems=[f"exit code {exit_code}" + ("" if report else ", no report")],
            stderr_tail=stderr[-3000:],
        )
        return result
    top = (report.get("findings") or [{}])[0]
    problems = check(expect, where, report, want_cuda)
    result.update(
        passed=not problems,
        problems=problems,
        bottleneck=report.get("bottleneck"),
        top={k: top.get(k) for k in ("category", "kind", "where", "expected_speedup", "evidence")},
        breakdown={k: round(v, 4) for k, v in (report.get("breakdown") or {}).items()},
        steps={k: report.get("steps", {}).get(k) for k in ("count", "median_s", "p90_s", "growth", "source")},
        device={k: report.get("device", {}).get(k) for k in ("kind", "name")},
        notes=report.get("notes", []),
    )
    return result


def print_table(results: list[dict[str, Any]], device: str) -> None:
    print(f"\ntrainmedic GPU zoo on {device}")
    header = f"{'scenario':<22} {'gpu':>3} {'expected':<34} {'got':<34} {'speedup':>7} {'steps':>6} {'wall':>6}  result"
    print(header)
    print("-" * len(header))
    for r in results:
        e = r["expect"]
        expected = f"{e['bottleneck']}/{e.get('kind') or '-'} @{r['expect_where'].split(':')[-1]}"
        if "top" in r:
            top = r["top"]
            where = (top.get("where") or "?").rsplit(":", 1)
            at = (
                where[-1]
                if len(where) == 2 and where[0] == r["expect_where"].split(":")[0]
                else top.get("where")
            )
            got = f"{r['bottleneck']}/{top.get('kind') or '-'} @{at}"
            speedup = f"{top.get('expected_speedup') or 0:.2f}x"
            steps = str(r["steps"].get("count"))
        else:
            got, speedup, steps = f"exit {r['exit_code']}", "-", "-"
        print(
            f"{r['scenario']:<22} {'yes' if e.get('gpu_only') else 'no':>3} {expected:<34} {got:<34} {speedup:>7} "
            f"{steps:>6} {r['wall_s']:5.1f}s  {'PASS' if r['passed'] else 'FAIL'}"
        )
        for problem in r["problems"]:
            print(f"{'':<27}- {problem}")
    passed = sum(r["passed"] for r in results)
    print(f"\n{passed}/{len(results)} scenarios diagnosed as declared")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--all", action="store_true", help="also run the scenarios that are not gpu_only")
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run just these scenarios (file stems)")
    parser.add_argument(
        "--scenarios", type=Path, default=SCENARIOS, help="the scenario folder (default tests/scenarios)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per scenario (default 600)")
    parser.add_argument(
        "--out", type=Path, help="result file (default benchmarks/results/gpu-zoo-<device>-<date>.json)"
    )
    parser.add_argument("--cpu", action="store_true", help="check the harness on this CPU; writes nothing")
    parser.add_argument(
        "--budget-s",
        type=float,
        help="start no further scenario after this many seconds (the file keeps what ran)",
    )
    args = parser.parse_args()

    gpu: dict[str, Any] | None = None
    if not args.cpu:
        probe = subprocess.run(
            [sys.executable, "-c", _PROBE, str(_env.BENCHMARKS)],
            check=False,
            capture_output=True,
            text=True,
            timeout=300,
        )
        answer = (
            json.loads(probe.stdout.strip().splitlines()[-1])
            if probe.returncode == 0 and probe.stdout.strip()
            else {"error": f"the CUDA probe failed (exit {probe.returncode}): {probe.stderr.strip()[-500:]}"}
        )
        if answer.get("error") or not answer.get("gpu"):
            print(
                f"gpu_zoo: no CUDA device: {answer.get('error', 'none visible')}.\n"
                "gpu_zoo: the GPU-only verdicts can only be checked on a machine with CUDA; nothing was run or written. "
                "(--cpu checks the harness itself on this machine.)",
                file=sys.stderr,
            )
            return 2
        gpu = answer["gpu"]

    declared: list[tuple[Path, dict[str, Any]]] = []
    for script in discover(args.scenarios):
        try:
            declared.append((script, expectation(script)[0]))
        except (ValueError, SyntaxError) as exc:
            print(f"gpu_zoo: skipping {script.name}: {exc}", file=sys.stderr)
    if args.only:
        known = {s.stem for s, _ in declared}
        missing = sorted(set(args.only) - known)
        if missing:
            print(
                f"gpu_zoo: no such scenario: {', '.join(missing)} (have: {', '.join(sorted(known))})",
                file=sys.stderr,
            )
            return 3
        selected = [(s, e) for s, e in declared if s.stem in args.only]
    else:
        selected = [(s, e) for s, e in declared if args.all or e.get("gpu_only")]
        selected.sort(key=lambda se: not se[1].get("gpu_only"))  # the GPU-only verdicts first
    if not selected:
        print(
            f'gpu_zoo: no scenario in {args.scenarios} declares "gpu_only": True; '
            "--all runs the others on this machine too. Nothing was run or written.",
            file=sys.stderr,
        )
        return 3

    device = gpu["name"] if gpu else "this CPU (harness check)"
    env = _env.environment()
    path = args.out or (_env.results_path("gpu-zoo", gpu["name"]) if gpu else None)
    started = time.perf_counter()
    results: list[dict[str, Any]] = []
    not_run: list[str] = []
    for i, (script, expect) in enumerate(selected, 1):
        if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
            not_run.append(script.stem)
            continue
        print(f"[gpu_zoo] {i}/{len(selected)} {script.name} ...", file=sys.stderr, flush=True)
        results.append(
            run_scenario(script, args.timeout, want_cuda=bool(gpu) and bool(expect.get("gpu_only")))
        )
        if path is not None:  # after every scenario: a run cut short keeps what it measured
            write(path, env, gpu, args, results, not_run)
    if path is not None and not_run:
        write(path, env, gpu, args, results, not_run)
    print_table(results, device)
    if not_run:
        print(f"not run (past --budget-s {args.budget_s:.0f}): {', '.join(not_run)}")
    if gpu is None:
        print("\n--cpu: harness check only; no result file written.")
    else:
        print(f"\nwritten: {os.path.relpath(path, _env.REPO)}")
    return 0 if all(r["passed"] for r in results) else 1


def write(
    path: Path, env: dict[str, Any], gpu: dict[str, Any], args, results: list, not_run: list[str]
) -> None:
    payload = {
        "benchmark": "gpu_zoo",
        **env,
        "gpu": gpu,
        "settings": {
            "scenarios": os.path.relpath(args.scenarios, _env.REPO),
            "selection": "only " + " ".join(args.only) if args.only else ("all" if args.all else "gpu_only"),
            "command": "python -m trainmedic run --quiet --json REPORT SCENARIO.py (cwd: the scenarios folder)",
            "growth_threshold": GROWTH,
        },
        "scenarios": results,
        "not_run": not_run,
        "passed": sum(r["passed"] for r in results),
        "total": len(results),
        "pass": all(r["passed"] for r in results) and not not_run,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
