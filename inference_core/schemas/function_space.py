"""Options of the f-POVI methods `fsvgd`, `fwsgld`, `fpisgld` (Wang, Ren, Zhu & Zhang, ICLR 2019).

Every default is the value of the authors' code (thu-ml/fpovi, `ffn/bnn_stein_f.py` with the UCI launcher
`exps/uci-exp-main.py`; the project's notes on function-space references, §1 and its f-POVI checklist).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from inference_core.schemas.common import StrictModel
from inference_core.schemas.kernels import KernelOptions
from inference_core.schemas.methods import OptimizerOptions, _fpovi_kernel


def _fpovi_adam() -> OptimizerOptions:
    """Adam, lr 4e-3, TF defaults (β = (0.9, 0.999), ε = 1e-8 as torch's), no decay."""
    return OptimizerOptions(name="adam", lr=4e-3)


class FunctionSpaceDirectionOptions(StrictModel):
    """The function-space part of f-POVI (Algorithm 1, lines 4-6): where the direction is computed and how.

    * mixed batch: the target's minibatch (B rows; all rows when the target has no batch_size) plus
      `extra_points` rows drawn without replacement (the code's block of the per-epoch shuffled training
      set; min(E, N) rows) perturbed by N(0, (ptb_scale/√(N·D))²) — the KDE ν of Algorithm 1;
    * prior gradient: a Gaussian fitted to `prior_draws` fresh prior functions at `prior_points` columns
      (the first half from the training rows, the second half from the extras), float64, divisor n−1,
      eigenvalues floored at `eigen_floor`, quadratic form only;
    * kernel: RBF exp(−d²·log(n+1)/med), med over the full n×n matrix, bandwidth floored at
      `bandwidth_floor` (the code floors 0.5·h at 1e-5, i.e. our h at 2e-5);
    * noise: σ starts at `noise_init` and is fitted by MAP under the target's noise prior.

    Shared by the f-POVI methods (`FunctionSpacePOVIOptions`) and `amortized_fsvgd`
    (`schemas.generative.AmortizedFSVGDOptions`).
    """

    kernel: KernelOptions = Field(default_factory=_fpovi_kernel)
    bandwidth_floor: float = Field(default=2e-5, ge=0, le=1e6, description="lower bound of h in exp(−d²/h)")
    extra_points: int = Field(default=100, ge=0, le=100_000, description="E: extra measurement points per step")
    ptb_scale: float = Field(default=1.0, ge=0, le=1e6,
                             description="extras' noise std is ptb_scale/sqrt(N·D) (UCI launcher: 1)")
    prior_draws: int = Field(default=40, ge=2, le=100_000, description="fresh prior functions per step")
    prior_points: int = Field(default=4, ge=2, le=1000,
                              description="columns of the Gaussian prior fit: first half training, last half extra")
    eigen_floor: float = Field(default=1e-3, gt=0, le=1e6, description="eigenvalue floor of the prior covariance")
    noise_init: float = Field(default=0.5, gt=0, le=1e6, description="initial σ (standardised y units)")
    classification_values: Literal["log_softmax", "logits"] = Field(
        default="log_softmax", description="function values of a classifier: normalised logits (paper B.3)")
    output_prior_scale: float = Field(
        default=1.0, gt=0, le=1e3,
        description="multiplies the output layer's prior std in the prior draws (the code uses 40 for classifiers)")

    @model_validator(mode="after")
    def _check(self) -> FunctionSpaceDirectionOptions:
        if self.prior_points % 2:
            raise ValueError("prior_points must be even (half training columns, half extra columns)")
        return self


class FunctionSpacePOVIOptions(FunctionSpaceDirectionOptions):
    """f-POVI: the POVI direction on function values at a mixed batch (`FunctionSpaceDirectionOptions`),
    pulled back to the weights (eq. 4).

    * pull-back: `mse` applies Adam to the gradient of mean((stopgrad(f + v) − f)²), i.e. −2/(n·M·K)·Jᵀv
      (TF1 code); `vjp` to −Jᵀv (the tf2 branch);
    * noise: per-particle σ = softplus(raw) starting at `noise_init`, fitted by MAP under the target's
      noise prior with its own optimiser (`noise_optimizer`) after the weight step; a fixed-noise target
      keeps its σ.
    """

    optimizer: OptimizerOptions = Field(default_factory=_fpovi_adam)
    noise_optimizer: OptimizerOptions = Field(default_factory=_fpovi_adam)
    pullback: Literal["mse", "vjp"] = "mse"
    init: Literal["fpovi", "target"] = Field(
        default="fpovi", description="fpovi: N(0,1)/sqrt(n_in+n_out+1), biases 0; target: the target's own init")
    dtype: Literal["float32", "float64"] = "float32"


class FSVGDOptions(FunctionSpacePOVIOptions):
    """f-SVGD: SVGD on function values, (K∇log p + Σ_j ∇k)/n."""


class FWSGLDOptions(FunctionSpacePOVIOptions):
    """f-w-SGLD-B: the blob w-SGLD on function values (no 1/n, stop-gradient row sums)."""


class FPiSGLDOptions(FunctionSpacePOVIOptions):
    """f-pi-SGLD: (w-SGLD-B + SVGD)/2 on function values."""
