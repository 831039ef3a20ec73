"""TM109: a cached DataLoader whose cache check ignores an argument it was built with."""

import textwrap

from trainmedic.lint import lint_source


def test_seed_004_sample_target_caches_the_first_batch_size(lint):
    source = """
        from data import get_image_dataloader

        class DatasetLoader:
            def __init__(self, dataset_name):
                self.dataset_name = dataset_name

            def sample_target(self, n, device="cpu"):
                if not hasattr(self, "_loader"):
                    self._loader = get_image_dataloader(self.dataset_name, batch_size=n)
                    self._iter = iter(self._loader)
                try:
                    x, _ = next(self._iter)
                except StopIteration:
                    self._iter = iter(self._loader)
                    x, _ = next(self._iter)
                return x.to(device)
    """
    [(line, message)] = lint(source, "TM109")
    assert line == 10
    assert message.startswith("get_image_dataloader() is built with n and cached in self._loader")
    assert "ignores n" in message and not message.endswith(".")


def test_none_checks_dict_caches_and_derived_arguments(lint):
    source = """
        import torch
        from torch.utils.data import DataLoader

        _loaders = {}
        _EVAL = None

        def get_loader(split, batch_size, workers=4):
            if split not in _loaders:
                _loaders[split] = DataLoader(
                    DATASETS[split], batch_size=batch_size, shuffle=split == "train", num_workers=workers
                )
            return _loaders[split]

        def eval_batches(bs):
            global _EVAL
            if _EVAL is None:
                _EVAL = iter(DataLoader(EVAL_SET, batch_size=bs))
            return _EVAL

        class Trainer:
            def loader(self, phase, scale=1):
                size = self.base_batch * scale
                if self._loader is None:
                    self._loader = torch.utils.data.DataLoader(self.sets[phase], batch_size=size)
                return self._loader
    """
    found = lint(source, "TM109")
    assert [line for line, _ in found] == [10, 18, 25]
    assert "built with batch_size, workers" in found[0][1]
    assert "ignores bs" in found[1][1]
    assert "built with phase, scale" in found[2][1]


def test_complete_checks_are_not_flagged(lines):
    source = """
        import functools
        from torch.utils.data import DataLoader

        class Data:
            def __init__(self, batch_size):
                self._loader = None
                if self._loader is None:
                    self._loader = DataLoader(self.ds, batch_size=batch_size)

            def sample_target(self, n):
                if not hasattr(self, "_loader") or self._batch_size != n:
                    self._batch_size = n
                    self._loader = DataLoader(self.ds, batch_size=n, drop_last=True)
                return self._loader

            def by_key(self, split, batch_size):
                key = (split, batch_size)
                if key not in self._cache:
                    self._cache[key] = DataLoader(self.sets[split], batch_size=batch_size)
                return self._cache[key]

            def fixed(self, device):
                if self._train is None:
                    self._train = DataLoader(self.ds, batch_size=self.batch_size)
                return self._train

            @functools.lru_cache(maxsize=None)
            def cached(self, batch_size):
                return DataLoader(self.ds, batch_size=batch_size)

            def template(self, folder):
                if self._env is None:
                    self._env = FileSystemLoader(folder)
                return self._env
    """
    assert lines(source, "TM109") == []


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        from torch.utils.data import DataLoader

        def loader(n):
            global L
            if L is None:
                L = DataLoader(DS, batch_size=n)  # noqa: TM109
            return L
    """)
    assert [v.code for v in lint_source(source) if v.code == "TM109"] == []


def test_early_return_caches(lines):
    source = """
        from torch.utils.data import DataLoader

        _loaders = {}

        def get_loader(split, data_dir, batch_size, workers):
            if split in _loaders:
                return _loaders[split]
            ds = ImageFolder(os.path.join(data_dir, split))
            _loaders[split] = DataLoader(ds, batch_size=batch_size, num_workers=workers)
            return _loaders[split]

        def get_keyed(split, batch_size):
            key = (split, batch_size)
            if key in _loaders:
                return _loaders[key]
            _loaders[key] = DataLoader(DATA[split], batch_size=batch_size)
            return _loaders[key]

        def train_batches(self, split):
            if self._train is None:
                self._train = get_train_loader(split)
            return self._train

        class Source:
            def batches(self, n):
                if self._it is not None and self._n == n:
                    return self._it
                self._n = n
                self._it = iter(DataLoader(self.ds, batch_size=n))
                return self._it
    """
    assert lines(source, "TM109") == [10, 22]
