"""``trainmedic run`` on real public training code, against the truth measured by ablation.

The corpus (``wild/corpus.py``): nanoGPT's ``train.py``, minGPT's ``chargpt.py``, pytorch/examples
(mnist, vae, dcgan, word_language_model, mnist_rnn) and four small scripts of this harness's own
after the libraries' documented usage (Lightning ``Trainer.fit``, HF ``Trainer``, Keras 3 ``fit``
on torch, an accelerate loop). Third-party code is never copied into this repository: each script
is extracted from the fetched bare mirrors (``--repos``, default /work/.mirror) into a temporary
folder at run time, its data is synthesised there, and every injected pitfall is a targeted source
edit applied there (an anchor text that must be found exactly once, or the run stops).

Per (script, variant):

* **Truth, by ablation**: plain ``python`` runs (no trainmedic) with a step clock (the time between
  successive ``optimizer.step()`` calls through a global post-hook, or a ``tick()`` inserted where
  a script has no optimizer), the arms of one script alternated in a mirrored order
  (clean, v1..vn, nodata, nodata, vn..v1, clean) so that a steady drift of the machine cancels.
  The measured gain is the variant's median steady step over the clean one, in CPU seconds of the
  process per step (``time.process_time``: every child is single-threaded and CPU-bound, and on a
  shared 2-core machine CPU time is far steadier than the wall clock, which is kept beside it). The as-is category
  comes from a data-free arm (every step reuses the first batch): data when the data share
  ``1 - nodata/clean`` is >= 0.5, compute when < 0.4, either in between; where there is no such arm, compute by knowledge.
  A pitfall is the truth when its share ``1 - clean/variant`` is >= 0.5, the as-is category
  when < 0.4, either in between ("close"). ``item`` (.item() + print every step) is decided the
  same way (host_other when it dominates). ``cat`` is "growth" when its plain runs' step time grew
  >= 1.3x (last quarter over first quarter), else the as-is category.
* **Verdicts**: ``python -m trainmedic run --quiet --json R.json SCRIPT ARGS`` ``--repeats`` times
  (rounds interleave the variants of a script), read ``bottleneck``, ``findings[0]`` and
  ``steps.growth``. A run is right when its category is accepted (growth: ``steps.growth >= 1.3``,
  a ``pool`` finding or a top finding whose evidence says the step grew; a report whose two levers
  are too close to call, ``close_call``, when the truth is one of them) and that finding's
  ``where`` is one of the expected lines: the pitfall's own lines (found by anchor in the edited
  source); for compute, the forward call, backward, gradient clipping and optimizer-step lines of
  the training loop, any line of the model's own file (nanoGPT model.py, mingpt/model.py,
  word_language_model/model.py) and any line inside an ``nn.Module``/``LightningModule`` subclass
  of the script; a compute verdict with no finding counts as right.

Every child runs with ``OMP_NUM_THREADS=1`` (a 2-core shared machine: two intra-op threads beside
another process made steps 5x slower and erratic) and the stand-in ``torchvision`` of
``wild/site-packages`` on its PYTHONPATH (the PyPI wheel does not load beside the CPU torch here;
the folder's name makes its frames a library's, as an installed torchvision's are, not the user's).

    python benchmarks/wild.py                         # everything, 5 verdict runs per case
    python benchmarks/wild.py --repeats 3 --only nanogpt --only mnist:transform
    python benchmarks/wild.py --list                  # the cases, nothing run

Writes ``benchmarks/results/wild-cpu-<date>.json`` (or ``--out``).
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _env

WILD = _env.BENCHMARKS / "wild"
STANDIN = WILD / "site-packages"
TIMER = WILD / "timer"
GROWTH = 1.3
PITFALL_SHARE = 0.5  # the pitfall is the bottleneck when it is at least half the step
CLOSE_SHARE = 0.4  # between this and PITFALL_SHARE either verdict is accepted
LAUNCH_RATIO = 2.0  # CUDA: a 4x batch's step under this many times the step: launch-bound
DEVICE_RATIO = 3.0  # ... over this: bound by the kernels


def load_corpus():
    spec = importlib.util.spec_from_file_location("wild_corpus", WILD / "corpus.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["wild_corpus"] = module
    spec.loader.exec_module(module)
    return module


C = load_corpus()


# -- trees -------------------------------------------------------------------------------------


def extract(script, repos: Path, dest: Path) -> str | None:
    """The script's files into ``dest``; the mirror's commit (None for the harness's own).

    ``repos/<owner+name>`` holds either the fetched bare mirror (``repo/``) or a tree exported
    from one by ``--export-trees`` (``tree/`` and ``COMMIT``), for a machine without the mirrors.
    """
    dest.mkdir(parents=True)
    if script.repo is None:
        for name in script.paths:
            shutil.copy2(C.OWN / name, dest / name)
        return None
    git_dir = repos / script.repo / "repo"
    exported = repos / script.repo / "tree"
    if not git_dir.exists() and exported.exists():
        for name in script.paths:
            source = exported / name
            if source.is_dir():
                shutil.copytree(source, dest / name)
            else:
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, dest / name)
        return (repos / script.repo / "COMMIT").read_text().strip()
    if not git_dir.exists():
        raise FileNotFoundError(f"no mirror at {git_dir} (and no exported tree at {exported})")
    commit = subprocess.run(
        ["git", f"--git-dir={git_dir}", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    archive = subprocess.run(
        ["git", f"--git-dir={git_dir}", "archive", "HEAD", *script.paths], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def build(base: Path, dest: Path, edits: list) -> Path:
    shutil.copytree(base, dest)
    for edit in edits:
        edit.apply(dest)
    return dest


def module_lines(path: Path) -> set[int]:
    """Lines inside classes whose bases end with ``Module`` (nn.Module, LightningModule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and any(ast.unparse(b).endswith("Module") for b in node.bases):
            lines.update(range(node.lineno, (node.end_lineno or node.lineno) + 1))
    return lines


def compute_lines(script, tree: Path) -> dict[str, Any]:
    lines = {f"{f}:{n}" for spec in script.compute for f, n in spec.resolve(tree)}
    entry = Path(script.cwd) / script.entry
    lines |= {f"{entry.as_posix()}:{n}" for n in module_lines(tree / entry)}
    return {"lines": sorted(lines), "files": list(script.model_files)}


def pitfall_lines(variant, tree: Path) -> dict[str, Any]:
    return {
        "lines": sorted({f"{f}:{n}" for spec in variant.where for f, n in spec.resolve(tree)}),
        "files": [],
    }


def normalise(where: str | None, tree: Path, cwd: Path) -> str | None:
    """A report's ``where`` as ``path-relative-to-the-tree:line``."""
    if not where or ":" not in where:
        return None
    path, _, line = where.rpartition(":")
    p = Path(path)
    for candidate in [p] if p.is_absolute() else [cwd / p, tree / p]:
        try:
            return f"{candidate.resolve().relative_to(tree.resolve()).as_posix()}:{line}"
        except ValueError:
            continue
    return where


def line_ok(where: str | None, accepted: list[dict[str, Any]]) -> bool:
    if where is None:
        return False
    path = where.rpartition(":")[0]
    for acc in accepted:
        if acc.get("any") or where in acc["lines"] or path in acc["files"]:
            return True
    return False


# -- running -----------------------------------------------------------------------------------


def export_trees(chosen, repos: Path, dest: Path) -> int:
    """The chosen scripts' files from the mirrors into ``dest/<owner+name>/tree`` (+ ``COMMIT``):
    what ``--repos dest`` reads on a machine that has no mirrors (a borrowed GPU)."""
    for script, _, _ in chosen:
        if script.repo is None:
            continue
        target = dest / script.repo
        with tempfile.TemporaryDirectory(prefix="trainmedic-wild-export-") as tmp:
            commit = extract(script, repos, Path(tmp) / "tree")
            tree = target / "tree"
            for name in script.paths:
                if (tree / name).exists():
                    shutil.rmtree(tree / name) if (tree / name).is_dir() else (tree / name).unlink()
            shutil.copytree(Path(tmp) / "tree", tree, dirs_exist_ok=True)
        (target / "COMMIT").write_text(f"{commit}\n")
        print(f"{script.name:<20} {script.repo} @ {commit[:10]} -> {tree}")
    return 0


def child_env(
    script, tree: Path, truth: bool, times: Path | None = None, device: str = "cpu"
) -> dict[str, str]:
    paths = [str(STANDIN)] if script.standin else []
    paths += [str(tree / p) for p in script.pythonpath]
    if truth:
        paths.insert(0, str(TIMER))
    env = {
        **os.environ,
        # a shared 2-core CPU machine: one intra-op thread per child; a GPU machine keeps its default
        **({"OMP_NUM_THREADS": "1"} if device == "cpu" else {}),
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(paths + [os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "WANDB_MODE": "disabled",
        **script.env,
    }
    if truth:
        env["WILD_TIMES"] = str(times)
        if script.tick is None:
            env["WILD_TICK"] = "optimizer"
    return env


def steady(ticks: list[float]) -> list[float]:
    steps = [b - a for a, b in zip(ticks, ticks[1:])]
    return steps[max(3, len(steps) // 10) :]


def paced_mean(steps: list[float]) -> float:
    """The GPU's pace from the intervals between optimizer steps: the median of the means of
    short runs of consecutive steps. The host runs ahead of the GPU and then waits, so single
    intervals are bimodal while a few in a row average out; and one step that autotunes a new
    shape (cudnn.benchmark at an epoch's last, smaller batch) moves only the runs that hold it.
    On an H200 the plain mean of dcgan's 12 steps at a 4x batch was 89 ms, its median 16 ms."""
    k = max(4, len(steps) // 8)
    if len(steps) <= k:
        return statistics.fmean(steps)
    return statistics.median(statistics.fmean(steps[i : i + k]) for i in range(len(steps) - k + 1))


def run_truth(script, tree: Path, args: list[str], timeout: float, device: str = "cpu") -> dict[str, Any]:
    times = tree / "_wild_times.json"
    times.unlink(missing_ok=True)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, script.entry, *args],
        cwd=tree / script.cwd,
        env=child_env(script, tree, True, times, device),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    wall = time.perf_counter() - started
    if done.returncode != 0 or not times.exists():
        raise RuntimeError(
            f"truth run of {script.name} failed (exit {done.returncode}): {done.stderr[-1500:]}"
        )
    clock = json.loads(times.read_text())
    steps, cpu = steady(clock["ticks"]), steady(clock["cpu"])
    if len(steps) < 8:
        raise RuntimeError(f"truth run of {script.name}: only {len(steps)} steady steps")
    q = max(1, len(steps) // 4)
    return {
        # what the truth is taken from: on a CPU the process's CPU time per step; on CUDA the
        # wall clock's pace over a few steps in a row (paced_mean)
        "step_s": statistics.median(cpu) if device == "cpu" else paced_mean(steps),
        "wall_mean_s": statistics.fmean(steps),
        "median_s": statistics.median(cpu),
        "wall_median_s": statistics.median(steps),
        "steps": len(steps),
        "growth": statistics.median(cpu[-q:]) / statistics.median(cpu[:q])
        if device == "cpu"
        else statistics.median(steps[-q:]) / statistics.median(steps[:q]),
        "wall_growth": statistics.median(steps[-q:]) / statistics.median(steps[:q]),
        "wall_s": round(wall, 2),
    }


def run_verdict(
    script, tree: Path, args: list[str], timeout: float, device: str = "cpu", steps: int | None = None
) -> dict[str, Any]:
    """``steps``: a diagnosis-only run of that many steps, which also confirms its top finding."""
    out = tree / "_wild_report.json"
    out.unlink(missing_ok=True)
    limit = ["--steps", str(steps)] if steps is not None else []
    command = [
        sys.executable, "-m", "trainmedic", "run", "--quiet", "--json", str(out), *limit, script.entry, *args
    ]  # fmt: skip
    started = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            cwd=tree / script.cwd,
            env=child_env(script, tree, False, device=device),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        code, stderr = done.returncode, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, stderr = None, f"timed out after {timeout:.0f} s: {(exc.stderr or b'')[-1500:]!r}"
    wall = time.perf_counter() - started
    if not out.exists():
        return {"exit_code": code, "wall_s": round(wall, 2), "error": stderr[-1500:]}
    report = json.loads(out.read_text(encoding="utf-8"))
    findings = report.get("findings") or []
    top = findings[0] if findings else {}
    steps = report.get("steps") or {}
    return {
        "exit_code": code,
        "wall_s": round(wall, 2),
        "bottleneck": report.get("bottleneck"),
        "close_call": report.get("close_call") or [],
        "evidence": report.get("evidence"),
        "top": {
            k: top.get(k)
            for k in (
                "category",
                "kind",
                "share",
                "where",
                "expected_speedup",
                "ceiling",
                "title",
                "evidence",
                "measured",
            )
        },
        "where": normalise(top.get("where"), tree, tree / script.cwd),
        "findings": [
            {
                **{k: f.get(k) for k in ("category", "kind", "share", "where", "expected_speedup", "title")},
                "at": normalise(f.get("where"), tree, tree / script.cwd),
            }
            for f in findings[:4]
        ],
        "steps": {
            k: steps.get(k) for k in ("count", "median_s", "p90_s", "growth", "cpu_growth", "source", "loop")
        },
        "breakdown": {k: round(v, 4) for k, v in (report.get("breakdown") or {}).items()},
        "lines": (report.get("lines") or [])[:6],
        "notes": report.get("notes") or [],
    }


# -- truth -------------------------------------------------------------------------------------


def truth_sequence(arms: list[str]) -> list[str]:
    return arms + arms[::-1]


def decide(share: float, base: str | list[str], pitfall_cat: str) -> list[str]:
    base = [base] if isinstance(base, str) else base
    if share >= PITFALL_SHARE:
        return [pitfall_cat]
    if share >= CLOSE_SHARE:
        return list(dict.fromkeys([pitfall_cat, *base]))
    return list(base)


def model_truth(med: dict[str, float]) -> tuple[list[str], str]:
    """On CUDA, what bounds the model's step, from the arm with a 4x batch: 4x the work in under
    twice the time is a step bound by its launches (tiny_ops); over three times, by its kernels
    (compute, or memory_bandwidth by the roofline: both accepted); in between, any of them."""
    if "batch4" not in med:
        return ["compute"], ""
    ratio = med["batch4"] / med["clean"]
    if ratio < LAUNCH_RATIO:
        cats = ["tiny_ops"]
    elif ratio > DEVICE_RATIO:
        cats = ["compute", "memory_bandwidth"]
    else:
        cats = ["tiny_ops", "compute", "memory_bandwidth"]
    return cats, f"; 4x batch: step x{ratio:.2f}"


def truths(script, variants, measured: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    med = {arm: statistics.median(r["step_s"] for r in runs) for arm, runs in measured.items()}
    clean = med["clean"]
    out: dict[str, dict[str, Any]] = {}
    model, scaled = model_truth(med)
    # What replaying batches from memory buys each arm: its step over the data-free arm's (the
    # truth of a data finding's confirmation, which replays the batches it already made).
    replay = {arm: m / med["nodata"] for arm, m in med.items() if "nodata" in med}
    if "nodata" in med:
        share = max(0.0, 1 - med["nodata"] / clean)
        base = ["data"] if share >= PITFALL_SHARE else model
        out["as-is"] = {
            "categories": decide(share, model, "data"),
            "basis": f"ablation: data share {share:.0%} (data-free arm {med['nodata'] * 1e3:.1f} ms){scaled}",
            "gain": clean / med["nodata"],
            "replay_gain": replay["clean"],
            "step_ms": clean * 1e3,
        }
    else:
        base = model
        out["as-is"] = {
            "categories": base,
            "basis": "knowledge (no data-free arm)" + scaled,
            "gain": None,
            "step_ms": clean * 1e3,
        }
    for v in variants:
        m = med[v.name]
        gain = m / clean
        share = 1 - clean / m
        growth = statistics.median(r["growth"] for r in measured[v.name])
        wall = statistics.median(r["wall_median_s"] for r in measured[v.name]) / statistics.median(
            r["wall_median_s"] for r in measured["clean"]
        )
        row = {
            "gain": gain,
            "wall_gain": wall,
            "share": share,
            "step_ms": m * 1e3,
            "growth": growth,
            "replay_gain": replay.get(v.name),
        }
        if v.truth == "growth":
            cats = ["growth"] if growth >= GROWTH else list(base)
            row["basis"] = f"plain-run growth {growth:.2f}x"
        elif v.truth == "measure":
            cats = decide(share, base, "host_other")
            row["basis"] = f"pitfall share {share:.0%}"
        else:
            cats = decide(share, base, v.truth)
            row["basis"] = f"pitfall share {share:.0%}"
        row["categories"] = cats
        out[v.name] = row
    return out


# -- judging -----------------------------------------------------------------------------------


def judge(run: dict[str, Any], categories: list[str], accepted: list[dict[str, Any]]) -> dict[str, bool]:
    if "error" in run:
        return {"category": False, "line": False}
    top = run["top"]
    grew = (
        (run["steps"].get("growth") or 0) >= GROWTH
        or top.get("kind") == "pool"
        or "grew" in (top.get("evidence") or "")
    )
    run["grew"] = grew
    # A report that calls its two levers too close to call is right when the truth is one of them.
    named = {run["bottleneck"], *(run.get("close_call") or [])}
    cat_ok = ("growth" in categories and grew) or bool(named & set(categories))
    where, category = run["where"], run["bottleneck"]
    if category not in categories and cat_ok and run.get("close_call"):
        # the close call's other lever is the truth: its finding's line is the one to judge
        other = next((f for f in run["findings"][:2] if f["category"] in categories), None)
        where, category = (
            (other.get("at") or other.get("where"), other["category"]) if other else (where, category)
        )
    if category == "compute" and "compute" in categories and not where:
        line = True
    else:
        line = line_ok(where, accepted)
    return {"category": bool(cat_ok), "line": bool(line)}


def run_script(
    script,
    variants,
    include_asis: bool,
    repos: Path,
    repeats: int,
    timeout: float,
    work: Path,
    device: str = "cpu",
    truth_once: bool = False,
    progress: Callable[[list[dict[str, Any]]], None] = lambda rows: None,
    confirm_steps: int | None = None,
) -> list[dict[str, Any]]:
    """The script's rows; ``progress`` gets what is measured so far after every truth arm and
    every verdict run (rows marked ``"partial"``), so that a harness cut short keeps it."""
    missing = [m for m in script.needs if importlib.util.find_spec(m) is None]
    cases = (["as-is"] if include_asis else []) + [v.name for v in variants]
    if missing:
        return [
            {"script": script.name, "variant": c, "skipped": f"not installed: {', '.join(missing)}"}
            for c in cases
        ]
    root = work / script.name
    base = root / "base"
    commit = extract(script, repos, base)
    if script.prepare:
        script.prepare(base)
    arms = {"clean": [], **{v.name: list(v.edits) for v in variants}}
    if script.nodata:
        arms["nodata"] = list(script.nodata)
    if device == "cuda" and script.cuda_batch4:
        arms["batch4"] = []
    trees = {a: build(base, root / a, script.base_edits + e) for a, e in arms.items()}
    truth_trees = {
        a: build(base, root / f"truth-{a}", script.base_edits + e + (script.tick or []))
        for a, e in arms.items()
    }
    base_args = script.arguments(device)
    arm_args = {
        "clean": base_args,
        "nodata": base_args,
        "batch4": base_args + (script.cuda_batch4 or []),
        **{v.name: base_args + v.args for v in variants},
    }

    print(
        f"\n== {script.name}" + (f" @ {commit[:10]}" if commit else "") + f": truth ({len(arms)} arms)",
        flush=True,
    )
    measured: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    failed: dict[str, str] = {}
    for arm in list(arms) if truth_once else truth_sequence(list(arms)):
        if arm in failed:
            continue
        try:
            r = run_truth(script, truth_trees[arm], arm_args[arm], timeout, device)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            if arm == "clean":
                raise
            failed[arm] = str(exc)[-1500:]
            print(f"   truth {arm:<11} FAILED: {failed[arm][-300:]}", flush=True)
            continue
        measured[arm].append(r)
        progress([{"script": script.name, "variant": "*", "partial": "truth arms so far", "arms": measured}])
        print(
            f"   truth {arm:<11} {r['step_s'] * 1e3:8.1f} ms/step ({r['median_s'] * 1e3:.1f} CPU, "
            f"{r['wall_median_s'] * 1e3:.1f} wall median)  "
            f"growth {r['growth']:.2f}  "
            f"({r['steps']} steps, {r['wall_s']:.0f} s)",
            flush=True,
        )
    for arm in ("nodata", "batch4"):
        if arm in failed:
            del measured[arm]
    broken = [v for v in variants if v.name in failed]
    variants = [v for v in variants if v.name not in failed]
    cases = [c for c in cases if c not in failed]
    truth = truths(script, variants, measured)

    compute = compute_lines(script, trees["clean"])
    expected: dict[str, list[dict[str, Any]]] = {}
    for case in cases:
        cats = truth[case]["categories"]
        v = next((v for v in variants if v.name == case), None)
        own = {"measure": "host_other"}.get(v.truth, v.truth) if v else None
        acc = []
        if own in cats:
            acc.append(pitfall_lines(v, trees[case]))
        if {"compute", "memory_bandwidth"} & set(cats) or ("tiny_ops" in cats and own != "tiny_ops"):
            # the model's own step (a launch-bound one too): its lines
            acc.append(compute_lines(script, trees[case]) if v else compute)
        if "data" in cats and own != "data":  # data-bound as the repository has it: no line to pin
            acc.append({"lines": [], "files": [], "any": True})
        expected[case] = acc

    runs: dict[str, list[dict[str, Any]]] = {c: [] for c in cases}

    def collect(partial: bool) -> list[dict[str, Any]]:
        rows = [
            row(
                script,
                case,
                commit,
                next((v for v in variants if v.name == case), None),
                arm_args,
                truth,
                expected,
                runs,
            )
            for case in cases
        ]
        for r in rows if partial else []:
            r["partial"] = f"{r['repeats']} of {repeats} verdict runs"
        return rows

    progress(collect(True))
    for rnd in range(repeats):
        for case in cases:
            tree = trees["clean" if case == "as-is" else case]
            r = run_verdict(
                script, tree, arm_args["clean" if case == "as-is" else case], timeout, device, confirm_steps
            )
            r["right"] = judge(r, truth[case]["categories"], expected[case])
            runs[case].append(r)
            top = r.get("top") or {}
            print(
                f"   run {rnd + 1} {case:<11} {'~'.join(r.get('close_call') or []) or r.get('bottleneck')!s:<10} "
                f"{top.get('kind')!s:<12} "
                f"{r.get('where')!s:<34} x{top.get('expected_speedup') or 0:.2f}  "
                f"growth {(r.get('steps') or {}).get('growth') or 0:.2f}  {r['wall_s']:.0f} s"
                + (f"  ERROR {r['error'][-200:]!r}" if "error" in r else ""),
                flush=True,
            )
            progress(collect(True))

    rows = collect(False)
    for v in broken:
        rows.append(
            {"script": script.name, "variant": v.name, "error": f"truth run failed: {failed[v.name]}"}
        )
    if os.environ.get("WILD_KEEP") is None:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def row(script, case, commit, v, arm_args, truth, expected, runs) -> dict[str, Any]:
    """One (script, variant) row of the table, from the verdict runs made so far."""
    rs = runs[case]
    speedups = [r["top"]["expected_speedup"] for r in rs if r.get("top", {}).get("expected_speedup")]
    measured = [r["top"]["measured"]["gain"] for r in rs if (r.get("top") or {}).get("measured")]
    estimated = [r["top"]["measured"]["estimated"] for r in rs if (r.get("top") or {}).get("measured")]
    return {
        "script": script.name,
        "variant": case,
        "commit": commit,
        "pitfall": v.pitfall if v else "none (as the repository has it)",
        "notes": script.notes,
        "args": arm_args["clean" if case == "as-is" else case],
        "truth": truth[case],
        "expected_lines": expected[case],
        "verdicts": [
            ("~".join(r.get("close_call") or []) or r.get("bottleneck") or "none")
            + ("+grew" if r.get("grew") else "")
            for r in rs
        ],
        "agreement": sum(r["right"]["category"] for r in rs),
        "line_right": sum(r["right"]["line"] for r in rs),
        "right": sum(r["right"]["category"] and r["right"]["line"] for r in rs),
        "repeats": len(rs),
        "expected_speedup_median": statistics.median(speedups) if speedups else None,
        # The confirmation (verdict runs with --confirm-steps): the measured gain of the top
        # finding's fix, its estimate, and the ablation truth of that fix.
        "measured_gain_median": statistics.median(measured) if measured else None,
        "estimated_gain_median": statistics.median(estimated) if estimated else None,
        "confirmed_category": next(
            (r["top"]["category"] for r in rs if (r.get("top") or {}).get("measured")), None
        ),
        "runs": list(rs),
    }


# -- output ------------------------------------------------------------------------------------


def print_table(rows: list[dict[str, Any]]) -> None:
    header = (
        f"{'script':<20} {'variant':<11} {'truth':<18} {'gain':>6} {'verdicts':<44} "
        f"{'agree':>5} {'line':>5} {'exp x':>6} {'meas x':>6} {'fix x':>6}"
    )
    print("\n" + header)
    print("-" * len(header))
    for r in rows:
        if "skipped" in r:
            print(f"{r['script']:<20} {r['variant']:<11} {r['skipped']}")
            continue
        if "error" in r:
            print(f"{r['script']:<20} {r['variant']:<11} ERROR {r['error'][-120:]!r}")
            continue
        t = r["truth"]
        gain = f"{t['gain']:.2f}" if t.get("gain") else "-"
        exp = f"{r['expected_speedup_median']:.2f}" if r["expected_speedup_median"] else "-"
        measured = r.get("measured_gain_median")
        fix = confirmation_truth(r)
        print(
            f"{r['script']:<20} {r['variant']:<11} {'|'.join(t['categories']):<18} {gain:>6} "
            f"{' '.join(r['verdicts']):<44} {r['agreement']}/{r['repeats']:<3} {r['line_right']}/{r['repeats']:<3} "
            f"{exp:>6} {f'{measured:.2f}' if measured else '-':>6} {f'{fix:.2f}' if fix else '-':>6}"
        )


def confirmation_truth(r: dict[str, Any]) -> float | None:
    """The ablation truth of what the confirmed fix buys: batches from memory for a data
    finding (the arm over the data-free one), the pitfall removed for a host call."""
    category = r.get("confirmed_category")
    if category == "data":
        return r["truth"].get("replay_gain")
    if category == "host_other" and r["variant"] != "as-is":
        return r["truth"].get("gain")
    return None


def select(only: list[str] | None, device: str = "cpu"):
    chosen = []
    for script in C.corpus():
        if not script.on(device):
            continue
        if not only:
            chosen.append((script, script.variants_on(device), True))
            continue
        names = [o.split(":", 1) for o in only if o.split(":", 1)[0] == script.name]
        if not names:
            continue
        wanted = {n[1] for n in names if len(n) == 2}
        if not wanted or len(names) > len(wanted):
            chosen.append((script, script.variants_on(device), True))
        else:
            chosen.append(
                (script, [v for v in script.variants_on(device) if v.name in wanted], "as-is" in wanted)
            )
    return chosen


def check(chosen, repos: Path) -> int:
    """Every edit applies and every anchor is found, without running anything."""
    failed = 0
    with tempfile.TemporaryDirectory(prefix="trainmedic-wild-check-") as tmp:
        for script, variants, _ in chosen:
            try:
                base = Path(tmp) / script.name / "base"
                extract(script, repos, base)
                if script.prepare:
                    script.prepare(base)
                clean = build(base, Path(tmp) / script.name / "clean", script.base_edits)
                print(f"{script.name:<20} compute {len(compute_lines(script, clean)['lines'])} lines")
                for name, edits in [("nodata", script.nodata or []), ("tick", script.tick or [])]:
                    build(base, Path(tmp) / script.name / name, script.base_edits + edits)
                for v in variants:
                    tree = build(base, Path(tmp) / script.name / v.name, script.base_edits + v.edits)
                    print(f"{script.name:<20} {v.name:<11} {' '.join(pitfall_lines(v, tree)['lines'])}")
            except Exception as exc:  # noqa: BLE001 - report every broken script
                failed += 1
                print(f"{script.name:<20} FAILED {type(exc).__name__}: {exc}")
    return 1 if failed else 0


def cuda_device() -> dict[str, Any] | None:
    """The CUDA device of a child ``python`` (this process never imports torch), or None."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import sys; sys.path.insert(0, {str(_env.BENCHMARKS)!r}); "
            "import json, _env; print(json.dumps(_env.gpu()))",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    lines = probe.stdout.strip().splitlines()
    return json.loads(lines[-1]) if probe.returncode == 0 and lines else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--repos",
        type=Path,
        default=Path("/work/.mirror"),
        help="folder of the fetched mirrors (or of trees written by --export-trees)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="the corpus's device")
    parser.add_argument("--repeats", type=int, default=5, help="trainmedic runs per case")
    parser.add_argument("--only", action="append", metavar="SCRIPT[:VARIANT]", help="repeatable")
    parser.add_argument("--out", type=Path, help="result file (default results/wild-<device>-<date>.json)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per child run")
    parser.add_argument(
        "--truth-once", action="store_true", help="one truth run per arm (default: two, in mirrored order)"
    )
    parser.add_argument(
        "--budget-s",
        type=float,
        help="start no further script after this many seconds (the file keeps what ran)",
    )
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--check", action="store_true", help="extract, edit and find every line; run nothing")
    parser.add_argument(
        "--export-trees", type=Path, metavar="DIR", help="write the chosen scripts' trees; run nothing"
    )
    parser.add_argument("--no-write", action="store_true")
    parser.add_argument(
        "--confirm-steps",
        type=int,
        metavar="N",
        help="verdict runs stop after N steps and confirm their top finding (its measured gain beside "
        "the ablation truth of that fix); default: full runs",
    )
    args = parser.parse_args(argv)

    chosen = select(args.only, args.device)
    if args.list:
        for script, variants, asis in chosen:
            for name in (["as-is"] if asis else []) + [v.name for v in variants]:
                v = next((v for v in variants if v.name == name), None)
                print(f"{script.name:<20} {name:<11} {v.pitfall if v else script.notes}")
        return 0
    if not chosen:
        print("nothing selected", file=sys.stderr)
        return 3
    if args.check:
        return check(chosen, args.repos)
    if args.export_trees:
        return export_trees(chosen, args.repos, args.export_trees)
    env = _env.environment()
    gpu = None
    if args.device == "cuda":
        gpu = cuda_device()
        if gpu is None:
            print("wild: --device cuda, but torch sees no CUDA device here; nothing was run", file=sys.stderr)
            return 2
    out = args.out or (
        _env.results_path("wild", "cuda", gpu["name"]) if gpu else _env.results_path("wild", "cpu")
    )
    # `timeout` ends a harness with SIGTERM: unwind, so that the child in flight is killed and the
    # temporary trees are removed (what was measured is already written, see progress below)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    skipped: list[str] = []

    def result() -> dict[str, Any]:
        return {
            "benchmark": "wild",
            **env,
            "device": args.device,
            **({"gpu": gpu} if gpu else {}),
            "repeats": args.repeats,
            "confirm_steps": args.confirm_steps,
            "truth_runs_per_arm": 1 if args.truth_once else 2,
            "omp_num_threads": 1 if args.device == "cpu" else os.environ.get("OMP_NUM_THREADS"),
            "rules": {"growth": GROWTH, "pitfall_share": PITFALL_SHARE, "close_share": CLOSE_SHARE},
            "wall_s": round(time.perf_counter() - started, 1),
            "not_run": skipped,
            "rows": rows,
        }

    def progress(partial: list[dict[str, Any]]) -> None:
        if not args.no_write:  # what the script in hand measured so far, beside the finished ones
            _env.write_result({**result(), "rows": rows + partial}, out, say=False)

    with tempfile.TemporaryDirectory(prefix="trainmedic-wild-") as tmp:
        for script, variants, asis in chosen:
            if args.budget_s is not None and time.perf_counter() - started > args.budget_s:
                skipped.append(script.name)
                print(f"   {script.name}: not started (past --budget-s {args.budget_s:.0f})", flush=True)
                continue

            try:
                rows += run_script(
                    script,
                    variants,
                    asis,
                    args.repos,
                    args.repeats,
                    args.timeout,
                    Path(tmp),
                    args.device,
                    args.truth_once,
                    progress,
                    args.confirm_steps,
                )
            except Exception as exc:  # noqa: BLE001 - one broken script must not lose the others
                print(f"   {script.name}: {type(exc).__name__}: {exc}", flush=True)
                rows.append({"script": script.name, "variant": "*", "error": f"{type(exc).__name__}: {exc}"})
            if not args.no_write:  # after every script: a run cut short keeps what it measured
                _env.write_result(result(), out)
    total = time.perf_counter() - started
    print_table(rows)
    judged = [r for r in rows if "right" in r]
    print(
        f"\n{sum(r['right'] for r in judged)}/{sum(r['repeats'] for r in judged)} runs right "
        f"(category and line); {total / 60:.1f} min"
    )
    if not args.no_write:
        _env.write_result(result(), out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
