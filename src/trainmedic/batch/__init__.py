"""Turn per-sample generation into batched device calls, with progress, a clean stop and resumable shards.

Generating 10k synthetic IQ samples one at a time took 70,000 tiny GPU calls from 72 threads
and kept the GPU 28 % busy; one call per 256 samples was 8-10x faster.

    from trainmedic import batch

    def iq_sample(freq, snr_db, rng):             # one sample, as the user wrote it
        ...
        return signal                              # e.g. [7 receivers, 1024] complex64

    gen = batch.vectorize(iq_sample)               # torch.func.vmap; a loop, with the reason, if not
    iq = gen(freq=freqs, snr_db=snrs, seed=0)      # [N, 7, 1024] in one call
    batch.generate(iq_sample, {"freq": freqs, "snr_db": snrs}, out="iq/")   # shards, resumable

Layers: ``rng`` (per-sample random streams), ``vectorize`` (vmap or the loop), ``params``
(the job's columns), ``measure`` (a real call's peak memory), ``sizing`` (samples per call from
it), ``shards`` (the output folder), ``host`` (a shard's outputs on the host: pinned side-stream
copies on CUDA), ``writer`` (the background writer thread), ``stages`` (where the time went),
``generate`` (the job). Nothing here prints: a fallback is a :class:`FallbackWarning`, progress
goes to an object that ``trainmedic.progress`` draws.
"""

from trainmedic.batch.generate import Generated, generate
from trainmedic.batch.rng import Rng
from trainmedic.batch.vectorize import FallbackWarning, Vectorized, vectorize

__all__ = ["FallbackWarning", "Generated", "Rng", "Vectorized", "generate", "vectorize"]
