"""Held-out rows for a learnt observation noise (issue 40): a generator whose functions adapt to the data
overfits the rows its likelihood sees, and a noise std σ learnt on those rows comes out too small, so the
predictive is over-confident. Measured on UCI split 0: FVI with adapting bases learnt σ 0.10 where its test RMSE
said 0.26 (Boston, model units; test NLL 4.38), amortised f-SVGD's draws were `miscalibrated` on Boston, Concrete
and Wine. Calibrating σ on a seeded share of the training rows that the likelihood never sees gives it the size of
the error on new inputs: an empirical-Bayes choice of ours, not the papers'.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from inference_core.seeding import derive_seed

#: the seed stream of the split
HOLDOUT_STREAM = 3


def holdout_split(n_rows: int, share: float, seed: int, device: torch.device) -> tuple[Tensor | None, Tensor | None]:
    """(rows the likelihood sees, held-out rows) of `n_rows` training rows, round(share · n_rows) of them held out
    by a permutation of their own seed stream; (None, None) when that is none or all of them."""
    held = round(share * n_rows)
    if held < 1 or held >= n_rows:
        return None, None
    order = torch.randperm(n_rows, generator=torch.Generator().manual_seed(derive_seed(seed, HOLDOUT_STREAM)))
    return order[held:].to(device), order[:held].to(device)


def fit_batch(fit_rows: Tensor, batch_size: int | None, generator: torch.Generator) -> Tensor:
    """A minibatch of B distinct rows among `fit_rows` (all of them when B is None or not smaller)."""
    if batch_size is None or batch_size >= fit_rows.shape[0]:
        return fit_rows
    pick = torch.randperm(fit_rows.shape[0], generator=generator)[:batch_size]
    return fit_rows.index_select(0, pick.to(fit_rows.device))


def predictive_log_likelihood(f: Tensor, y: Tensor, log_std: Tensor) -> Tensor:
    """log (1/M) Σ_i N(y_j; f_ij, σ²) per held-out row j, [m], for draws f [M, m] of the functions there (no graph
    needed) and log σ a scalar tensor whose graph is kept: what σ is fitted to."""
    log_density = -0.5 * (y - f).square() * torch.exp(-2 * log_std) - log_std - 0.5 * math.log(2 * math.pi)
    return torch.logsumexp(log_density, 0) - math.log(f.shape[0])
