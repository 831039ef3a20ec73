"""Keras 3 ``model.fit`` on the torch backend (an MLP classifier on NumPy arrays); the wild
corpus's Keras case (benchmarks/wild.py). ``Tick`` feeds the truth runs' step clock only where
benchmarks/wild.py loaded it (Keras optimizers are not torch optimizers)."""

import os
import sys

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras
import numpy as np


class Tick(keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        timer = sys.modules.get("_wild_timer")
        if timer is not None:
            timer.tick()


def main():
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((94 * 128, 256)).astype("float32")
    y = (x[:, :10].argmax(axis=1)).astype("int64")
    model = keras.Sequential(
        [
            keras.Input((256,)),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(512, activation="relu"),
            keras.layers.Dense(10),
        ]
    )
    model.compile(optimizer="adam", loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, batch_size=128, epochs=2, callbacks=[Tick()], verbose=0)


if __name__ == "__main__":
    main()
