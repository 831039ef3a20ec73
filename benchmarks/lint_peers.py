"""`trainmedic lint` beside the two public static analysers of PyTorch training code, on their
own test suites and on real training code.

The peers are installed, at run time, into an environment of their own under --work (never
into trainmedic's; nothing of theirs is committed):

- torch-preflight (``pip install --no-deps torch-preflight==0.5.0``, with libcst and rich): its
  rule tests (tests/test_rules.py of its sdist) are run once with its engine wrapped, so every
  snippet a test analyses is recorded with what torch-preflight reports on it. A snippet with a
  finding is a positive example of that finding's class, at its line; a snippet with none is a
  clean example.
- TorchFix, installed (``--no-deps``, with libcst and PyYAML) from the checkout given by
  --torchfix-source (a folder or a git directory), whose checker fixtures it is judged on:
  tests/fixtures/<group>/checker/<name>.py, with the expected findings beside it in <name>.txt
  (the registry's sdist leaves them out). Listed lines are positives; every other code line of
  the file is a negative. The result records the commit.

Per class, trainmedic's rules for it (CLASSES below) count a positive when they report within
two lines of the expected line. A clean snippet counts as flagged when *any* trainmedic rule
reports on it; a TorchFix negative when a rule of its class reports on that line. Each peer is
also run over both suites, so the table has all three tools side by side. --tree adds real
code: every tool's findings are counted and the wall time of each whole command is measured
on the same tree (trainmedic three times, the median; torch-preflight once, with its default
of one worker per core).

    python benchmarks/lint_peers.py --torchfix-source PATH [--tree DIR ...]
    python benchmarks/lint_peers.py --torchfix-source PATH --no-write
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import venv
from dataclasses import dataclass
from pathlib import Path

import _env

PREFLIGHT = "torch-preflight==0.5.0"
PEER_DEPENDENCIES = ("libcst", "rich", "pyyaml", "pytest")
NEAR = 2  # lines between the expected line and trainmedic's


@dataclass(frozen=True)
class Class:
    """One class of finding: where its examples come from, the peer's code for it, and the
    trainmedic rules that should find it (none when trainmedic leaves the class out, with why)."""

    name: str
    suite: str  # "torch-preflight" or "torchfix"
    peer_codes: tuple[str, ...]
    rules: tuple[str, ...]
    #: for a TorchFix class, the fixture files that hold its examples
    fixtures: tuple[str, ...] = ()
    #: the other peer's code for the same thing, where it has one
    other_codes: tuple[str, ...] = ()
    #: only the peer's findings of these severities belong to the class (all when empty)
    severities: tuple[str, ...] = ()
    left_out: str = ""

    def expected(self, found: list[list]) -> list[int]:
        """The lines of a case where the peer's own result holds an example of this class."""
        return [
            f[1]
            for f in found
            if f[0] in self.peer_codes and (not self.severities or f[2:3] and f[2] in self.severities)
        ]


CLASSES = (
    Class("graph kept across steps", "torch-preflight", ("TG001",), ("TM201",)),
    Class("eval forward with autograd on", "torch-preflight", ("TG002",), ("TM202",)),
    Class("backward without zero_grad", "torch-preflight", ("TG003",), ("TM203",)),
    Class(
        "DataLoader without workers / pin_memory",
        "torch-preflight",
        ("TG004",),
        ("TM110",),
        other_codes=("TOR401",),
        left_out=(
            "a tuning note, not a defect: trainmedic flags a worker-less DataLoader where its "
            "Dataset reads or decodes per item (TM110), and `trainmedic run` measures whether "
            "loading or the host-to-device copy is what the step waits on"
        ),
    ),
    Class("softmax before CrossEntropyLoss", "torch-preflight", ("TG005",), ("TM204",)),
    Class("sigmoid before BCEWithLogitsLoss", "torch-preflight", ("TG006",), ("TM204",)),
    Class("device sync every step", "torch-preflight", ("TG007",), ("TM107",)),
    Class("partly seeded run", "torch-preflight", ("TG008",), ("TM208",), severities=("warning", "error")),
    Class(
        "run never seeded",
        "torch-preflight",
        ("TG008",),
        ("TM208",),
        severities=("note",),
        left_out=(
            "a script that seeds nothing has not asked to be reproducible; flagging it would flag "
            "most tutorials (10 of the 40 training files of nanoGPT, pytorch/examples and minGPT)"
        ),
    ),
    Class("eval() never undone", "torch-preflight", ("TG011",), ("TM205",)),
    Class("DDP without DistributedSampler", "torch-preflight", ("TG012",), ("TM206",)),
    Class("constant moved to the device every step", "torch-preflight", ("TG013",), ("TM114",)),
    Class("accumulation without dividing the loss", "torch-preflight", ("TG014",), ("TM207",)),
    Class("torch.load without weights_only", "torchfix", ("TOR102",), ("TM301",), ("load",)),
    Class("require_grad typo", "torchfix", ("TOR002",), ("TM209",), ("require_grad",)),
    Class("checkpoint without use_reentrant", "torchfix", ("TOR003",), ("TM303",), ("reentrant_checkpoint",)),
    Class(
        "DataLoader with num_workers=0",
        "torchfix",
        ("TOR401",),
        ("TM110",),
        ("dataloader",),
        other_codes=("TG004",),
        left_out=(
            "the fixture's DataLoaders serve an in-memory tensor, where worker processes add "
            "inter-process copies and buy nothing; trainmedic flags the loaders whose Dataset "
            "does per-item I/O (TM110)"
        ),
    ),
    Class("zero_grad(set_to_none=False)", "torchfix", ("TOR402",), ("TM115",), ("zerograd",)),
    Class("torch.cuda.amp / torch.cpu.amp", "torchfix", ("TOR101",), ("TM302",), ("amp",)),
    Class("sdp_kernel", "torchfix", ("TOR101", "TOR103"), ("TM302",), ("sdp_kernel",)),
    Class("unstabilised logsumexp", "torchfix", ("TOR108",), ("TM210",), ("logsumexp",)),
)

