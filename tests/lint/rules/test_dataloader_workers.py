"""TM110: DataLoader over a Dataset that reads files or a database, without (persistent) workers."""

import textwrap

from trainmedic.lint import lint_source

IMAGE_DATASET = """
    import os
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader, Dataset, Subset, TensorDataset

    class CsvImageDataset(Dataset):
        def __init__(self, root, rows, transform=None):
            self.root, self.rows, self.transform = root, rows, transform

        def __len__(self):
            return len(self.rows)

        def _load(self, path):
            return Image.open(os.path.join(self.root, path)).convert("RGB")

        def __getitem__(self, idx):
            path, label = self.rows[idx]
            return self.transform(self._load(path)), label
"""


def test_image_dataset_without_workers(lint):
    source = (
        IMAGE_DATASET
        + """
    train_set = CsvImageDataset("data", rows)
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    val_loader = DataLoader(Subset(CsvImageDataset("data", val_rows), range(1000)), batch_size=64, num_workers=0)
    """
    )
    found = lint(source, "TM110")
    assert [line for line, _ in found] == [22, 23]
    assert found[0][1].startswith(
        "DataLoader over CsvImageDataset without num_workers: CsvImageDataset.__getitem__"
    )
    assert "Image.open() at line 15" in found[0][1] and "with num_workers=0" in found[1][1]
    assert not found[0][1].endswith(".")


def test_database_dataset_mentions_seed_003_pickling(lint):
    source = """
        import torch
        from torch.utils.data import DataLoader, Dataset

        class TriangulationDataset(Dataset):
            def __init__(self, session, ids):
                self.session, self.ids = session, ids

            def __len__(self):
                return len(self.ids)

            def __getitem__(self, i):
                row = self.session.execute(QUERY, {"id": self.ids[i]}).fetchone()
                return torch.tensor(row.features), torch.tensor(row.position)

        loader = DataLoader(TriangulationDataset(session, ids), batch_size=128, shuffle=True, num_workers=0)
    """
    [(line, message)] = lint(source, "TM110")
    assert line == 16
    assert "reads a database (self.session.execute() at line 13)" in message
    assert "open the connection lazily in each worker" in message and "cannot be pickled" in message
    assert "seed" not in message.lower()


def test_workers_recreated_every_epoch(lint):
    source = (
        IMAGE_DATASET
        + """
    def train_one_epoch(model, loader, optimizer):
        for x, y in loader:
            loss = model(x, y)
            loss.backward()
            optimizer.step()

    def main(args):
        ds = CsvImageDataset(args.root, rows)
        train_loader = DataLoader(ds, batch_size=64, shuffle=True, num_workers=args.workers, pin_memory=True)
        val_loader = DataLoader(ds, batch_size=64, num_workers=4)
        for epoch in range(args.epochs):
            train_one_epoch(model, train_loader, optimizer)
            for x, y in val_loader:
                evaluate(x, y)
    """
    )
    found = lint(source, "TM110")
    assert [line for line, _ in found] == [29, 30]
    assert "num_workers=args.workers) is iterated every epoch (line 32)" in found[0][1]
    assert "(persistent_workers=args.workers > 0)" in found[0][1]
    assert "(line 33) without persistent_workers=True" in found[1][1]
    assert "worker processes are started again each epoch; pass persistent_workers=True" in found[1][1]


def test_loader_attribute_iterated_by_an_epoch_method(lines):
    source = (
        IMAGE_DATASET
        + """
    class Trainer:
        def __init__(self, rows):
            self.train_loader = DataLoader(CsvImageDataset("d", rows), batch_size=32, num_workers=8)

        def train_epoch(self):
            for batch in self.train_loader:
                self.step(batch)

        def fit(self, epochs):
            for epoch in range(epochs):
                self.train_epoch()
    """
    )
    assert lines(source, "TM110") == [23]


def test_in_memory_datasets_and_good_loaders_are_fine(lines):
    source = (
        IMAGE_DATASET
        + """
    import numpy as np

    class ArrayDataset(Dataset):
        def __init__(self, path):
            self.x = np.load(path)

        def __len__(self):
            return len(self.x)

        def __getitem__(self, i):
            return self.x[i]

    a = DataLoader(ArrayDataset("x.npy"), batch_size=256, shuffle=True)
    b = DataLoader(TensorDataset(torch.zeros(10, 3)), batch_size=2)
    c = DataLoader(CsvImageDataset("d", rows), batch_size=64, num_workers=8, persistent_workers=True)
    d = DataLoader(CsvImageDataset("d", rows), batch_size=64, num_workers=8)
    for x in d:
        pass
    e = DataLoader(CsvImageDataset("d", rows), **loader_kwargs)
    for epoch in range(3):
        f = DataLoader(CsvImageDataset("d", rows), batch_size=64, num_workers=4)
        for x in f:
            pass
    g = DataLoader(build_dataset(cfg), batch_size=64)

    def make_loader(dataset, batch_size):
        return DataLoader(dataset, batch_size=batch_size)

    dataset = CsvImageDataset("d", rows)
    """
    )
    assert lines(source, "TM110") == []


