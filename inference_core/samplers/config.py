"""The sampler's `config.json`: a versioned, JSON-only description of a trained generator (never code).

    {
      "format": "parvis.sampler", "format_version": 1,
      "method": "gpvi",
      "dtype": "float32",
      "generator": {"kind": "mlp", "noise_dim": 2, "input_dim": 2, "hidden": [], "activation": "relu",
                    "output_dim": 2, "lambda": 0.0},
      "noise": {"distribution": "standard_normal", "dtype": "float32", "draw": NOISE_DRAW},
      "target": {"kind": "gaussian", "dim": 2},
      "layout": null,                     # BNN hypernetworks: [{"name", "shape", "offset"}, ...]
      "model": null                       # predictive samplers: PredictiveModelConfig below
    }

The `generator` block is discriminated by `kind`: "mlp" (above) or "spg", a stochastic process generator of
FVI whose draws are functions evaluated at inputs x (`SPGSamplerConfig`: noise `SPG_NOISE_DRAW`, `model`
required).

f(z) = output.weight · φ(z[:, :input_dim]) + output.bias + lambda · z, φ the hidden stack (see
`samplers.generator`); when lambda = 0 the noise has input_dim columns, else output_dim. Optional entries, written
only when present: `"affine": true` (x = affine.shift + affine.root · f(z), a generator trained in whitened
coordinates) and with it `"flow": {"layers", "hidden"}` (x = shift + root · T(f(z)), T the coupling flow of
`inference_core.coupling` whose tensors are named "flow.*"), and `"structure": "coupling"` with `"coupling":
{"layers", "hidden"}`: the injective generator f(z) = [t(z[:k]); W φ(z[:k]) + b + λ z[k:]] of
`samplers.generator` (output layer d − k rows, top block tensors "top.*"; absent means "residual").
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from inference_core.coupling import flow_shapes
from inference_core.samplers.generator import parameter_shapes
from inference_core.schemas.common import StrictModel

FORMAT = "parvis.sampler"
FORMAT_VERSION = 1
SUPPORTED_VERSIONS = (1,)
GENERATOR_KINDS = ("mlp", "spg")
#: How `Sampler.sample_noise(n, seed)` draws z (row-major [n, noise_dim], one call, CPU, float32).
NOISE_DRAW = ("torch.randn((n, noise_dim), generator=torch.Generator('cpu').manual_seed(seed), "
              "dtype=torch.float32)")
#: How an "spg" sampler draws its noise for `sample(n, seed, x)` with m = len(x): three calls on one stream.
SPG_NOISE_DRAW = ("g = torch.Generator('cpu').manual_seed(seed); eps_h = torch.randn((n, latent_dim), generator=g, "
                  "dtype=torch.float32); eps_a = torch.randn((n, n_basis), generator=g, dtype=torch.float32)")
MAX_DIM = 10_000_000
MAX_WIDTH = 65_536
MAX_HIDDEN_LAYERS = 16
#: Largest parameter count a sampler may hold (1 GiB of float32).
MAX_PARAMETERS = 2**28

Activation = Literal["relu", "tanh", "sigmoid", "softplus", "elu", "leaky_relu", "silu", "gelu"]


class FlowConfig(StrictModel):
    """A normalising flow between the generator and the affine output (`precondition: "flow"`): x = shift +
    root·T(f(z)), T a stack of `layers` affine couplings whose nets have two hidden layers of `hidden`
    (inference_core.coupling.CouplingFlow; its tensors are "flow.layers.{l}.mask" and "flow.layers.{l}.net.{0,2,4}
    .{weight,bias}")."""

    layers: int = Field(ge=1, le=64)
    hidden: int = Field(ge=1, le=4096)


class CouplingTopConfig(StrictModel):
    """The top block t(u) = shift + exp(log_scale) ⊙ T(u) of a "coupling" generator (samplers.generator): T has
    `layers` affine couplings whose nets have two tanh layers of `hidden` (tensors "top.shift", "top.log_scale",
    "top.flow.layers.{l}.mask" and "top.flow.layers.{l}.net.{0,2,4}.{weight,bias}")."""

    layers: int = Field(ge=1, le=64)
    hidden: int = Field(ge=1, le=4096)


class GeneratorConfig(StrictModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_by_name=True,
                              validate_by_alias=True, serialize_by_alias=True)

    kind: Literal["mlp"]
    noise_dim: int = Field(ge=1, le=MAX_DIM)
    input_dim: int = Field(ge=1, le=MAX_DIM, description="k: the noise prefix g reads")
    hidden: list[int] = Field(max_length=MAX_HIDDEN_LAYERS)
    activation: Activation
    output_dim: int = Field(ge=1, le=MAX_DIM)
    lam: float = Field(ge=0, le=1e6, alias="lambda")
    affine: bool = Field(default=False, description="an output map x = shift + root·f(z) (whitened training)")
    flow: FlowConfig | None = Field(default=None, description="a coupling flow before the affine map (needs it)")
    structure: Literal["residual", "coupling"] = Field(
        default="residual", description="'residual' f = g(z[:k]) + λz; 'coupling' the injective generator")
    coupling: CouplingTopConfig | None = Field(default=None, description="the top block of structure 'coupling'")

    @model_validator(mode="after")
    def _consistent(self) -> GeneratorConfig:
        if (self.structure == "coupling") != (self.coupling is not None):
            raise ValueError("`coupling` is given exactly with structure 'coupling'")
        if self.structure == "coupling" and not (self.lam > 0 and self.input_dim < self.output_dim):
            raise ValueError("structure 'coupling' needs lambda > 0 and input_dim < output_dim")
        if any(not 1 <= w <= MAX_WIDTH for w in self.hidden):
            raise ValueError(f"hidden widths must be in [1, {MAX_WIDTH}]")
        expected_noise = self.output_dim if self.lam > 0 else self.input_dim
        if self.noise_dim != expected_noise:
            raise ValueError(f"noise_dim must be {expected_noise} (lambda={self.lam}, input_dim={self.input_dim}, "
                             f"output_dim={self.output_dim}), got {self.noise_dim}")
        if self.lam > 0 and self.input_dim > self.output_dim:
            raise ValueError("input_dim cannot exceed output_dim when lambda > 0")
        if self.flow is not None and not self.affine:
            raise ValueError("a generator's flow comes with its affine output map (affine: true)")
        total = sum(math.prod(shape) for shape in self.shapes().values())
        if total > MAX_PARAMETERS:
            raise ValueError(f"the generator has {total} parameters, over the cap of {MAX_PARAMETERS}")
        return self

    def shapes(self) -> dict[str, tuple[int, ...]]:
        coupling = (self.coupling.layers, self.coupling.hidden) if self.coupling is not None else None
        shapes = parameter_shapes(self.input_dim, self.hidden, self.output_dim, self.affine, coupling)
        if self.flow is not None:
            shapes.update(flow_shapes(self.output_dim, self.flow.layers, self.flow.hidden))
        return shapes


class NoiseConfig(StrictModel):
    distribution: Literal["standard_normal"] = "standard_normal"
    dtype: Literal["float32"] = "float32"
    draw: Literal[NOISE_DRAW] = NOISE_DRAW  # type: ignore[valid-type]


class TargetSummary(StrictModel):
    kind: str = Field(min_length=1, max_length=64)
    dim: int = Field(ge=1, le=MAX_DIM)


class LayoutBlock(StrictModel):
    name: str = Field(min_length=1, max_length=128)
    shape: list[int] = Field(max_length=8)
    offset: int = Field(ge=0, le=MAX_DIM)


class NetworkConfig(StrictModel):
    """The MLP whose flat weight vectors a hypernetwork draws (layout in `SamplerConfig.layout`)."""

    hidden: list[int] = Field(max_length=MAX_HIDDEN_LAYERS)
    activation: Activation
    n_outputs: int = Field(ge=1, le=MAX_WIDTH)


class StandardizationConfig(StrictModel):
    """Training-part statistics: the model sees (x − x_mean)/x_std and predicts (y − y_mean)/y_std."""

    x_mean: list[float] = Field(max_length=MAX_WIDTH)
    x_std: list[float] = Field(max_length=MAX_WIDTH)
    y_mean: float | None = None
    y_std: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> StandardizationConfig:
        if len(self.x_mean) != len(self.x_std) or any(s <= 0 for s in self.x_std):
            raise ValueError("x_mean and x_std must have one entry per input and x_std > 0")
        if (self.y_mean is None) != (self.y_std is None):
            raise ValueError("y_mean and y_std come together")
        return self


class FixedNoiseConfig(StrictModel):
    """Regression noise N(0, std²) in the model's (standardised) units, the same for every draw."""

    type: Literal["fixed"] = "fixed"
    std: float = Field(gt=0, le=1e6)


class DrawNoiseConfig(StrictModel):
    """Regression noise carried by each draw: the extra parameter `name` of its weight vector."""

    type: Literal["from_draw"] = "from_draw"
    name: Literal["log_noise_std", "log_noise_precision"]


class PredictiveModelConfig(StrictModel):
    """What `/predict` needs besides the draws: the task, the network a weight draw parameterises (None when
    the sampler draws function values itself), the data standardisation and the observation noise."""

    task: Literal["regression", "classification"]
    n_inputs: int = Field(ge=1, le=MAX_WIDTH)
    n_classes: int | None = Field(default=None, ge=2, le=MAX_WIDTH)
    network: NetworkConfig | None = None
    standardization: StandardizationConfig | None = None
    noise: FixedNoiseConfig | DrawNoiseConfig | None = Field(default=None, discriminator="type")

    @model_validator(mode="after")
    def _consistent(self) -> PredictiveModelConfig:
        if self.task == "classification":
            if self.n_classes is None or self.noise is not None:
                raise ValueError("a classifier has n_classes and no regression noise")
        elif self.n_classes is not None or self.noise is None:
            raise ValueError("a regression model has a noise model and no n_classes")
        if self.standardization is not None and len(self.standardization.x_mean) != self.n_inputs:
            raise ValueError("standardization.x_mean must have n_inputs entries")
        return self


class SamplerConfig(StrictModel):
    format: Literal["parvis.sampler"]
    format_version: Literal[1]
    method: str = Field(min_length=1, max_length=64)
    dtype: Literal["float32"]
    generator: GeneratorConfig
    noise: NoiseConfig
    target: TargetSummary
    layout: list[LayoutBlock] | None = Field(default=None, max_length=10_000)
    model: PredictiveModelConfig | None = None

    @model_validator(mode="after")
    def _consistent(self) -> SamplerConfig:
        if self.target.dim != self.generator.output_dim:
            raise ValueError(f"target.dim {self.target.dim} != generator.output_dim {self.generator.output_dim}")
        if self.layout is not None:
            for block in self.layout:
                if any(s < 0 for s in block.shape):
                    raise ValueError(f"layout block {block.name!r} has a negative extent")
                if block.offset + math.prod(block.shape) > self.target.dim:
                    raise ValueError(f"layout block {block.name!r} runs past the output dimension")
        if self.model is not None and self.model.network is not None:
            names = {block.name for block in self.layout or []}
            if "layer0.weight" not in names:
                raise ValueError("a model with a network needs the weight layout")
            noise = self.model.noise
            if isinstance(noise, DrawNoiseConfig) and noise.name not in names:
                raise ValueError(f"the noise parameter {noise.name!r} is not in the layout")
        return self


def spg_parameter_shapes(input_dim: int, n_basis: int, basis_hidden: list[int], latent_dim: int,
                         decoder_hidden: list[int]) -> dict[str, tuple[int, ...]]:
    """Tensors of an "spg" sampler: the S basis networks as one flat weight row each (`basis.weights`, the
    layout of `targets.models.network.MLP(input_dim, basis_hidden, 1)`), the decoder h → (μ_a, raw σ_a)
    (`decoder.` + the mlp generator's names, output width 2S) and q_η(h) = N(q.mean, exp(q.log_std)²)."""
    sizes = [input_dim, *basis_hidden, 1]
    basis = sum(fan_in * fan_out + fan_out for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True))
    shapes = {"basis.weights": (n_basis, basis)}
    shapes.update({f"decoder.{name}": shape
                   for name, shape in parameter_shapes(latent_dim, decoder_hidden, 2 * n_basis).items()})
    shapes["q.mean"] = (latent_dim,)
    shapes["q.log_std"] = (latent_dim,)
    return shapes


