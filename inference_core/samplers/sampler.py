"""`Sampler`: a trained generator frozen on the CPU in float32, with seeded draws and its serialisations.

Draws (`sample(n, seed)`), in this order and nothing else:
  1. z = torch.randn((n, noise_dim), generator=torch.Generator("cpu").manual_seed(seed), dtype=torch.float32)
     — one call, row-major, so row i is the i-th noise vector of that stream;
  2. x = f(z) in float32 on the CPU (`samplers.generator.generator_forward`).
With `with_log_q=True` the draws come with log q(x), the generator's exact log-density at each draw, computed
in float64 from the same noise z (`samplers.density`: log N(z; 0, I) − log|det ∂f/∂z|).
The same (sampler, n, seed) therefore gives bit-identical draws in one build of torch on one machine; a client
that rebuilds the sampler from its zip with `inference_core.samplers.load` reproduces them. ONNX consumers
feed `sample_noise(n, seed)` to the graph's input "z".
"""

from __future__ import annotations

from typing import IO, Any

import torch
from torch import Tensor

from inference_core.coupling import CouplingFlow
from inference_core.samplers import archive
from inference_core.samplers.base import FrozenSampler
from inference_core.samplers.config import (
    FORMAT,
    FORMAT_VERSION,
    NOISE_DRAW,
    SamplerConfig,
    SPGSamplerConfig,
    validate_config,
)
from inference_core.samplers.density import Density, generator_density
from inference_core.samplers.generator import TOP_FLOW_PREFIX, GeneratorNetwork, generator_forward
from inference_core.samplers.spg import SPGSampler

#: Largest n·max(noise_dim, output_dim) one `sample` call may produce (1 GiB of float32).
MAX_SAMPLE_ELEMENTS = 2**28


def _check_count(n: Any, seed: Any) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an integer in [0, 2^63), got {seed!r}")


