"""``trainmedic attach`` on the wild corpus: real public training code, read from outside.

Each (script, variant) of ``benchmarks/wild.py``'s corpus is started as a plain ``python`` job
(no trainmedic in it), left to reach its training loop (a backward frame in its
stack, polled with ``py-spy dump``), and read for ``--duration`` seconds by
``python -m trainmedic attach PID``. The verdict is judged against the truth and the accepted
lines that ``wild.py`` measured by ablation (``--truth``, a ``wild-cpu-*.json`` result), with
``wild.py``'s own judge.

From outside there is no op census: a case whose cost is in the user's own lines with no
library under them (tiny torch ops in a generator, a tokenizer loop) gets no bottleneck but the
line ("withheld"). That is counted apart, neither right nor wrong: the question is whether attach
is ever confidently wrong. A job that ends inside the window (the harness caps the corpus's runs
at tens of batches) is judged on what was read before its end, and counted.

    python benchmarks/wild_attach.py                      # every case of the truth file, 1 run each
    python benchmarks/wild_attach.py --only nanogpt --repeats 3

Writes ``benchmarks/results/wild-attach-cpu-<date>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _env
import wild

RESULTS = _env.BENCHMARKS / "results"


def attach_verdict(script, tree: Path, args: list[str], wait_s: float, duration_s: float) -> dict[str, Any]:
    """Start the job, read it from outside once it had ``wait_s`` to reach its loop, stop it."""
    out = tree / "_wild_attach.json"
    out.unlink(missing_ok=True)
    job = subprocess.Popen(
        [sys.executable, script.entry, *args],
        cwd=tree / script.cwd,
        env=wild.child_env(script, tree, False),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    started = time.perf_counter()
    try:
        if not wait_for_training(job, wait_s):
            return {"error": f"the job ended after {time.perf_counter() - started:.1f} s, before the window"}
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "trainmedic",
                "attach",
                str(job.pid),
                "--duration",
                f"{duration_s:g}s",
                "--quiet",
                "--json",
                str(out),
            ],
            capture_output=True,
            text=True,
            timeout=duration_s + 120,
            check=False,
        )
    finally:
        if job.poll() is None:
            job.kill()
        job.wait()
    if not out.exists():
        return {"error": (done.stderr or done.stdout)[-800:]}
    report = json.loads(out.read_text(encoding="utf-8"))
    findings = report.get("findings") or []
    top = findings[0] if findings else {}
    steps = report.get("steps") or {}
    return {
        "bottleneck": report.get("bottleneck"),
        "close_call": report.get("close_call") or [],
        "evidence": report.get("evidence"),
        "outcome": report.get("outcome"),
        "top": {
            k: top.get(k) for k in ("category", "kind", "share", "where", "expected_speedup", "evidence")
        },
        "findings": [
            {
                **{k: f.get(k) for k in ("category", "kind", "share")},
                "where": (at := wild.normalise(f.get("where"), tree, tree / script.cwd)),
                "at": at,  # as wild.judge reads it
            }
            for f in findings[:4]
        ],
        "where": wild.normalise(top.get("where"), tree, tree / script.cwd),
        "lines": [
            {**line, "where": wild.normalise(line.get("where"), tree, tree / script.cwd)}
            for line in (report.get("lines") or [])[:4]
        ],
        "steps": {k: steps.get(k) for k in ("count", "median_s", "growth", "source", "loop")},
        "breakdown": {k: round(v, 4) for k, v in (report.get("breakdown") or {}).items()},
        "notes": report.get("notes") or [],
    }


def wait_for_training(job: subprocess.Popen, timeout_s: float) -> bool:
    """Poll the job's main stack (py-spy dump) until it shows a training step: a backward pass, or
    an optimizer's step (not its construction, which imports torch._dynamo for seconds; a forward
    alone may be an evaluation before training, as nanoGPT's at iteration 0). False when the job
    ended first; True at ``timeout_s`` in any case."""
    from trainmedic.errors import AttachError
    from trainmedic.run.probe import pyspy

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if job.poll() is not None:
            return False
        try:
            threads = pyspy.dump(job.pid)
        except AttachError:
            threads = []  # still starting: no Python state to read yet
        if any(_training(stack) for t in threads for stack in t.stacks):
            return True
        time.sleep(0.2)
    return job.poll() is None


def _training(stack) -> bool:
    if any(frame.filename.startswith("<frozen importlib") for frame in stack):
        return False
    return any(
        "torch/autograd/" in frame.filename or ("torch/optim/" in frame.filename and frame.name != "__init__")
        for frame in stack
    )


def judge(run: dict[str, Any], truth: list[str], accepted: list[dict[str, Any]]) -> str:
    """right, withheld (no bottleneck, the top line among the accepted ones), or wrong."""
    if "error" in run:
        return "error"
    if run["bottleneck"] is None:
        # Withheld: the report points at its first findings (the user's own code among them), or,
        # with no steps, at its top line; one of them must be the pitfall's or the model's.
        pointed = [f["where"] for f in run["findings"][:2]] or [(run["lines"] or [{}])[0].get("where")]
        return "withheld" if any(w is not None and wild.line_ok(w, accepted) for w in pointed) else "wrong"
    right = wild.judge(run, truth, accepted)
    return "right" if right["category"] and right["line"] else "wrong"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repos", type=Path, default=Path("/work/.mirror"), help="folder of the fetched mirrors"
    )
    parser.add_argument(
        "--truth",
        type=Path,
        default=RESULTS / "wild-cpu-2026-11-27.json",
        help="a wild.py result (truth, lines)",
    )
    parser.add_argument("--only", action="append", metavar="SCRIPT[:VARIANT]", help="repeatable")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--wait", type=float, default=30.0, help="at most this long for the job's training loop to begin"
    )
    parser.add_argument("--duration", type=float, default=3.0, help="seconds read from outside")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)

    truth_rows = {
        (r["script"], r["variant"]): r for r in json.loads(args.truth.read_text())["rows"] if "truth" in r
    }
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainmedic-wild-attach-") as tmp:
        for script, variants, include_asis in wild.select(args.only):
            cases = (["as-is"] if include_asis else []) + [v.name for v in variants]
            cases = [c for c in cases if (script.name, c) in truth_rows]
            if not cases:
                continue
            base = Path(tmp) / script.name / "base"
            wild.extract(script, args.repos, base)
            if script.prepare:
                script.prepare(base)
            for case in cases:
                v = next((v for v in variants if v.name == case), None)
                tree = wild.build(
                    base, Path(tmp) / script.name / case, script.base_edits + (v.edits if v else [])
                )
                known = truth_rows[(script.name, case)]
                runs = []
                for _ in range(args.repeats):
                    run = attach_verdict(script, tree, known["args"], args.wait, args.duration)
                    run["judged"] = judge(run, known["truth"]["categories"], known["expected_lines"])
                    runs.append(run)
                    top = run.get("where") or ((run.get("lines") or [{}])[0].get("where"))
                    print(
                        f"{script.name:<20} {case:<11} {'|'.join(known['truth']['categories']):<14} "
                        f"{run.get('bottleneck')!s:<10} {(run.get('top') or {}).get('kind')!s:<18} {top!s:<40} "
                        f"{run['judged']}"
                        + (" (ended)" if run.get("outcome") == "ended" else "")
                        + (f"  {run['error'][-160:]!r}" if "error" in run else ""),
                        flush=True,
                    )
                rows.append(
                    {
                        "script": script.name,
                        "variant": case,
                        "truth": known["truth"]["categories"],
                        "expected_lines": known["expected_lines"],
                        "run_verdicts": known.get("verdicts"),
                        "attach_verdicts": [r.get("bottleneck") or "none" for r in runs],
                        "judged": [r["judged"] for r in runs],
                        "runs": runs,
                    }
                )
            shutil.rmtree(Path(tmp) / script.name, ignore_errors=True)
    judged = [j for r in rows for j in r["judged"]]
    summary = {k: judged.count(k) for k in ("right", "withheld", "wrong", "error")}
    summary["ended_inside_the_window"] = sum(r.get("outcome") == "ended" for row in rows for r in row["runs"])
    print("\n" + ", ".join(f"{k} {v}" for k, v in summary.items()) + f" of {len(judged)} attached runs")
    out = args.out or _env.results_path("wild-attach", "cpu")
    result = {
        "benchmark": "wild_attach",
        **_env.environment(),
        "wait_s": args.wait,
        "duration_s": args.duration,
        "rate_hz": 100,
        "truth_file": args.truth.name,
        "summary": summary,
        "median_runs_per_case": statistics.median([len(r["runs"]) for r in rows]) if rows else 0,
        "rows": rows,
    }
    out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    return 0 if not summary["wrong"] else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    sys.exit(main())
