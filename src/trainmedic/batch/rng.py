"""Per-sample random streams that give the same draws batched or one sample at a time.

``torch.func.vmap(randomness="different")`` draws every sample's numbers from torch's one global
generator, so a batch of 256 draws other numbers than 256 single calls, and any change of the
batch size changes the data. Here each sample owns a stream keyed by ``(seed, index)``, and a
draw is a pure function of that key and a counter (the counter-based design of JAX's keys and
of Philox): ``splitmix64(counter·G xor key)``, computed with int64 tensor ops. Under vmap the
key is a batched tensor, so the same code draws every sample's numbers at once, bit for bit
those of the per-sample call. The key is xor-ed, not added: with ``key + counter`` two samples
whose keys differ by a multiple of G would draw shifted copies of one stream (likely once
streams are millions of samples times thousands of draws); a single equal word under xor
implies nothing about the next one.

The counter advances in Python, once per draw call, so two calls in the same order draw the
same numbers in the batched and per-sample runs; a draw inside data-dependent control flow
would differ, but vmap refuses such code anyway (the loop fallback then calls per sample).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["Rng", "sample_keys"]

_MASK64 = (1 << 64) - 1


def _signed(value: int) -> int:
    """A 64-bit constant as the int64 two's complement torch stores (products wrap the same way)."""
    value &= _MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


_GOLDEN = _signed(0x9E3779B97F4A7C15)
_MIX1 = _signed(0xBF58476D1CE4E5B9)
_MIX2 = _signed(0x94D049BB133111EB)
_STREAM = _signed(0xD1B54A32D192ED03)  # separates the key derivation from the draws


def _shift_right(z: torch.Tensor, bits: int) -> torch.Tensor:
    # torch's >> on int64 is arithmetic; the mask turns it into the logical shift splitmix64 needs.
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser: every input bit reaches every output bit."""
    # In place after the first op: a third of the memory traffic of the out-of-place chain,
    # which measured 3x slower on 10M words.
    z = z ^ _shift_right(z, 30)
    z.mul_(_MIX1)
    z.bitwise_xor_(_shift_right(z, 27))
    z.mul_(_MIX2)
    return z.bitwise_xor_(_shift_right(z, 31))


_WEYL: dict[tuple[int, int, str], torch.Tensor] = {}  # (start, count, device)
_WEYL_MAX = 1 << 16


def _weyl(start: int, count: int, device: torch.device) -> torch.Tensor:
    """``arange(start, start + count) * golden`` (wrapping), cached per range and device: a
    per-sample function makes the same draws, at the same counters, call after call, so a draw
    costs one xor before the mix. Large draws and fake tensors (a traced call) are not kept."""
    key = (start, count, str(device))
    steps = _WEYL.get(key)
    if steps is None:
        steps = torch.arange(start, start + count, dtype=torch.int64, device=device) * _GOLDEN
        if count <= _WEYL_MAX and type(steps) is torch.Tensor:
            if len(_WEYL) >= 256:
                _WEYL.clear()
            _WEYL[key] = steps
    return steps


def sample_keys(seed: int, indices: torch.Tensor) -> torch.Tensor:
    """The int64 key of each sample's stream: a hash of the job's seed and the sample's index."""
    seed_word = _mix(
        torch.tensor(_signed(seed * _GOLDEN + _STREAM), dtype=torch.int64, device=indices.device)
    )
    return _mix(indices.to(torch.int64) * _GOLDEN + seed_word)