# Runs inside the peers' environment: records every snippet torch-preflight's rule tests analyse.
_RECORDER = """
import json, os, sys
import pytest
import torch_preflight.engine as engine
original = engine.check_source
out = open(sys.argv[2], "w")
def recording(path, source, cfg=None, *args, **kwargs):
    result = original(path, source, cfg, *args, **kwargs)
    out.write(json.dumps({"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
        "source": source, "found": [[d.code, d.line, d.severity.name.lower()] for d in result[0]]}) + "\\n")
    return result
engine.check_source = recording
sys.path.insert(0, os.path.join(sys.argv[1], "tests"))
import conftest
conftest.check_source = recording
code = pytest.main(["-q", "-p", "no:cacheprovider", "-p", "no:randomly", os.path.join(sys.argv[1], "tests", "test_rules.py")])
out.close()
sys.exit(code)
"""


def peer_environment(work: Path, torchfix: Path) -> Path:
    """The peers' own virtual environment (made once per TorchFix commit), and its python."""
    env = work / f"venv-{torchfix.name}"
    python = env / "bin" / "python"
    if not python.exists():
        venv.create(env, with_pip=True)
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, *PEER_DEPENDENCIES], check=True)
        subprocess.run([*pip, "--no-deps", PREFLIGHT, str(torchfix)], check=True)
    return python


