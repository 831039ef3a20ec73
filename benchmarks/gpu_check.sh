#!/usr/bin/env bash
# trainmedic run's GPU checks in one go, for a CUDA machine with no network (results to $OUT):
# the wild corpus's CUDA cases (benchmarks/wild.py --device cuda, from trees exported beforehand
# with `python benchmarks/wild.py --device cuda --export-trees benchmarks/wild/trees`), the sync
# scenario's ablation (its step time with and without the per-micro-batch .item()), and the
# GPU-only zoo scenarios (benchmarks/gpu_zoo.py). Each part has a time limit; every part writes
# what it finished.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_check.sh
set -u
OUT=${OUT:?set OUT to a results folder}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
cd benchmarks
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv > "$OUT/nvidia-smi.txt" 2>&1
timeout "${WILD_S:-200}" python3 wild.py --device cuda --repos wild/trees --repeats 3 --truth-once \
    --budget-s "${WILD_BUDGET_S:-120}" --timeout 90 ${WILD_ONLY:---only nanogpt:as-is --only mnist:as-is --only dcgan:as-is} \
    --out "$OUT/wild-cuda.json" > "$OUT/wild.log" 2>&1
echo "wild exit $?" >> "$OUT/wild.log"
# sync.py: the per-step time with .item() every micro-batch and with the loss kept on the device
sed 's/running_loss += loss.item()  # expect-where/running_loss += loss.detach()/' \
    ../tests/scenarios/sync.py > "$OUT/sync_detach.py"
timeout 90 python3 - "$OUT" > "$OUT/sync_ablation.json" 2>> "$OUT/sync_ablation.log" <<'PY'
import json, subprocess, sys, time
out = sys.argv[1]
def run(path, steps):
    t = time.perf_counter()
    subprocess.run([sys.executable, path, "--steps", str(steps)], check=True, capture_output=True)
    return time.perf_counter() - t
rows = {}
for name, path in [("item", "../tests/scenarios/sync.py"), ("detach", f"{out}/sync_detach.py")]:
    short, long = run(path, 20), run(path, 120)
    rows[name] = {"step_s": (long - short) / 100, "runs_s": [short, long]}
rows["gain"] = rows["item"]["step_s"] / rows["detach"]["step_s"]
print(json.dumps(rows, indent=2))
PY
timeout "${ZOO_S:-80}" python3 gpu_zoo.py --only sync memory_bandwidth --timeout 40 \
    --out "$OUT/gpu-zoo.json" > "$OUT/zoo.log" 2>&1
echo "zoo exit $?" >> "$OUT/zoo.log"
tail -8 "$OUT/wild.log"; cat "$OUT/sync_ablation.json"; tail -20 "$OUT/zoo.log"
