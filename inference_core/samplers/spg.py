"""Function-space samplers: a trained stochastic process generator (SPG, FVI: Ma & Hernández-Lobato 2021,
eq. 10) frozen on the CPU in float32. A draw is a function; `sample(n, seed, x)` evaluates n of them at x.

`sample(n, seed, x)`, x [m, p] in the data's ORIGINAL units, does in this order and nothing else:
  1. one stream g = torch.Generator("cpu").manual_seed(seed), two calls (`SPG_NOISE_DRAW`):
     eps_h [n, H], then eps_a [n, S] (float32 standard normal, row-major) — none depends on x;
  2. u = (x − x_mean) / x_std (the config's `model.standardization`; identity when null);
  3. h = q.mean + exp(q.log_std)·eps_h;  (μ_a, r) = decoder(h) split in halves;  σ_a = softplus(r) + 1e-4;
     a = μ_a + σ_a·eps_a;
  4. Φ = [φ_1(u) … φ_S(u)] [m, S] (each φ_s the MLP `basis.weights[s]`, layout of
     `targets.models.network.MLP(p, basis_hidden, 1)`);  g = a Φᵀ (model units);
  5. y = y_mean + y_std·g (original units; identity when the standardisation has no y part).
Draw i is one function: its values at a point do not depend on the other rows of x (up to float32 matmul
rounding), and the same (sampler, n, seed, x) gives bit-identical values in one build of torch.
The SPG's white noise ν (std `generator.white_noise_std`) is white, so at distinct inputs it acts as
observation noise: it is not in the draws but in `model.noise.std` = √(σ_π² + σ_ν²) (model units), which
predictions add.

ONNX (`to_onnx_bytes`): inputs "x" [m, p] (original units), "eps_h" [n, H], "eps_a" [n, S] → "samples"
[n, m]; feed the noise exactly as drawn above.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from inference_core.samplers import archive
from inference_core.samplers.base import FrozenSampler
from inference_core.samplers.config import (
    FORMAT,
    FORMAT_VERSION,
    SPG_NOISE_DRAW,
    SPGSamplerConfig,
    validate_config,
)
from inference_core.samplers.density import DensityUnavailable
from inference_core.samplers.generator import generator_forward
from inference_core.targets.models.network import MLP

#: Floor of the decoder's std σ_a = softplus(raw) + SPG_MIN_STD.
SPG_MIN_STD = 1e-4
#: Largest n·m (values) or n·(H + S) (noise) one `sample` call may produce (1 GiB of float32).
MAX_SPG_VALUES = 2**28


def basis_values(weights: Tensor, u: Tensor, hidden: list[int], activation: str) -> Tensor:
    """Φ [m, S]: the S basis networks (flat rows of `weights` [S, D]) at inputs u [m, p] (model units)."""
    network = MLP(u.shape[1], hidden, 1, activation)
    return network.forward(weights, u)[..., 0].T


def decode(tensors: dict[str, Tensor], h: Tensor, n_hidden: int, activation: str) -> tuple[Tensor, Tensor]:
    """(μ_a, σ_a) [n, S] of p_θ(a | h) for h [n, H]; `tensors` holds the decoder's mlp-generator names."""
    out = generator_forward(tensors, h, input_dim=h.shape[1], n_hidden=n_hidden, activation=activation, lam=0.0)
    mean, raw = out.chunk(2, dim=-1)
    return mean, F.softplus(raw) + SPG_MIN_STD


def _decoder_tensors(tensors: dict[str, Tensor]) -> dict[str, Tensor]:
    return {name.removeprefix("decoder."): t for name, t in tensors.items() if name.startswith("decoder.")}

#: Why an SPG has no log q for an importance weight. Given the decoder input h, the function values at m inputs
#: are Gaussian (a linear map of a ~ N(μ_a(h), σ_a(h)²)), but their marginal is a continuous mixture over h
#: with no closed form, and — more to the point — the FVI target is a function-space posterior whose density
#: at finitely many inputs is not available either, so there is no p̃/q to weigh.
DENSITY_UNAVAILABLE = ("a function-space (spg) sampler's draws have no tractable density (a continuous mixture "
                       "over the decoder noise) and its function-space target no unnormalised density at finite "
                       "inputs: no log q, importance weights or correction exist for it")


