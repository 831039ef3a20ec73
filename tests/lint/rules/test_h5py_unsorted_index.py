"""TM104: h5py fancy indexing with a shuffled index that was never sorted."""

import textwrap

from trainmedic.lint import lint_source


def test_seed_000_generator_shuffles_then_reads_batches(lint):
    source = """
        import h5py
        import numpy as np

        class PUSCHDataset:
            def __init__(self, h5_path, batch_size=16):
                self.h5_path = h5_path
                self.batch_size = batch_size

            def _generator(self, indices):
                np.random.shuffle(indices)
                with h5py.File(self.h5_path, "r") as f:
                    for i in range(len(indices) // self.batch_size):
                        batch_indices = indices[i * self.batch_size:(i + 1) * self.batch_size]
                        y = f["y_received"][batch_indices]
                        bits = f["bits"][batch_indices, :]
                        yield y, bits
    """
    found = lint(source, "TM104")
    assert [line for line, _ in found] == [15, 16]
    message = found[0][1]
    assert "f['y_received']" in message and "batch_indices" in message
    assert "np.random.shuffle() at line 11" in message
    assert "np.unique(batch_indices, return_inverse=True)" in message and not message.endswith(".")


def test_keras_sequence_with_permutation_on_epoch_end(lines):
    source = """
        import h5py
        import numpy as np
        from tensorflow import keras

        class H5Batches(keras.utils.Sequence):
            def __init__(self, path, batch_size):
                self.file = h5py.File(path, "r")
                self.x = self.file["x"]
                self.batch_size = batch_size
                self.on_epoch_end()

            def __len__(self):
                return len(self.x) // self.batch_size

            def on_epoch_end(self):
                self.perm = np.random.permutation(len(self.x))

            def __getitem__(self, i):
                idx = self.perm[i * self.batch_size:(i + 1) * self.batch_size]
                return self.x[idx], self.file["y"][idx]
    """
    assert lines(source, "TM104") == [21, 21]


def test_random_draws_and_torch_randperm(lines):
    source = """
        import random
        import h5py
        import numpy as np
        import torch

        rng = np.random.default_rng(0)
        f = h5py.File("train.h5", "r")
        images = f["images"]
        labels = f.get("labels")

        def sample_batch(n, batch_size):
            idx = rng.choice(n, size=batch_size, replace=False)
            x = images[idx]
            picked = random.sample(range(n), batch_size)
            y = labels[picked]
            order = torch.randperm(n)[:batch_size].numpy()
            return x, y, images[order], images[np.random.randint(0, n, batch_size)]
    """
    assert lines(source, "TM104") == [14, 16, 18, 18]


def test_shuffle_at_the_end_of_the_epoch_reaches_the_next_one(lines):
    source = """
        import h5py
        import numpy as np

        with h5py.File("data.h5") as h5:
            dset = h5["x"]
            idx = np.arange(len(dset))
            for epoch in range(10):
                for start in range(0, len(idx), 64):
                    x = dset[idx[start:start + 64]]
                    train_step(x)
                np.random.shuffle(idx)
    """
    assert lines(source, "TM104") == [10]


def test_sorted_indices_are_not_flagged(lines):
    source = """
        import h5py
        import numpy as np

        with h5py.File("data.h5", "r") as f:
            perm = np.random.permutation(len(f["x"]))
            for i in range(0, len(perm), 32):
                a = np.sort(perm[i:i + 32])
                xa = f["x"][a]
                b = sorted(perm[i:i + 32])
                xb = f["x"][b]
                c = perm[i:i + 32]
                c.sort()
                xc = f["x"][c]
                d = perm[i:i + 32]
                d = d[np.argsort(d)]
                xd = f["x"][d]
                xe = f["x"][np.unique(perm[i:i + 32])]
    """
    assert lines(source, "TM104") == []


def test_near_misses_are_not_flagged(lines):
    source = """
        import h5py
        import numpy as np

        perm = np.random.permutation(1000)
        with h5py.File("data.h5", "r") as f:
            x = f["x"][:]
            y = f["y"][0:1000]
        batch = x[perm[:32]]
        one = y[perm[0]]

        with open("labels.json") as f:
            labels = f["labels"]
            first = labels[perm[:10]]

        def read(path, idx):
            with h5py.File(path) as h5:
                return h5["x"][idx], h5["x"][np.random.choice(1000)], h5["x"][10:20]
    """
    assert lines(source, "TM104") == []


def test_without_h5py_nothing_is_flagged(lines):
    source = """
        import numpy as np
        perm = np.random.permutation(100)
        data = np.load("x.npy")
        batch = data[perm[:32]]
    """
    assert lines(source, "TM104") == []


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        import h5py
        import numpy as np
        f = h5py.File("x.h5")
        perm = np.random.permutation(10)
        a = f["x"][perm]  # noqa: TM104
        b = f["x"][perm]
    """)
    assert [v.line for v in lint_source(source) if v.code == "TM104"] == [7]


def test_sorted_in_place_after_a_shuffle_and_scalar_reads_are_fine(lines):
    source = """
        import h5py
        import numpy as np

        def generator(h5path, batch_size=32, num=None):
            db = h5py.File(h5path, "r")
            indices = np.arange(num)
            while True:
                np.random.shuffle(indices)
                for i in range(0, len(indices), batch_size):
                    batch_indices = indices[i:i + batch_size]
                    batch_indices.sort()
                    yield db["sen2"][batch_indices, :, :, :], db["label"][batch_indices, :]

        def one_by_one(path, seed):
            f = h5py.File(path, "r")
            order = list(range(len(f["data"])))
            np.random.RandomState(seed).shuffle(order)
            for n, i in enumerate(order):
                yield f["data"][i]
    """
    assert lines(source, "TM104") == []


def test_torch_randperm_through_tolist(lines):
    source = """
        import h5py
        import numpy as np
        import torch

        class Reader:
            def __init__(self, path):
                self.h5 = h5py.File(path, "r")

            def batch(self, n):
                idx = torch.randperm(len(self.h5["x"]))[:n].tolist()
                return self.h5["x"][idx]

            def draw(self, n, seed):
                picks = torch.randint(len(self.h5["y"]), (n,)).numpy()
                one = self.h5["y"][torch.randint(0, n, (1,)).item()]
                order = list(range(n))
                np.random.RandomState(seed).shuffle(order)
                return self.h5["y"][picks], self.h5["y"][order[:8]], one
    """
    assert lines(source, "TM104") == [12, 19, 19]


def test_closure_over_a_file_opened_in_the_enclosing_function(lines):
    source = """
        import h5py
        import numpy as np

        def make_generator(path, batch_size):
            hdf5_file = h5py.File(path, "r")

            def get_epoch():
                perm = np.random.permutation(len(hdf5_file["data"]))
                for start in range(0, len(perm), batch_size):
                    yield hdf5_file["data"][perm[start:start + batch_size]]

            return get_epoch
    """
    assert lines(source, "TM104") == [11]
