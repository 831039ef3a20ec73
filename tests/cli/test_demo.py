import json
import re
import time


def test_demo_diagnoses_the_starved_loop_and_measures_the_fix(tm):
    started = time.perf_counter()
    result = tm("demo", "--json", "demo.json", "--html", "demo.html")
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    assert elapsed < 60  # the promise to a 2-core laptop; typically ~5 s
    report = json.loads((tm.cwd / "demo.json").read_text())
    assert report["bottleneck"] == "data"
    top = report["findings"][0]
    assert (top["kind"], top["where"]) == ("database", "starved_train.py:42")
    measured = re.search(r"Measured: median step [\d.]+ ms -> [\d.]+ ms, ([\d.]+)x faster", result.stderr)
    assert measured, result.stderr[-2000:]
    assert float(measured.group(1)) > 2.0
    assert (tm.cwd / "demo.html").stat().st_size > 1000
