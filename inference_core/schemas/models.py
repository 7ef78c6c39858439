"""Schemas of the Bayesian model targets (docs/api.md; `GET /v1/targets/kinds` lists them): linear and logistic regression, BNNs and
function-space posteriors. Torch-free (numpy only): the API validates specs, computes dimensions and
parameter layouts with this module alone.

Shared fields of every data target:
* `dataset`: a built-in reference (`uci:<name>[:split=K]`, `sklearn:<name>`), an uploaded id (`ds_…`), or
  inline `{"X": [[..]], "y": [..]}` (at most 100,000 numbers); see `inference_core.datasets`.
* `batch_size`: minibatch size B for stochastic-gradient methods; omitted or ≥ N means full data. The
  likelihood of a batch is scaled by N/B (`targets.models.data.DataTarget`).
* `standardize`: standardise the inputs (and, for regression, the targets) with training-part statistics
  (mean, std; a constant column gets std 1). The model then lives in standardised units.

Each schema has `dim` (None when it depends on an uploaded data set's shape) and
`dim_for(n_features, n_classes=None, n_rows=None)` to compute it from a stored data set's shape.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BeforeValidator, Field, ValidationError, model_validator

from inference_core.datasets import MAX_INLINE_NUMBERS, is_builtin_ref, is_dataset_id, parse_builtin_ref
from inference_core.datasets.uploads import json_matrix, json_vector
from inference_core.schemas.common import JsonTuple, StrictModel

ACTIVATIONS = ("relu", "tanh", "sigmoid", "softplus", "elu", "gelu", "silu", "leaky_relu")
Activation = Literal["relu", "tanh", "sigmoid", "softplus", "elu", "gelu", "silu", "leaky_relu"]
MAX_HIDDEN_LAYERS = 8
MAX_HIDDEN_WIDTH = 4096
MAX_CLASSES = 1000
MAX_PIECEWISE_RATE = 1000.0
# Positive scale parameters are capped so that their squares and inverses stay finite in float32.
_SCALE = {"gt": 0, "le": 1e6}


# ------------------------------------------------------------------------------------- dataset field


def _check_dataset_string(value: str) -> str:
    if is_dataset_id(value):
        return value
    if is_builtin_ref(value):
        parse_builtin_ref(value)
        return value
    raise ValueError(
        f"dataset {value[:80]!r} is not a built-in reference ('uci:<name>[:split=K]', 'sklearn:<name>'), an "
        "uploaded data set id ('ds_' + 32 lowercase hex characters) or inline data {\"X\": [[..]], \"y\": [..]}"
    )


class InlineDataset(StrictModel):
    """Data given in the spec itself: X [N, p] and optional y [N]; at most MAX_INLINE_NUMBERS numbers."""

    X: list[list[float]]
    y: list[float] | None = None

    @model_validator(mode="before")
    @classmethod
    def _check_numbers(cls, data: Any) -> Any:
        # Before pydantic's lax coercion (which would take True or "1.5" as numbers): same rules as uploads.
        if not isinstance(data, dict):
            return data
        X, y = data.get("X"), data.get("y")
        if isinstance(X, list) and X and isinstance(X[0], list):
            count = len(X) * len(X[0]) + (len(y) if isinstance(y, list) else 0)
            if count > MAX_INLINE_NUMBERS:
                raise ValueError(
                    f"inline data has {count} numbers, more than the cap of {MAX_INLINE_NUMBERS}; upload it "
                    "(POST /v1/datasets) and refer to it by id"
                )
        if X is not None:
            json_matrix(X, "X", max_rows=MAX_INLINE_NUMBERS, max_cols=MAX_INLINE_NUMBERS)
        if y is not None:
            vector = json_vector(y, "y")
            if isinstance(X, list) and len(vector) != len(X):
                raise ValueError(f"y has {len(vector)} entries but X has {len(X)} rows")
        return data


def _parse_dataset_field(value: Any) -> Any:
    """One validator for the whole field, so an error names the real problem (not "should be a string")."""
    if isinstance(value, str):
        return _check_dataset_string(value)
    if isinstance(value, InlineDataset):
        return value
    if isinstance(value, dict):
        try:
            return InlineDataset.model_validate(value)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            message = first["msg"].removeprefix("Value error, ")
            raise ValueError(f"inline data: {where + ': ' if where else ''}{message}") from None
    raise ValueError(
        "dataset must be a built-in reference string, an uploaded data set id, or an object {\"X\": [[..]], \"y\": [..]}"
    )


DatasetField = Annotated[str | InlineDataset, BeforeValidator(_parse_dataset_field)]


@dataclass(frozen=True)
class DataInfo:
    """What a spec alone tells about its data (None fields: unknown without loading)."""

    n_rows: int
    n_features: int
    labels: np.ndarray | None  # the training y when inline (for label checks), else None
    n_classes: int | None  # known number of classes (built-in classification sets)
    is_regression_set: bool  # a built-in set whose y is real-valued
    name: str
    inline: bool


def dataset_info(field: str | InlineDataset) -> DataInfo | None:
    """Shape facts of a dataset field without loading anything; None for an uploaded `ds_…` id."""
    if isinstance(field, InlineDataset):
        y = None if field.y is None else np.asarray(field.y, dtype=np.float64)
        return DataInfo(len(field.X), len(field.X[0]), y, None, False, "inline data", inline=True)
    if is_dataset_id(field):
        return None
    ref = parse_builtin_ref(field)
    return DataInfo(ref.n_rows, ref.info.n_features, None, ref.info.n_classes, ref.info.n_classes is None, field,
                    inline=False)


# ----------------------------------------------------------------------------- label checks (shared)


def regression_targets(y: np.ndarray | None) -> np.ndarray:
    """Real-valued y as float64 (used by the schemas for inline data and by the builders for any data)."""
    if y is None:
        raise ValueError("the data set has no y (targets are needed for this model)")
    return np.asarray(y, dtype=np.float64)


def binary_labels(y: np.ndarray | None) -> np.ndarray:
    """Labels {0, 1} or {−1, +1} as float64 0/1 (Liu & Wang's BLR code uses ±1)."""
    if y is None:
        raise ValueError("the data set has no y (labels are needed for logistic regression)")
    values = set(np.unique(np.asarray(y, dtype=np.float64)).tolist())
    if not (values <= {0.0, 1.0} or values <= {-1.0, 1.0}):
        shown = sorted(values)[:6]
        raise ValueError(f"logistic regression needs binary labels 0/1 or -1/+1; y has the values {shown}"
                         + (" ..." if len(values) > 6 else ""))
    return (np.asarray(y, dtype=np.float64) == 1.0).astype(np.float64)


def class_labels(y: np.ndarray | None, n_classes: int | None) -> tuple[np.ndarray, int]:
    """Integer labels 0..K−1 as int64 and K (given, or the largest label + 1)."""
    if y is None:
        raise ValueError("the data set has no y (labels are needed for classification)")
    values = np.asarray(y, dtype=np.float64)
    if not np.array_equal(values, np.round(values)):
        raise ValueError("classification needs integer class labels 0, 1, ..., K-1; y has non-integers")
    labels = values.astype(np.int64)
    if labels.min() < 0:
        raise ValueError("classification needs class labels 0, 1, ..., K-1; y has negative values")
    k = int(labels.max()) + 1 if n_classes is None else n_classes
    if k < 2:
        raise ValueError("classification needs at least 2 classes (set n_classes, or check y)")
    if k > MAX_CLASSES:
        raise ValueError(f"{k} classes is over the cap of {MAX_CLASSES}")
    if int(labels.max()) >= k:
        raise ValueError(f"y has the label {int(labels.max())} but n_classes is {k}")
    return labels, k


# ------------------------------------------------------------------------------- parameter layouts


@dataclass(frozen=True)
class ParameterBlock:
    """One named block of a flat parameter vector: theta[:, offset:offset+size].reshape(shape)."""

    name: str
    shape: tuple[int, ...]
    offset: int

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "shape": list(self.shape), "offset": self.offset}


