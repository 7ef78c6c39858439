"""Deterministic seeding helpers: stable across processes, Python versions and particle counts."""

from __future__ import annotations

import torch

_MASK64 = (1 << 64) - 1


def splitmix64(value: int) -> int:
    """One round of SplitMix64 (Steele et al. 2014): a well-mixed 64-bit hash of an integer."""
    value = (value + 0x9E3779B97F4A7C15) & _MASK64
    value = ((value ^ (value >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    value = ((value ^ (value >> 27)) * 0x94D049BB133111EB) & _MASK64
    return value ^ (value >> 31)


def derive_seed(seed: int, *stream: int) -> int:
    """A 63-bit seed for sub-stream `stream` of `seed` (e.g. particle i, or the minibatch stream)."""
    value = splitmix64(seed)
    for part in stream:
        value = splitmix64(splitmix64(value) ^ part)  # chained, so (1, 2) and (2, 1) differ
    return value & ((1 << 63) - 1)


def per_particle_normal(seed: int, n: int, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """Row i is N(0, I) drawn from its own stream derived from (seed, i): particle i does not depend on n."""
    rows = torch.empty(n, dim, dtype=torch.float64)
    generator = torch.Generator()
    for i in range(n):
        generator.manual_seed(derive_seed(seed, 0, i))
        rows[i] = torch.randn(dim, generator=generator, dtype=torch.float64)
    return rows.to(dtype)