class SPGGeneratorConfig(StrictModel):
    """A stochastic process generator f(x) = Σ_s a_s φ_s(x) + ν (FVI, Ma & Hernández-Lobato 2021, eq. 10):
    h ~ q_η, a ~ N(μ_θ(h), diag σ_θ(h)²), σ_θ = softplus(raw) + 1e-4, ν white noise of std
    `white_noise_std`, all in the model's (standardised) units. Draws are the latent g = Σ_s a_s φ_s; ν, white
    and so indistinguishable from observation noise at distinct inputs, is folded into `model.noise.std`
    (= √(σ_π² + σ_ν²)); see `samplers.spg`."""

    kind: Literal["spg"]
    input_dim: int = Field(ge=1, le=MAX_WIDTH)
    n_basis: int = Field(ge=1, le=MAX_WIDTH)
    basis_hidden: list[int] = Field(max_length=MAX_HIDDEN_LAYERS)
    basis_activation: Activation
    latent_dim: int = Field(ge=1, le=MAX_WIDTH)
    decoder_hidden: list[int] = Field(max_length=MAX_HIDDEN_LAYERS)
    decoder_activation: Activation
    white_noise_std: float = Field(ge=0, le=1e6)

    @model_validator(mode="after")
    def _consistent(self) -> SPGGeneratorConfig:
        if any(not 1 <= w <= MAX_WIDTH for w in [*self.basis_hidden, *self.decoder_hidden]):
            raise ValueError(f"hidden widths must be in [1, {MAX_WIDTH}]")
        total = sum(math.prod(shape) for shape in self.shapes().values())
        if total > MAX_PARAMETERS:
            raise ValueError(f"the generator has {total} parameters, over the cap of {MAX_PARAMETERS}")
        return self

    def shapes(self) -> dict[str, tuple[int, ...]]:
        return spg_parameter_shapes(self.input_dim, self.n_basis, self.basis_hidden, self.latent_dim,
                                    self.decoder_hidden)


