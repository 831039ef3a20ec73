"""Three training phases read their iteration counts from one config; --iters reaches two."""

import argparse
import json
import time

parser = argparse.ArgumentParser()
parser.add_argument("--iters", type=int)
args = parser.parse_args()

with open("config.json") as f:
    cfg = json.load(f)
if args.iters:
    cfg["encoder"]["num_iterations"] = args.iters
    cfg["decoder"]["num_iterations"] = args.iters

for phase in ("encoder", "decoder", "predictor"):
    for it in range(cfg[phase]["num_iterations"]):
        time.sleep(0.001)  # one training step
    print(f"{phase}: done")