def mlp_layout(n_inputs: int, hidden: Sequence[int], n_outputs: int,
               extras: Sequence[str] = ()) -> list[ParameterBlock]:
    """The flat layout of a fully connected network, one vector per particle (ALF `ParamNetwork` order):

    for each layer l = 0..L (L = len(hidden)): `layer{l}.weight` [out, in] row-major, then `layer{l}.bias`
    [out]; then each extra scalar (e.g. `log_noise_precision`, `log_weight_precision`) with shape [].
    """
    sizes = [n_inputs, *hidden, n_outputs]
    blocks: list[ParameterBlock] = []
    offset = 0
    for layer, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:], strict=True)):
        blocks.append(ParameterBlock(f"layer{layer}.weight", (fan_out, fan_in), offset))
        offset += fan_out * fan_in
        blocks.append(ParameterBlock(f"layer{layer}.bias", (fan_out,), offset))
        offset += fan_out
    for name in extras:
        blocks.append(ParameterBlock(name, (), offset))
        offset += 1
    return blocks


def layout_size(layout: Sequence[ParameterBlock]) -> int:
    return sum(block.size for block in layout)


# ----------------------------------------------------------------------------------- shared pieces


class GammaPrior(StrictModel):
    """Gamma(shape a0, rate b0) on a precision (mean a0/b0)."""

    a0: float = Field(**_SCALE, description="shape")
    b0: float = Field(**_SCALE, description="rate")