class SPGNoiseConfig(StrictModel):
    distribution: Literal["standard_normal"] = "standard_normal"
    dtype: Literal["float32"] = "float32"
    draw: Literal[SPG_NOISE_DRAW] = SPG_NOISE_DRAW  # type: ignore[valid-type]


class SPGSamplerConfig(StrictModel):
    """A function-space sampler: draws f at given inputs. `model` is required: its standardisation maps
    inputs and draws between original and model units, its fixed noise is the learnt σ_π."""

    format: Literal["parvis.sampler"]
    format_version: Literal[1]
    method: str = Field(min_length=1, max_length=64)
    dtype: Literal["float32"]
    generator: SPGGeneratorConfig
    noise: SPGNoiseConfig
    target: TargetSummary
    layout: None = None
    model: PredictiveModelConfig

    @model_validator(mode="after")
    def _consistent(self) -> SPGSamplerConfig:
        if self.model.task != "regression" or self.model.network is not None:
            raise ValueError("an spg sampler models a regression function (task regression, no network)")
        if self.model.n_inputs != self.generator.input_dim:
            raise ValueError(f"model.n_inputs {self.model.n_inputs} != generator.input_dim {self.generator.input_dim}")
        return self


def validate_config(raw: Any) -> SamplerConfig | SPGSamplerConfig:
    """Parse a config dict; ValueError with a message for anything unknown, inconsistent or unsafe."""
    if not isinstance(raw, dict):
        raise ValueError("the sampler config must be a JSON object")
    if raw.get("format") != FORMAT:
        raise ValueError(f"not a Parvis sampler config (format {raw.get('format')!r}, expected {FORMAT!r})")
    version = raw.get("format_version")
    if isinstance(version, bool) or version not in SUPPORTED_VERSIONS:
        raise ValueError(f"unsupported sampler format_version {version!r}; this library reads {SUPPORTED_VERSIONS}")
    generator = raw.get("generator")
    kind = generator.get("kind") if isinstance(generator, dict) else None
    if kind not in GENERATOR_KINDS:
        raise ValueError(f"unsupported generator architecture {kind!r}; known: {', '.join(GENERATOR_KINDS)}")
    try:
        return (SPGSamplerConfig if kind == "spg" else SamplerConfig).model_validate(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(part) for part in first["loc"])
        raise ValueError(f"invalid sampler config: {loc}: {first['msg']}") from None
