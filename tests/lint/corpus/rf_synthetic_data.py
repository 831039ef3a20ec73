"""
Synthetic IQ dataset for RF emitter localisation, and a small network trained on it.

Each sample is a narrow-band IQ snapshot as seen by a handful of fixed receivers: a carrier
with a random frequency offset, multipath echoes, Rayleigh fading, free-space path loss and
AWGN. Samples are generated in parallel, written to .npz shards, then used to train a 1D CNN
that regresses the frequency offset and the SNR.

    python rf_synthetic_data.py generate --n 10000 --out data/synth
    python rf_synthetic_data.py train --data data/synth --epochs 20
"""
import argparse
import glob
import json
import logging
import math
import os
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

log = logging.getLogger("synth")

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
SAMPLE_RATE = 200_000
NUM_SAMPLES = 1024
CARRIER_HZ = 145e6
RECEIVERS = [
    (45.0703, 7.6869),
    (45.1123, 7.6421),
    (45.0318, 7.7394),
    (45.0902, 7.5527),
    (45.0040, 7.6130),
    (45.1551, 7.7302),
    (45.0587, 7.8215),
]
RECEIVER_INFO_URLS = [f"https://example.org/receivers/{i}.json" for i in range(len(RECEIVERS))]


# ---------------------------------------------------------------------------
# receiver metadata, fetched once

def fetch_receiver_info(url, cache_dir):
    path = os.path.join(cache_dir, os.path.basename(url))
    if not os.path.exists(path):
        urllib.request.urlretrieve(url, path)
    with open(path) as f:
        return json.load(f)


def fetch_all_receivers(cache_dir):
    os.makedirs(cache_dir, exist_ok=True)
    with ThreadPoolExecutor(max_workers=8) as pool:
        return list(pool.map(lambda url: fetch_receiver_info(url, cache_dir), RECEIVER_INFO_URLS))


# ---------------------------------------------------------------------------
# one IQ sample

def haversine_km(a, b):
    lat1, lon1, lat2, lon2 = map(math.radians, (*a, *b))
    h = math.sin((lat2 - lat1) / 2) ** 2 + math.cos(lat1) * math.cos(lat2) * math.sin((lon2 - lon1) / 2) ** 2
    return 2 * 6371.0 * math.asin(math.sqrt(h))


def path_loss_db(distance_km, freq_hz):
    return 20 * math.log10(max(distance_km, 1e-3)) + 20 * math.log10(freq_hz / 1e6) + 32.44


def clean_signal(freq_offset, t):
    phase = torch.rand((), device=DEVICE) * 2 * math.pi
    return torch.exp(1j * (2 * math.pi * freq_offset * t + phase))


def add_multipath(signal, num_paths=3):
    out = signal.clone()
    for delay in (3, 7, 15)[:num_paths]:
        gain = 0.3 * torch.randn((), device=DEVICE)
        out = out + gain * torch.roll(signal, delay)
    return out


def generate_iq_sample(tx, freq_offset, snr_db):
    t = torch.arange(NUM_SAMPLES, device=DEVICE) / SAMPLE_RATE
    per_receiver = []
    for rx in RECEIVERS:
        sig = add_multipath(clean_signal(freq_offset, t))
        sig = sig * torch.randn((), dtype=torch.cfloat, device=DEVICE)  # Rayleigh fading
        sig = sig / sig.abs().pow(2).mean().sqrt() * 10 ** (-path_loss_db(haversine_km(tx, rx), CARRIER_HZ) / 20)
        noise_power = sig.abs().pow(2).mean() / 10 ** (snr_db / 10)
        noise = torch.randn(NUM_SAMPLES, dtype=torch.cfloat, device=DEVICE)
        per_receiver.append(torch.view_as_real(sig + torch.sqrt(noise_power / 2) * noise))
    return torch.stack(per_receiver).cpu().numpy()


def _generate_single_sample(args):
    idx, tx, freq_offset, snr_db = args
    iq = generate_iq_sample(tx, freq_offset, snr_db)
    return idx, iq, np.array([freq_offset / 1e4, snr_db / 30], dtype=np.float32)


# ---------------------------------------------------------------------------
# the dataset

def random_emitters(n, seed):
    rng = np.random.default_rng(seed)
    lat = rng.uniform(44.95, 45.20, n)
    lon = rng.uniform(7.50, 7.85, n)
    freq = rng.uniform(-1e4, 1e4, n)
    snr = rng.uniform(0.0, 30.0, n)
    return [(i, (lat[i], lon[i]), freq[i], snr[i]) for i in range(n)]


def validation_set(n=512, seed=1):
    """A fixed held-out set, made once before training."""
    emitters = random_emitters(n, seed)
    iq = np.stack([generate_iq_sample(tx, freq, snr) for _, tx, freq, snr in emitters])  # expect: TM113
    labels = np.array([[freq / 1e4, snr / 30] for _, _, freq, snr in emitters], dtype=np.float32)
    return iq, labels