class DataTargetSpec(StrictModel):
    dataset: DatasetField
    batch_size: int | None = Field(default=None, ge=1, description="minibatch size B; omit for full data")
    standardize: bool = Field(default=False, description="standardise X (and y for regression) with training stats")

    def data_info(self) -> DataInfo | None:
        return dataset_info(self.dataset)

    def dim_for(self, n_features: int, n_classes: int | None = None, n_rows: int | None = None) -> int:
        raise NotImplementedError

    def _known_dim(self) -> int | None:
        """The dimension when the spec alone fixes it (built-in or inline data), else None."""
        info = self.data_info()
        if info is None:
            return None
        try:
            return self.dim_for(info.n_features, self._n_classes(info), info.n_rows)
        except ValueError:  # e.g. labels that the validators report on their own
            return None

    def _n_classes(self, info: DataInfo) -> int | None:
        return None


def _check_inline_y_present(info: DataInfo | None) -> None:
    if info is not None and info.inline and info.labels is None:
        raise ValueError("inline data needs y for this model")


# -------------------------------------------------------------------------- bayesian_linear_regression


class BayesianLinearRegressionSpec(DataTargetSpec):
    """y = Xw + ε, ε ~ N(0, noise_std²), w ~ N(0, prior_std² I) or a flat prior when prior_std is omitted.

    With `bias`, a column of ones is appended to X (after standardising) and the last weight is the
    intercept. The posterior is Gaussian in closed form (the target's exact reference); note the GPVI paper
    erratum: with unit noise and a flat prior its covariance is (XᵀX)⁻¹, not XᵀX.
    """

    kind: Literal["bayesian_linear_regression"] = "bayesian_linear_regression"
    noise_std: float = Field(default=1.0, **_SCALE)
    prior_std: float | None = Field(default=None, **_SCALE, description="omit for a flat prior")
    bias: bool = Field(default=False, description="append a column of ones (intercept is the last weight)")

    @model_validator(mode="after")
    def _check(self) -> BayesianLinearRegressionSpec:
        info = self.data_info()
        _check_inline_y_present(info)
        if info is not None and self.prior_std is None and info.n_rows < info.n_features + self.bias:
            raise ValueError(
                f"a flat prior needs at least as many rows as weights ({info.n_rows} < "
                f"{info.n_features + self.bias}); give prior_std"
            )
        return self

    def dim_for(self, n_features: int, n_classes: int | None = None, n_rows: int | None = None) -> int:
        return n_features + int(self.bias)

    @property
    def dim(self) -> int | None:
        return self._known_dim()


# ------------------------------------------------------------------------ bayesian_logistic_regression


class BayesianLogisticRegressionSpec(DataTargetSpec):
    """p(y=1 | x, w) = σ(xᵀw), labels 0/1 or −1/+1 (normalised to 0/1).

    Prior, one of:
    * `prior: {"a0", "b0"}` (the default, a0 = 1, b0 = 0.01): the SVGD paper's hierarchical prior
      w ~ N(0, α⁻¹ I), α ~ Gamma(a0, rate b0), sampled as θ = [w, log α] with the log-Jacobian (Liu & Wang
      2016, §5 / python/bayesian_logistic_regression.py); dim = p + bias + 1;
    * `prior_std`: fixed w ~ N(0, prior_std² I); dim = p + bias.
    `bias` (default true) appends a column of ones; its weight is the last entry of w.
    """

    kind: Literal["bayesian_logistic_regression"] = "bayesian_logistic_regression"
    prior: GammaPrior | None = None
    prior_std: float | None = Field(default=None, **_SCALE)
    bias: bool = True

    @model_validator(mode="after")
    def _check(self) -> BayesianLogisticRegressionSpec:
        if self.prior is not None and self.prior_std is not None:
            raise ValueError("give either 'prior' (hierarchical Gamma prior) or 'prior_std', not both")
        if self.prior is None and self.prior_std is None:
            self.prior = GammaPrior(a0=1.0, b0=0.01)
        info = self.data_info()
        _check_inline_y_present(info)
        if info is not None:
            if info.labels is not None:
                binary_labels(info.labels)
            elif info.is_regression_set:
                raise ValueError(f"{info.name} is a regression data set; logistic regression needs binary labels")
            elif info.n_classes is not None and info.n_classes != 2:
                raise ValueError(f"{info.name} has {info.n_classes} classes; logistic regression needs 2")
        return self

    @property
    def hierarchical(self) -> bool:
        return self.prior is not None

    def dim_for(self, n_features: int, n_classes: int | None = None, n_rows: int | None = None) -> int:
        return n_features + int(self.bias) + int(self.prior is not None)

    @property
    def dim(self) -> int | None:
        return self._known_dim()


