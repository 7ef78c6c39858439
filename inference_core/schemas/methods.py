"""Method option schemas (the `options` object of a JobSpec), one per method family."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from inference_core.memory import DENSE_SOLVE_MAX_N, dense_solve_bytes, memory_rule, particle_bytes
from inference_core.schemas.common import JsonTuple, StrictModel
from inference_core.schemas.kernels import BandwidthOptions, KernelOptions, SpeedupKernelOptions


class NoiseHoldoutOptions(StrictModel):
    """`noise_holdout` of the generators of functions (`fvi`, `amortized_fsvgd`; methods.holdout)."""

    noise_holdout: float = Field(
        default=0.1, ge=0, lt=0.5,
        description="[inferred] share of the training rows held out of the likelihood to calibrate a learnt noise "
        "std on (methods.holdout): the noise then fits those rows' predictive error instead of the rows the "
        "generator fits, which it overfits (0: none held out, the papers' objective alone; a fixed noise holds out "
        "nothing)")
    holdout_selection_every: int = Field(
        default=100, ge=0, le=1_000_000,
        description="[inferred] with held-out rows (`noise_holdout`), score the held-out predictive log-likelihood "
        "every this many steps (FVI: posterior steps) with the same draws, keep the best-scoring state, and take the "
        "results (draws, sampler, metrics) from it where the final state scores worse by more than one paired "
        "standard error: early stopping, since a generator whose functions adapt to the data can go on fitting its "
        "rows' noise (methods.holdout.HoldoutSelection; 0: the final state)")


class OptimizerOptions(StrictModel):
    """`adagrad_momentum` is the rule of the original SVGD code (Liu & Wang 2016, python/svgd.py)."""

    name: Literal["adam", "sgd", "adagrad_momentum"] = "adam"
    lr: float = Field(default=0.05, gt=0, le=100)
    betas: Annotated[tuple[float, float], JsonTuple] = (0.9, 0.999)
    momentum: float = Field(default=0.0, ge=0, lt=1)
    alpha: float = Field(default=0.9, gt=0, lt=1, description="adagrad_momentum history decay")
    eps: float = Field(default=1e-6, gt=0)


class InitOptions(StrictModel):
    """Initial particles, particle i drawn from its own seeded stream (so it does not depend on n).

    `auto`: the target's own initialisation when it has one (e.g. a BNN's fan-in-scaled weights), else
    `normal`: loc + scale · N(0, I).
    """

    method: Literal["auto", "normal", "target"] = "auto"
    loc: float | list[float] = 0.0
    scale: float = Field(default=1.0, gt=0)


#: the largest dimension `precondition: "pathfinder"` takes (as `auto`'s: Pathfinder forms dense d×d Hessians)
PRECONDITION_MAX_DIM = 2000


class ParticleMethodOptions(StrictModel):
    optimizer: OptimizerOptions = Field(default_factory=OptimizerOptions)
    init: InitOptions = Field(default_factory=InitOptions)
    dtype: Literal["float32", "float64"] = "float32"
    precondition: Literal["none", "pathfinder"] = Field(
        default="none",
        description="'pathfinder': the particles move in coordinates u with x = μ + R u, (μ, R Rᵀ) the Gaussian "
        "that Pathfinder fits (as `auto` and `gpvi` do; its gradients count in grad_evals), so a badly scaled or "
        "correlated posterior looks like N(0, I) to the method; `init` then acts in u (its defaults start the "
        "particles as draws of that Gaussian) and the job's particles are mapped back to x. For targets without "
        "an initialisation of their own (not network weights) of dimension up to 2,000. 'none' (the default) keeps "
        "the papers' setting (docs/method-choice.md has what each gives)")


class SVGDOptions(ParticleMethodOptions):
    kernel: KernelOptions = Field(default_factory=KernelOptions)


# ---------------------------------------------------------------------------------------------------------
# Kernel defaults of the reference implementations (docs/implementation-notes.md, "Median heuristic",
# "w-SGLD-B and pi-SGLD", "GPVI (ALF)"). Each is only a default: every field of `kernel` can be set in a spec.


def _alf_kernel() -> KernelOptions:
    """ALF's ParVIAlgorithm rule (GFSF): median over all n² squared distances, diagonal included, / log n."""
    return KernelOptions(bandwidth=BandwidthOptions(divisor="log_n", include_diagonal=True))


def _fpovi_kernel() -> KernelOptions:
    """thu-ml/fpovi's rule (w-SGLD-B, pi-SGLD): exp(-d² log(n+1)/med), med over the full n×n matrix."""
    return KernelOptions(bandwidth=BandwidthOptions(divisor="log_n_plus_1", include_diagonal=True))


class GFSFOptions(ParticleMethodOptions):
    """GFSF (Liu et al. 2019): φ = ∇log p + (K + εI)⁻¹ Σ_j ∇_{x_j} k(x_j, ·)."""

    kernel: KernelOptions = Field(default_factory=_alf_kernel)
    eps: float = Field(default=1e-5, gt=0, le=1e3, description="ε of the regularised solve (K + εI)⁻¹ (ALF: 1e-5)")
    solve_method: Literal["auto", "cholesky", "cg"] = Field(
        default="auto", description="kernel_solve method: float64 Cholesky up to 8192 particles (auto), or CG"
    )



