"""TM208: a training script that seeds some global random generators and draws from another."""


def test_numpy_noise_while_only_torch_is_seeded(lint):
    source = """
        import numpy as np
        import torch

        def train(model, loader, optimizer, args):
            torch.manual_seed(args.seed)
            for images, labels in loader:
                scale = np.random.uniform(0.8, 1.2)
                images = images * scale + torch.from_numpy(np.random.randn(*images.shape)).float()
                loss = model(images, labels)
                loss.backward()
                optimizer.step()
    """
    [(line, message)] = lint(source, "TM208")
    assert line == 8
    assert message.startswith("np.random.uniform() draws from NumPy's global generator")
    assert "seeds PyTorch's global generator (line 6)" in message
    assert "(1 more draw from it: line 9)" in message
    assert "np.random.seed(seed)" in message and "np.random.default_rng(seed)" in message


def test_python_shuffle_while_only_numpy_is_seeded(lines):
    source = """
        import random
        import numpy as np

        np.random.seed(7)
        order = list(range(len(samples)))
        for epoch in range(epochs):
            random.shuffle(order)
            for start in range(0, len(order), 32):
                batch = [samples[i] for i in order[start : start + 32]]
                loss = step_loss(model, batch)
                loss.backward()
                opt.step()
    """
    assert lines(source, "TM208") == [8]


def test_a_local_seed_helper_that_misses_one_generator(lines):
    source = """
        import random
        import numpy as np
        import torch

        def seed_all(seed):
            np.random.seed(seed)
            torch.manual_seed(seed)

        def flip(x):
            return x.flip(-1) if random.random() < 0.5 else x

        seed_all(0)
        for x, y in loader:
            loss = criterion(model(flip(x)), y)
            loss.backward()
            optimizer.step()
    """
    assert lines(source, "TM208") == [11]


def test_torch_draws_while_only_numpy_and_random_are_seeded(lint):
    source = """
        import random
        import numpy as np
        import torch
        from torch import nn
        from torch.utils.data import DataLoader

        random.seed(1)
        np.random.seed(1)
        head = nn.Linear(16, 4)
        nn.init.xavier_uniform_(head.weight)
        loader = DataLoader(dataset, batch_size=64, shuffle=True)
        for x, y in loader:
            loss = nn.functional.cross_entropy(head(x + 0.01 * torch.randn_like(x)), y)
            loss.backward()
            optimizer.step()
    """
    [(line, message)] = lint(source, "TM208")
    assert line == 11
    assert "PyTorch's global generator" in message and "line 12, 14" in message
    assert "seeds NumPy's global generator and Python's `random` module (line 8)" in message


def test_keras_script_seeding_tensorflow_but_shuffling_with_numpy(lines):
    source = """
        import numpy as np
        import tensorflow as tf
        from tensorflow import keras

        tf.random.set_seed(3)
        idx = np.arange(len(x_train))
        np.random.shuffle(idx)
        model = keras.Sequential([keras.layers.Dense(10)])
        model.compile("adam", "mse")
        model.fit(x_train[idx], y_train[idx], epochs=5)
    """
    assert lines(source, "TM208") == [8]


DRAWING_LOOP = """
import random
import numpy as np
import torch
for x, y in loader:
    x = x * np.random.uniform(0.9, 1.1) + torch.randn_like(x)
    x = x if random.random() < 0.5 else x.flip(-1)
    model(x, y).backward()
    optimizer.step()
"""


def test_every_generator_seeded_or_a_helper_that_seeds_them_all(lines):
    every_one = """
        import random
        import numpy as np
        import torch

        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        for x, y in loader:
            x = x * np.random.uniform(0.9, 1.1) + torch.randn_like(x)
            if random.random() < 0.5:
                x = x.flip(-1)
            model(x, y).backward()
            optimizer.step()
    """
    helpers = [
        "import lightning as L\nL.seed_everything(0)",
        "from transformers import set_seed\nset_seed(0)",
        "from accelerate.utils import set_seed\nset_seed(0)",
        "from project.utils import init_seeds\ninit_seeds(0)",
        "from tensorflow import keras\nkeras.utils.set_random_seed(0)",
    ]
    assert lines(every_one, "TM208") == []
    for helper in helpers:
        assert lines(helper + "\n" + DRAWING_LOOP, "TM208") == [], helper


