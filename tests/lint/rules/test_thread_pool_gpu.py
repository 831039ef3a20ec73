"""TM112: a thread pool that runs GPU work one sample per task, and the thread pools that are fine."""

import pytest


def test_seed_001_thread_pool_of_single_sample_generation(lint):
    # The shape of seed 001's synthetic_generator.py: 72 threads, one sample per task, the
    # sample made on the GPU with CuPy two calls below the submitted function.
    source = """
        from concurrent.futures import ThreadPoolExecutor, as_completed

        import cupy as cp
        import numpy as np

        def generate_iq_sample(freq, snr_db, num_samples=1024):
            t = cp.arange(num_samples) / 1e6
            signal = cp.exp(2j * cp.pi * freq * t)
            return add_awgn(signal, snr_db)

        def add_awgn(signal, snr_db):
            noise = cp.random.randn(signal.size) * 10 ** (-snr_db / 20)
            return cp.asnumpy(signal + noise)

        def _generate_single_sample(args):
            idx, freq, snr_db = args
            return idx, generate_iq_sample(freq, snr_db)

        def generate(num_samples, rng):
            args_list = [(i, rng.uniform(-2e4, 2e4), rng.uniform(0, 30)) for i in range(num_samples)]
            results = {}
            with ThreadPoolExecutor(max_workers=72) as executor:
                futures = {executor.submit(_generate_single_sample, args): args[0]
                           for args in args_list}
                for future in as_completed(futures):
                    idx, iq = future.result()
                    results[idx] = iq
            return results
    """
    [(line, message)] = lint(source, "TM112")
    assert line == 24
    assert message.startswith(
        "executor.submit(_generate_single_sample, ...) in the comprehension over `args_list` (line 24) runs "
        "_generate_single_sample() (line 16) once per sample on 72 threads, and it does GPU work "
        "(`cp.arange(num_samples)` at line 8)"
    )
    assert "launches serialize on one device" in message and "GPU 28 % busy" in message
    assert "trainmedic.batch" in message
    assert "`gen = batch.vectorize(_generate_single_sample)` and one call per 256 samples" in message
    assert "`batch.generate(_generate_single_sample, params, out=...)`" in message
    assert "(typically 8-10x)" in message and "seed" not in message.lower()
    assert not message.endswith(".")


def test_submit_in_a_for_loop_and_map_over_samples(lines):
    source = """
        import concurrent.futures
        import torch

        device = torch.device("cuda")

        def embed_one(image, encoder):
            return encoder(image.unsqueeze(0).to(device)).cpu()

        def render(params):
            return torch.randn(256, 256, device="cuda") * params["scale"]

        def embed_all(images, encoder):
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=16)
            futures = []
            for image in images:
                futures.append(pool.submit(embed_one, image, encoder))
            return [f.result() for f in futures]

        def render_all(param_list):
            with concurrent.futures.ThreadPoolExecutor() as ex:
                return list(ex.map(render, param_list))
    """
    assert lines(source, "TM112") == [17, 22]


def test_multiprocessing_thread_pools_lambdas_partials_and_methods(lint):
    source = """
        from functools import partial
        from multiprocessing.dummy import Pool as DummyPool
        from multiprocessing.pool import ThreadPool

        import torch

        class Synth:
            def __init__(self, device):
                self.device = device

            def sample(self, freq):
                return torch.sin(freq * torch.arange(64, device=self.device))

        synth = Synth("cuda")

        def one(freq, scale):
            return synth.sample(freq) * scale

        def run(freqs):
            pool = ThreadPool(8)
            a = pool.map(partial(one, scale=2.0), freqs)
            b = pool.imap_unordered(lambda f: torch.tensor(f).cuda() * 2, freqs)
            with DummyPool(4) as dummy:
                c = [dummy.apply_async(one, (f, 1.0)) for f in freqs]
            return a, b, c
    """
    found = lint(source, "TM112")
    assert [line for line, _ in found] == [22, 23, 25]
    assert found[0][1].startswith(
        "pool.map(one, ...) over `freqs` runs one() (line 17) once per sample on 8 threads"
    )
    assert "(`torch.arange(64, device=self.device)` at line 13)" in found[0][1]
    assert found[1][1].startswith("pool.imap_unordered(lambda, ...) over `freqs` runs the lambda (line 23)")
    assert "`gen = batch.vectorize(<per_sample_fn>)`" in found[1][1]
    assert "on 4 threads" in found[2][1]


def test_thread_pools_for_downloads_and_file_io_are_fine(lines):
    source = """
        import os
        from concurrent.futures import ThreadPoolExecutor

        import requests
        import torch

        def download(url, folder):
            path = os.path.join(folder, os.path.basename(url))
            with open(path, "wb") as f:
                f.write(requests.get(url, timeout=30).content)
            return path

        def load_shard(path):
            return torch.load(path, map_location="cpu")

        def fetch_all(urls, folder):
            with ThreadPoolExecutor(max_workers=32) as executor:
                futures = [executor.submit(download, url, folder) for url in urls]
                paths = [f.result() for f in futures]
                shards = list(executor.map(load_shard, paths))
            return torch.cat(shards).to("cuda")
    """
    assert lines(source, "TM112") == []


