"""Small U-Net for segmenting multi-channel microscopy tiles stored in one HDF5 file.

HDF5 layout: images (N, H, W, C) uint8, masks (N, H, W, 1) uint8, split (N,) uint8 with 0=train 1=val.
"""
import argparse
import math
import os

import h5py
import numpy as np
import tensorflow as tf
from tensorflow import keras
from tensorflow.keras import layers

SMOOTH = 1.0


# ---------------------------------------------------------------------------
# metrics and losses

def dice_coef(y_true, y_pred):
    y_true = tf.cast(y_true, y_pred.dtype)
    inter = tf.reduce_sum(y_true * y_pred, axis=[1, 2, 3])
    denom = tf.reduce_sum(y_true, axis=[1, 2, 3]) + tf.reduce_sum(y_pred, axis=[1, 2, 3])
    return tf.reduce_mean((2.0 * inter + SMOOTH) / (denom + SMOOTH))


def iou_score(y_true, y_pred, threshold=0.5):
    y_true = tf.cast(y_true > 0.5, tf.float32)
    y_pred = tf.cast(y_pred > threshold, tf.float32)
    inter = tf.reduce_sum(y_true * y_pred, axis=[1, 2, 3])
    union = tf.reduce_sum(tf.maximum(y_true, y_pred), axis=[1, 2, 3])
    return tf.reduce_mean((inter + SMOOTH) / (union + SMOOTH))


def bce_dice_loss(y_true, y_pred):
    bce = keras.losses.binary_crossentropy(y_true, y_pred)
    return tf.reduce_mean(bce) + (1.0 - dice_coef(y_true, y_pred))


# ---------------------------------------------------------------------------
# data

class H5TileSequence(keras.utils.Sequence):
    def __init__(self, path, indices, batch_size=16, shuffle=True, augment=False, **kwargs):
        super().__init__(**kwargs)
        self.path = path
        self.indices = np.asarray(indices)
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.augment = augment
        self._h5 = None
        self.on_epoch_end()

    def __len__(self):
        return math.ceil(len(self.indices) / self.batch_size)

    def on_epoch_end(self):
        if self.shuffle:
            np.random.shuffle(self.indices)

    def __getitem__(self, i):
        if self._h5 is None:
            # opened on first use so that every worker process gets its own handle
            self._h5 = h5py.File(self.path, "r")
        # point selection in h5py needs increasing indices; order inside a batch does not matter
        idx = np.sort(self.indices[i * self.batch_size:(i + 1) * self.batch_size])
        x = self._h5["images"][idx].astype("float32") / 255.0
        y = self._h5["masks"][idx].astype("float32")
        if self.augment:
            if np.random.rand() < 0.5:
                x, y = x[:, :, ::-1], y[:, :, ::-1]
            if np.random.rand() < 0.5:
                x, y = x[:, ::-1], y[:, ::-1]
        return x, {"mask": y, "has_fg": y.max(axis=(1, 2, 3))}


def h5_batches(path, batch_size):
    """Endless generator for the quick-look mode; reads straight from disk."""
    with h5py.File(path, "r") as f:
        n = f["images"].shape[0]
    while True:
        order = np.random.permutation(n)
        for start in range(0, n - batch_size + 1, batch_size):
            idx = order[start:start + batch_size]
            with h5py.File(path, "r") as f:  # expect: TM105
                x, y = f["images"][idx], f["masks"][idx]  # expect: TM104
            x = x.astype("float32") / 255.0
            y = y.astype("float32")
            yield x, {"mask": y, "has_fg": y.max(axis=(1, 2, 3))}


