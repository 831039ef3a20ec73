"""TM113: a loop that makes one sample per iteration on the GPU (seed 001's generator), and the
loops that are fine: training and evaluation loops, chunks, files, models, CPU-only code."""

import textwrap

from trainmedic.lint import lint_source

# -- the per-sample generation loops ----------------------------------------------------------


def test_seed_001_generator_at_module_level(lint):
    source = """
        import math
        import torch

        device = torch.device("cuda")
        n_samples = 10_000
        samples = []
        for i in range(n_samples):
            phase = torch.rand((), device=device) * 2 * math.pi
            x = torch.randn(7, 1024, dtype=torch.cfloat, device=device)
            x = x * torch.exp(1j * phase)
            samples.append(x.cpu())
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 8
    assert message.startswith(
        "the loop over `range(n_samples)` (line 8) makes one sample per iteration on the GPU "
        "(`torch.rand((), device=device)` at line 9 and `x.cpu()` at line 12): every sample pays its own "
        "kernel launches and a copy between host and GPU"
    )
    assert "made 70,000 single-sample GPU calls and kept the GPU 28 % busy" in message
    assert "move the loop body into a function of one sample (`def make_sample(i, ...)`" in message
    assert "`gen = batch.vectorize(make_sample)`" in message and "copied back once" in message
    assert "`batch.generate(make_sample, params, out=...)`" in message
    assert "(typically 8-10x)" in message and "seed" not in message.lower()
    assert not message.endswith(".")


def test_numpy_result_written_into_a_preallocated_array(lint):
    source = """
        import numpy as np
        import torch
        from iq import generate_iq_sample

        def build_dataset(params, n, device):
            out = np.zeros((n, 7, 1024), dtype=np.complex64)
            for i in range(n):
                out[i] = generate_iq_sample(params[i], device=device).cpu().numpy()
            return out
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 8
    assert "the loop over `range(n)` (line 8)" in message
    assert "`generate_iq_sample(params[i], device=device).cpu()` at line 9" in message
    assert (
        "batch generate_iq_sample() with trainmedic.batch: `gen = batch.vectorize(generate_iq_sample)`"
        in message
    )


def test_a_while_loop_with_a_counter(lint):
    source = """
        import torch

        def synth(num, dev):
            signals = []
            i = 0
            while i < num:
                t = torch.arange(1024, device=dev) / 2e5
                sig = torch.sin(2 * torch.pi * 1e3 * (i + 1) * t) + 0.1 * torch.randn(1024, device=dev)
                signals.append(sig.cpu().numpy())
                i += 1
            return signals
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 7
    assert message.startswith("the `while i < num` loop (line 7) makes one sample per iteration on the GPU")
    assert "`gen = batch.vectorize(make_sample)`" in message


def test_a_list_comprehension_of_a_function_from_another_module(lint):
    source = """
        import torch
        from gen import make

        def dataset(n):
            return [make(i).cpu() for i in range(n)]
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 6
    assert "the comprehension over `range(n)` (line 6)" in message and "`make(i).cpu()` at line 6" in message
    assert "`gen = batch.vectorize(make)`" in message and "`batch.generate(make, params, out=...)`" in message


def test_a_local_helper_that_makes_the_sample_on_the_gpu(lint):
    source = """
        import math
        import torch

        def make_sample(i, freqs, device):
            t = torch.arange(1024, device=device) / 2e5
            carrier = torch.exp(2j * math.pi * freqs[i] * t)
            noise = torch.randn(1024, dtype=torch.cfloat, device=device)
            return carrier + 0.1 * noise

        def build(freqs, device="cuda"):
            data = []
            for i in range(len(freqs)):
                data.append(make_sample(i, freqs, device))
            return torch.stack(data)
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 13
    assert (
        "(`make_sample(i, freqs, device)` at line 14, whose `torch.arange(1024, device=device)` runs on the GPU)"
        in message
    )
    assert "every sample pays its own kernel launches, too small" in message  # no copy: none was written
    assert "`gen = batch.vectorize(make_sample)`" in message and "copied back once" not in message


def test_small_ops_written_into_a_preallocated_device_tensor(lint):
    source = """
        import torch

        def render(freqs, device):
            n = len(freqs)
            t = torch.linspace(0, 1, 1024, device=device)
            out = torch.empty(n, 1024, device=device)
            for i in range(n):
                noise = torch.randn(1024, device=device)
                out[i] = torch.sin(2 * torch.pi * freqs[i] * t) + 0.05 * noise
            return out
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 8
    assert "(`torch.randn(1024, device=device)` at line 9)" in message
    assert "`gen = batch.vectorize(make_sample)`" in message


