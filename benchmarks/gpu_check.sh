#!/usr/bin/env bash
# trainmedic run's GPU checks in one go, for a CUDA machine with no network (results to $OUT):
# the wild corpus's CUDA cases (benchmarks/wild.py --device cuda, from trees exported beforehand
# with `python benchmarks/wild.py --device cuda --export-trees benchmarks/wild/trees`), one case
# per wild.py call so that a case cut short loses only itself, then the zoo scenarios
# (benchmarks/gpu_zoo.py) in the time left. The whole check keeps to TOTAL_S seconds: a wild case
# starts only with 50 s or more to spare (cut at the limit, it keeps what it measured), the zoo
# starts no scenario it could not finish, and every part writes what it finished.
#
#   OUT=/tmp/gpu bash benchmarks/gpu_check.sh
#   OUT=/tmp/gpu WILD_CASES="nanogpt:as-is mnist" ZOO_ONLY="sync transfer" bash benchmarks/gpu_check.sh
#   OUT=/tmp/gpu GPU_CHECK_DEVICE=cpu TOTAL_S=300 bash benchmarks/gpu_check.sh   # the plumbing, on a CPU
set -u
OUT=${OUT:?set OUT to a results folder}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
TOTAL_S=${TOTAL_S:-540}
# What the H200 runs of 2026-11-27/28 left thinnest first: mnist's transform has no verdict run
# since the loader names the workers' code, vae and nanoGPT have 1-2 of 3, and none of them has
# run with the paced CUDA truth (results/wild-cuda-nvidia-h200-2026-11-28.json); then the
# GPU-only scenarios and the one never run there.
WILD_CASES=${WILD_CASES:-mnist:transform vae:as-is nanogpt:as-is dcgan:as-is dcgan:transform}
ZOO_ONLY=${ZOO_ONLY:-sync transfer memory_bandwidth trainmedic_data pool_growth_tiny loader_mlp_compute}
ZOO_RESERVE_S=${ZOO_RESERVE_S:-100}  # kept for the zoo while wild cases are started
# On an H200 machine each process takes 12-21 s (start-up and imports included), so a case of 3-4
# truth arms and 3 verdict runs takes 86-160 s: dcgan as-is 114 s, dcgan transform about 160 s.
# A case cut short keeps the arms and runs it finished (wild.py writes after each one).
WILD_CASE_S=${WILD_CASE_S:-180}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
cd benchmarks
start=$SECONDS
left() { echo $((TOTAL_S - (SECONDS - start))); }

if [ "$DEVICE" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.max.sm --format=csv \
        > "$OUT/nvidia-smi.txt" 2>&1
    # A cold machine's first run stepped 50 % slower (17.2 against 11.2 ms, the note of
    # results/wild-cuda-nvidia-h200-launches-2026-11-27.json): load torch and keep the card busy
    # for a few seconds before any arm is timed.
    timeout 60 python3 - > "$OUT/warmup.log" 2>&1 <<'PY'
import time

import torch

x = torch.randn(8192, 8192, device="cuda")
end, n = time.perf_counter() + 8, 0
while time.perf_counter() < end:
    x = torch.tanh(x @ x)
    n += 1
    torch.cuda.synchronize()
print(f"warm-up: {n} matmuls of 8192x8192 in 8 s")
PY
fi

for case in $WILD_CASES; do
    budget=$(($(left) - ZOO_RESERVE_S))
    ((budget > WILD_CASE_S)) && budget=$WILD_CASE_S
    if ((budget < 50)); then
        echo "wild $case: not started ($(left) s left)" >> "$OUT/wild.log"
        continue
    fi
    echo "== wild $case (at $((SECONDS - start)) s, limit $budget s)" >> "$OUT/wild.log"
    timeout "$budget" python3 wild.py --device "$DEVICE" --repos wild/trees --repeats "${WILD_REPEATS:-3}" \
        --truth-once --timeout 60 --only "$case" --out "$OUT/wild-$DEVICE-${case/:/-}.json" >> "$OUT/wild.log" 2>&1
    echo "wild $case exit $? at $((SECONDS - start)) s" >> "$OUT/wild.log"
done

zoo_s=$(($(left) - 5))
if ((zoo_s > 30)); then
    # --budget-s: start no scenario that could not finish before the end (each takes 5-20 s)
    zoo_cpu=$([ "$DEVICE" = cpu ] && echo --cpu)
    # shellcheck disable=SC2086
    timeout "$zoo_s" python3 gpu_zoo.py $zoo_cpu --only $ZOO_ONLY --timeout 40 --budget-s $((zoo_s - 25)) \
        --out "$OUT/gpu-zoo.json" > "$OUT/zoo.log" 2>&1
    echo "zoo exit $? at $((SECONDS - start)) s" >> "$OUT/zoo.log"
else
    echo "zoo: not started ($(left) s left)" > "$OUT/zoo.log"
fi
grep -E "^(==|wild )|runs right" "$OUT/wild.log"
tail -16 "$OUT/zoo.log"