class SPGSampler(FrozenSampler):
    """An spg config (JSON-ready dict) and float32 CPU tensors; rebuilt from those two only."""

    takes_inputs = True

    def __init__(self, config: dict[str, Any], tensors: dict[str, Tensor]):
        parsed = validate_config(config)
        if not isinstance(parsed, SPGSamplerConfig):
            raise ValueError("SPGSampler needs a config with generator kind 'spg'")
        frozen = archive.frozen_tensors(parsed.generator.shapes(), tensors)
        self._parsed = parsed
        self._config = parsed.model_dump(mode="json")
        self._tensors = frozen
        stats = parsed.model.standardization
        p = parsed.generator.input_dim
        self._x_mean = torch.tensor(stats.x_mean if stats else [0.0] * p, dtype=torch.float32)
        self._x_std = torch.tensor(stats.x_std if stats else [1.0] * p, dtype=torch.float32)
        has_y = stats is not None and stats.y_mean is not None
        self._y_mean = float(torch.tensor(stats.y_mean if has_y else 0.0, dtype=torch.float32))
        self._y_std = float(torch.tensor(stats.y_std if has_y else 1.0, dtype=torch.float32))

    @classmethod
    def build(cls, *, method: str, target_kind: str, target_dim: int, generator: dict[str, Any],
              tensors: dict[str, Tensor], model: dict[str, Any]) -> SPGSampler:
        config = {"format": FORMAT, "format_version": FORMAT_VERSION, "method": method, "dtype": "float32",
                  "generator": {"kind": "spg", **generator},
                  "noise": {"distribution": "standard_normal", "dtype": "float32", "draw": SPG_NOISE_DRAW},
                  "target": {"kind": target_kind, "dim": target_dim}, "layout": None, "model": model}
        return cls(config, tensors)

    # ---- description -------------------------------------------------------------------------------------

    @property
    def input_dim(self) -> int:
        return self._parsed.generator.input_dim

    @property
    def noise_dim(self) -> None:
        return None

    # ---- drawing -----------------------------------------------------------------------------------------

    def check_inputs(self, x: Any) -> Tensor:
        """x as a float32 [m, p] tensor; ValueError for a wrong shape or non-finite values."""
        if x is None:
            raise ValueError(f"this sampler draws functions: give inputs x of shape [m, {self.input_dim}]")
        x = torch.as_tensor(x, dtype=torch.float32)
        if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] != self.input_dim:
            raise ValueError(f"x must have shape [m, {self.input_dim}] with m >= 1, got {list(x.shape)}")
        if not bool(torch.isfinite(x).all()):
            raise ValueError("x holds NaN or infinite values")
        return x

    def sample_noise(self, n: int, seed: int) -> tuple[Tensor, Tensor]:
        """(eps_h [n, H], eps_a [n, S]) as `sample(n, seed, x)` draws them (module docstring)."""
        from inference_core.samplers.sampler import _check_count

        _check_count(n, seed)
        gen = self._parsed.generator
        if n * (gen.latent_dim + gen.n_basis) > MAX_SPG_VALUES:
            raise ValueError(f"n={n} draws exceed the cap of {MAX_SPG_VALUES} values per call")
        g = torch.Generator(device="cpu").manual_seed(seed)
        eps_h = torch.randn((n, gen.latent_dim), generator=g, dtype=torch.float32)
        eps_a = torch.randn((n, gen.n_basis), generator=g, dtype=torch.float32)
        return eps_h, eps_a

    def forward(self, x: Tensor, eps_h: Tensor, eps_a: Tensor) -> Tensor:
        """Function values [n, m] in original units for inputs x [m, p] (original units) and given noise."""
        gen = self._parsed.generator
        t = self._tensors
        with torch.no_grad():
            u = (x - self._x_mean) / self._x_std
            h = t["q.mean"] + t["q.log_std"].exp() * eps_h
            a_mean, a_std = decode(_decoder_tensors(t), h, len(gen.decoder_hidden), gen.decoder_activation)
            a = a_mean + a_std * eps_a
            basis = basis_values(t["basis.weights"], u, gen.basis_hidden, gen.basis_activation)
            return self._y_mean + self._y_std * (a @ basis.T)

    def sample(self, n: int, seed: int, x: Any = None, *, with_log_q: bool = False) -> Tensor:
        """n function draws at x [m, p] (original units): [n, m] float32, bit-identical for the same (n, seed, x).
        `with_log_q` raises DensityUnavailable: see `DENSITY_UNAVAILABLE`."""
        if with_log_q:
            raise DensityUnavailable(DENSITY_UNAVAILABLE)
        x = self.check_inputs(x)
        if n * x.shape[0] > MAX_SPG_VALUES:
            raise ValueError(f"n·m = {n * x.shape[0]} values exceed the cap of {MAX_SPG_VALUES} per call")
        return self.forward(x, *self.sample_noise(n, seed))

    # ---- serialisation -----------------------------------------------------------------------------------

    def to_zip_bytes(self) -> bytes:
        return archive.write_zip(self._config, self._tensors)

    def to_onnx_bytes(self) -> bytes:
        from inference_core.samplers.onnx_export import export_spg_onnx

        return export_spg_onnx(self._config, self._tensors)