class PreviewCallback(keras.callbacks.Callback):
    """Writes a few random tiles with predicted masks to TensorBoard after every epoch."""

    def __init__(self, path, candidates, log_dir, n=6):
        super().__init__()
        self.path = path
        self.idx = np.random.choice(candidates, size=n, replace=False)
        self.writer = tf.summary.create_file_writer(os.path.join(log_dir, "preview"))

    def on_epoch_end(self, epoch, logs=None):
        with h5py.File(self.path, "r") as f:
            x = f["images"][self.idx].astype("float32") / 255.0  # expect: TM104
        pred = self.model.predict(x, verbose=0)["mask"]
        with self.writer.as_default():
            tf.summary.image("tiles", x[..., :3], step=epoch, max_outputs=len(x))
            tf.summary.image("pred_mask", pred, step=epoch, max_outputs=len(x))


def split_indices(path):
    with h5py.File(path, "r") as f:
        split = f["split"][:]
    return np.flatnonzero(split == 0), np.flatnonzero(split == 1)


# ---------------------------------------------------------------------------
# model

class Standardize(layers.Layer):
    """Zero mean, unit variance per image and channel."""

    def call(self, x):
        mean = tf.reduce_mean(x, axis=[1, 2], keepdims=True)
        std = tf.math.reduce_std(x, axis=[1, 2], keepdims=True)
        return (x - mean) / (std + 1e-6)


def conv_block(x, filters, name, dropout=0.0):
    for j in range(2):
        x = layers.Conv2D(filters, 3, padding="same", use_bias=False, name=f"{name}_conv{j}")(x)
        x = layers.BatchNormalization(name=f"{name}_bn{j}")(x)
        x = layers.Activation("relu", name=f"{name}_relu{j}")(x)
    if dropout:
        x = layers.SpatialDropout2D(dropout, name=f"{name}_drop")(x)
    return x


