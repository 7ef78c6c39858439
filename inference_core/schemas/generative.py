"""Option schemas of the generative methods (GPVI, Ratzlaff et al. 2021; amortised SVGD/GFSF/KSD).

Defaults follow the paper where it states one (Adam, generator lr 1e-3, three hidden layers for the pairwise
helper, λ = 1, bandwidth med²/log n; Appendix B, Table 7; the helper's lr is 1e-3, not the paper's 1e-4: see
HelperOptions) and ALF otherwise (docs/implementation-notes.md, "GPVI (ALF)"). Every field is documented in its `description`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from inference_core.memory import (
    ACTIVATION_COPIES,
    DENSE_SOLVE_MAX_N,
    PARAMETER_COPIES,
    dense_solve_bytes,
    generative_bytes,
    generator_noise_width,
    memory_rule,
    mlp_parameters,
)
from inference_core.schemas.auto import FlowOptions
from inference_core.schemas.common import StrictModel
from inference_core.schemas.function_space import FunctionSpaceDirectionOptions
from inference_core.schemas.methods import (
    GENERATIVE_CRITIC_HIDDEN,
    MAX_WIDTH,
    Activation,
    CriticOptions,
    NoiseHoldoutOptions,
    OptimizerOptions,
)


def _widths_ok(widths: list[int], what: str) -> None:
    if any(not 1 <= w <= MAX_WIDTH for w in widths):
        raise ValueError(f"{what} widths must be in [1, {MAX_WIDTH}]")


class GeneratorOptions(StrictModel):
    """The generator f(z) = g(z[:k]) + λz (GPVI eq. 6), g an MLP k → hidden... → d with a linear output.

    `hidden: []` is a linear generator (the paper's Gaussian and BLR experiments). `lambda` (JSON key)
    defaults to: GPVI 1.0 when k < d (paper §3.2), none (λ = 0, f = g) when k = d (ALF) unless trained in
    whitened coordinates (`precondition`), where it is 1.0 and the generator starts as f(z) = z; for targets with
    their own initialisation (BNN hypernetworks) 0.001 when k < d (λz floors every weight's sd at λ: ALF's MNIST
    hypernetwork has 0.1, and 0.01 still widened the predictive measurably: docs/reproduction.md, GPVI BNN and UCI
    sections); amortised
    methods 0 (noise of width k). With λ > 0 the noise has d columns, else k.
    """

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, validate_by_name=True, validate_by_alias=True,
                              serialize_by_alias=True)

    hidden: list[int] = Field(default_factory=lambda: [64, 64], max_length=8, description="hidden widths of g")
    activation: Activation = "relu"
    noise_dim: int | None = Field(default=None, ge=1, le=65_536,
                                  description="k, the noise prefix g reads; default min(d, 64)")
    lam: float | None = Field(default=None, ge=0, le=100, alias="lambda", description="λ in f = g(z[:k]) + λz")
    lambda_trainable: bool = Field(default=False, description="train log λ with its own Adam")
    lambda_lr: float = Field(default=1e-3, gt=0, le=10, description="Adam lr of log λ")
    structure: Literal["residual", "coupling"] | None = Field(
        default=None,
        description="'residual': f(z) = g(z[:k]) + λz (eq. 6), which can fold (det of its top k×k Jacobian block "
        "changing sign across draws); 'coupling': injective by construction, the top k outputs an affine coupling "
        "flow of z[:k] with an elementwise affine output, the other d − k outputs W φ(z[:k]) + b + λ z[k:] (exact "
        "log q everywhere; needs λ > 0 and k < d; GPVI then solves its k×k Jacobian block exactly). Default: "
        "'residual' (for GPVI on BNN hypernetworks methods.generative.gpvi.DEFAULT_BNN_STRUCTURE, also 'residual': "
        "'coupling' costs 1.7× a step, its Figure 1 band is no wider in the gap than on the data, and on UCI split 0 "
        "it was better on 2 sets and worse on 2; samplers.generator)")
    coupling_layers: int = Field(default=4, ge=1, le=16, description="structure 'coupling': affine couplings in T")
    coupling_hidden: int = Field(default=64, ge=1, le=4096,
                                 description="structure 'coupling': width of each coupling net's two tanh layers")

    @model_validator(mode="after")
    def _check(self) -> GeneratorOptions:
        _widths_ok(self.hidden, "generator hidden")
        if self.lambda_trainable and self.lam is not None and self.lam == 0:
            raise ValueError("a trainable lambda needs lambda > 0")
        if self.structure == "coupling" and self.lam is not None and self.lam == 0:
            raise ValueError("structure 'coupling' needs lambda > 0")
        return self


class GenerativeBandwidthOptions(StrictModel):
    """Bandwidth h of k(a, b) = exp(−||a − b||²/h) (GPVI Appendix B.2 with the erratum's minus sign).

    `median`: h = med / divisor(n), med the median of the squared distances over all pairs between the two
    batches (the updated batch and the expectation batch; over distinct pairs for one-batch forms), n the
    number of particles (generator batch size); h = 1 if med = 0. `fixed`: h = value.
    Divisors: `log_n` (paper), `log_n_plus_1`, `log_n_squared` (ALF's GPVI: log(n·n')), `none`.
    """

    rule: Literal["median", "fixed"] = "median"
    divisor: Literal["log_n", "log_n_plus_1", "log_n_squared", "none"] = "log_n"
    value: float | None = Field(default=None, gt=0, le=1e12)

    @model_validator(mode="after")
    def _check(self) -> GenerativeBandwidthOptions:
        if (self.rule == "fixed") != (self.value is not None):
            raise ValueError("`value` is required by rule 'fixed' and only used by it")
        return self


def _generator_optimizer() -> OptimizerOptions:
    return OptimizerOptions(name="adam", lr=1e-3)


class GenerativeOptions(StrictModel):
    generator: GeneratorOptions = Field(default_factory=GeneratorOptions)
    optimizer: OptimizerOptions = Field(default_factory=_generator_optimizer,
                                        description="generator optimiser (paper: Adam, lr 1e-3)")
    entropy_weight: float = Field(default=1.0, ge=0, le=1e6,
                                  description="multiplies the repulsive (entropy) term; 1 targets the posterior")
    dtype: Literal["float32", "float64"] = "float32"
    precondition: Literal["none", "pathfinder", "flow", "auto"] = Field(
        default="none",
        description="'pathfinder': train in whitened coordinates x = μ + R u from a Pathfinder Gaussian N(μ, R Rᵀ) "
        "(the sampler stores the affine output and maps its draws back; a generator with λ > 0 starts there: "
        "g's output layer is zeroed, so f(z) = λz, and GPVI's default λ is 1 when whitened); 'flow': that, then "
        "`auto`'s normalising flow T fitted by reverse KL (`flow`), x = μ + R·T(u), and the generator starts at the "
        "flow's own draws (the sampler stores T too); 'auto': 'flow' where Pathfinder's paths settle at no mode or "
        "end far apart or its Gaussian misses mass (`auto`'s rule, docs/method-choice.md), else 'pathfinder', and "
        "'none' where the target has its own initialisation (BNN weights). GPVI's default is 'auto'")
    flow: FlowOptions = Field(default_factory=FlowOptions, description="the flow of precondition 'flow'")
    lr_schedule: Literal["constant", "cosine"] | None = Field(
        default=None,
        description="the generator's learning rate over the job's `steps`: 'constant' (`optimizer.lr` throughout), "
        "'cosine' (from `optimizer.lr` at the first step down to `lr_final_factor` × it at the last, half a cosine; "
        "the run loop gives the method its step count, and a method stepped by hand without one runs constant). "
        "Default: 'cosine' for GPVI's BNN hypernetworks (see inference_core/methods/generative/gpvi.py), "
        "'constant' elsewhere")
    lr_final_factor: float = Field(default=0.1, gt=0, le=1,
                                   description="'cosine': the last step's learning rate as a share of `optimizer.lr`")


class GenerativeKernelOptions(StrictModel):
    """The RBF kernel of the kernel generative methods, `options.kernel` as the particle methods spell it (only its
    `bandwidth` is chosen here: the generative methods take the rules `median` and `fixed`)."""

    bandwidth: GenerativeBandwidthOptions = Field(default_factory=GenerativeBandwidthOptions)


def moved_bandwidth(data: Any, method: str) -> Any:
    """A `model_validator(mode="before")` step: the deprecated `options.bandwidth` of the generative methods becomes
    `options.kernel.bandwidth`, the spelling of the particle methods (docs/api.md, "Deprecated spellings")."""
    if not isinstance(data, dict) or data.get("bandwidth") is None:
        return data
    data = dict(data)
    bandwidth = data.pop("bandwidth")
    kernel = data.get("kernel")
    if isinstance(kernel, BaseModel):
        kernel = kernel.model_dump()
    kernel = dict(kernel) if isinstance(kernel, dict) else {}
    if "bandwidth" in kernel:
        raise ValueError(f"{method}: give the bandwidth once, as `kernel.bandwidth` (`bandwidth` is its deprecated "
                         "spelling)")
    data["kernel"] = {**kernel, "bandwidth": bandwidth}
    return data


class KernelGenerativeOptions(GenerativeOptions):
    @model_validator(mode="before")
    @classmethod
    def _bandwidth_spelling(cls, data: Any) -> Any:
        return moved_bandwidth(data, "options")

    kernel: GenerativeKernelOptions = Field(default_factory=GenerativeKernelOptions,
                                            description="the kernel: its `bandwidth` rule (GPVI Appendix B.2)")
    bandwidth: GenerativeBandwidthOptions | None = Field(
        default=None, exclude=True, deprecated=True,
        description="Deprecated: use options.kernel.bandwidth (moved there when given)")
    expectation_particles: int | None = Field(
        default=None, ge=2, le=100_000, description="size n' of the independent expectation batch (default n)")


#: Default `hidden_layers` of each GPVI helper.
HELPER_LAYERS = {"pairwise": 3, "matrix": 1}


class HelperOptions(StrictModel):
    """GPVI's helper network (Appendix B.1): trained `steps` times per generator step on the current batch.

    pairwise: h(z'[:k], w) → k, one ReLU layer per input branch (width `hidden_width`), concatenated, then
    `hidden_layers` ReLU layers of width 2·hidden_width, linear output (ALF's InverseMVPAlgorithm).
    Default 32 wide, 3 layers (ALF).
    matrix: P(z'[:k]) → k×k, an MLP with `hidden_layers` ReLU layers of width `hidden_width`, trained on
    `probes` random N(0, I_k) vectors per z' with the same residual. Default 32 wide, 1 layer (its input is
    z'[:k] alone; at small sizes its update costs per layer, not per width: docs/benchmarks.md).
    """

    def resolved_optimizer(self) -> OptimizerOptions:
        if self.optimizer is not None:
            return self.optimizer
        return OptimizerOptions(name="adam", lr=1e-3)

    def resolved_layers(self, helper: str) -> int:
        return self.hidden_layers if self.hidden_layers is not None else HELPER_LAYERS[helper]

    hidden_width: int = Field(default=32, ge=1, le=MAX_WIDTH)
    hidden_layers: int | None = Field(default=None, ge=0, le=8, description="default: 3 (`pairwise`), 1 (`matrix`)")
    optimizer: OptimizerOptions | None = Field(
        default=None, description="helper optimiser; default Adam lr 1e-3 (the paper's 1e-4 for `pairwise` learns "
        "the small singular directions of the Jacobian too slowly: the generator collapses along them; `matrix`: "
        "its k×k output must track the generator's Jacobian as fast as the generator moves)")
    steps: int = Field(default=1, ge=1, le=100, description="helper updates per generator step")
    probes: int = Field(default=8, ge=1, le=1024, description="matrix helper: random probes per z'")


class GPVIExpectationOptions(KernelGenerativeOptions):
    """`expectation` of the GPVI methods: the batch z' that eq. 9's expectation E_{z'} runs over."""

    expectation: Literal["independent", "same"] | None = Field(
        default=None,
        description="'independent': a second batch z' (ALF's estimator; `expectation_particles` sets its size); "
        "'same': the updated batch itself (z' = z), so each draw's own score enters its driving term with k(z, z) = 1 "
        "(the one-batch Monte-Carlo estimate of eq. 9, as classic SVGD). Default: 'same' for BNN hypernetworks (targets "
        "with their own initialisation), 'independent' elsewhere. Measured on UCI Energy split 0 (full schedule): "
        "independent test RMSE 2.44, NLL 2.40 (the kernel-weighted average of other draws' scores drives every draw "
        "alike: k(z', z) ≈ 1/(n + 1) between independent draws at the median bandwidth); same 0.47 / 0.95")

    noise_holdout: float = Field(
        default=0.1, ge=0, lt=0.5,
        description="[inferred] a `bnn` regression with a learnt noise: share of the training rows held out of the "
        "likelihood; at read-out every draw's noise std is multiplied by one factor fitted to those rows' predictive "
        "log-likelihood (methods.generative.noise_calibration; `holdout_noise_factor` in the final metrics), so that "
        "draws that fit badly are not also over-confident. Measured on UCI splits 0-4 (benchmarks/reproduce_uci.py's "
        "GPVI protocol), mean test NLL 0 → 0.1: Boston 2.55 → 2.44, Concrete 3.28 → 3.09, Energy 0.85 → 0.79, "
        "Yacht 1.40 → 1.04, Wine 0.97 → 0.96. 0 (or fewer than 20 rows held out): none held out, the posterior of all "
        "rows; unused elsewhere (a "
        "fixed noise, classification, other targets, training whitened)")

    @model_validator(mode="after")
    def _check_expectation(self) -> GPVIExpectationOptions:
        if self.expectation == "same" and self.expectation_particles is not None:
            raise ValueError("expectation_particles sizes the independent batch; 'same' uses the updated batch")
        return self


class GPVIOptions(GPVIExpectationOptions):
    """GPVI with a learned Jacobian-inverse helper. `helper`: `pairwise` (the paper's h(z', ∇k), evaluated
    on all n'·n pairs) or `matrix` (a k×k inverse per z', then kernel matmuls: no network on the pairs)."""

    helper: Literal["pairwise", "matrix"] = Field(
        default="matrix",
        description="'matrix' by default (measured on the robustness suite with precondition 'auto' and 3,000 steps: "
        "6 of the 8 problems with d ≤ 20 within issue 14's bars, about 10× faster per step than 'pairwise'); "
        "'pairwise' is the paper's")
    helper_network: HelperOptions = Field(default_factory=HelperOptions)
    precondition: Literal["none", "pathfinder", "flow", "auto"] = Field(
        default="auto", description="see GenerativeOptions; 'auto' whitens (through the flow where Pathfinder says "
        "one is needed) unless the target has its own init")


class GPVIExactOptions(GPVIExpectationOptions):
    """GPVI with the k×k Jacobian block formed (torch.func) and solved exactly (torch.linalg.solve)."""


class AmortizedSVGDOptions(KernelGenerativeOptions):
    """`expectation`: `independent` draws a second batch for the expectation (ALF's svgd3, default);
    `same` uses the updated batch itself (classic SVGD on the batch, the one-batch form)."""

    expectation: Literal["independent", "same"] = "independent"
    backend: Literal["auto", "dense", "chunked", "triton", "keops"] = "auto"


class AmortizedGFSFOptions(KernelGenerativeOptions):
    """GFSF score estimate on the generated batch: ∇log q ≈ −(K + εI)⁻¹ Σ_j ∇_{x_j} k(x_j, ·)."""

    gfsf_eps: float = Field(default=1e-5, gt=0, le=1.0, description="ε (ALF's Generator: 1e-5)")


class AmortizedKSDOptions(GenerativeOptions):
    """Amortised KSD: the generator's options and the KSD critic (`CriticOptions`, shared with `ksd`)."""

    critic: CriticOptions = Field(default_factory=CriticOptions)

    @model_validator(mode="after")
    def _critic_hidden(self) -> AmortizedKSDOptions:
        self.critic = self.critic.with_hidden(GENERATIVE_CRITIC_HIDDEN)
        return self


class AmortizedFSVGDOptions(GenerativeOptions, FunctionSpaceDirectionOptions, NoiseHoldoutOptions):
    """Amortised f-SVGD: the generator's options (`GenerativeOptions`: `generator`, `optimizer`, `entropy_weight`,
    `dtype`) and f-SVGD's function-space options (`FunctionSpaceDirectionOptions`: `extra_points`, `ptb_scale`,
    `prior_draws`, `prior_points`, `eigen_floor`, `kernel`, `bandwidth_floor`, `noise_init`, ...) and
    `noise_holdout` (each draw's learnt σ follows the held-out rows' likelihood), composed by inheritance. The generator trains on the BNN's own weight coordinates, so `precondition` may only be 'none'
    or 'auto' (which is 'none' for network weights); `flow` is unused."""

    @model_validator(mode="after")
    def _check_precondition(self) -> AmortizedFSVGDOptions:
        if self.precondition not in ("none", "auto"):
            raise ValueError("amortized_fsvgd trains on the network's own weights: precondition must be 'none' "
                             "(or 'auto', which is 'none' for network weights)")
        return self


# ---------------------------------------------------------------------------------------------------------
# Memory rules (inference_core.memory): the generator's parameters and activations, plus each method's own.


@memory_rule(GenerativeOptions)
def _generative_memory(options: GenerativeOptions, n: int, d: int, itemsize: int) -> int:
    return generative_bytes(options, n, d, itemsize)


@memory_rule(KernelGenerativeOptions)
def _kernel_generative_memory(options: KernelGenerativeOptions, n: int, d: int, itemsize: int) -> int:
    """With the expectation batch of n' = `expectation_particles` (default n) draws."""
    return generative_bytes(options, n, d, itemsize, options.expectation_particles or n)


@memory_rule(GPVIExactOptions)
def _gpvi_exact_memory(options: GPVIExactOptions, n: int, d: int, itemsize: int) -> int:
    """Plus the k×d Jacobian block of each draw."""
    k = generator_noise_width(options, d)
    return _kernel_generative_memory(options, n, d, itemsize) + ACTIVATION_COPIES * n * k * d * itemsize


@memory_rule(GPVIOptions)
def _gpvi_memory(options: GPVIOptions, n: int, d: int, itemsize: int) -> int:
    """Plus the helper: `matrix`, an MLP k → k×k and its probes per draw; `pairwise`, run on all n·n' pairs with
    layers of width 2·hidden_width."""
    k = generator_noise_width(options, d)
    helper = options.helper_network
    total = _kernel_generative_memory(options, n, d, itemsize)
    if options.helper == "matrix":
        layers = [helper.hidden_width] * helper.resolved_layers("matrix")
        total += PARAMETER_COPIES * mlp_parameters([k, *layers, k * k]) * itemsize
        return total + ACTIVATION_COPIES * n * (k * k + helper.probes * k) * itemsize
    pair_width = k + helper.resolved_layers("pairwise") * 2 * helper.hidden_width
    return total + ACTIVATION_COPIES * n * (options.expectation_particles or n) * pair_width * itemsize


@memory_rule(AmortizedGFSFOptions)
def _amortized_gfsf_memory(options: AmortizedGFSFOptions, n: int, d: int, itemsize: int) -> int:
    """Plus GFSF's dense float64 solve up to DENSE_SOLVE_MAX_N draws."""
    dense = dense_solve_bytes(n) if n <= DENSE_SOLVE_MAX_N else 0
    return _kernel_generative_memory(options, n, d, itemsize) + dense