def test_an_item_per_generated_sample(lint):
    source = """
        import torch

        device = "cuda"
        powers = []
        for k in range(num_samples):
            x = torch.randn(4096, device=device)
            powers.append((x.abs() ** 2).mean().item())
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 6
    assert "its own kernel launches and a wait for the GPU (`.item()`)" in message


def test_moved_to_the_gpu_worked_on_and_copied_back(lint):
    source = """
        import numpy as np
        import torch
        from rf import generate_iq_sample

        iq = []
        for freq, snr in zip(freqs, snrs):
            sig = generate_iq_sample(freq, snr).to("cuda")
            sig = sig * torch.exp(1j * torch.rand(1, device="cuda"))
            iq.append(sig.cpu().numpy())
        iq = np.stack(iq)
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 7
    assert "the loop over `zip(freqs, snrs)` (line 7)" in message
    assert "(`generate_iq_sample(freq, snr).to('cuda')` at line 8 and `sig.cpu()` at line 10)" in message
    # The loop body adds its own GPU ops to generate_iq_sample's: the body is what to batch.
    assert "`gen = batch.vectorize(make_sample)`" in message


def test_seed_001_batched_method_still_makes_one_sample_per_iteration(lint):
    # Seed 001's own "batch" method preallocated the batch on the GPU, then filled it one sample
    # at a time through per-sample helpers: the launches stayed per sample.
    source = """
        import torch

        class IQGenerator:
            def __init__(self, device="cuda", num_samples=1024):
                self.device = device
                self.num_samples = num_samples

            def _clean_signal(self, freq):
                t = torch.arange(self.num_samples, device=self.device) / 2e5
                return torch.exp(2j * torch.pi * freq * t)

            def _add_awgn(self, signal, snr_db):
                noise = torch.randn(self.num_samples, dtype=torch.cfloat, device=self.device)
                return signal + noise * 10 ** (-snr_db / 20)

            def generate_iq_batch(self, batch_params):
                shape = (len(batch_params), self.num_samples)
                batch_signals = torch.zeros(shape, dtype=torch.cfloat, device=self.device)
                for i, params in enumerate(batch_params):
                    signal = self._clean_signal(params["freq"])
                    signal = self._add_awgn(signal, params["snr_db"])
                    batch_signals[i] = signal
                return batch_signals.cpu().numpy()
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 20
    assert "the loop over `enumerate(batch_params)` (line 20)" in message
    assert "whose `torch.arange(self.num_samples, device=self.device)` runs on the GPU" in message
    assert "`gen = batch.vectorize(make_sample)`" in message


def test_host_noise_moved_to_the_gpu_and_back_per_sample(lint):
    source = """
        import numpy as np
        import torch
        from tqdm import tqdm

        N = 5000
        data = np.empty((N, 2, 1024), dtype=np.float32)
        for idx in tqdm(range(N)):
            z = torch.from_numpy(np.random.randn(2, 1024).astype(np.float32)).cuda()
            z = torch.fft.ifft(torch.fft.fft(z) * 0.5).real
            data[idx] = z.cpu().numpy()
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 8
    assert "(`torch.from_numpy(...).cuda()` at line 9 and `z.cpu()` at line 11)" in message


def test_a_cupy_generator(lint):
    source = """
        import cupy as cp
        import numpy as np

        def generate(num_samples, freqs):
            out = np.zeros((num_samples, 1024), dtype=np.complex64)
            for i in range(num_samples):
                t = cp.arange(1024) / 2e5
                sig = cp.exp(2j * cp.pi * freqs[i] * t) + 0.1 * cp.random.randn(1024)
                out[i] = cp.asnumpy(sig)
            return out
    """
    [(line, message)] = lint(source, "TM113")
    assert line == 7
    assert "(`cp.arange(1024)` at line 8 and `cp.asnumpy(sig)` at line 10)" in message