def build_unet(input_shape=(256, 256, 3), base=32, depth=4, stem_filters=8):
    inputs = keras.Input(shape=input_shape, name="image")
    x = Standardize(name="standardize")(inputs)

    # every channel is a different stain, so each gets its own small stem first
    stems = []
    for c in range(input_shape[-1]):
        ch = layers.Lambda(lambda t: t[..., c:c + 1], name=f"channel_{c}")(x)  # expect: TM101
        stems.append(layers.Conv2D(stem_filters, 3, padding="same", activation="relu", name=f"stem_{c}")(ch))
    x = tf.concat(stems, axis=-1)  # expect: TM103

    skips = []
    for level in range(depth):
        x = conv_block(x, base * 2 ** level, f"enc{level}")
        skips.append(x)
        x = layers.MaxPooling2D(name=f"pool{level}")(x)
    bottleneck = conv_block(x, base * 2 ** depth, "bottleneck", dropout=0.2)

    # auxiliary head: does the tile contain any foreground at all?
    pooled = tf.reduce_max(bottleneck, axis=[1, 2])  # expect: TM103
    aux = layers.Dense(bottleneck.shape[-1] // 4, activation="relu", name="aux_fc")(pooled)
    has_fg = layers.Dense(1, activation="sigmoid", name="has_fg")(aux)

    x = bottleneck
    for level in reversed(range(depth)):
        x = layers.Conv2DTranspose(base * 2 ** level, 2, strides=2, padding="same", name=f"up{level}")(x)
        # deeper skips are down-weighted a little; the default argument pins the level
        skip = layers.Lambda(
            lambda s, lv=level: s * (0.5 ** (depth - 1 - lv)), name=f"skip_scale{level}"
        )(skips[level])
        x = layers.Concatenate(name=f"cat{level}")([x, skip])
        x = conv_block(x, base * 2 ** level, f"dec{level}")

    mask = layers.Conv2D(1, 1, activation="sigmoid", name="mask_logits")(x)
    mask = mask[:, :tf.shape(inputs)[1], :tf.shape(inputs)[2], :]  # expect: TM103
    mask = layers.Activation("linear", name="mask")(mask)
    return keras.Model(inputs, {"mask": mask, "has_fg": has_fg}, name="unet")


def threshold_metrics(thresholds=(0.3, 0.5, 0.7)):
    fns = []
    for t in thresholds:
        fn = lambda y_true, y_pred: iou_score(y_true, y_pred, threshold=t)  # expect: TM101
        fn.__name__ = f"iou_{int(t * 100)}"
        fns.append(fn)
    return fns


# ---------------------------------------------------------------------------
# training

def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--out", default="runs/unet")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--quick", action="store_true", help="stream batches with the plain generator")
    args = p.parse_args()
    os.makedirs(args.out, exist_ok=True)

    with h5py.File(args.data, "r") as f:
        input_shape = f["images"].shape[1:]
    train_idx, val_idx = split_indices(args.data)
    train_seq = H5TileSequence(args.data, train_idx, args.batch_size, shuffle=True, augment=True,
                               workers=4, use_multiprocessing=True)
    val_seq = H5TileSequence(args.data, val_idx, args.batch_size, shuffle=False)

    model = build_unet(input_shape)
    model.compile(
        optimizer=keras.optimizers.Adam(args.lr),
        loss={"mask": bce_dice_loss, "has_fg": "binary_crossentropy"},
        loss_weights={"mask": 1.0, "has_fg": 0.2},
        metrics={"mask": [dice_coef, *threshold_metrics()], "has_fg": ["accuracy"]},
    )
    model.summary(line_length=120)

    callbacks = [
        keras.callbacks.EarlyStopping(  # expect: TM102
            monitor="val_mask_dice_coef", patience=15, restore_best_weights=True
        ),
        keras.callbacks.ModelCheckpoint(
            os.path.join(args.out, "best.keras"),
            monitor="val_mask_dice_coef",
            mode="max",
            save_best_only=True,
        ),
        keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=5, min_lr=1e-6),
        keras.callbacks.TensorBoard(log_dir=os.path.join(args.out, "logs"), update_freq="epoch"),
        keras.callbacks.CSVLogger(os.path.join(args.out, "history.csv")),
        PreviewCallback(args.data, val_idx, os.path.join(args.out, "logs")),
    ]

    if args.quick:
        steps = len(train_idx) // args.batch_size
        model.fit(h5_batches(args.data, args.batch_size), steps_per_epoch=steps, epochs=5,
                  validation_data=val_seq, callbacks=callbacks[3:5])
        return

    history = model.fit(train_seq, validation_data=val_seq, epochs=args.epochs, callbacks=callbacks)
    best = max(history.history["val_mask_dice_coef"])
    print(f"best val dice: {best:.4f}")

    # fine-tune with the encoder frozen, in two stages with their own step schedules
    for layer in model.layers:
        if layer.name.startswith(("enc", "stem", "channel")):
            layer.trainable = False
    model.compile(
        optimizer=keras.optimizers.Adam(args.lr * 0.1),
        loss={"mask": bce_dice_loss, "has_fg": "binary_crossentropy"},
        metrics={"mask": [dice_coef, iou_score], "has_fg": ["accuracy"]},
    )
    finetune_callbacks = [
        keras.callbacks.ReduceLROnPlateau(  # expect: TM102
            monitor="val_mask_iou_score", factor=0.2, patience=3
        ),
        keras.callbacks.EarlyStopping(monitor="val_has_fg_accuracy", patience=8),
        keras.callbacks.ModelCheckpoint(os.path.join(args.out, "finetuned.weights.h5"),
                                        monitor="val_loss", save_weights_only=True, save_best_only=True),
    ]
    for stage, (n_epochs, base_lr) in enumerate([(20, 1e-4), (10, 2e-5)]):
        sched = keras.callbacks.LearningRateScheduler(lambda e: base_lr * 0.5 ** (e // 5))
        model.fit(train_seq, validation_data=val_seq, epochs=n_epochs, callbacks=[sched, *finetune_callbacks])
        model.save(os.path.join(args.out, f"finetune_stage{stage}.keras"))


if __name__ == "__main__":
    main()
