"""The bottleneck zoo: each scenario script is diagnosed by `trainmedic run`, `where` included.

Every script declares what it reproduces (``EXPECT``) and marks the line the diagnosis must
point at with ``# expect-where`` (``EXPECT["or_at"]`` names the first words of other lines that are
as right, where which line is heaviest differs between CPUs). They run unmodified, in a child process, as a user would (one
forked from a warm interpreter: tests/warm_kit.py).
"""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest
from warm_kit import run_trainmedic

from trainmedic.categories import GPU_ONLY

HERE = Path(__file__).parent
SCENARIOS = sorted(p for p in HERE.glob("*.py") if not p.name.startswith("test_"))


def expectation(script: Path) -> tuple[dict, str]:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    expect = next(
        ast.literal_eval(node.value) for node in tree.body
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "EXPECT"
    )
    lines = script.read_text(encoding="utf-8").splitlines()
    marked = [i for i, line in enumerate(lines, 1) if line.rstrip().endswith("# expect-where")]
    assert len(marked) == 1, f"{script.name}: exactly one line must end with '# expect-where'"
    return expect, f"{script.name}:{marked[0]}"


def line_starting(script: Path, text: str) -> int:
    lines = script.read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(lines, 1) if line.lstrip().startswith(text))


def diagnose(script: Path, tmp_path: Path, exit_code: int = 0) -> dict:
    out = tmp_path / "report.json"
    result = run_trainmedic(
        ["run", "--quiet", "--json", str(out), script.name],
        cwd=HERE, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == exit_code, result.stderr[-3000:]
    return json.loads(out.read_text(encoding="utf-8"))


def verdicts(gpu: bool) -> list[Path]:
    """The scenarios whose expectation is a verdict (not a run that ends before any step)."""
    return [s for s in SCENARIOS if expectation(s)[0]["bottleneck"] and bool(expectation(s)[0].get("gpu_only")) == gpu]


def test_the_zoo_covers_every_category_that_can_occur():
    verdicts = {expectation(s)[0]["bottleneck"] for s in SCENARIOS}
    assert verdicts >= {"data", "tiny_ops", "compute", "host_other", "transfer", "sync", "memory_bandwidth"}
    kinds = {expectation(s)[0].get("kind") for s in SCENARIOS}
    assert kinds >= {"hdf5", "database", "transform", "pool", "logging"}


# No `alone` lock: a verdict must hold on a busy machine, as users' machines are.
@pytest.mark.slow
@pytest.mark.parametrize("script", verdicts(gpu=False), ids=lambda p: p.stem)
def test_cpu_scenario_is_diagnosed_at_the_right_line(script, tmp_path):
    expect, where = expectation(script)
    report = diagnose(script, tmp_path)
    assert report["evidence"] == ("loop" if expect.get("loop") else "steps"), report["notes"]
    if expect.get("loop"):
        # The loop counted is the one named, not a loop nested in it that held most samples.
        assert report["steps"]["loop"] == f"{script.name}:{line_starting(script, expect['loop'])}"
    summary = {k: round(v, 3) for k, v in report["breakdown"].items() if v}
    assert report["bottleneck"] == expect["bottleneck"], summary
    top = report["findings"][0]
    assert top["category"] == expect["bottleneck"], report["findings"]
    if expect.get("kind"):
        assert top["kind"] == expect["kind"], report["findings"]
    # "or_at": lines as right as the marked one, where which is heaviest differs between CPUs.
    also = {f"{script.name}:{line_starting(script, text)}" for text in expect.get("or_at", [])}
    assert top["where"] in {where} | also, report["lines"]
    assert top["expected_speedup"] > 1.0 or expect["bottleneck"] == "compute"
    for category, limit in expect.get("max_share", {}).items():
        assert report["breakdown"][category] <= limit, summary
    if expect.get("suggests"):
        # The exact data.load call for the script's own source (paths are temporary: a fragment).
        assert expect["suggests"] in (top.get("suggestion") or ""), top
    if expect.get("fixes"):
        assert expect["fixes"] in top["fix"], top
    if expect.get("growth"):
        # Wall time, or the process's own CPU time per step where a busy neighbour blurs it.
        assert max(report["steps"]["growth"], report["steps"]["cpu_growth"] or 0.0) >= 1.3
        assert "grew" in top["evidence"]
    else:
        assert not any("grew" in f["evidence"] for f in report["findings"])


@pytest.mark.parametrize("script", [s for s in SCENARIOS if not expectation(s)[0]["bottleneck"]], ids=lambda p: p.stem)
def test_a_script_that_fails_before_any_step_gets_its_line_and_no_verdict(script, tmp_path):
    expect, where = expectation(script)
    report = diagnose(script, tmp_path, exit_code=expect["exit_code"])
    assert (report["outcome"], report["exit_code"]) == (expect["outcome"], expect["exit_code"])
    assert (report["evidence"], report["bottleneck"], report["findings"]) == ("none", None, [])
    assert f"(at {where})" in report["message"]
    assert report["steps"]["count"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("script", verdicts(gpu=True), ids=lambda p: p.stem)
def test_gpu_scenario_runs_on_a_cpu_and_says_the_gpu_side_was_not_measured(script, tmp_path):
    # The verdicts themselves need a GPU: benchmarks/gpu_zoo.py checks them there.
    report = diagnose(script, tmp_path)
    assert report["device"]["kind"] == "cpu"
    assert report["steps"]["count"] > 0
    assert all(report["breakdown"][c] == 0.0 for c in GPU_ONLY)
    assert any("GPU categories" in note for note in report["notes"])
