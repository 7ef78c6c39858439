"""`parvis.load_sampler`: a downloaded sampler zip, sampled offline with numpy in and out.

The zip is rebuilt by `inference_core.samplers.load` (config.json + weights.safetensors, never pickle), which
needs torch; it is imported only here, when a sampler is loaded, so the HTTP client works without it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from parvis.errors import ParvisError


class OfflineSampler:
    """The same draws as the server's `/sample` for the same n, seed (and x): bit-identical (docs/api.md)."""

    def __init__(self, sampler: Any):
        self._sampler = sampler

    @property
    def config(self) -> dict[str, Any]:
        return self._sampler.config

    @property
    def layout(self) -> list[dict[str, Any]] | None:
        return self.config.get("layout")

    def sample(self, n: int, seed: int = 0, x: Any = None) -> np.ndarray:
        import torch

        with torch.no_grad():
            draws = self._sampler.sample(n, seed) if x is None else self._sampler.sample(n, seed, x)
        return draws.numpy()


def load_sampler(path: str | Path | bytes) -> OfflineSampler:
    try:
        from inference_core.samplers import load
    except ImportError as exc:
        raise ParvisError("torch_missing", "offline sampling needs the full package with torch "
                          f"(pip install parvis; here: {exc}); the HTTP client alone can sample with "
                          "Client(...).sampler(id).sample(n, seed)") from None
    try:
        return OfflineSampler(load(path))
    except ValueError as exc:
        raise ParvisError("sampler_invalid", f"not a Parvis sampler zip: {exc}") from None