def test_thread_pools_over_cpu_work_are_fine(lines):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        import numpy as np
        import torch
        from PIL import Image

        def decode(path):
            image = np.asarray(Image.open(path).convert("RGB").resize((224, 224)))
            return torch.from_numpy(image).permute(2, 0, 1).float() / 255

        def spectrum(signal):
            return np.abs(np.fft.rfft(signal)) ** 2

        def prepare(paths, signals):
            with ThreadPoolExecutor(8) as pool:
                images = list(pool.map(decode, paths))
                spectra = [pool.submit(spectrum, s) for s in signals]
            return torch.stack(images).cuda(), [f.result() for f in spectra]
    """
    assert lines(source, "TM112") == []


def test_a_dataloader_and_process_pools_are_not_thread_pools(lines):
    source = """
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import Pool

        import torch
        from torch.utils.data import DataLoader, Dataset

        class Signals(Dataset):
            def __init__(self, n):
                self.n = n

            def __len__(self):
                return self.n

            def __getitem__(self, idx):
                return torch.randn(1024, device="cuda")

        def make(i):
            return torch.randn(1024, device="cuda") * i

        loader = DataLoader(Signals(1000), batch_size=64, num_workers=4)
        with ProcessPoolExecutor(4) as executor:
            futures = [executor.submit(make, i) for i in range(1000)]
        with Pool(4) as pool:
            out = pool.map(make, range(1000))
    """
    assert lines(source, "TM112") == []


def test_one_thread_per_gpu_and_a_sweep_of_training_runs_are_fine(lines):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        import torch

        def run_on(rank, shard):
            x = shard.to(f"cuda:{rank}")
            return (x @ x.T).sum().item()

        def train(config):
            model = build(config).cuda()
            opt = torch.optim.Adam(model.parameters())
            for x, y in make_loader(config):
                loss = model(x.cuda()).sub(y.cuda()).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            return loss.item()

        def evaluate(model, loader):
            return sum(model(x.cuda()).sum().item() for x, y in loader)

        def main(shards, jobs, model, val_loader):
            with ThreadPoolExecutor(max_workers=torch.cuda.device_count()) as ex:
                per_gpu = [ex.submit(run_on, rank, shards[rank]) for rank in range(torch.cuda.device_count())]
                results = list(ex.map(run_on, range(torch.cuda.device_count()), shards))
                runs = [ex.submit(train, job) for job in jobs]  # a task that trains is a whole run
                for epoch in range(10):
                    ex.submit(evaluate, model, val_loader)
            return per_gpu, results, runs
    """
    assert lines(source, "TM112") == []


def test_a_submit_that_does_not_change_with_the_loop_is_not_per_sample(lines):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        import torch

        def warm_up():
            torch.cuda.synchronize()
            return torch.zeros(1, device="cuda")

        executor = ThreadPoolExecutor(max_workers=2)
        executor.submit(warm_up)
        for _ in range(3):
            executor.submit(warm_up)
    """
    assert lines(source, "TM112") == []


def test_a_function_from_another_module_cannot_be_read(lines):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        from .iq_generator import generate_iq_sample

        with ThreadPoolExecutor(max_workers=72) as executor:
            futures = [executor.submit(generate_iq_sample, p) for p in params]
    """
    assert lines(source, "TM112") == []


@pytest.mark.parametrize("query", ["torch.cuda.is_available()", "torch.cuda.device_count()"])
def test_asking_about_the_gpu_is_not_gpu_work(lines, query):
    source = f"""
        from concurrent.futures import ThreadPoolExecutor

        import numpy as np

        def features(signal):
            use_gpu = {query}
            return np.abs(np.fft.rfft(signal))

        with ThreadPoolExecutor(max_workers=8) as executor:
            out = list(executor.map(features, signals))
    """
    assert lines(source, "TM112") == []


def test_noqa_silences_it(lines):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        import torch

        def make(i):
            return torch.randn(64, device="cuda") * i

        with ThreadPoolExecutor(max_workers=8) as executor:
            out = list(executor.map(make, range(n_samples)))  # noqa: TM112
    """
    assert lines(source, "TM112") == []


def test_a_task_that_iterates_a_loader_is_a_whole_dataset_not_a_sample(lines):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        def evaluate(model, loader):
            return sum(model(x.cuda()).sum().item() for x, y in loader)

        def evaluate_all(model, loaders):
            with ThreadPoolExecutor(max_workers=4) as ex:
                return [ex.submit(evaluate, model, loader) for loader in loaders]
    """
    assert lines(source, "TM112") == []


def test_a_queue_drained_in_a_while_loop(lint):
    source = """
        from concurrent.futures import ThreadPoolExecutor

        import torch

        def denoise(signal):
            return torch.fft.ifft(torch.fft.fft(signal.cuda()) * mask).cpu()

        def serve(queue):
            executor = ThreadPoolExecutor(max_workers=8)
            while not queue.empty():
                signal = queue.get()
                executor.submit(denoise, signal)
    """
    [(line, message)] = lint(source, "TM112")
    assert line == 13
    assert message.startswith(
        "executor.submit(denoise, ...) in the `while not queue.empty()` loop (line 11) runs denoise()"
    )


def test_a_pool_kept_on_self_and_a_name_that_may_be_a_process_pool(lines):
    source = """
        from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor

        import torch

        class Renderer:
            def __init__(self, device):
                self.device = device
                self.pool = None  # started on first use

            def render_one(self, scene):
                return torch.rand(3, 64, 64, device=self.device) * scene.brightness

            def render(self, scenes):
                if self.pool is None:
                    self.pool = ThreadPoolExecutor(max_workers=12)
                return list(self.pool.map(self.render_one, scenes))

        def make(i):
            return torch.randn(64, device="cuda") * i

        executor = ThreadPoolExecutor(4) if THREADS else ProcessPoolExecutor(4)
        out = list(executor.map(make, range(n_samples)))
    """
    assert lines(source, "TM112") == [17]
