"""Posterior over functions f: R^p → R, y_i = f(x_i) + ε_i, ε_i ~ N(0, σ²), for the function-space methods:
f-POVI (Wang, Ren, Zhu & Zhang, ICLR 2019) and FVI with stochastic-process generators (Ma & Hernández-Lobato,
NeurIPS 2021). Not a weight-space kind: particle methods like `svgd` do not accept it.

What the methods use:
* `sample_prior_functions(n, X[m, p], generator) -> [n, m]`: exact prior draws of f at any inputs;
* `log_likelihood(f_values[n, B], batch) -> [n]`: (N/B) Σ_{i∈batch} log N(y_i; f(x_i), σ²), the values
  given at the batch rows in batch order (at all N training rows when batch is None) — the DataTarget rule;
* `sample_batch(generator)`, `X`, `y`, `n_data`, `domain` [p, 2] and `sample_measurement_points(m, g)`
  (uniform in the domain box);
* with a `bnn` prior, the parametric network: `network`, `dim`, `layout`, `forward(weights, X)`,
  `initial_particles(n, g)` and a weight-space `log_prob`/`score` (fixed weight prior + the likelihood).

`dim` and `log_prob` otherwise: the parameters are f at the N training inputs. For a `gp` prior
log_prob(f) = log N(f; 0, K_XX + jitter) + the scaled likelihood, with the exact Gaussian posterior as
`reference()` (N ≤ MAX_GP_ROWS). The piecewise priors have no density over function values: their log_prob
raises NotImplementedError (use `sample_prior_functions` and `log_likelihood`).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor

from inference_core import errors
from inference_core.datasets import resolve_dataset
from inference_core.schemas.models import (
    BNNFunctionPrior,
    FunctionPosteriorSpec,
    GPPrior,
    PiecewiseConstantPrior,
    PiecewiseLinearPrior,
    regression_targets,
)
from inference_core.targets.base import BuildContext, Reference
from inference_core.targets.models.bnn import WeightPrior, gaussian_log_likelihood_sum
from inference_core.targets.models.data import DataTarget, PreparedData, prepare_data
from inference_core.targets.models.function_priors import (
    gp_lengthscale,
    jittered_cholesky,
    rbf_kernel,
    sample_gp,
    sample_piecewise_constant,
    sample_piecewise_linear,
)
from inference_core.targets.models.network import MLP

MAX_GP_ROWS = 5000  # an N×N Cholesky per build: beyond this use sample_prior_functions on subsets
DOMAIN_MARGIN = 0.1


def default_domain(X: np.ndarray) -> np.ndarray:
    """The bounding box of X widened by 10 % of its range on each side (±1 for a constant column), [p, 2]."""
    low, high = X.min(axis=0), X.max(axis=0)
    span = high - low
    margin = np.where(span > 0, DOMAIN_MARGIN * span, 1.0)
    return np.stack([low - margin, high + margin], axis=1)


class FunctionPosteriorTarget(DataTarget):
    kind = "function_posterior"

    def __init__(self, data: PreparedData, spec: FunctionPosteriorSpec, dtype: torch.dtype, device: torch.device):
        super().__init__(data, spec.batch_size, dtype, device)
        self.prior = spec.prior
        self.prior_type = spec.prior.type
        self.noise_std = float(spec.likelihood.noise_std)
        domain = np.asarray(spec.domain, dtype=np.float64) if spec.domain is not None else default_domain(data.X)
        self.domain = torch.as_tensor(domain, dtype=dtype, device=device)
        self.network: MLP | None = None
        self._gp_cache: dict[str, np.ndarray] = {}
        if isinstance(spec.prior, BNNFunctionPrior):
            self.network = MLP(int(data.X.shape[1]), spec.prior.hidden, 1, spec.prior.activation)
            self.weight_prior = WeightPrior(self.network, spec.prior.prior_std, spec.prior.prior_std_scaling, None)
            self.prior_inverse_variance = (1 / self.weight_prior.stds64**2).to(device=device, dtype=dtype)
            self.dim = self.network.dim
            self.layout = self.network.layout
        else:
            self.dim = self.n_data

    # ---- what function-space methods use ----------------------------------------------------------

    def sample_prior_functions(self, n: int, X: Tensor, generator: torch.Generator) -> Tensor:
        """Exact prior draws of f at inputs X [m, p]: [n, m] in the target's dtype and device."""
        if X.ndim != 2 or X.shape[1] != self.X.shape[1]:
            raise ValueError(f"inputs must have shape [m, {self.X.shape[1]}], got {list(X.shape)}")
        prior = self.prior
        if isinstance(prior, GPPrior):
            values = sample_gp(prior, n, X, generator)
        elif isinstance(prior, PiecewiseConstantPrior | PiecewiseLinearPrior):
            low, high = (float(v) for v in self.domain[0])
            sampler = sample_piecewise_constant if isinstance(prior, PiecewiseConstantPrior) else sample_piecewise_linear
            values = sampler(prior, n, X, low, high, generator)
        else:
            weights, _ = self.weight_prior.sample(n, generator)
            X64 = X.to(device=generator.device, dtype=torch.float64)
            values = self.network.forward(weights, X64)[..., 0]
        return values.to(device=self.device, dtype=self.dtype)

    def log_likelihood(self, f_values: Tensor, batch: Tensor | None = None) -> Tensor:  # type: ignore[override]
        """(N/B) Σ_{i∈batch} log N(y_i; f_i, σ²), f_values [n, B] at the batch rows (all N rows if None)."""
        _, y = self.rows(batch)
        if f_values.ndim != 2 or f_values.shape[1] != y.shape[0]:
            raise ValueError(f"f_values must have shape [n, {y.shape[0]}] (one value per batch row), "
                             f"got {list(f_values.shape)}")
        return self.likelihood_scale(batch) * gaussian_log_likelihood_sum(y - f_values, math.log(self.noise_std))

    def sample_measurement_points(self, m: int, generator: torch.Generator) -> Tensor:
        """m points uniform in the domain box, [m, p]."""
        low, high = self.domain[:, 0], self.domain[:, 1]
        uniform = torch.rand(m, self.domain.shape[0], generator=generator, dtype=torch.float64,
                             device=generator.device)
        return low + (high - low) * uniform.to(device=self.device, dtype=self.dtype)

    # ---- the parametric (bnn) prior ---------------------------------------------------------------

    def _require_network(self) -> MLP:
        if self.network is None:
            raise ValueError(f"a {self.prior_type} prior has no network weights")
        return self.network

    def forward(self, weights: Tensor, inputs: Tensor) -> Tensor:
        """Network outputs [n, B, 1] for weights [n, dim] (bnn prior only)."""
        return self._require_network().forward(weights, inputs)

    def describe_layout(self) -> list[dict]:
        return self._require_network().describe_layout()

    def initial_particles(self, n: int, generator: torch.Generator) -> Tensor:
        """[n, dim]: for a bnn prior weights ~ N(0, 1/(fan_in + 1)), biases 0 (as BNNTarget); otherwise
        prior draws of f at the training inputs."""
        if self.network is None:
            return self.sample_prior_functions(n, self.X, generator)
        return self.network.initial_weights(n, generator, self.dtype, self.device)

    # ---- log density: weights (bnn) or f at the training inputs (gp) -------------------------------

    def log_prior(self, x: Tensor) -> Tensor:
        if self.network is not None:
            return self.weight_prior.log_prob(x, None, self.prior_inverse_variance)
        if isinstance(self.prior, GPPrior):
            factor = torch.as_tensor(self._gp_factors()["prior_cholesky"], dtype=x.dtype, device=x.device)
            whitened = torch.linalg.solve_triangular(factor, x.T, upper=False)  # L⁻¹ f, [N, n]
            log_det = 2 * torch.log(torch.diagonal(factor)).sum()
            return -0.5 * whitened.square().sum(0) - 0.5 * log_det - 0.5 * self.n_data * math.log(2 * math.pi)
        raise NotImplementedError(
            f"the {self.prior_type} prior has no density over function values; use sample_prior_functions "
            "and log_likelihood"
        )

    def log_likelihood_sum(self, x: Tensor, batch: Tensor | None) -> Tensor:
        X, y = self.rows(batch)
        if self.network is not None:
            f_values = self.network.forward(x, X)[..., 0]
        else:
            f_values = x if batch is None else x.index_select(1, batch.to(x.device))
        return gaussian_log_likelihood_sum(y - f_values, math.log(self.noise_std))

    def _gp_factors(self) -> dict[str, np.ndarray]:
        """float64 Cholesky of K_XX + jitter and the exact posterior of f(X) (computed once)."""
        if not self._gp_cache:
            if self.n_data > MAX_GP_ROWS:
                raise ValueError(f"the GP density over all {self.n_data} training values is capped at "
                                 f"{MAX_GP_ROWS} rows; use sample_prior_functions on subsets")
            X = self.X.to(device="cpu", dtype=torch.float64)
            K = rbf_kernel(X, X, gp_lengthscale(self.prior, X.shape[1]), self.prior.variance)
            factor = jittered_cholesky(K, self.prior.variance)
            K_jittered = factor @ factor.T
            # Posterior of f(X): Σ = K − K (K + σ²I)⁻¹ K, μ = K (K + σ²I)⁻¹ y (Rasmussen & Williams eq. 2.23-2.24).
            noisy = K_jittered + self.noise_std**2 * torch.eye(self.n_data, dtype=torch.float64)
            gain = torch.linalg.solve(noisy, K_jittered).T  # K (K + σ²I)⁻¹ (both symmetric)
            y = self.y.to(device="cpu", dtype=torch.float64)
            cov = K_jittered - gain @ K_jittered
            self._gp_cache = {
                "prior_cholesky": factor.numpy(),
                "posterior_mean": (gain @ y).numpy(),
                "posterior_cov": (0.5 * (cov + cov.T)).numpy(),
            }
        return self._gp_cache

    def reference(self) -> Reference | None:
        """gp prior: the exact Gaussian posterior of f at the training inputs; None otherwise."""
        if not isinstance(self.prior, GPPrior) or self.n_data > MAX_GP_ROWS:
            return None
        factors = self._gp_factors()
        mean = torch.as_tensor(factors["posterior_mean"], dtype=self.dtype, device=self.device)
        cov = torch.as_tensor(factors["posterior_cov"], dtype=self.dtype, device=self.device)
        cholesky = jittered_cholesky(torch.as_tensor(factors["posterior_cov"]), self.noise_std**2)

        def sample(n: int, generator: torch.Generator) -> Tensor:
            noise = torch.randn(n, self.dim, generator=generator, dtype=torch.float64, device=generator.device)
            return (torch.as_tensor(factors["posterior_mean"]) + noise.cpu() @ cholesky.T).to(
                device=self.device, dtype=self.dtype)

        return Reference(mean=mean, cov=cov, sample=sample)


def build(spec: FunctionPosteriorSpec, context: BuildContext) -> FunctionPosteriorTarget:
    dataset = resolve_dataset(spec.dataset, context)
    try:
        spec.check_features(dataset.n_features)
    except ValueError as exc:
        raise errors.TargetInvalid(str(exc), loc=("target",)) from None
    data = prepare_data(dataset, targets=regression_targets, standardize=spec.standardize, standardize_y=True)
    return FunctionPosteriorTarget(data, spec, context.dtype, context.device)