# --------------------------------------------------------------------------------------------- bnn


class FixedNoise(StrictModel):
    """y ~ N(f(x), std²) with a fixed std."""

    type: Literal["fixed"] = "fixed"
    std: float = Field(**_SCALE)


class GammaNoisePrecision(StrictModel):
    """y ~ N(f(x), γ⁻¹), γ ~ Gamma(a0, rate b0), sampled as log γ (SVGD BNN, Liu & Wang 2016, from PBP)."""

    type: Literal["gamma_precision"] = "gamma_precision"
    a0: float = Field(default=1.0, **_SCALE)
    b0: float = Field(default=0.1, **_SCALE)


class InverseGammaNoiseStd(StrictModel):
    """y ~ N(f(x), σ²), σ ~ InverseGamma(alpha, beta) on the std (f-POVI, thu-ml/fpovi), sampled as log σ."""

    type: Literal["inverse_gamma_std"] = "inverse_gamma_std"
    alpha: float = Field(default=1.0, **_SCALE)
    beta: float = Field(default=0.1, **_SCALE)


NoiseModel = Annotated[FixedNoise | GammaNoisePrecision | InverseGammaNoiseStd, Field(discriminator="type")]
HiddenWidth = Annotated[int, Field(ge=1, le=MAX_HIDDEN_WIDTH)]


class NetworkFields(StrictModel):
    """Architecture and weight prior of a fully connected network.

    Weight prior on every weight and bias: N(0, s_l²) with s_l = prior_std (`prior_std_scaling` "none"),
    prior_std/√fan_in or prior_std/√fan_out of layer l (f-POVI uses prior_std = 1 with fan_out: variance
    1/n_out, the output layer has variance 1).
    """

    hidden: list[HiddenWidth] = Field(default_factory=lambda: [50], max_length=MAX_HIDDEN_LAYERS)
    activation: Activation = "relu"
    prior_std: float | None = Field(default=None, **_SCALE, description="default 1 (fixed prior)")
    prior_std_scaling: Literal["none", "fan_in", "fan_out"] = "none"


