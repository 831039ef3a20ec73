"""TM108: one host-to-device copy per sample, and the per-batch / per-field copies that are fine."""

import textwrap

from trainmedic.lint import lint_source


def test_transfers_in_a_dataset_getitem_are_flagged(lint):
    source = """
        import torch
        from torch.utils.data import Dataset

        class SignalDataset(Dataset):
            def __init__(self, signals, labels, device="cuda"):
                self.signals, self.labels, self.device = signals, labels, device

            def __len__(self):
                return len(self.signals)

            def __getitem__(self, idx):
                x = torch.tensor(self.signals[idx], dtype=torch.float32, device=self.device)
                y = torch.as_tensor(self.labels[idx]).cuda()
                mask = torch.ones(x.shape[-1]).to(self.device, non_blocking=True)
                return x, y, mask
    """
    found = lint(source, "TM108")
    assert [line for line, _ in found] == [13, 14, 15]
    message = found[1][1]
    assert message.startswith("torch.as_tensor(self.labels[idx]).cuda() inside SignalDataset.__getitem__")
    assert "pin_memory=True" in message and not message.endswith(".")


def test_seed_001_samples_generated_and_moved_one_at_a_time(lint):
    source = """
        import numpy as np
        import torch

        def make_batch(params, batch_size, device):
            signals = []
            for i in range(batch_size):
                sig = generate_iq_sample(params[i])
                signals.append(torch.from_numpy(sig).to(device))
            return torch.stack(signals)

        def embed_all(dataset, encoder, device):
            out = []
            for sample in dataset:
                out.append(encoder(sample["image"].unsqueeze(0).to(device)))
            return out

        def collate_to_gpu(batch):
            images = [item[0].to("cuda") for item in batch]
            return torch.stack(images)

        def per_row(x, device):
            rows = []
            for j in range(x.size(0)):
                rows.append(torch.tensor(x[j].tolist(), device=device))
            return rows
    """
    found = lint(source, "TM108")
    assert [line for line, _ in found] == [9, 15, 19, 25]
    assert "in the loop over `range(batch_size)` (line 7)" in found[0][1]


def test_samples_made_by_a_function_and_moved_name_the_vectorize_fix(lint):
    # The loop's count is a plain `n`, `N` or the length of a parameter list: what says "one
    # sample per iteration" is the user's function making each from the loop variable.
    source = """
        import torch

        def to_gpu_samples(make_np, n, device):
            xs = []
            for i in range(n):
                xs.append(torch.from_numpy(make_np(i)).to(device))
            return xs

        def make_batch(params, batch_size, device):
            signals = []
            for i in range(batch_size):
                sig = generate_iq_sample(params[i])
                signals.append(torch.from_numpy(sig).to(device))
            return torch.stack(signals)

        gpu = [torch.as_tensor(synth(f, s)).cuda() for f, s in zip(freqs, snrs)]
    """
    found = lint(source, "TM108")
    assert [line for line, _ in found] == [7, 14, 17]
    assert found[0][1].startswith(
        "torch.from_numpy(make_np(i)).to(device) in the loop over `range(n)` (line 6) copies one sample at a "
        "time to the GPU; build the batch on the host (torch.stack / np.stack) and move it with one call, or "
        "make the whole batch on the device: `gen = batch.vectorize(make_np)` (trainmedic.batch) makes it in "
        "one call per 256 samples"
    )
    assert "`gen = batch.vectorize(generate_iq_sample)`" in found[1][1]
    assert "in the comprehension over `zip(freqs, snrs)` (line 17)" in found[2][1]
    assert "`gen = batch.vectorize(synth)`" in found[2][1]


def test_made_and_moved_but_not_samples(lines):
    source = """
        import torch

        models = []
        for m in ensemble:
            models.append(build(m).to(device))
        nets = [make_net(cfg).cuda() for cfg in specs]
        for epoch in range(num_epochs):
            history.append(summarize(epoch).to(device))
        copies = {}
        for attr in state:
            value = getattr(owner, attr)
            copies[attr] = clone(value).to(value.device)
        for i in range(n):
            out.append(model(encode(i).to(device)))
    """
    assert lines(source, "TM108") == []


def test_rows_of_a_loaded_array(lines):
    source = """
        import numpy as np
        import torch

        def load_points(path, device):
            arr = np.load(path)["points"].astype(np.float32)
            points = []
            for row in arr:
                points.append(torch.from_numpy(row).to(device))
            return torch.stack(points)
    """
    assert lines(source, "TM108") == [9]


def test_one_transfer_per_batch_and_per_field_is_not_flagged(lines):
    source = """
        import torch
        device = torch.device("cuda")
        model = model.to(device)
        for epoch in range(epochs):
            for batch in train_loader:
                batch = {k: v.to(device) for k, v in batch.items()}
                loss = model(**batch).loss
                loss.backward()
                optimizer.step()
            for x, y in train_data:
                x, y = x.to(device), y.to(device)
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
        for k, v in extra.items():
            extra[k] = v.to(device)
    """
    assert lines(source, "TM108") == []


def test_a_loop_else_block_runs_once_and_is_not_flagged(lines):
    source = """
        import torch

        def make_batch(params, batch_size, device):
            signals = []
            for i in range(batch_size):
                sig = generate_iq_sample(params[i])
                signals.append(torch.from_numpy(sig).to(device))
            else:
                # runs once, after the last sample: a reference copy for the plot
                reference = torch.from_numpy(sig).to(device)
            return torch.stack(signals), reference
    """
    assert lines(source, "TM108") == [8]


def test_models_fixed_tensors_and_loop_invariant_values_are_not_flagged(lines):
    source = """
        import torch
        for model in ensemble:
            model.to(device)
        for name, net in nets.items():
            nets[name] = net.cuda()
        for t in (mean, std, anchors):
            t.to(device)
        for i in range(batch_size):
            template = base_template.to(device)
        for t in torch.linspace(0, 1, n_steps):
            x = x + dt * velocity(x, torch.tensor(t, device=device))
        for i in range(n_samples):
            x = x.to(torch.float16)
        mean_gpu = [m.to(device) for m in (mean, std)]
    """
    assert lines(source, "TM108") == []


def test_cpu_targets_gpu_resident_datasets_and_other_containers_are_not_flagged(lines):
    source = """
        import torch
        from torch.utils.data import Dataset

        class CpuDataset(Dataset):
            def __getitem__(self, idx):
                x = torch.tensor(self.data[idx], device="cpu")
                return x.to("cpu"), self.labels[idx].to(torch.device("cpu"))

        class GPUCachedDataset(Dataset):
            def __init__(self, features, labels, device):
                self.features = torch.as_tensor(features).to(device)
                self.labels = torch.tensor(labels, device=device)
                self.device = device

            def __getitem__(self, idx):
                x = self.features[idx]
                return x.to(self.device), self.labels[idx].to(self.device)

        class Batch:
            def __getitem__(self, key):
                return self.fields[key].to(self.device)
    """
    assert lines(source, "TM108") == []


def test_noqa_silences_the_line():
    source = textwrap.dedent("""
        def collate(batch):
            a = [s.to(device) for s in batch]  # noqa: TM108
            b = [s.to(device) for s in batch]  # noqa: E501
            return a, b
    """)
    assert [v.line for v in lint_source(source) if v.code == "TM108"] == [4]
