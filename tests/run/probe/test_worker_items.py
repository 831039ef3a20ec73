"""A DataLoader worker's time, found by fetching items in the training process after the run."""

import importlib.util
import sys
import textwrap

from trainmedic.run.probe.frames import FrameClassifier
from trainmedic.run.probe.worker_items import profile_items

DATASETS = textwrap.dedent(
    """
    import numpy as np
    import torch
    from torch.utils.data import Dataset, IterableDataset


    def blur(img):
        out = img
        for _ in range(30):
            out = (out + np.roll(out, 1, 0) + np.roll(out, 1, 1)) / 3
        return torch.from_numpy(out)


    class Images(Dataset):
        def __init__(self, n, transform):
            self.images = np.random.default_rng(0).random((n, 64, 64))
            self.transform = transform

        def __len__(self):
            return len(self.images)

        def __getitem__(self, i):
            return self.transform(self.images[i]), i


    class Broken(Images):
        def __getitem__(self, i):
            raise FileNotFoundError("/data/shard-7.tar")


    class Stream(IterableDataset):
        def __iter__(self):
            yield from range(3)
    """
)


def _module(tmp_path):
    path = tmp_path / "datasets.py"
    path.write_text(DATASETS)
    spec = importlib.util.spec_from_file_location("user_datasets", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["user_datasets"] = module
    spec.loader.exec_module(module)
    return module


def test_the_users_transform_is_where_an_item_goes(tmp_path):
    user = _module(tmp_path)
    profile = profile_items(user.Images(100, user.blur), FrameClassifier(cwd=str(tmp_path)), 1, 32)
    assert profile.measured and profile.items == 16
    assert profile.where == "datasets.py:7" and profile.function == "blur"  # the def line, not __getitem__'s
    assert profile.share > 0.5
    assert profile.seconds_per_batch == profile.seconds_per_item * 32 > 0
    assert profile.num_workers == 1 and profile.cores >= 1


def test_a_library_transform_names_the_users_getitem_and_a_library_dataset_nothing(tmp_path):
    user = _module(tmp_path)
    classifier = FrameClassifier(cwd=str(tmp_path))
    # numpy's own transform: the innermost function of the user's is __getitem__, which calls it
    profile = profile_items(user.Images(100, user.np.fft.fft2), classifier, 2, 8)
    assert profile.where == "datasets.py:22" and profile.function == "Images.__getitem__"
    # torch's own dataset: no code of the user's to name, the item's cost still measured
    tensors = user.torch.utils.data.TensorDataset(user.torch.randn(100, 8), user.torch.arange(100))
    profile = profile_items(tensors, classifier, 2, 8)
    assert profile.measured and profile.where is None and profile.function is None


def test_datasets_that_cannot_be_fetched_here_leave_the_reason(tmp_path):
    user = _module(tmp_path)
    classifier = FrameClassifier(cwd=str(tmp_path))
    broken = profile_items(user.Broken(10, user.blur), classifier, 1, 4)
    assert not broken.measured
    assert broken.problem == "fetching an item here raised FileNotFoundError: /data/shard-7.tar"
    stream = profile_items(user.Stream(), classifier, 1, 4)
    assert not stream.measured and stream.problem.startswith("an iterable dataset")