def preflight_suite(work: Path, python: Path) -> list[dict]:
    """torch-preflight's rule-test snippets with what it reports on each, unique by source."""
    cases = work / "preflight-cases.jsonl"
    if not cases.exists():
        sdists = work / "sdist"
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "download",
                "-q",
                "--no-deps",
                "--no-binary",
                ":all:",
                PREFLIGHT,
                "-d",
                str(sdists),
            ],
            check=True,
        )
        [archive] = sdists.glob("torch_preflight-*.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(sdists, filter="data")
        [source] = [p for p in sdists.iterdir() if p.is_dir()]
        recorder = work / "record.py"
        recorder.write_text(_RECORDER)
        subprocess.run([str(python), str(recorder), str(source), str(cases)], check=True, cwd=work)
    unique: dict[str, dict] = {}
    for line in cases.read_text().splitlines():
        row = json.loads(line)
        unique.setdefault(row["source"], row)
    return list(unique.values())


def torchfix_suite(checkout: Path, names: set[str]) -> list[dict]:
    """The checker fixtures named in CLASSES: their source and expected (code, line)s."""
    cases = []
    for fixture in sorted(checkout.glob("tests/fixtures/*/checker/*.py")):
        if fixture.stem not in names:
            continue
        expected = fixture.with_suffix(".txt").read_text()
        found = [[m.group(2), int(m.group(1))] for m in re.finditer(r"^(\d+):\d+ (TOR\d+)", expected, re.M)]
        cases.append({"test": fixture.stem, "source": fixture.read_text(), "found": found})
    return cases


def torchfix_checkout(source: Path, work: Path) -> tuple[Path, str]:
    """A work tree of the TorchFix checkout (exported when ``source`` is a git directory), and
    its commit: the fixtures and the TorchFix that is judged on them come from the same commit."""
    if (source / "tests" / "fixtures").is_dir():
        commit = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True
        )
        return source, commit.stdout.strip() or "unknown"
    commit = subprocess.run(
        ["git", f"--git-dir={source}", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    tree = work / f"torchfix-{commit[:12]}"
    if not tree.exists():
        tree.mkdir(parents=True)
        archive = subprocess.run(
            ["git", f"--git-dir={source}", "archive", "HEAD"], capture_output=True, check=True
        )
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree, commit


def write_cases(folder: Path, cases: list[dict]) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, case in enumerate(cases):
        path = folder / f"case{number:03d}.py"
        path.write_text(case["source"])
        paths.append(path)
    return paths


def trainmedic_findings(paths: list[Path]) -> dict[str, list[tuple[str, int]]]:
    from trainmedic.lint import lint_paths

    result = lint_paths([str(p) for p in paths])
    found: dict[str, list[tuple[str, int]]] = {str(p): [] for p in paths}
    for violation in result.violations:
        found[violation.path].append((violation.code, violation.line))
    return found


def preflight_findings(python: Path, paths: list[Path]) -> dict[str, list[tuple[str, int]]]:
    tool = python.parent / "torch-preflight"
    run = subprocess.run(
        [str(tool), "check", "-f", "json", "-j", "1", *map(str, paths)], capture_output=True, text=True
    )
    found: dict[str, list[tuple[str, int]]] = {str(p): [] for p in paths}
    for d in json.loads(run.stdout)["diagnostics"]:
        found.setdefault(d["path"], []).append((d["code"], d["line"]))
    return found


def torchfix_findings(python: Path, paths: list[Path]) -> dict[str, list[tuple[str, int]]]:
    tool = python.parent / "torchfix"
    run = subprocess.run([str(tool), "--select", "ALL", *map(str, paths)], capture_output=True, text=True)
    found: dict[str, list[tuple[str, int]]] = {str(p): [] for p in paths}
    for m in re.finditer(r"^(.+?\.py):(\d+):\d+: (TOR\d+)", run.stdout, re.M):
        found.setdefault(m.group(1), []).append((m.group(3), int(m.group(2))))
    return found


def _near(found: list[tuple[str, int]], codes: tuple[str, ...], line: int) -> bool:
    return any(code in codes and abs(at - line) <= NEAR for code, at in found)


def score(
    klass: Class, cases: list[dict], paths: list[Path], tools: dict[str, dict[str, list[tuple[str, int]]]]
) -> dict:
    """One class's row: positives and negatives, and what each tool makes of them."""
    codes_of = {"trainmedic": klass.rules, klass.suite: klass.peer_codes}
    other = "torchfix" if klass.suite == "torch-preflight" else "torch-preflight"
    if klass.other_codes:
        codes_of[other] = klass.other_codes
    row: dict = {
        "class": klass.name,
        "suite": klass.suite,
        "peer_codes": list(klass.peer_codes),
        "trainmedic_rules": list(klass.rules),
        "left_out": klass.left_out or None,
        "positives": 0,
        "negatives": 0,
        "hits": {t: 0 for t in codes_of},
        "negatives_flagged": {t: 0 for t in codes_of},
        "missed": [],
        "flagged": [],
    }
    for case, path in zip(cases, paths):
        if klass.suite == "torchfix" and case["test"] not in klass.fixtures:
            continue
        expected = klass.expected(case["found"])
        for line in expected:
            row["positives"] += 1
            for tool, codes in codes_of.items():
                hit = _near(tools[tool][str(path)], codes, line)
                row["hits"][tool] += hit
                if tool == "trainmedic" and not hit:
                    row["missed"].append(f"{case['test']}:{line}")
        if klass.suite == "torchfix":
            listed = {found[1] for found in case["found"]}
            negatives = [
                n
                for n, text in enumerate(case["source"].splitlines(), 1)
                if text.strip()
                and not text.lstrip().startswith(("#", "import ", "from "))
                and n not in listed
            ]
            row["negatives"] += len(negatives)
            for tool, codes in codes_of.items():
                bad = [
                    n for n in negatives if any(c in codes and at == n for c, at in tools[tool][str(path)])
                ]
                row["negatives_flagged"][tool] += len(bad)
                if tool == "trainmedic":
                    row["flagged"] += [f"{case['test']}:{n}" for n in bad]
    return row


def clean_row(cases: list[dict], paths: list[Path], tools: dict) -> dict:
    """torch-preflight's clean snippets: any finding of any rule counts against a tool."""
    clean = [(c, p) for c, p in zip(cases, paths) if not c["found"]]
    row = {
        "class": "clean examples (any finding)",
        "suite": "torch-preflight",
        "negatives": len(clean),
        "negatives_flagged": {},
        "flagged": [],
    }
    for tool, found in tools.items():
        bad = [(c, p) for c, p in clean if found[str(p)]]
        row["negatives_flagged"][tool] = len(bad)
        if tool == "trainmedic":
            row["flagged"] = [f"{c['test']}: {found[str(p)]}" for c, p in bad]
    return row


def real_trees(python: Path, trees: list[Path]) -> list[dict]:
    rows = []
    for tree in trees:
        lines = sum(p.read_text(errors="replace").count("\n") for p in tree.rglob("*.py"))
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            mine = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "trainmedic",
                    "lint",
                    "--isolated",
                    "--output-format",
                    "json",
                    str(tree),
                ],
                capture_output=True,
                text=True,
            )
            runs.append(time.perf_counter() - start)
        start = time.perf_counter()
        theirs = subprocess.run(
            [str(python.parent / "torch-preflight"), "check", "-f", "json", "--fail-on", "note", str(tree)],
            capture_output=True,
            text=True,
        )
        preflight_s = time.perf_counter() - start
        fixes = subprocess.run(
            [str(python.parent / "torchfix"), "--select", "ALL", str(tree)], capture_output=True, text=True
        )
        trainmedic = json.loads(mine.stdout or "[]")
        trainmedic = trainmedic.get("violations", trainmedic) if isinstance(trainmedic, dict) else trainmedic
        rows.append(
            {
                "tree": tree.name,
                "lines": lines,
                "trainmedic": {
                    "findings": len(trainmedic),
                    "s": statistics.median(runs),
                    "by_rule": _count(f["code"] for f in trainmedic),
                    "list": [
                        f"{Path(f['path']).relative_to(tree)}:{f['line']} {f['code']}" for f in trainmedic
                    ],
                },
                "torch-preflight": {
                    "findings": len(json.loads(theirs.stdout)["diagnostics"]),
                    "s": preflight_s,
                    "by_rule": _count(d["code"] for d in json.loads(theirs.stdout)["diagnostics"]),
                },
                "torchfix": {
                    "findings": len(re.findall(r"^\S+\.py:\d+:\d+: TOR", fixes.stdout, re.M)),
                    "by_rule": _count(re.findall(r"^\S+\.py:\d+:\d+: (TOR\d+)", fixes.stdout, re.M)),
                },
            }
        )
    return rows