@memory_rule(GFSFOptions)
def _gfsf_memory(options: GFSFOptions, n: int, d: int, itemsize: int) -> int:
    """The particle rule plus the dense float64 solve, where it is one (`solve_method`: cholesky, or auto up to
    DENSE_SOLVE_MAX_N particles)."""
    dense = options.solve_method == "cholesky" or (options.solve_method == "auto" and n <= DENSE_SOLVE_MAX_N)
    return particle_bytes(options, n, d, itemsize) + (dense_solve_bytes(n) if dense else 0)

class WSGLDOptions(ParticleMethodOptions):
    """w-SGLD-B (Chen et al. 2018; f-POVI Table 1), deterministic blob update."""

    kernel: KernelOptions = Field(default_factory=_fpovi_kernel)


class PiSGLDOptions(WSGLDOptions):
    """pi-SGLD = (w-SGLD-B + SVGD) / 2 with one kernel (f-POVI Table 1; thu-ml/fpovi)."""


#: The activations of the critic (and the generators): inference_core.networks.ACTIVATIONS.
Activation = Literal["relu", "tanh", "sigmoid", "softplus", "elu", "leaky_relu", "silu", "gelu"]
#: The widest hidden layer of a critic or generator.
MAX_WIDTH = 16_384
#: The critic's default hidden widths: `ksd` (ALF's default) and `amortized_ksd` (GPVI Table 7: 1×100).
PARTICLE_CRITIC_HIDDEN = [100, 100]
GENERATIVE_CRITIC_HIDDEN = [100]


def _critic_optimizer() -> OptimizerOptions:
    return OptimizerOptions(name="adam", lr=1e-3)