def write_shard(path, iq, labels):
    np.savez_compressed(path, iq=iq, labels=labels)
    return path


def generate(n, out_dir, seed=0, shard_size=1000, num_workers=32):
    os.makedirs(out_dir, exist_ok=True)
    args_list = random_emitters(n, seed)
    iq = np.zeros((n, len(RECEIVERS), NUM_SAMPLES, 2), dtype=np.float32)
    labels = np.zeros((n, 2), dtype=np.float32)
    start, done = time.time(), 0
    with ThreadPoolExecutor(max_workers=num_workers) as executor:
        futures = {executor.submit(_generate_single_sample, args): args[0]  # expect: TM112
                   for args in args_list}
        for future in as_completed(futures):
            idx, sample, label = future.result()
            iq[idx], labels[idx] = sample, label
            done += 1
            if done % 500 == 0:
                log.info("generated %d/%d samples (%.1f/s)", done, n, done / (time.time() - start))
    # Compression is CPU work that releases the GIL: threads help here.
    with ThreadPoolExecutor(max_workers=4) as writer:
        jobs = [
            writer.submit(write_shard, os.path.join(out_dir, f"shard_{k:04d}.npz"),
                          iq[s:s + shard_size], labels[s:s + shard_size])
            for k, s in enumerate(range(0, n, shard_size))
        ]
        return [job.result() for job in jobs]


def spectral_features(sample):
    z = sample[..., 0] + 1j * sample[..., 1]
    spectrum = np.abs(np.fft.fftshift(np.fft.fft(z, axis=-1), axes=-1)) ** 2
    return spectrum.mean(axis=0)


def feature_table(iq, num_workers=8):
    with ThreadPoolExecutor(max_workers=num_workers) as pool:
        return np.stack(list(pool.map(spectral_features, iq)))


def load_shards(data_dir):
    iq, labels = [], []
    for path in sorted(glob.glob(os.path.join(data_dir, "shard_*.npz"))):
        with np.load(path) as shard:
            iq.append(shard["iq"])
            labels.append(shard["labels"])
    return np.concatenate(iq), np.concatenate(labels)


# ---------------------------------------------------------------------------
# the model

class OffsetNet(nn.Module):
    def __init__(self, receivers=len(RECEIVERS), width=64):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv1d(2 * receivers, width, 7, padding=3), nn.BatchNorm1d(width), nn.GELU(),
            nn.Conv1d(width, width, 7, stride=2, padding=3), nn.BatchNorm1d(width), nn.GELU(),
            nn.Conv1d(width, 2 * width, 5, stride=2, padding=2), nn.BatchNorm1d(2 * width), nn.GELU(),
            nn.AdaptiveAvgPool1d(1),
        )
        self.head = nn.Linear(2 * width, 2)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


def train(data_dir, epochs=20, batch_size=256, lr=1e-3):
    iq, labels = load_shards(data_dir)
    # (N, receivers, samples, 2) -> (N, 2 * receivers, samples): receivers and I/Q as channels
    x = torch.from_numpy(iq).permute(0, 1, 3, 2).reshape(len(iq), -1, NUM_SAMPLES)
    loader = DataLoader(TensorDataset(x, torch.from_numpy(labels)), batch_size=batch_size, shuffle=True,
                        pin_memory=True, drop_last=True)
    model = OffsetNet().to(DEVICE)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=1e-4)
    for epoch in range(epochs):
        model.train()
        running = torch.zeros((), device=DEVICE)
        for xb, yb in loader:
            xb, yb = xb.to(DEVICE, non_blocking=True), yb.to(DEVICE, non_blocking=True)
            loss = nn.functional.mse_loss(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.detach()
        log.info("epoch %d  loss %.4f", epoch, (running / len(loader)).item())
    model.eval()
    val_iq, val_labels = validation_set()
    val_x = torch.from_numpy(val_iq).permute(0, 1, 3, 2).reshape(len(val_iq), -1, NUM_SAMPLES).to(DEVICE)
    with torch.no_grad():
        val_loss = nn.functional.mse_loss(model(val_x), torch.from_numpy(val_labels).to(DEVICE))
    log.info("validation loss %.4f", val_loss.item())
    torch.save(model.state_dict(), os.path.join(data_dir, "offset_net.pt"))


def main():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    gen = sub.add_parser("generate")
    gen.add_argument("--n", type=int, default=10_000)
    gen.add_argument("--out", default="data/synth")
    gen.add_argument("--seed", type=int, default=0)
    fit = sub.add_parser("train")
    fit.add_argument("--data", default="data/synth")
    fit.add_argument("--epochs", type=int, default=20)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if args.command == "generate":
        fetch_all_receivers(os.path.join(args.out, "receivers"))
        generate(args.n, args.out, seed=args.seed)
    else:
        train(args.data, epochs=args.epochs)


if __name__ == "__main__":
    main()