class BNNSpec(NetworkFields, DataTargetSpec):
    """Bayesian neural network in weight space: an MLP with `hidden` widths and `activation`.

    * regression: y ~ N(f(x), noise) with `noise` one of fixed `{"type": "fixed", "std"}`,
      `{"type": "gamma_precision", "a0": 1, "b0": 0.1}` (default; SVGD BNN) or
      `{"type": "inverse_gamma_std", "alpha": 1, "beta": 0.1}` (f-POVI);
    * classification: softmax over `n_classes` outputs (default: largest label + 1).
    Weight prior: fixed N(0, prior_std²) (default prior_std = 1, optionally fan-scaled), or the SVGD BNN's
    hierarchical `weight_precision_prior: {"a0": 1, "b0": 0.1}`: all weights ~ N(0, λ⁻¹), λ ~ Gamma, sampled
    as log λ. Flat layout: see `mlp_layout` (extras: log_noise_precision | log_noise_std, then
    log_weight_precision).
    """

    kind: Literal["bnn"] = "bnn"
    task: Literal["regression", "classification"] = "regression"
    weight_precision_prior: GammaPrior | None = None
    noise: NoiseModel | None = None
    n_classes: int | None = Field(default=None, ge=2, le=MAX_CLASSES)

    @model_validator(mode="after")
    def _check(self) -> BNNSpec:
        if self.weight_precision_prior is not None:
            if self.prior_std is not None:
                raise ValueError("give either 'prior_std' or 'weight_precision_prior', not both")
            if self.prior_std_scaling != "none":
                raise ValueError("prior_std_scaling applies to a fixed prior_std only")
        elif self.prior_std is None:
            self.prior_std = 1.0
        if self.task == "classification":
            if self.noise is not None:
                raise ValueError("'noise' is for regression; classification uses a softmax likelihood")
        else:
            if self.n_classes is not None:
                raise ValueError("'n_classes' is for classification")
            if self.noise is None:
                self.noise = GammaNoisePrecision()
        info = self.data_info()
        _check_inline_y_present(info)
        if info is not None and self.task == "classification":
            if info.labels is not None:
                class_labels(info.labels, self.n_classes)
            elif info.is_regression_set:
                raise ValueError(f"{info.name} is a regression data set; classification needs class labels")
            elif self.n_classes is not None and info.n_classes is not None and info.n_classes > self.n_classes:
                raise ValueError(f"{info.name} has {info.n_classes} classes but n_classes is {self.n_classes}")
        return self

    def extras(self) -> list[str]:
        names = []
        if isinstance(self.noise, GammaNoisePrecision):
            names.append("log_noise_precision")
        elif isinstance(self.noise, InverseGammaNoiseStd):
            names.append("log_noise_std")
        if self.weight_precision_prior is not None:
            names.append("log_weight_precision")
        return names

    def n_outputs(self, n_classes: int | None) -> int:
        if self.task == "regression":
            return 1
        k = self.n_classes or n_classes
        if k is None:
            raise ValueError("the number of classes is unknown: set n_classes")
        return k

    def layout_for(self, n_features: int, n_classes: int | None = None) -> list[ParameterBlock]:
        return mlp_layout(n_features, self.hidden, self.n_outputs(n_classes), self.extras())

    def dim_for(self, n_features: int, n_classes: int | None = None, n_rows: int | None = None) -> int:
        return layout_size(self.layout_for(n_features, n_classes))

    def _n_classes(self, info: DataInfo) -> int | None:
        if self.task != "classification":
            return None
        if info.labels is not None:
            return class_labels(info.labels, self.n_classes)[1]
        return self.n_classes or info.n_classes

    @property
    def dim(self) -> int | None:
        return self._known_dim()


# ------------------------------------------------------------------------------ function_posterior


class NormalValues(StrictModel):
    distribution: Literal["normal"] = "normal"
    mean: float = Field(default=0.0, ge=-1e6, le=1e6)
    std: float = Field(default=1.0, **_SCALE)


class UniformValues(StrictModel):
    distribution: Literal["uniform"] = "uniform"
    low: float = Field(ge=-1e6, le=1e6)
    high: float = Field(ge=-1e6, le=1e6)

    @model_validator(mode="after")
    def _check(self) -> UniformValues:
        if not self.low < self.high:
            raise ValueError("uniform values need low < high")
        return self


ValueDistribution = Annotated[NormalValues | UniformValues, Field(discriminator="distribution")]


class GPPrior(StrictModel):
    """Gaussian process, zero mean, RBF kernel k(x, x') = variance · exp(−Σ_j (x_j − x'_j)² / (2 ℓ_j²))
    (the GP convention with 2ℓ², unlike the SVGD kernel's exp(−r²/h)); `lengthscale` is one ℓ or one per
    input dimension."""

    type: Literal["gp"] = "gp"
    kernel: Literal["rbf"] = "rbf"
    lengthscale: float | list[Annotated[float, Field(**_SCALE)]] = Field(default=1.0)
    variance: float = Field(default=1.0, **_SCALE)

    @model_validator(mode="after")
    def _check(self) -> GPPrior:
        scales = self.lengthscale if isinstance(self.lengthscale, list) else [self.lengthscale]
        if not scales or not all(0 < s <= 1e6 for s in scales):
            raise ValueError("lengthscale must be positive (one value, or one per input dimension)")
        return self


class PiecewiseConstantPrior(StrictModel):
    """Random step functions on a 1-D domain [lo, hi] (after fBNN's PiecewiseConstant, Sun et al. 2019):
    K ~ Poisson(rate) change points c_1..c_K iid Uniform(lo, hi); K + 1 levels v_0..v_K iid from `values`;
    f(x) = v_j with j = #{k : c_k < x}. Cov(f(x), f(x')) = Var(v)·exp(−rate·|x − x'|/(hi − lo))."""

    type: Literal["piecewise_constant"] = "piecewise_constant"
    rate: float = Field(default=3.0, ge=0, le=MAX_PIECEWISE_RATE, description="mean number of change points")
    values: ValueDistribution = Field(default_factory=NormalValues)