def in_memory_loader(repeats: int = 3) -> dict:
    """What workers buy a DataLoader over an in-memory tensor (the num_workers=0 fixture's
    case): one pass over 20,000 rows of 100 floats, batch 64, with 0 and with 2 workers,
    interleaved, each the median of ``repeats`` (worker start-up included, as a user pays it)."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.rand(20_000, 100), torch.randint(0, 10, (20_000,)))
    times: dict[int, list[float]] = {0: [], 2: []}
    for _ in range(repeats):
        for workers in times:
            start = time.perf_counter()
            for _batch in DataLoader(data, batch_size=64, shuffle=True, num_workers=workers):
                pass
            times[workers].append(time.perf_counter() - start)
    median = {w: statistics.median(t) for w, t in times.items()}
    return {
        "rows": 20_000,
        "batch_size": 64,
        "epoch_s": {f"num_workers={w}": t for w, t in median.items()},
        "workers_over_none": median[2] / median[0],
    }


def _peer_version(python: Path, dist: str) -> str:
    run = subprocess.run(
        [str(python), "-c", f"from importlib.metadata import version; print(version({dist!r}))"],
        capture_output=True,
        text=True,
    )
    return run.stdout.strip()


def _count(codes) -> dict[str, int]:
    counted: dict[str, int] = {}
    for code in codes:
        counted[code] = counted.get(code, 0) + 1
    return dict(sorted(counted.items()))


def _fraction(hits: int, total: int) -> str:
    return f"{hits}/{total}" if total else "-"


def print_table(rows: list[dict], clean: dict, trees: list[dict]) -> None:
    print(
        f"{'class':44} {'suite':16} {'trainmedic':>11} {'preflight':>10} {'torchfix':>9}  negatives flagged (tm)"
    )
    for row in rows:
        hits, total = row["hits"], row["positives"]
        cells = [
            _fraction(hits.get(t, 0), total) if t in hits else "n/a"
            for t in ("trainmedic", "torch-preflight", "torchfix")
        ]
        negatives = f"{row['negatives_flagged']['trainmedic']}/{row['negatives']}" if row["negatives"] else ""
        mark = "  (left out)" if row["left_out"] else ""
        print(
            f"{row['class'][:44]:44} {row['suite']:16} {cells[0]:>11} {cells[1]:>10} {cells[2]:>9}  {negatives}{mark}"
        )
    flagged = clean["negatives_flagged"]
    print(
        f"{clean['class']:44} {'torch-preflight':16} {flagged['trainmedic']:>8}/{clean['negatives']} "
        f"{flagged['torch-preflight']:>7}/{clean['negatives']} {flagged['torchfix']:>6}/{clean['negatives']}"
    )
    counted = [r for r in rows if not r["left_out"]]
    hit = sum(r["hits"]["trainmedic"] for r in counted)
    total = sum(r["positives"] for r in counted)
    print(
        f"\ntrainmedic, classes not left out: {hit}/{total} positives ({100 * hit / max(total, 1):.0f} %) within "
        f"{NEAR} lines; clean examples flagged {flagged['trainmedic']}/{clean['negatives']}"
    )
    for tree in trees:
        mine, theirs = tree["trainmedic"], tree["torch-preflight"]
        print(
            f"{tree['tree']:24} {tree['lines']:>6} lines  trainmedic {mine['findings']:>3} findings "
            f"{mine['s']:.2f} s  torch-preflight {theirs['findings']:>3} findings {theirs['s']:.2f} s "
            f"(x{theirs['s'] / mine['s']:.1f})  torchfix {tree['torchfix']['findings']:>3} findings"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--torchfix-source",
        type=Path,
        required=True,
        help="a TorchFix checkout, or its git directory (for its test fixtures)",
    )
    parser.add_argument(
        "--tree", type=Path, action="append", default=[], help="real code to lint with all three"
    )
    parser.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "trainmedic-lint-peers")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    checkout, torchfix_commit = torchfix_checkout(args.torchfix_source, args.work)
    python = peer_environment(args.work, checkout)
    preflight_cases = preflight_suite(args.work, python)
    fixtures = {name for klass in CLASSES for name in klass.fixtures}
    torchfix_cases = torchfix_suite(checkout, fixtures)
    suites = {"torch-preflight": preflight_cases, "torchfix": torchfix_cases}
    rows: list[dict] = []
    clean: dict = {}
    with tempfile.TemporaryDirectory() as scratch:
        for suite, cases in suites.items():
            paths = write_cases(Path(scratch) / suite, cases)
            tools = {
                "trainmedic": trainmedic_findings(paths),
                "torch-preflight": preflight_findings(python, paths),
                "torchfix": torchfix_findings(python, paths),
            }
            rows += [score(k, cases, paths, tools) for k in CLASSES if k.suite == suite]
            if suite == "torch-preflight":
                clean = clean_row(cases, paths, tools)
    trees = real_trees(python, args.tree)
    loader = in_memory_loader()
    print_table(rows, clean, trees)
    epoch = loader["epoch_s"]
    print(
        f"in-memory DataLoader, one pass: num_workers=0 {epoch['num_workers=0']:.3f} s, "
        f"num_workers=2 {epoch['num_workers=2']:.3f} s (x{loader['workers_over_none']:.2f} the time)"
    )
    if not args.no_write:
        path = _env.results_path("lint_peers", "cpu")
        result = {
            "benchmark": "lint_peers",
            "environment": _env.environment(),
            "peers": {
                "torch-preflight": PREFLIGHT.split("==")[1],
                "torchfix": {"version": _peer_version(python, "torchfix"), "commit": torchfix_commit},
            },
            "method": textwrap.dedent(__doc__.split("\n\n", 1)[1]).strip(),
            "suites": {
                "torch-preflight": {
                    "snippets": len(preflight_cases),
                    "clean": sum(1 for c in preflight_cases if not c["found"]),
                },
                "torchfix": {"fixtures": sorted(c["test"] for c in torchfix_cases)},
            },
            "classes": rows,
            "clean": clean,
            "trees": trees,
            "in_memory_loader": loader,
        }
        path.write_text(json.dumps(result, indent=1) + "\n")
        print(f"\nwrote {path.relative_to(_env.REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