class Sampler(FrozenSampler):
    """A generator's config (JSON-ready dict) and float32 CPU tensors; rebuilt from those two only."""

    #: Draws need no inputs (function-space samplers, `samplers.spg.SPGSampler`, take x).
    takes_inputs = False
    input_dim = None

    def __init__(self, config: dict[str, Any], tensors: dict[str, Tensor]):
        parsed = validate_config(config)
        if not isinstance(parsed, SamplerConfig):
            raise ValueError("Sampler needs a config with generator kind 'mlp' (use samplers.load)")
        frozen = archive.frozen_tensors(parsed.generator.shapes(), tensors)
        self._parsed: SamplerConfig = parsed
        self._config = parsed.model_dump(mode="json")
        if not parsed.generator.affine:  # written only when there is one: older configs stay byte-identical
            self._config["generator"].pop("affine")
        if parsed.generator.flow is None:
            self._config["generator"].pop("flow")
        if parsed.generator.structure == "residual":
            self._config["generator"].pop("structure")
            self._config["generator"].pop("coupling")
        self._tensors = frozen
        #: the flow between generator and affine map, built once (float32 for draws, float64 for densities)
        self._flow = self._flow64 = None
        if parsed.generator.flow is not None:
            self._flow = CouplingFlow.from_tensors(frozen)
            self._flow64 = CouplingFlow.from_tensors({name: value.double() for name, value in frozen.items()})
        #: a "coupling" generator's top-block flow, built once likewise
        self._top = self._top64 = None
        if parsed.generator.structure == "coupling":
            self._top = CouplingFlow.from_tensors(frozen, TOP_FLOW_PREFIX)
            self._top64 = CouplingFlow.from_tensors({name: value.double() for name, value in frozen.items()},
                                                    TOP_FLOW_PREFIX)

    # ---- construction ----------------------------------------------------------------------------------

    @classmethod
    def from_generator(cls, network: GeneratorNetwork, *, method: str, target_kind: str,
                       layout: list[dict[str, Any]] | None = None, model: dict[str, Any] | None = None,
                       affine: tuple[Tensor, Tensor] | None = None, flow: CouplingFlow | None = None) -> Sampler:
        """Snapshot of a training generator (float32 copies; λ rounded to float32 as the forward uses it);
        `affine` = (shift, root) when it was trained in whitened coordinates x = shift + root·u, and `flow` T
        when in a flow's latent space, x = shift + root·T(u)."""
        lam = float(torch.tensor(network.lam_float(), dtype=torch.float32))
        config = {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "method": method,
            "dtype": "float32",
            "generator": {"kind": "mlp", "noise_dim": network.noise_dim, "input_dim": network.input_dim,
                          "hidden": list(network.hidden_sizes), "activation": network.activation,
                          "output_dim": network.output_dim, "lambda": lam,
                          **({"affine": True} if affine is not None else {}),
                          **({"structure": "coupling", "coupling": {"layers": network.coupling_layers,
                                                                    "hidden": network.coupling_hidden}}
                             if network.coupling else {}),
                          **({"flow": {"layers": len(flow.layers), "hidden": flow.hidden}} if flow is not None else {})},
            "noise": {"distribution": "standard_normal", "dtype": "float32", "draw": NOISE_DRAW},
            "target": {"kind": target_kind, "dim": network.output_dim},
            "layout": layout,
            "model": model,
        }
        tensors = network.tensors()
        if affine is not None:
            tensors = {**tensors, "affine.shift": affine[0].detach().to("cpu", torch.float32),
                       "affine.root": affine[1].detach().to("cpu", torch.float32)}
        if flow is not None:
            tensors = {**tensors, **flow.tensors()}
        return cls(config, tensors)

    # ---- description -------------------------------------------------------------------------------------

    @property
    def noise_dim(self) -> int:
        return self._parsed.generator.noise_dim

    @property
    def output_dim(self) -> int:
        return self._parsed.generator.output_dim

    # ---- drawing -----------------------------------------------------------------------------------------

    def sample_noise(self, n: int, seed: int) -> Tensor:
        """The noise `sample(n, seed)` uses: [n, noise_dim] float32 (see the module docstring)."""
        _check_count(n, seed)
        if n * max(self.noise_dim, self.output_dim) > MAX_SAMPLE_ELEMENTS:
            raise ValueError(f"n={n} draws of dimension {self.output_dim} exceed the cap of "
                             f"{MAX_SAMPLE_ELEMENTS} values per call")
        generator = torch.Generator(device="cpu").manual_seed(seed)
        return torch.randn((n, self.noise_dim), generator=generator, dtype=torch.float32)

    def forward(self, z: Tensor) -> Tensor:
        """f(z) for noise z [n, noise_dim] (float32, CPU)."""
        if not isinstance(z, Tensor) or z.ndim != 2 or z.shape[1] != self.noise_dim:
            raise ValueError(f"noise must be a tensor of shape [n, {self.noise_dim}]")
        gen = self._parsed.generator
        with torch.no_grad():
            return generator_forward(self._tensors, z.to(device="cpu", dtype=torch.float32), input_dim=gen.input_dim,
                                     n_hidden=len(gen.hidden), activation=gen.activation,
                                     lam=float(torch.tensor(gen.lam, dtype=torch.float32)), flow=self._flow,
                                     top_flow=self._top)

    def density(self, z: Tensor) -> Density:
        """log q(f(z)) [n] in float64 for noise z [n, noise_dim] and the orientation of f there
        (samplers.density; DensityUnavailable when the draws have no density: λ = 0 with k < d)."""
        if not isinstance(z, Tensor) or z.ndim != 2 or z.shape[1] != self.noise_dim:
            raise ValueError(f"noise must be a tensor of shape [n, {self.noise_dim}]")
        gen = self._parsed.generator
        return generator_density(self._tensors, z, input_dim=gen.input_dim, n_hidden=len(gen.hidden),
                                 activation=gen.activation, lam=float(torch.tensor(gen.lam, dtype=torch.float32)),
                                 output_dim=gen.output_dim, flow=self._flow64, top_flow=self._top64)

    def log_q(self, z: Tensor) -> Tensor:
        """log q(f(z)) [n], float64 (see `density`)."""
        return self.density(z).log_q

    def sample(self, n: int, seed: int, x: Any = None, *, with_log_q: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """n fresh draws [n, output_dim], float32, bit-identical for the same (n, seed); with `with_log_q`,
        (draws, log q [n] float64). `x` must be None: only function-space samplers take inputs."""
        if x is not None:
            raise ValueError("this sampler draws parameter vectors and takes no inputs x")
        z = self.sample_noise(n, seed)
        draws = self.forward(z)
        return (draws, self.log_q(z)) if with_log_q else draws

    # ---- serialisation -----------------------------------------------------------------------------------

    def to_zip_bytes(self) -> bytes:
        """`.zip` with config.json + weights.safetensors; the same sampler gives the same bytes."""
        return archive.write_zip(self._config, self._tensors)

    def to_onnx_bytes(self) -> bytes:
        """ONNX graph "z" [n, noise_dim] → "samples" [n, output_dim] (see samplers.onnx_export)."""
        from inference_core.samplers.onnx_export import export_onnx

        return export_onnx(self._config, self._tensors)


def load(source: bytes | bytearray | memoryview | str | Any | IO[bytes], *,
         max_weights_bytes: int = archive.MAX_WEIGHTS_BYTES) -> Sampler | SPGSampler:
    """Rebuild a Sampler from its zip (a path, bytes, or a binary file object), from config.json and
    weights.safetensors only (an `SPGSampler` for generator kind "spg"). Anything malformed, unknown or
    oversized raises ValueError."""
    data = archive.read_source(source, max_weights_bytes + archive.MAX_CONFIG_BYTES + 4096)
    raw_config, weights = archive.read_zip(data, max_weights_bytes)
    parsed = validate_config(raw_config)
    tensors = archive.read_weights(weights, parsed.generator.shapes())
    if isinstance(parsed, SPGSamplerConfig):
        return SPGSampler(parsed.model_dump(mode="json"), tensors)
    return Sampler(parsed.model_dump(mode="json"), tensors)