class Rng:
    """One sample's random stream; ``Rng(seed, index)`` is sample ``index`` of a job seeded ``seed``.

    A per-sample function takes it as its ``rng`` argument and draws with its methods instead of
    ``torch.randn``; :func:`trainmedic.batch.vectorize` then hands every sample of a batch its own
    stream, and the batched result equals the per-sample calls exactly::

        def noisy_tone(freq, rng):
            t = torch.arange(256) / 256
            return torch.cos(2 * math.pi * freq * t) + 0.1 * rng.normal((256,))

    Draws follow the default dtype (float32) unless ``dtype`` says otherwise; float32 draws carry
    24 random bits (normals reach 5.8 sigma), float64 draws 53 (8.6 sigma). float16 and bfloat16
    draws are made in float32 and rounded; ``complex_normal`` takes complex or real dtypes.
    """

    def __init__(self, seed: int = 0, index: int = 0, device: Any = "cpu") -> None:
        try:
            seed, index = operator.index(seed), operator.index(index)
        except TypeError:
            raise ValueError(
                f"Rng(seed={seed!r}, index={index!r}): expected an int seed and an int index >= 0."
            ) from None
        if index < 0:
            raise ValueError(
                f"Rng(seed={seed!r}, index={index!r}): expected an int seed and an int index >= 0."
            )
        self._key = sample_keys(seed, torch.tensor(index, device=device))
        self._counter = 0

    @classmethod
    def from_key(cls, key: torch.Tensor) -> Rng:
        """A stream from a key of :func:`sample_keys` (under vmap: one key per sample)."""
        rng = cls.__new__(cls)
        rng._key = key
        rng._counter = 0
        return rng

    @property
    def device(self) -> torch.device:
        return self._key.device

    def _bits(self, shape: Sequence[int]) -> torch.Tensor:
        """``numel`` fresh 64-bit words in ``shape``; the counter moves past them."""
        shape = _as_shape(shape)
        count = math.prod(shape)
        steps = _weyl(self._counter, count, self.device)
        self._counter += count
        return _mix(steps ^ self._key).reshape(shape)

    def _unit(self, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
        """Uniform in [0, 1): the top 24 bits of a word (float32) or 53 (float64)."""
        bits = 53 if dtype == torch.float64 else 24
        return _shift_right(self._bits(shape), 64 - bits).to(dtype) * (2.0**-bits)

    def uniform(
        self, shape: Sequence[int] = (), low: float = 0.0, high: float = 1.0, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Uniform in ``[low, high)``."""
        want, work = _real_dtypes(dtype, "uniform")
        return _cast(low + (high - low) * self._unit(shape, work), want, low, high)

    def normal(
        self, shape: Sequence[int] = (), mean: float = 0.0, std: float = 1.0, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Gaussian draws: Box-Muller with both of its outputs used, so a pair of draws costs one
        64-bit word in float32 (two 24-bit uniforms) and two in float64."""
        shape = _as_shape(shape)
        want, work = _real_dtypes(dtype, "normal")
        count = math.prod(shape)
        u1, u2 = self._pair(((count + 1) // 2,), work)
        radius = torch.sqrt(-2.0 * torch.log(u1))
        angle = (2.0 * math.pi) * u2
        draws = torch.cat((radius * torch.cos(angle), radius * torch.sin(angle)), dim=-1)
        return (mean + std * draws[..., :count].reshape(shape)).to(want)

    def _pair(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
        """Two uniforms per position: u1 in (0, 1] (log() of it is finite), u2 in [0, 1)."""
        if dtype == torch.float64:
            words = self._bits((2, *shape))
            u1, u2 = (_shift_right(w, 11).to(dtype) for w in words)
            return (u1 + 1.0) * 2.0**-53, u2 * 2.0**-53
        words = self._bits(shape)
        u1 = (_shift_right(words, 40) + 1).to(dtype) * 2.0**-24
        u2 = ((words >> 16) & 0xFFFFFF).to(dtype) * 2.0**-24
        return u1, u2

    def complex_normal(
        self, shape: Sequence[int] = (), std: float = 1.0, dtype: torch.dtype | None = None
    ) -> torch.Tensor:
        """Circularly symmetric complex Gaussian, E|z|² = std² (Rayleigh fading, complex AWGN):
        Box-Muller's radius and angle are the draw's modulus and phase, one word per value."""
        shape = _as_shape(shape)
        if dtype is not None and dtype.is_complex:
            dtype = torch.float64 if dtype == torch.complex128 else torch.float32
        # 16-bit dtypes give complex64: complex32 is experimental in torch and has no bfloat16 twin.
        _, work = _real_dtypes(dtype, "complex_normal")
        u1, u2 = self._pair(shape, work)
        return torch.polar(std * torch.sqrt(-torch.log(u1)), (2.0 * math.pi) * u2)

    def integers(self, low: int, high: int, shape: Sequence[int] = ()) -> torch.Tensor:
        """Integers in ``[low, high)`` (int64), from 53-bit uniforms: unbiased to 2⁻⁵³·(high-low)."""
        # Bounds may be per-sample tensors (checked by the caller then): only numbers are checked
        # here, or a tensor comparison would read as data-dependent control flow under vmap.
        if isinstance(low, (int, float)) and isinstance(high, (int, float)) and high <= low:
            raise ValueError(f"integers(low={low}, high={high}): high must be greater than low.")
        return low + torch.floor(self._unit(shape, torch.float64) * (high - low)).to(torch.int64)


def _real_dtypes(dtype: torch.dtype | None, method: str) -> tuple[torch.dtype, torch.dtype]:
    """(the dtype asked for, the one drawn in): 16-bit floats are drawn in float32 and rounded,
    since 2⁻²⁴ steps underflow or round to 1.0 in them."""
    dtype = dtype or torch.get_default_dtype()
    if dtype in (torch.float32, torch.float64):
        return dtype, dtype
    if dtype in (torch.float16, torch.bfloat16):
        return dtype, torch.float32
    raise ValueError(
        f"{method}(dtype={dtype}): draws are float16, bfloat16, float32 or float64 (complex for complex_normal)."
    )


def _cast(values: torch.Tensor, dtype: torch.dtype, low: float, high: float) -> torch.Tensor:
    if values.dtype == dtype:
        return values
    # Rounding to 16 bits can land on `high`; [low, high) is kept by stepping back one ulp.
    rounded = values.to(dtype)
    return torch.where(
        rounded >= high,
        torch.nextafter(torch.tensor(high, dtype=dtype), torch.tensor(low, dtype=dtype)),
        rounded,
    )


def _as_shape(shape: Sequence[int] | int) -> tuple[int, ...]:
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)
