"""The linear-time SVGD variants of Kang, "Speedup Methods for Stein Variational Gradient Descent" (Dartmouth
thesis; MATLAB/Python code `MinHyung-Kang/Thesis`; docs/implementation-notes.md,
"SVGD speed-ups (Kang)"): random subset (Alg. 2), random subset with
control-functional weights (Alg. 3), random induced points (Alg. 4, eq. 13) and adversarial induced points
(Alg. 5, eqs. 14-18).

Shared conventions (same section: bandwidth and subsets):
* kernel exp(−r²/h) (or IMQ) with h = median of the n×m cross distances between all particles and the m
  subset/induced points, divided by log(n + 1) with the full n (`kernel.bandwidth`, schemas.kernels.SpeedupBandwidthRuleOptions);
* the subset (or the induced points) is redrawn each step from `self.generator`, uniformly without
  replacement (adversarial: with replacement, as `randi` in `svgd_singleIteration.m`);
* the subset methods evaluate the score at the m subset points only (that is the saving); the induced-point
  methods need all n scores.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from inference_core import errors
from inference_core.kernels import Kernel, kernel_matmul
from inference_core.kernels.common import centre
from inference_core.methods.base import KernelParticleMethod
from inference_core.methods.kernel_sums import (
    cross_median_bandwidth,
    cross_sq_dists,
    induced_stein_sums,
    stein_kernel_matrix,
    weighted_cross_stein_sums,
)
from inference_core.methods.optim import adagrad_momentum_ascent
from inference_core.schemas.methods import (
    InducedAdversarialOptions,
    InducedOptions,
    SubsetCFOptions,
    SubsetOptions,
)
from inference_core.targets.base import Target

#: λ of the control-functional solve is searched over lambda_min · 10^k for k = 0 .. this.
LAMBDA_SEARCH_STEPS = 24

# ------------------------------------------------------------------------------------ pure functions


def subset_svgd_direction(
    x: Tensor,
    y: Tensor,
    score_y: Tensor,
    kernel: Kernel,
    weights: Tensor | None = None,
    *,
    backend: str = "auto",
    precision: str = "ieee",
) -> Tensor:
    """ψ(x_i) = Σ_j w_j [k(y_j, x_i) ∇log p(y_j) + ∇_{y_j} k(y_j, x_i)], [n, d], O(nm).

    Random subset (Kang Alg. 2): w_j = 1/m (`weights=None`); control functionals (Alg. 3): the weights of
    `control_functional_weights` (summing to 1, no 1/m). y are m of the particles, score_y their scores.
    """
    if weights is None:
        weights = y.new_full((y.shape[0],), 1.0 / y.shape[0])
    return weighted_cross_stein_sums(x, y, score_y, weights, kernel, backend=backend, precision=precision)


def control_functional_weights(
    k0: Tensor, *, lambda_min: float = 1e-8, max_condition: float = 1e11
) -> tuple[Tensor, float]:
    """Control-functional weights of m points from their Stein-kernel matrix K₀ (Kang Alg. 3 / eq. 12,
    Oates et al. 2017's simplified estimator; docs/implementation-notes.md, "SVGD speed-ups (Kang)"), computed in float64:

        λ = the smallest λ_min·10^k (k = 0, 1, ...) with cond₂(K₀ + λI) < max_condition,
        a = (K₀ + λ m I)⁻¹ 1,   v = aᵀ / (1 + 1ᵀa),   w = v / Σ_j v_j   (may be negative).

    The condition number is tested with λI but the system is solved with λmI, as in the code. After the
    renormalisation the "1 +" of the denominator cancels (w = a / Σa); it is kept to follow the algorithm.
    Returns (w [m] in k0's dtype, λ).
    """
    if k0.dim() != 2 or k0.shape[0] != k0.shape[1]:
        raise ValueError(f"k0 must be a square matrix, got shape {tuple(k0.shape)}")
    m = k0.shape[0]
    a64 = k0.detach().to(torch.float64)
    a64 = 0.5 * (a64 + a64.T)
    eig = torch.linalg.eigvalsh(a64)
    if not bool(torch.isfinite(eig).all()):
        raise errors.Diverged("the Stein-kernel matrix of the control functionals is not finite")
    lam = None
    for k in range(LAMBDA_SEARCH_STEPS + 1):
        candidate = lambda_min * 10.0**k
        shifted = (eig + candidate).abs()
        smallest = float(shifted.min())
        if smallest > 0 and float(shifted.max()) / smallest < max_condition:
            lam = candidate
            break
    if lam is None:
        raise errors.Diverged("no λ ≤ λ_min·1e24 makes K₀ + λI well conditioned (control functionals)")
    system = a64 + lam * m * torch.eye(m, dtype=torch.float64, device=k0.device)
    a = torch.linalg.solve(system, torch.ones(m, 1, dtype=torch.float64, device=k0.device)).squeeze(1)
    v = a / (1.0 + a.sum())
    w = v / v.sum()
    return w.to(k0.dtype), lam


def induced_svgd_direction(
    x: Tensor, score: Tensor, y: Tensor, kernel: Kernel, *, backend: str = "auto", precision: str = "ieee"
) -> Tensor:
    """Kang eq. 13 (Alg. 4), the SVGD direction under the induced kernel k_y(x, x') = (1/m) Σ_j k(x, y_j) k(x', y_j):

        φ(x') = (1/m) Σ_j k(x', y_j) · (1/n) Σ_i [k(x_i, y_j) ∇log p(x_i) + ∇_{x_i} k(x_i, y_j)],

    two O(nm) kernel passes (`induced_stein_sums`, then K(X, Y)·A). All n scores are needed.
    """
    a = induced_stein_sums(x, score, y, kernel, backend=backend, precision=precision)
    xc, yc = centre(x, y)
    return kernel_matmul(xc, yc, a, kernel, backend=backend, precision=precision) / y.shape[0]


def induced_ksd(x: Tensor, score: Tensor, y: Tensor, kernel: Kernel, *, u_statistic: bool = True) -> Tensor:
    """The KSD of the particles under the induced kernel (Kang eqs. 34-35 with 17-18), differentiable in y and
    in the kernel's parameters (h):

        ξ_ij = k(x_i, y_j) s(x_i) + ∇_{x_i} k(x_i, y_j)          (the Stein operator of k(·, y_j) at x_i)
        U   = 1/(n(n−1)m) Σ_j [ ||Σ_i ξ_ij||² − Σ_i ||ξ_ij||² ]    (U-statistic: pairs i ≠ i')
        V   = 1/(n² m)     Σ_j ||Σ_i ξ_ij||²                       (`u_statistic=False`)

    O(nm) with dense [n, m] matrices (centred Gram-form distances): Σ_i ξ_ij and Σ_i ||ξ_ij||² expand into
    matrix products, no [n, m, d] tensor.
    """
    n, m = x.shape[0], y.shape[0]
    if u_statistic and n < 2:
        raise ValueError("the U-statistic needs at least 2 particles")
    xc, yc = centre(x, y)
    sq = ((xc * xc).sum(1, keepdim=True) + (yc * yc).sum(1)[None, :] - 2.0 * (xc @ yc.T)).clamp_min(0.0)
    k, g = kernel.f_and_g(sq)  # ∇_{x_i} k(x_i, y_j) = −g_ij (x_i − y_j)
    sum_xi = k.T @ score - (g.T @ xc - yc * g.sum(0).unsqueeze(1))  # [m, d]
    total = sum_xi.square().sum()
    if not u_statistic:
        return total / (n * n * m)
    s_dot_diff = (score * xc).sum(1, keepdim=True) - score @ yc.T  # s_i·(x_i − y_j), [n, m]
    sq_norms = (k * k * score.square().sum(1, keepdim=True) - 2.0 * k * g * s_dot_diff + g * g * sq).sum()
    return (total - sq_norms) / (n * (n - 1) * m)


def induced_points_repulsion(y: Tensor, kernel: Kernel, strength: float) -> Tensor:
    """−(α / 2m) Σ_{j,k} k(y_j, y_k): its gradient in y_j is α (1/m) Σ_k g_jk (y_j − y_k) = −α (1/m) Σ_k
    ∇_{y_j} k(y_j, y_k), the regulariser of Kang eq. 16 that keeps the induced points apart."""
    m = y.shape[0]
    yc, _ = centre(y)
    sq = ((yc.unsqueeze(1) - yc.unsqueeze(0)) ** 2).sum(-1)
    return -(strength / (2.0 * m)) * kernel.f(sq).sum()


# ------------------------------------------------------------------------------------------- methods


class _SpeedupMethod(KernelParticleMethod):
    """A speed-up method: subset size m ≤ n, cross-median (or kernel-rule) bandwidth."""

    options: SubsetOptions

    def __init__(self, target: Target, options: SubsetOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        if options.subset_size > num_particles:
            raise errors.MethodOptionsInvalid(
                f"options.subset_size ({options.subset_size}) must not exceed num_particles ({num_particles})",
                loc=("options", "subset_size"),
            )

    def draw_subset(self) -> Tensor:
        """m distinct particle indices, uniform, from the method's generator."""
        return torch.randperm(self.num_particles, generator=self.generator)[: self.options.subset_size]

    def bandwidth_for(self, x: Tensor, y: Tensor) -> Tensor:
        rule = self.options.kernel.bandwidth
        if rule.source == "cross_median":
            return cross_median_bandwidth(x, y, rule.cross_divisor)
        return self.bandwidth_rule(x)


class SubsetSVGD(_SpeedupMethod):
    """Random-subset SVGD (Kang Alg. 2):

        φ(x_i) = (1/m) Σ_{j∈S} [k(y_j, x_i) ∇log p(y_j) + ∇_{y_j} k(y_j, x_i)],   y_j = x_j, j ∈ S,

    S a fresh uniform subset of m particles (without replacement) each step; the score is evaluated at the
    m subset points only, with this step's minibatch. O(nm)."""

    name = "svgd_subset"

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        index = self.draw_subset().to(x.device)
        y = x.index_select(0, index)
        score_y = self.moved.score(y, batch)
        h = self.bandwidth_for(x, y)
        phi = subset_svgd_direction(x, y, score_y, self.kernel(h), **self.pairwise)
        return phi, {"bandwidth": float(h)}


class SubsetCFSVGD(_SpeedupMethod):
    """Random-subset SVGD with control-functional weights (Kang Alg. 3):

        φ(x_i) = Σ_{j∈S} w_j [k(y_j, x_i) ∇log p(y_j) + ∇_{y_j} k(y_j, x_i)]   (no 1/m),

    w from `control_functional_weights` on the Stein-kernel matrix K₀ of the subset (same kernel and h),
    renormalised to Σ w = 1 (negative weights allowed). Scores at the m subset points only. O(nm + m³)."""

    name = "svgd_subset_cf"
    options: SubsetCFOptions

    def __init__(self, target: Target, options: SubsetCFOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        index = self.draw_subset().to(x.device)
        y = x.index_select(0, index)
        score_y = self.moved.score(y, batch)
        h = self.bandwidth_for(x, y)
        kernel = self.kernel(h)
        k0 = stein_kernel_matrix(y.to(torch.float64), score_y.to(torch.float64),
                                 self.kernel(float(h)))
        weights, lam = control_functional_weights(k0, lambda_min=self.options.lambda_min,
                                                  max_condition=self.options.max_condition)
        phi = subset_svgd_direction(x, y, score_y, kernel, weights.to(x.dtype), **self.pairwise)
        return phi, {"bandwidth": float(h), "cf_lambda": lam, "cf_weight_min": float(weights.min())}


class InducedSVGD(_SpeedupMethod):
    """Random induced-points SVGD (Kang Alg. 4): `induced_svgd_direction` (eq. 13) with Y = a fresh uniform
    subset of m particles (without replacement) each step and the scores of all n particles. O(nm)."""

    name = "svgd_induced"
    options: InducedOptions

    def __init__(self, target: Target, options: InducedOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        score = self.moved.score(x, batch)
        y = x.index_select(0, self.draw_subset().to(x.device))
        h = self.bandwidth_for(x, y)
        phi = induced_svgd_direction(x, score, y, self.kernel(h), **self.pairwise)
        return phi, {"bandwidth": float(h)}


class InducedAdversarialSVGD(_SpeedupMethod):
    """Adversarial induced-points SVGD (Kang Alg. 5; `svgd_singleIteration.m`; docs/implementation-notes.md,
    "SVGD speed-ups (Kang)").

    Each step, with the scores of this step's minibatch (the one the particle update then uses):
    1. Y = m particles drawn uniformly WITH replacement; h = the bandwidth rule (cross median) at (X, Y);
    2. `ascent_steps` times: Y ← Y + AdaGrad(∇_Y [U + repulsion]) then log h ← log h + AdaGrad(∂U/∂log h),
       U = `induced_ksd` (U- or V-statistic), the gradients by autograd (the reference code's hand-written
       h-gradient is wrong, same section); h is optimised as log h so it stays > 0; with `batched`, U is taken
       over a fresh random subset of `batch_size` particles (with replacement) at every ascent step;
    3. the particles move along the induced direction (eq. 13) with that Y and h.
    Y and log h have their own AdaGrad-with-momentum histories, kept across steps (and in the checkpoint).
    Drawing Y at the start of a step is the paper's "after each particle step" shifted by one step.
    """

    name = "svgd_induced_adversarial"
    options: InducedAdversarialOptions

    def __init__(self, target: Target, options: InducedAdversarialOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        self.points_history: Tensor | None = None
        self.log_h_history: Tensor | None = None

    @property
    def ascent_lr(self) -> float:
        return self.options.ascent_lr if self.options.ascent_lr is not None else self.options.optimizer.lr

    def direction(self, x: Tensor, batch: object | None) -> tuple[Tensor, dict[str, float]]:
        opts = self.options
        score = self.moved.score(x, batch)
        n, m = x.shape[0], opts.subset_size
        y = x.index_select(0, torch.randint(n, (m,), generator=self.generator).to(x.device)).clone()
        h0 = self.bandwidth_for(x, y)
        log_h = torch.log(h0).detach()
        batch_size = opts.batch_size or m
        objective = float("nan")
        with torch.enable_grad():
            for _ in range(opts.ascent_steps):
                xs, ss = x, score
                if opts.batched:
                    rows = torch.randint(n, (batch_size,), generator=self.generator).to(x.device)
                    xs, ss = x.index_select(0, rows), score.index_select(0, rows)
                if opts.update in ("both", "points"):
                    yv = y.detach().requires_grad_(True)
                    h = log_h.exp()
                    value = induced_ksd(xs, ss, yv, self.kernel(h), u_statistic=opts.u_statistic)
                    total = value + induced_points_repulsion(yv, self.kernel(h), opts.repulsion)
                    (grad_y,) = torch.autograd.grad(total, yv)
                    y, self.points_history = adagrad_momentum_ascent(
                        y.detach(), grad_y, self.points_history, self.ascent_lr, opts.ascent_alpha, opts.ascent_eps
                    )
                    objective = float(value.detach())
                if opts.update in ("both", "bandwidth"):
                    lh = log_h.detach().requires_grad_(True)
                    value = induced_ksd(xs, ss, y.detach(), self.kernel(lh.exp()), u_statistic=opts.u_statistic)
                    (grad_h,) = torch.autograd.grad(value, lh)
                    log_h, self.log_h_history = adagrad_momentum_ascent(
                        log_h, grad_h, self.log_h_history, self.ascent_lr, opts.ascent_alpha, opts.ascent_eps
                    )
                    objective = float(value.detach())
        y = y.detach()
        h = log_h.exp().detach()
        if not math.isfinite(float(h)) or float(h) <= 0:
            raise errors.Diverged(f"the adversarial bandwidth became {float(h)} at step {self.step_count + 1}")
        phi = induced_svgd_direction(x, score, y, self.kernel(h), **self.pairwise)
        info = {"bandwidth": float(h), "bandwidth_start": float(h0)}
        if math.isfinite(objective):
            info["induced_ksd"] = objective
        return phi, info

    def extra_state(self) -> dict[str, Any]:
        return {**super().extra_state(), "points_history": self.points_history, "log_h_history": self.log_h_history}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        super().load_extra_state(state)
        points, log_h = state.get("points_history"), state.get("log_h_history")
        self.points_history = None if points is None else points.to(device=self.device, dtype=self.dtype)
        self.log_h_history = None if log_h is None else log_h.to(device=self.device, dtype=self.dtype)


__all__ = [
    "InducedAdversarialSVGD",
    "InducedSVGD",
    "SubsetCFSVGD",
    "SubsetSVGD",
    "adagrad_momentum_ascent",
    "control_functional_weights",
    "cross_median_bandwidth",
    "cross_sq_dists",
    "induced_ksd",
    "induced_points_repulsion",
    "induced_svgd_direction",
    "subset_svgd_direction",
]