def test_rejection_sampling_until_enough_samples(lines):
    source = """
        import torch

        samples = []
        while len(samples) < n_samples:
            x = torch.randn(2, 1024, device="cuda")
            if x.abs().max() < 4:
                samples.append(x.cpu())
    """
    assert lines(source, "TM113") == [5]


def test_a_generator_function_that_yields_one_sample_at_a_time(lines):
    source = """
        import torch

        def stream(freqs, device):
            t = torch.arange(1024, device=device)
            for f in freqs:
                noise = torch.randn(1024, device=device)
                yield (torch.sin(f * t) + noise).cpu().numpy()
    """
    assert lines(source, "TM113") == [6]


def test_a_dict_comprehension_and_a_module_level_comprehension(lines):
    source = """
        import torch
        from synth import make

        table = {i: make(i).cpu() for i in range(n)}
        data = [torch.randn(7, 1024, device="cuda").cpu() for _ in range(10000)]
    """
    assert lines(source, "TM113") == [5, 6]


def test_an_outer_sample_loop_is_reported_once(lines):
    source = """
        import torch

        out = []
        for i in range(n_samples):
            per_rx = [torch.randn(1024, device="cuda") for _ in range(n_receivers)]
            out.append(torch.stack(per_rx).cpu())
    """
    assert lines(source, "TM113") == [5]


# -- loops that are fine ----------------------------------------------------------------------


def test_a_training_loop_is_left_to_the_per_step_rules(lines):
    source = """
        import torch

        for epoch in range(epochs):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                noise = torch.randn(x.shape, device=device)
                loss = criterion(model(x + noise), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
    """
    assert lines(source, "TM113") == []


def test_an_evaluation_loop_over_a_dataloader(lines):
    source = """
        import torch

        @torch.no_grad()
        def evaluate(model, loader, dev):
            preds, targets = [], []
            for x, y in loader:
                out = model(x.to(dev))
                preds.append(out.argmax(1).cpu())
                targets.append(y)
            return torch.cat(preds), torch.cat(targets)
    """
    assert lines(source, "TM113") == []


def test_loops_over_files_and_epochs(lines):
    source = """
        import glob
        import torch

        feats = []
        for path in sorted(glob.glob("shards/*.pt")):
            shard = torch.load(path).to(device)
            feats.append((shard - shard.mean(0) + torch.randn_like(shard)).cpu())
        for epoch in range(num_epochs):
            noise = torch.randn(1024, device=device)
            history.append(noise.std().item())
    """
    assert lines(source, "TM113") == []


def test_a_few_large_ops_per_chunk(lines):
    source = """
        import torch

        total = []
        for chunk in torch.split(big, 1_000_000):
            c = chunk.to(device)
            total.append((c * torch.rand_like(c)).sum().cpu())
        for start in range(0, n, 1_000_000):
            part = torch.randn(1_000_000, device=device)
            out[start:start + 1_000_000] = part.cpu()
        for i in range(n_samples):
            img = torch.randn(3, 1024, 1024, device=device)
            out[i] = blur(img).cpu()
    """
    assert lines(source, "TM113") == []


def test_moving_models_parameters_and_buffers(lines):
    source = """
        import torch
        import torch.nn as nn

        for model in models:
            model.to(device)
        for p in net.parameters():
            p.data = p.data.to(device)
        moved = [m.cuda() for m in ensemble]
        for name, buf in model.named_buffers():
            buffers[name] = buf.cpu()
        noise = [p + 0.01 * torch.randn(p.shape, device=p.device) for p in params]

        class Heads(nn.Module):
            def __init__(self, n, d, device):
                super().__init__()
                self.weights = nn.ParameterList()
                for i in range(n):
                    self.weights.append(nn.Parameter(torch.randn(d, d, device=device)))
                self.masks = [torch.rand(d, device=device) > 0.5 for _ in range(n)]
    """
    assert lines(source, "TM113") == []


def test_a_cpu_only_loop_is_not_a_gpu_problem(lines):
    source = """
        import numpy as np
        import torch

        out = np.zeros((n_samples, 1024), dtype=np.complex64)
        for i in range(n_samples):
            t = np.arange(1024) / 2e5
            out[i] = np.exp(2j * np.pi * freqs[i] * t) + 0.1 * np.random.randn(1024)
        signals = []
        for i in range(n_samples):
            signals.append(torch.sin(2 * torch.pi * freqs[i] * torch.arange(1024)) + torch.randn(1024))
    """
    assert lines(source, "TM113") == []


