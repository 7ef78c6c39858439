"""`DataTarget`: the base of every Bayesian model target, where the minibatch rule is stated once.

    log p(θ | D) ≈ log prior(θ) + (N/B) Σ_{i∈S} log p(y_i | x_i, θ),      S ⊂ {1..N}, |S| = B

(the usual stochastic-gradient estimate, e.g. Welling & Teh 2011; Liu & Wang 2016's SVGD BNN/BLR code
scales the batch likelihood by N/B). With `batch=None` S is the whole data set and the factor is 1.

Batches are drawn by `sample_batch(generator)`: B distinct row indices, uniformly without replacement,
`torch.randperm(N, generator=g)[:B]`, independently at every step. The draw is a pure function of the
generator passed in (the run loop checkpoints only the method's generator, so a target may hold no
sampling state such as an epoch permutation). Each row is in S with probability B/N, hence
E_S[(N/B) Σ_{i∈S} ℓ_i] = Σ_i ℓ_i: the estimate is unbiased.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from inference_core import errors
from inference_core.datasets import Dataset
from inference_core.targets.base import Target

_LOC = ("target", "dataset")


@dataclass(frozen=True)
class Standardization:
    """Training-part statistics used to standardise (x − mean)/std; y fields are None for classification."""

    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float | None = None
    y_std: float | None = None


@dataclass(frozen=True)
class PreparedData:
    """Model-ready float64/int64 arrays (standardised, with a bias column when asked)."""

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray | None
    y_test: np.ndarray | None
    standardization: Standardization | None
    n_classes: int | None = None


def _std(values: np.ndarray) -> np.ndarray:
    std = values.std(axis=0)
    return np.where(std > 0, std, 1.0)  # a constant column is only centred


def prepare_data(
    dataset: Dataset,
    *,
    targets: Callable[[np.ndarray | None], np.ndarray],
    standardize: bool,
    standardize_y: bool,
    bias: bool = False,
    n_classes: int | None = None,
) -> PreparedData:
    """Convert y with `targets` (e.g. `schemas.models.binary_labels`), standardise with training-part
    statistics, append a column of ones when `bias`. A data problem raises `errors.TargetInvalid`."""
    try:
        y = targets(dataset.y)
        y_test = None if dataset.y_test is None else targets(dataset.y_test)
    except ValueError as exc:
        raise errors.TargetInvalid(f"{dataset.name}: {exc}", loc=_LOC) from None
    X, X_test = dataset.X, dataset.X_test
    standardization = None
    if standardize:
        x_mean, x_std = X.mean(axis=0), _std(X)
        X = (X - x_mean) / x_std
        X_test = None if X_test is None else (X_test - x_mean) / x_std
        y_mean = y_std = None
        if standardize_y:
            y_mean, y_std = float(y.mean()), float(_std(y[:, None])[0])
            y = (y - y_mean) / y_std
            y_test = None if y_test is None else (y_test - y_mean) / y_std
        standardization = Standardization(x_mean, x_std, y_mean, y_std)
    if bias:
        X = np.column_stack([X, np.ones(X.shape[0])])
        X_test = None if X_test is None else np.column_stack([X_test, np.ones(X_test.shape[0])])
    return PreparedData(X, y, X_test, y_test, standardization, n_classes)


def _tensor(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> Tensor:
    # A copy: Dataset arrays are read-only and shared (cached built-in sets).
    return torch.from_numpy(np.array(array, copy=True)).to(device=device, dtype=dtype)


class DataTarget(Target):
    """Posterior of parameters θ [n, dim] given data; subclasses implement `log_prior(θ) -> [n]` and
    `log_likelihood_sum(θ, batch) -> [n]` = Σ_{i∈batch} log p(y_i | x_i, θ) (unscaled). For a closed-form
    score they also implement `grad_log_prior` and `grad_log_likelihood_sum`; otherwise autograd is used.
    """

    kind = "data_target"

    def __init__(self, data: PreparedData, batch_size: int | None, dtype: torch.dtype, device: torch.device):
        label_dtype = torch.int64 if data.y.dtype == np.int64 else dtype
        self.X = _tensor(data.X, dtype, device)
        self.y = _tensor(data.y, label_dtype, device)
        self.X_test = None if data.X_test is None else _tensor(data.X_test, dtype, device)
        self.y_test = None if data.y_test is None else _tensor(data.y_test, label_dtype, device)
        self.standardization = data.standardization
        self.n_data = int(data.X.shape[0])
        if batch_size is not None and batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        # B ≥ N is full data: there is nothing to subsample.
        self.batch_size = batch_size if batch_size is not None and batch_size < self.n_data else None

    # ---- the minibatch rule ------------------------------------------------------------------------

    def sample_batch(self, generator: torch.Generator) -> Tensor | None:
        """B distinct row indices, uniform without replacement (see the module docstring); None: full data."""
        if self.batch_size is None:
            return None
        return torch.randperm(self.n_data, generator=generator, device=generator.device)[: self.batch_size]

    def likelihood_scale(self, batch: Tensor | None) -> float:
        """N/B for a batch of B rows, 1 for the full data."""
        if batch is None:
            return 1.0
        return self.n_data / self._check_batch(batch).shape[0]

    def _check_batch(self, batch: object) -> Tensor:
        if not isinstance(batch, Tensor) or batch.ndim != 1 or batch.dtype not in (torch.int64, torch.int32):
            raise ValueError("a batch must be a 1-D integer tensor of row indices (from sample_batch)")
        if batch.shape[0] == 0:
            raise ValueError("a batch must hold at least one row index")
        return batch

    def rows(self, batch: Tensor | None) -> tuple[Tensor, Tensor]:
        """(X, y) of the batch rows, or of all rows."""
        if batch is None:
            return self.X, self.y
        index = self._check_batch(batch).to(self.X.device)
        return self.X.index_select(0, index), self.y.index_select(0, index)

    def log_prob(self, x: Tensor, batch: object | None = None) -> Tensor:
        """log prior(θ) + (N/B) Σ_{i∈batch} log p(y_i | x_i, θ) for each row θ of x."""
        return self.log_prior(x) + self.likelihood_scale(batch) * self.log_likelihood_sum(x, batch)  # type: ignore[arg-type]

    def score(self, x: Tensor, batch: object | None = None) -> Tensor:
        """∇ log prior + (N/B) ∇ Σ_{i∈batch} log p(y_i | x_i, θ): closed form when the subclass has one."""
        grad_prior = self.grad_log_prior(x)
        grad_likelihood = self.grad_log_likelihood_sum(x, batch)  # type: ignore[arg-type]
        if grad_prior is None or grad_likelihood is None:
            return super().score(x, batch)
        scale = self.likelihood_scale(batch)  # type: ignore[arg-type]
        return grad_prior + (grad_likelihood if scale == 1.0 else scale * grad_likelihood)

    def log_likelihood(self, x: Tensor, batch: Tensor | None = None) -> Tensor:
        """The scaled estimate (N/B) Σ_{i∈batch} log p(y_i | x_i, θ) of the full-data log-likelihood."""
        return self.likelihood_scale(batch) * self.log_likelihood_sum(x, batch)

    # ---- subclass hooks ----------------------------------------------------------------------------

    def log_prior(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def log_likelihood_sum(self, x: Tensor, batch: Tensor | None) -> Tensor:
        raise NotImplementedError

    def grad_log_prior(self, x: Tensor) -> Tensor | None:
        return None

    def grad_log_likelihood_sum(self, x: Tensor, batch: Tensor | None) -> Tensor | None:
        return None

    @property
    def values_per_row(self) -> int:
        """Intermediate values one data row produces per particle in `log_likelihood_sum` (the linear predictor,
        the residual, its square, the term; a network adds its activations): what `targets.bounded` budgets by
        (measured: a linear regression's log p held about 8 bytes × 4 a row and particle in float64)."""
        return 4

    @property
    def dtype(self) -> torch.dtype:
        return self.X.dtype

    @property
    def device(self) -> torch.device:
        return self.X.device