def test_generators_made_with_their_own_seed_are_not_global_draws(lines):
    source = """
        import random
        import numpy as np
        import torch
        from torch.utils.data import DataLoader, random_split

        torch.manual_seed(0)
        rng = np.random.default_rng(0)
        picker = random.Random(0)
        g = torch.Generator().manual_seed(0)
        train_set, val_set = random_split(dataset, [0.9, 0.1], generator=g)
        loader = DataLoader(train_set, batch_size=32, shuffle=True, generator=g)
        for x, y in loader:
            x = x + torch.from_numpy(rng.normal(0, 0.1, x.shape)).float()
            if picker.random() < 0.5:
                x = x.flip(-1)
            model(x, y).backward()
            optimizer.step()
    """
    assert lines(source, "TM208") == []


def test_a_script_that_seeds_nothing_is_not_flagged(lines):
    # Not seeding at all is a choice the script does not pretend otherwise about.
    source = """
        import random
        import numpy as np
        import torch

        for x, y in loader:
            x = x * np.random.uniform(0.9, 1.1) + torch.randn_like(x)
            model(x, y).backward()
            optimizer.step()
    """
    assert lines(source, "TM208") == []


def test_reseeding_from_the_clock_is_not_a_seed(lines):
    source = """
        import random
        import torch

        random.seed()
        for x, y in loader:
            model(x + torch.randn_like(x), y).backward()
            optimizer.step()
    """
    assert lines(source, "TM208") == []


def test_files_that_do_not_train_are_not_flagged(lines):
    source = """
        import random
        import torch

        torch.manual_seed(0)

        def make_split(paths):
            random.shuffle(paths)
            return paths[:100], paths[100:]

        def jitter(x):
            return x + 0.1 * torch.randn_like(x)
    """
    assert lines(source, "TM208") == []


def test_draws_that_name_the_run_or_pick_a_port(lines):
    source = """
        import os
        import random
        import torch

        torch.manual_seed(0)
        os.environ["MASTER_PORT"] = str(random.randint(20000, 30000))
        run_name = f"run-{random.randint(0, 9999)}"
        for x, y in loader:
            model(x, y).backward()
            optimizer.step()
    """
    assert lines(source, "TM208") == []


DATASET = """
    import random
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Pairs(Dataset):
        def __init__(self, items):
            self.items = items

        def __len__(self):
            return len(self.items)

        def __getitem__(self, i):
            return self.items[i], self.items[random.randrange(len(self.items))]

    torch.manual_seed(0)
"""
TRAIN = """
    for a, b in loader:
        model(a, b).backward()
        optimizer.step()
"""


def test_a_dataset_drawing_in_workers_is_seeded_from_torch(lines):
    # Each DataLoader worker seeds `random` and NumPy from the loader's torch generator.
    source = DATASET + "    loader = DataLoader(Pairs(items), batch_size=8, num_workers=4)\n" + TRAIN
    assert lines(source, "TM208") == []
    spread = DATASET + "    loader = DataLoader(Pairs(items), **loader_kwargs)\n" + TRAIN
    assert lines(spread, "TM208") == []


def test_a_dataset_drawing_in_the_main_process_is_not(lines):
    source = DATASET + "    loader = DataLoader(Pairs(items), batch_size=8)\n" + TRAIN
    assert lines(source, "TM208") == [14]


def test_noqa_silences_the_finding(lines):
    source = """
        import numpy as np
        import torch

        torch.manual_seed(0)
        for x, y in loader:
            x = x * np.random.uniform(0.9, 1.1)  # noqa: TM208
            model(x, y).backward()
            optimizer.step()
    """
    assert lines(source, "TM208") == []