def test_code_that_is_already_batched(lines):
    source = """
        import torch
        from trainmedic import batch

        def make_sample(freq, snr_db, rng):
            t = torch.arange(1024, device=freq.device) / 2e5
            return torch.exp(2j * torch.pi * freq * t) + rng.complex_normal((1024,)) * 10 ** (-snr_db / 20)

        gen = batch.vectorize(make_sample)
        iq = gen(freq=freqs, snr_db=snrs, seed=0)
        chunks = []
        for start in range(0, len(freqs), 256):
            chunks.append(gen(freq=freqs[start:start + 256], snr_db=snrs[start:start + 256], seed=0).cpu())
        per_sample = []
        for i in range(n_samples):
            per_sample.append(gen(freq=freqs[i:i + 1], snr_db=snrs[i:i + 1], seed=i).cpu())
        out = torch.vmap(make_sample, randomness="different")(freqs, snrs, None)
    """
    assert lines(source, "TM113") == []


def test_iterative_methods_carry_state_from_one_iteration_to_the_next(lines):
    source = """
        import torch

        @torch.no_grad()
        def sample_tokens(model, idx, max_new_tokens):
            for _ in range(max_new_tokens):
                logits = model(idx)[:, -1, :]
                nxt = torch.multinomial(torch.softmax(logits, -1), 1)
                idx = torch.cat([idx, nxt], dim=1)
            return idx

        def integrate(x, n, device):
            traj = []
            for k in range(n):
                t = torch.full((x.shape[0],), k / n, device=device)
                x = x + velocity(x, t) / n + 0.01 * torch.randn_like(x)
                traj.append(x.cpu())
            return traj
    """
    assert lines(source, "TM113") == []


def test_a_loop_that_runs_a_model_per_sample(lines):
    source = """
        import torch

        imgs, preds = [], []
        for i in range(num_images):
            z = torch.randn(1, nz, 1, 1, device=device)
            imgs.append(netG(z).detach().cpu())
        for i in range(n_samples):
            x = torch.randn(1, 3, 32, 32, device=device)
            preds.append(model(x).argmax().item())
    """
    assert lines(source, "TM113") == []


def test_items_of_existing_data_classes_and_a_literal_handful(lines):
    source = """
        import torch

        for image in images:
            crops.append(torch.full(image.shape[-2:], 0.5, device=image.device) * image.cpu())
        for c in range(num_classes):
            ious.append(((pred == c) & (target == c)).sum().cpu())
        for i in range(x.size(0)):
            rows.append(x[i].cpu())
        for snr in [0, 10, 20]:
            res.append((torch.randn(1024, device="cuda") * snr).std().item())
        for k in range(3):
            res.append(torch.randn(8, device="cuda").cpu())
        for n in sizes:
            times.append(bench(torch.randn(n, device="cuda")))
    """
    assert lines(source, "TM113") == []


def test_per_receiver_loops_inside_a_sample_function(lines):
    # Seed 001's sample function loops over its 7 receivers and 3 echoes: parts of one sample.
    source = """
        import torch

        RECEIVERS = [(45.07, 7.68), (45.11, 7.64), (45.03, 7.74)]

        def generate_iq_sample(freq, device):
            per_rx = []
            for rx in RECEIVERS:
                sig = torch.exp(2j * torch.pi * freq * torch.arange(1024, device=device))
                for delay in (3, 7, 15):
                    sig = sig + 0.3 * torch.randn((), device=device) * torch.roll(sig, delay)
                per_rx.append(sig)
            return torch.stack(per_rx)
    """
    assert lines(source, "TM113") == []


def test_noqa_silences_the_loop_line():
    source = textwrap.dedent("""
        import torch
        a = [torch.randn(8, device="cuda").cpu() for _ in range(10000)]  # noqa: TM113
        b = [torch.randn(8, device="cuda").cpu() for _ in range(10000)]  # noqa: TM108
    """)
    assert [v.line for v in lint_source(source) if v.code == "TM113"] == [4]