class CriticOptions(StrictModel):
    """The KSD critic f_ψ: R^d → R^d of `ksd` and `amortized_ksd` (methods.critic.KSDCritic), an MLP without
    BatchNorm (BatchNorm couples the particles and biases the Hutchinson trace; docs/implementation-notes.md, "KSD
    critic"), trained `steps` times per step to maximise E[∇log p·f + tr ∇f] − l2_weight·E||f||² (ALF's minmax
    critic; GPVI Table 7: lr 1e-3, L2 weight 10). `trace`: exact (d backward passes) or Hutchinson (one Gaussian
    probe); `auto` is exact for d ≤ 16 (methods.directions.EXACT_TRACE_MAX_DIM)."""

    @model_validator(mode="before")
    @classmethod
    def _lr_spelling(cls, data: Any) -> Any:
        """The deprecated `lr` (the former `ksd` spelling) is `optimizer.lr`."""
        if not isinstance(data, dict) or data.get("lr") is None:
            return data
        data = dict(data)
        lr = data.pop("lr")
        optimizer = data.get("optimizer")
        if isinstance(optimizer, OptimizerOptions):
            optimizer = optimizer.model_dump()
        optimizer = dict(optimizer) if isinstance(optimizer, dict) else {"name": "adam"}
        if "lr" in optimizer:
            raise ValueError("give the critic's learning rate once: `optimizer.lr` (`lr` is its deprecated spelling)")
        data["optimizer"] = {**optimizer, "lr": lr}
        return data

    hidden: list[int] | None = Field(
        default=None, max_length=8,
        description=f"hidden widths (each 1 to {MAX_WIDTH}); default {PARTICLE_CRITIC_HIDDEN} for ksd (ALF), "
        f"{GENERATIVE_CRITIC_HIDDEN} for amortized_ksd (GPVI Table 7)")
    activation: Activation = "relu"
    optimizer: OptimizerOptions = Field(default_factory=_critic_optimizer,
                                        description="critic optimiser (default Adam, lr 1e-3)")
    lr: float | None = Field(default=None, gt=0, le=10, exclude=True, deprecated=True,
                             description="Deprecated: use critic.optimizer.lr (moved there when given)")
    l2_weight: float = Field(default=10.0, ge=0, le=1e6, description="weight of E||f||² in the critic loss")
    steps: int = Field(default=2, ge=1, le=100, description="critic updates per step (ALF default 2)")
    trace: Literal["auto", "exact", "hutchinson"] = Field(
        default="auto", description="tr ∇f: exact (d backward passes) or Hutchinson (one Gaussian probe); "
        "auto = exact for d ≤ 16"
    )

    @field_validator("hidden")
    @classmethod
    def _widths(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and any(not 1 <= w <= MAX_WIDTH for w in value):
            raise ValueError(f"critic hidden widths must be between 1 and {MAX_WIDTH}")
        return value

    def with_hidden(self, default: list[int]) -> CriticOptions:
        """These options with `hidden` filled in by the method's default where left out."""
        return self if self.hidden is not None else self.model_copy(update={"hidden": list(default)})


class KSDOptions(ParticleMethodOptions):
    """Stein discrepancy with a learned critic ("minmax"; Hu et al. 2018, Grathwohl et al. 2020)."""

    critic: CriticOptions = Field(default_factory=CriticOptions)

    @model_validator(mode="after")
    def _critic_hidden(self) -> KSDOptions:
        self.critic = self.critic.with_hidden(PARTICLE_CRITIC_HIDDEN)
        if not self.critic.hidden:
            raise ValueError("critic hidden: the particle critic needs at least one hidden layer")
        return self


class SpeedupBandwidthOptions(StrictModel):
    """Deprecated `options.bandwidth` of the speed-up methods: `source` is now `kernel.bandwidth.source` and
    `divisor` `kernel.bandwidth.cross_divisor` (schemas.kernels.SpeedupBandwidthRuleOptions)."""

    source: Literal["cross_median", "kernel"] = "cross_median"
    divisor: Literal["log_n", "log_n_plus_1", "log_n_squared", "none"] = "log_n_plus_1"


def _moved_speedup_bandwidth(data: Any) -> Any:
    """The deprecated `options.bandwidth` {source, divisor} → `options.kernel.bandwidth` {source, cross_divisor}."""
    if not isinstance(data, dict) or data.get("bandwidth") is None:
        return data
    data = dict(data)
    old = data.pop("bandwidth")
    if isinstance(old, BaseModel):
        old = old.model_dump()
    if not isinstance(old, dict):
        raise ValueError("bandwidth: deprecated spelling of kernel.bandwidth.source/cross_divisor, an object")
    unknown = set(old) - {"source", "divisor"}
    if unknown:
        raise ValueError(f"bandwidth: unknown fields {sorted(unknown)} (use kernel.bandwidth)")
    kernel = data.get("kernel")
    if isinstance(kernel, BaseModel):
        kernel = kernel.model_dump()
    kernel = dict(kernel) if isinstance(kernel, dict) else {}
    rule = kernel.get("bandwidth")
    if isinstance(rule, BaseModel):
        rule = rule.model_dump()
    rule = dict(rule) if isinstance(rule, dict) else {}
    moved = {"source": old.get("source"), "cross_divisor": old.get("divisor")}
    for key, value in moved.items():
        if value is None:
            continue
        if key in rule:
            raise ValueError(f"give kernel.bandwidth.{key} once (`bandwidth` is its deprecated spelling)")
        rule[key] = value
    data["kernel"] = {**kernel, "bandwidth": rule}
    return data


class SubsetOptions(ParticleMethodOptions):
    """Random-subset SVGD (Kang, "Speedup methods for SVGD", Alg. 2)."""

    @model_validator(mode="before")
    @classmethod
    def _bandwidth_spelling(cls, data: Any) -> Any:
        return _moved_speedup_bandwidth(data)

    kernel: SpeedupKernelOptions = Field(default_factory=SpeedupKernelOptions)
    subset_size: int = Field(default=20, ge=1, le=100_000, description="m: subset / induced points per step")
    bandwidth: SpeedupBandwidthOptions | None = Field(
        default=None, exclude=True, deprecated=True,
        description="Deprecated: use options.kernel.bandwidth.source and options.kernel.bandwidth.cross_divisor "
        "(moved there when given)")


class SubsetCFOptions(SubsetOptions):
    """Random-subset SVGD with control-functional weights (Alg. 3; Oates et al. 2017 simplified estimator)."""

    lambda_min: float = Field(default=1e-8, gt=0, le=1, description="first λ tried (then ×10)")
    max_condition: float = Field(default=1e11, gt=1, le=1e16, description="accept λ once cond₂(K₀+λI) < this")


class InducedOptions(SubsetOptions):
    """Random induced-points SVGD (Alg. 4, eq. 13)."""


class InducedAdversarialOptions(SubsetOptions):
    """Adversarial induced-points SVGD (Alg. 5, eqs. 14-18)."""

    ascent_steps: int = Field(default=10, ge=0, le=1000, description="L: ascent steps on (Y, log h) per step")
    repulsion: float = Field(default=0.1, ge=0, le=1e6, description="α of the repulsion on Y (eq. 16)")
    u_statistic: bool = Field(default=True, description="U-statistic (eqs. 17-18) instead of the V-statistic")
    update: Literal["both", "points", "bandwidth"] = Field(default="both", description="what the ascent moves")
    batched: bool = Field(default=False, description="ascent on a random particle subset (with replacement)")
    batch_size: int | None = Field(default=None, ge=2, le=100_000,
                                   description="particles in that subset (default: subset_size)")
    ascent_lr: float | None = Field(default=None, gt=0, le=100,
                                    description="AdaGrad-momentum step of Y and log h (default: the particle lr)")
    ascent_alpha: float = Field(default=0.9, gt=0, lt=1, description="AdaGrad-momentum history decay")
    ascent_eps: float = Field(default=1e-6, gt=0, description="AdaGrad-momentum fudge")
