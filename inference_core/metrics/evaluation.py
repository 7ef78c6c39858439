"""A job's periodic diagnostics (JobSpec `eval`): what `inference_core.training.evaluate` reports.

* `mean_error`, `cov_error_rel`: against the target's exact moments, where it has them (moments.py);
* `ksd_imq`: KSD² (U-statistic) with the IMQ kernel c = 1, β = −1/2 and h = 1 (`ksd_bandwidth="fixed"`,
  the convergence-determining kernel of Gorham & Mackey 2017) or h = the median heuristic of the particles
  (`"median"`: median of distinct squared distances / log n), with full-data scores;
* `mmd2_reference` (+ `mmd_bandwidth`): MMD² (V-statistic, RBF, median bandwidth of the union) between the
  particles and `mmd_reference_samples` exact draws of the target's reference sampler, drawn once per run
  with a fixed seed (`reference_seed`) and cached by the `Evaluator`;
* whatever the method reports of itself through an optional `diagnostics() -> dict` (the MCMC baselines: ESS
  and R-hat of their chains), so a job's final metrics carry them.

The O(n²) diagnostics use at most `max_particles` particles: the first ones of a fixed permutation seeded by
`reference_seed` (an unbiased subsample). Non-finite values are left out. Nothing here touches the method's
random generator, so evaluating does not change the run.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from inference_core.kernels import median_heuristic
from inference_core.metrics.discrepancy import ksd_imq, mmd2_rbf
from inference_core.metrics.moments import cov_error_relative, mean_error
from inference_core.spec import EvalSpec


def _subset(x: Tensor, limit: int, seed: int) -> Tensor:
    n = x.shape[0]
    if n <= limit:
        return x
    generator = torch.Generator().manual_seed(seed)
    index = torch.randperm(n, generator=generator)[:limit].sort().values
    return x.index_select(0, index.to(x.device))


class Evaluator:
    """Evaluates a method's particles; caches the reference draws for the whole run."""

    def __init__(self, spec: EvalSpec | None = None):
        self.spec = spec or EvalSpec()
        self._reference_draws: Tensor | None = None
        self._reference_checked = False

    def reference_draws(self, method: Any) -> Tensor | None:
        """The cached exact draws (None when the target has no sampler or MMD is off)."""
        if not self._reference_checked:
            self._reference_checked = True
            reference = method.target.reference()
            if self.spec.mmd and reference is not None and reference.sample is not None:
                self._reference_draws = self._draw(reference.sample, method.particles().device)
        return self._reference_draws

    def _draw(self, sample: Any, device: torch.device) -> Tensor:
        """Reference draws with a generator seeded by `reference_seed`, on the particles' device first: the
        targets' samplers disagree on whether the generator's device or the target's is used; a CPU
        generator is the fallback."""
        n = self.spec.mmd_reference_samples
        with torch.no_grad():
            try:
                generator = torch.Generator(device=device).manual_seed(self.spec.reference_seed)
                return sample(n, generator).detach()
            except RuntimeError:
                if device.type == "cpu":
                    raise
                return sample(n, torch.Generator().manual_seed(self.spec.reference_seed)).detach()

    def __call__(self, method: Any) -> dict[str, float]:
        x = method.particles().detach()
        metrics: dict[str, float] = {}
        reference = method.target.reference()
        if reference is not None:
            if reference.mean is not None:
                metrics["mean_error"] = mean_error(x, reference.mean)
            if reference.cov is not None:
                metrics["cov_error_rel"] = cov_error_relative(x, reference.cov)
        sub = _subset(x, self.spec.max_particles, self.spec.reference_seed)
        if self.spec.ksd and sub.shape[0] >= 2:
            score = method.target.score(sub, None)
            if self.spec.ksd_bandwidth == "fixed":
                h = 1.0
            else:
                h = float(median_heuristic(sub, divisor="log_n", include_diagonal=False))
            metrics["ksd_imq"] = ksd_imq(sub, score, h=h)
        draws = self.reference_draws(method)
        if draws is not None:
            value, bandwidth = mmd2_rbf(sub, draws.to(device=sub.device, dtype=sub.dtype))
            metrics["mmd2_reference"] = value
            metrics["mmd_bandwidth"] = bandwidth
        metrics.update(method.diagnostics())
        return {key: value for key, value in metrics.items() if math.isfinite(value)}