def test_noqa_silences_the_line():
    source = textwrap.dedent(
        IMAGE_DATASET
        + """
    a = DataLoader(CsvImageDataset("d", rows))  # noqa: TM110
    b = DataLoader(CsvImageDataset("d", rows))
    """
    )
    assert [v.line for v in lint_source(source) if v.code == "TM110"] == [22]


def test_lightning_val_loader_over_an_image_folder_split(lint):
    source = """
        import lightning as L
        import torch
        from torch.utils.data import DataLoader, random_split
        from torchvision import datasets

        class ImageData(L.LightningDataModule):
            def setup(self, stage=None):
                full = datasets.ImageFolder(self.hparams.root, transform=self.tf)
                self.train_ds, self.val_ds = random_split(full, [0.9, 0.1])
                self.test_ds = datasets.ImageFolder(self.hparams.test_root)

            def train_dataloader(self):
                return DataLoader(self.train_ds, batch_size=64, num_workers=self.hparams.workers,
                                  persistent_workers=True)

            def val_dataloader(self):
                return DataLoader(self.val_ds, batch_size=128, num_workers=self.hparams.workers)

            def predict_dataloader(self):
                return DataLoader(self.test_ds, batch_size=256, num_workers=self.hparams.workers)

        mnist = DataLoader(datasets.MNIST("data", download=True), batch_size=64)
    """
    [(line, message)] = lint(source, "TM110")
    assert line == 18
    assert "over ImageFolder" in message and "by Lightning, from val_dataloader()" in message


def test_hdf5_handles_module_loaders_and_lazy_full_loads(lint):
    source = """
        import h5py
        import numpy as np
        import torch
        from torch.utils.data import DataLoader, Dataset

        class H5Data(Dataset):
            def __init__(self, path):
                self.path, self.h5 = path, None

            def __len__(self):
                return 1000

            def __getitem__(self, i):
                if self.h5 is None:
                    self.h5 = h5py.File(self.path, "r")
                return self.h5["x"][i]

        class LazyArray(Dataset):
            def __init__(self, path):
                self.path, self.data = path, None

            def __len__(self):
                return 1000

            def __getitem__(self, i):
                if self.data is None:
                    self.data = np.load(self.path)
                return self.data[i]

        train_loader = DataLoader(H5Data("x.h5"), batch_size=32, num_workers=4)
        array_loader = DataLoader(LazyArray("x.npy"), batch_size=32)

        def train(epoch):
            for x in train_loader:
                step(x)

        for epoch in range(10):
            train(epoch)
    """
    [(line, message)] = lint(source, "TM110")
    assert line == 31
    assert message.startswith("DataLoader over H5Data (num_workers=4) is iterated every epoch")
    assert "line 35, in train() called from the loop at line 39" in message
    assert "and each reopens its files or connections" in message


def test_a_parameter_with_the_loaders_name_is_another_loader(lines):
    source = (
        IMAGE_DATASET
        + """
    loader = DataLoader(CsvImageDataset("d", rows), batch_size=64, num_workers=4)
    first = next(iter(loader))

    def evaluate(model, loader):
        for x, y in loader:
            model(x)

    for epoch in range(3):
        evaluate(model, val_loader)
    """
    )
    assert lines(source, "TM110") == []


def test_a_dataset_chosen_in_branches_counts_when_any_branch_reads_files(lines):
    # Reduced from an ImageNet example: FakeData behind --dummy, ImageFolder by default.
    source = """
        import torch
        from torchvision import datasets

        if args.dummy:
            ds = datasets.FakeData(1000, (3, 224, 224), 10)
        else:
            ds = datasets.ImageFolder(args.data)
        loader = torch.utils.data.DataLoader(ds, batch_size=64, num_workers=4)
        for epoch in range(args.epochs):
            for x, y in loader:
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
    """
    assert lines(source, "TM110") == [9]
