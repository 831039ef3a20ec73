"""The order samples are served in: a pure function of (length, seed, epoch), the same on every tier.

Because the order never depends on where the data lives, moving a run from the ``ram`` tier on a
workstation to the ``stream`` tier on a bigger dataset, or resuming it from a checkpoint, replays
exactly the same batches. The permutation is computed on the host with NumPy's PCG64 from a
``SeedSequence([seed, epoch])`` (independent streams per epoch, documented as stable across
NumPy versions); the ``vram`` tier uploads it once per epoch, never per step.

``shuffle_block`` trades randomness for read locality on sources larger than RAM: blocks of that
many consecutive samples are shuffled, then the samples inside each block. With a block as long as
a storage chunk, the stream tier reads every chunk once, front to back within the chunk.
"""

from __future__ import annotations

import numpy as np


def epoch_order(length: int, *, shuffle: bool, seed: int, epoch: int, shuffle_block: int = 1) -> np.ndarray:
    """Sample indices (int64) in the order epoch ``epoch`` serves them."""
    if not shuffle:
        return np.arange(length, dtype=np.int64)
    rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([int(seed) & 0xFFFFFFFF, int(epoch)])))
    if shuffle_block <= 1:
        return rng.permutation(length).astype(np.int64, copy=False)
    n_blocks = -(-length // shuffle_block)
    order = []
    for block in rng.permutation(n_blocks):
        start = int(block) * shuffle_block
        stop = min(length, start + shuffle_block)
        order.append(start + rng.permutation(stop - start))
    return np.concatenate(order).astype(np.int64, copy=False)


def batch_count(length: int, batch_size: int, drop_last: bool) -> int:
    """Batches per epoch; the last short batch is kept unless ``drop_last``."""
    return length // batch_size if drop_last else -(-length // batch_size)


def batch_slices(length: int, batch_size: int, drop_last: bool, start_batch: int = 0):
    """(start, stop) positions in the epoch order of each batch from ``start_batch`` on."""
    for b in range(start_batch, batch_count(length, batch_size, drop_last)):
        yield b * batch_size, min(length, (b + 1) * batch_size)