class PiecewiseLinearPrior(StrictModel):
    """Random continuous piecewise-linear functions on a 1-D domain [lo, hi] (after fBNN's PiecewiseLinear):
    K ~ Poisson(rate) interior knots iid Uniform(lo, hi), sorted, plus the knots lo and hi; the values at
    the K + 2 knots iid from `values`; f interpolates linearly and is constant beyond [lo, hi]."""

    type: Literal["piecewise_linear"] = "piecewise_linear"
    rate: float = Field(default=3.0, ge=0, le=MAX_PIECEWISE_RATE, description="mean number of interior knots")
    values: ValueDistribution = Field(default_factory=NormalValues)


class BNNFunctionPrior(NetworkFields):
    """Functions drawn as MLPs with weights from the fixed weight prior (the f-POVI / FVI BNN prior)."""

    type: Literal["bnn"] = "bnn"

    @model_validator(mode="after")
    def _default_std(self) -> BNNFunctionPrior:
        if self.prior_std is None:
            self.prior_std = 1.0
        return self


FunctionPrior = Annotated[
    GPPrior | PiecewiseConstantPrior | PiecewiseLinearPrior | BNNFunctionPrior, Field(discriminator="type")
]


class GaussianLikelihood(StrictModel):
    noise_std: float = Field(default=1.0, **_SCALE)


class FunctionPosteriorSpec(DataTargetSpec):
    """Posterior over functions f: R^p → R with y = f(x) + ε, ε ~ N(0, noise_std²), for the function-space
    methods (f-POVI, Wang et al. 2019; FVI, Ma & Hernández-Lobato 2021).

    `prior`: `gp`, `piecewise_constant`, `piecewise_linear` (1-D inputs only) or `bnn` (an MLP prior on
    weights). `domain`: a box [[lo, hi], ...] per input dimension for measurement points and for the
    piecewise priors' change points; default the training inputs' bounding box widened by 10 % of its
    range on each side (±1 for a constant column). Weight-space methods do not accept this kind; `dim` is the
    network's parameter count for a `bnn` prior and the number of training rows (f at the training
    inputs) otherwise.
    """

    kind: Literal["function_posterior"] = "function_posterior"
    prior: FunctionPrior
    likelihood: GaussianLikelihood = Field(default_factory=GaussianLikelihood)
    domain: list[Annotated[tuple[float, float], JsonTuple]] | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _check(self) -> FunctionPosteriorSpec:
        if self.domain is not None:
            for index, (low, high) in enumerate(self.domain):
                if not low < high:
                    raise ValueError(f"domain[{index}] needs lo < hi, got [{low}, {high}]")
                if max(abs(low), abs(high)) > 1e12:
                    raise ValueError(f"domain[{index}] is too large")
        info = self.data_info()
        _check_inline_y_present(info)
        if info is not None:
            self.check_features(info.n_features)
        return self

    def check_features(self, n_features: int) -> None:
        """Checks that need the number of input dimensions (also run by the builder for uploaded data)."""
        if self.prior.type in ("piecewise_constant", "piecewise_linear") and n_features != 1:
            raise ValueError(f"the {self.prior.type} prior needs 1-D inputs; the data has {n_features} features")
        if self.domain is not None and len(self.domain) != n_features:
            raise ValueError(f"domain has {len(self.domain)} intervals but the data has {n_features} features")
        if isinstance(self.prior, GPPrior) and isinstance(self.prior.lengthscale, list) \
                and len(self.prior.lengthscale) != n_features:
            raise ValueError(f"lengthscale has {len(self.prior.lengthscale)} values but the data has "
                             f"{n_features} features")

    def layout_for(self, n_features: int) -> list[ParameterBlock]:
        if not isinstance(self.prior, BNNFunctionPrior):
            raise ValueError(f"a {self.prior.type} prior has no weight layout")
        return mlp_layout(n_features, self.prior.hidden, 1)

    def dim_for(self, n_features: int, n_classes: int | None = None, n_rows: int | None = None) -> int:
        if isinstance(self.prior, BNNFunctionPrior):
            return layout_size(self.layout_for(n_features))
        if n_rows is None:
            raise ValueError(f"with a {self.prior.type} prior the dimension is the number of training rows")
        return n_rows

    @property
    def dim(self) -> int | None:
        return self._known_dim()
