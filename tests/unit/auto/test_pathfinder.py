"""Pathfinder (preconditioning/pathfinder.py) against closed forms: the L-BFGS path reaches the mode of a badly
scaled rotated Gaussian, the finite-difference Hessian equals the exact one, and the chosen Gaussian is the
target itself (mean and covariance), with an ELBO equal to log Z; the importance k̂ of a Gaussian against its
closed-form tail index."""

from __future__ import annotations

import math

import numpy as np
import torch

from inference_core import errors
from inference_core.preconditioning.pathfinder import (
    DensityCounter,
    candidate_indices,
    finite_difference_hessian,
    finite_start,
    importance_check,
    lbfgs_path,
    local_gaussian,
    pathfinder,
)
from inference_core.targets.base import Target


class Gaussian(Target):
    """Unnormalised N(mean, cov): log p = −½ (x − m)ᵀ P (x − m), so log Z = ½ log det(2π cov)."""

    def __init__(self, mean: np.ndarray, cov: np.ndarray):
        self.dim = mean.shape[0]
        self.mean = torch.tensor(mean)
        self.cov = torch.tensor(cov)
        self.precision = torch.linalg.inv(self.cov)

    def log_prob(self, x, batch=None):
        z = x - self.mean
        return -0.5 * ((z @ self.precision) * z).sum(-1)


def rotated(d: int, seed: int = 0, span: float = 2.0) -> Gaussian:
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    scales = np.logspace(-span, span, d)
    return Gaussian(rng.standard_normal(d) * 30, q @ np.diag(scales**2) @ q.T)


def test_lbfgs_reaches_the_mode_of_a_badly_scaled_gaussian() -> None:
    target = rotated(8, span=1.5)
    density = DensityCounter(target)
    xs, grads, lps, settled = lbfgs_path(density, torch.zeros(8, dtype=torch.float64), max_iters=2000, history=6,
                                        tol=1e-14)
    assert lps == sorted(lps) and settled  # an ascent, to the mode
    sd = target.cov.diagonal().sqrt()
    assert float(((xs[-1] - target.mean) / sd).abs().max()) < 1e-3
    assert density.evals >= len(xs)


def test_finite_difference_hessian_and_local_gaussian_are_exact_for_a_gaussian() -> None:
    target = rotated(6)
    density = DensityCounter(target)
    x = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(1)) + target.mean
    hessian = finite_difference_hessian(density, x)
    torch.testing.assert_close(hessian, -target.precision, rtol=1e-6, atol=1e-6 * float(target.precision.abs().max()))
    _, grad = density(x[None])
    mean, root, log_det = local_gaussian(x, grad[0], hessian)  # one Newton step from anywhere lands on the mean
    torch.testing.assert_close(mean, target.mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(root @ root.T, target.cov, rtol=1e-5, atol=1e-8)
    assert abs(log_det - float(torch.logdet(target.cov))) < 1e-5


def test_pathfinder_picks_the_target_and_its_elbo_is_log_z() -> None:
    target = rotated(10, seed=3, span=1.0)  # condition 1e4: the paths reach the mode (1e8 takes > 1000 steps)
    found = pathfinder(target, starts=3, start_scale=2.0, max_iters=2000, history=6, tol=1e-12, max_candidates=6,
                       elbo_draws=64, generator=torch.Generator().manual_seed(0))
    best = found.best
    # in the target's own metric (scales span 1e-2..1e2, rotated): Mahalanobis error of the mean, and the
    # whitened covariance L⁻¹ Σ L⁻ᵀ against I
    delta = best.mean - target.mean
    assert float(delta @ target.precision @ delta) ** 0.5 < 1e-2
    chol = torch.linalg.cholesky(target.cov)
    whitened = torch.linalg.solve_triangular(chol, best.root, upper=False)
    torch.testing.assert_close(whitened @ whitened.T, torch.eye(10, dtype=torch.float64), rtol=0, atol=1e-2)
    log_z = 0.5 * float(torch.logdet(2 * math.pi * target.cov))
    assert abs(best.elbo - log_z) < 1e-3  # q = p exactly: log p − log q is the constant log Z at every draw
    assert found.start_disagreement() < 1e-2
    assert found.grad_evals > 0
    assert found.settled == [True, True, True]  # every path ended at the mode


class Funnel(Target):
    """Neal's funnel in d dimensions: v ~ N(0, 3²), x_i | v ~ N(0, e^v). log p rises without a nearby mode down the
    neck (v → −∞ with x → 0; its mode is at v = −9(d − 1)/2, 40 sds out at d = 10)."""

    def __init__(self, dim: int):
        self.dim = dim

    def log_prob(self, x, batch=None):
        v, rest = x[:, 0], x[:, 1:]
        return -v.square() / 18 - 0.5 * (self.dim - 1) * v - 0.5 * (rest.square() * torch.exp(-v[:, None])).sum(-1)


def test_paths_down_a_funnel_s_neck_do_not_settle() -> None:
    """The paths' `settled` flags tell a mode from a neck (`auto`'s `starts_disagree` looks only at settled paths):
    down the funnel's neck every L-BFGS and Newton step still gains, so no path settles; two unit Gaussians 12 apart,
    each path settles at its mode."""
    found = pathfinder(Funnel(10), starts=3, start_scale=2.0, max_iters=300, history=6, tol=1e-9, max_candidates=5,
                       elbo_draws=32, newton_steps=10, generator=torch.Generator().manual_seed(0))
    assert found.settled == [False, False, False] and found.iterations == [310, 310, 310], found.iterations

    class TwoModes(Target):
        dim = 4

        def log_prob(self, x, batch=None):
            shifted = torch.tensor([6.0, 0.0, 0.0, 0.0], dtype=x.dtype)
            return torch.logaddexp(-0.5 * (x - shifted).square().sum(-1), -0.5 * (x + shifted).square().sum(-1))

    found = pathfinder(TwoModes(), starts=4, start_scale=4.0, max_iters=300, history=6, tol=1e-9, max_candidates=5,
                       elbo_draws=32, newton_steps=10, generator=torch.Generator().manual_seed(0))
    assert found.settled == [True] * 4 and max(found.iterations) < 50, found.iterations
    assert found.start_disagreement() > 10  # both modes were found


def test_no_finite_start_names_the_bad_coordinates() -> None:
    class Nowhere(Target):
        dim = 3

        def log_prob(self, x, batch=None):
            return torch.log(-x[:, 1].abs() - 1.0)  # NaN everywhere

    density = DensityCounter(Nowhere())
    try:
        finite_start(density, lambda _: torch.zeros(3, dtype=torch.float64) + 0.5, retries=3)
    except errors.TargetNonFinite as exc:
        assert "no finite starting point in 3 draws" in exc.detail
    else:
        raise AssertionError("expected TargetNonFinite")



class NoiseRegression(Target):
    """y = Xβ + ε, ε ~ N(0, σ²), flat prior on (β, log σ); X has an intercept and 6 features correlated 0.999,
    y is in "original units" (intercept 150, noise sd 50), like the robustness suite's diabetes regression.
    Its mode is closed-form: β̂ by least squares, σ̂² = RSS/n; there −H⁻¹ is σ̂²(XᵀX)⁻¹ ⊕ 1/(2n)."""

    def __init__(self, n: int = 200, features: int = 6, seed: int = 0):
        rng = np.random.default_rng(seed)
        corr = 0.999 * np.ones((features, features)) + 0.001 * np.eye(features)
        X = np.hstack([np.ones((n, 1)), rng.standard_normal((n, features)) @ np.linalg.cholesky(corr).T])
        y = X @ np.append(150.0, 20 * rng.standard_normal(features)) + 50 * rng.standard_normal(n)
        beta = np.linalg.solve(X.T @ X, X.T @ y)
        variance = ((y - X @ beta) ** 2).sum() / n
        self.X, self.y, self.n, self.dim = torch.tensor(X), torch.tensor(y), n, features + 2
        self.mode = torch.tensor(np.append(beta, 0.5 * math.log(variance)))
        cov = np.zeros((self.dim, self.dim))
        cov[:-1, :-1], cov[-1, -1] = variance * np.linalg.inv(X.T @ X), 1 / (2 * n)
        self.laplace_cov = torch.tensor(cov)

    def log_prob(self, x, batch=None):
        residual = self.y - x[:, :-1] @ self.X.T
        return -self.n * x[:, -1] - 0.5 * residual.square().sum(-1) * torch.exp(-2 * x[:, -1])


def test_newton_steps_finish_a_path_that_lbfgs_leaves_short() -> None:
    """50 L-BFGS iterations a path leave the badly scaled regression's paths 4.6 sds from its mode and the best
    Gaussian's mean 0.5 sd off; 10 Newton steps after them reach the mode, whose Laplace fit is then chosen."""
    target = NoiseRegression()
    sd = target.laplace_cov.diagonal().sqrt()
    options = dict(starts=2, start_scale=2.0, max_iters=50, history=6, tol=1e-12, max_candidates=4, elbo_draws=32)
    short = pathfinder(target, generator=torch.Generator().manual_seed(0), newton_steps=0, **options)
    assert float(((short.path_ends - target.mode) / sd).abs().max()) > 1.0
    assert float(((short.best.mean - target.mode) / sd).abs().max()) > 0.1
    refined = pathfinder(target, generator=torch.Generator().manual_seed(0), newton_steps=10, **options)
    assert float(((refined.path_ends - target.mode) / sd).abs().max()) < 1e-8
    assert float(((refined.best.mean - target.mode) / sd).abs().max()) < 1e-6
    cov = refined.best.root @ refined.best.root.T
    torch.testing.assert_close(cov, target.laplace_cov, rtol=1e-4, atol=1e-4 * float(sd.min()) ** 2)
    assert refined.grad_evals > short.grad_evals


def test_importance_khat_is_the_tail_index_of_the_weights() -> None:
    """p = N(0, τ²I₂), q = N(0, I₂): the weights w ∝ exp(‖z‖²(1 − 1/τ²)/2) with ‖z‖² ~ χ²₂ (exponential) are exactly
    Pareto with shape k = 1 − 1/τ², so k̂ estimates it (mean of 5 seeds of 4,000 draws: the PSIS fit is noisy,
    ±0.15 a seed); q = p gives constant weights, k̂ < 0."""
    from inference_core.preconditioning.pathfinder import Gaussian as Proposal

    proposal = Proposal(torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64), 0.0, 0.0)
    for tau in (1.0, math.sqrt(2.0), 2.0):
        target = Gaussian(np.zeros(2), np.eye(2) * tau**2)
        estimates = [importance_check(target, proposal, 4000, torch.Generator().manual_seed(seed)).khat
                     for seed in range(5)]
        if tau == 1.0:
            assert max(estimates) < 0, estimates
        else:
            assert abs(np.mean(estimates) - (1 - 1 / tau**2)) < 0.08, (tau, estimates)


def test_importance_shift_is_the_weighted_mean_offset_in_sds_of_q() -> None:
    """q = N(0, I₂). p = N((0.6, −0.3), I₂): importance weighting recovers p's mean, so the shift is 0.6 sds of q
    (the weights exp(m·z) are log-normal: k̂ well under 1). p = N(0, 4I₂), symmetric and wider than q: k̂ = 0.75 but
    the weighted mean stays at q's, shift near 0 (mean of 5 seeds of 4,000 draws)."""
    from inference_core.preconditioning.pathfinder import Gaussian as Proposal

    proposal = Proposal(torch.zeros(2, dtype=torch.float64), torch.eye(2, dtype=torch.float64), 0.0, 0.0)
    offset = Gaussian(np.array([0.6, -0.3]), np.eye(2))
    wide = Gaussian(np.zeros(2), 4 * np.eye(2))
    shifted = [importance_check(offset, proposal, 4000, torch.Generator().manual_seed(seed)) for seed in range(5)]
    assert abs(np.mean([c.shift_sd for c in shifted]) - 0.6) < 0.06, shifted
    assert max(c.khat for c in shifted) < 0.5, shifted
    symmetric = [importance_check(wide, proposal, 4000, torch.Generator().manual_seed(seed)) for seed in range(5)]
    assert np.mean([c.khat for c in symmetric]) > 0.6 and np.mean([c.shift_sd for c in symmetric]) < 0.25, symmetric


def test_candidates_are_dense_early_and_keep_the_start_and_the_end() -> None:
    assert candidate_indices(1011, 8) == [0, 2, 6, 18, 51, 139, 375, 1010]
    assert candidate_indices(5, 8) == [0, 1, 2, 3, 4]  # a short path: every point
    assert candidate_indices(31, 8) == [0, 1, 2, 3, 6, 11, 18, 30] and candidate_indices(40, 1) == [39]


def test_on_centred_eight_schools_pathfinder_picks_the_bulk_not_the_neck() -> None:
    """Centred eight schools (the robustness suite's problem): every path runs down the neck (log τ ≈ −15 by its
    1,000th iteration, where −8 log τ makes the density grow without bound) and crosses the posterior's bulk only in
    its first iterations. With the candidates evenly spaced in iteration (the first after the start at iteration
    144) the chosen Gaussian sat in the neck on seeds 2, 6 and 7 of 0-7 (log τ ≈ −15; NUTS: 0.81 ± 1.16), and the
    flow fitted from there stayed in it (means 5-8 posterior sds off); spaced in log(1 + iteration), it is in the
    bulk on every seed (log τ within 2.6 posterior sds)."""
    from benchmarks.robustness import problems as suite
    from benchmarks.robustness.scoring import load_reference
    from inference_core.seeding import derive_seed
    from inference_core.targets import BuildContext, build_target

    problem, reference = suite.problems()["eight_schools_centered"], load_reference("eight_schools_centered")
    target = build_target(problem.target_spec(), BuildContext(dtype=torch.float64))
    log_tau = problem.param_names.index("log_tau")
    for seed in (2, 6, 7):
        found = pathfinder(target, starts=4, start_scale=2.0, max_iters=1000, history=6, tol=1e-9, max_candidates=8,
                           elbo_draws=32, newton_steps=10, generator=torch.Generator().manual_seed(derive_seed(seed, 3)))  # as `auto` draws them
        assert not any(found.settled)
        off = abs(float(found.best.mean[log_tau]) - reference["mean"][log_tau]) / reference["sd"][log_tau]
        assert off < 4, (seed, float(found.best.mean[log_tau]))  # the neck: 13 sds off


class UnequalModes(Target):
    """0.3·N(0, I) + 0.7·N(m, I), m = 5·e₁ (d = 6): each mode's Gaussian is its component to e^−12."""

    dim = 6
    light = 0.3

    def __init__(self) -> None:
        self.far = torch.zeros(self.dim, dtype=torch.float64)
        self.far[0] = 5.0

    def log_prob(self, x, batch=None):
        near = math.log(self.light) - 0.5 * x.square().sum(-1)
        far = math.log(1 - self.light) - 0.5 * (x - self.far.to(x)).square().sum(-1)
        return torch.logaddexp(near, far)


def test_probes_find_the_mode_that_no_start_reached() -> None:
    """One start at the light mode (start_scale 0.1): without probes Pathfinder knows only that mode; with them a
    probe settles at the heavy one, which becomes a path of its own, its Gaussian N(m, I) and its ELBO about the
    log mass of its component, so the two ELBOs differ by about log(0.7/0.3) and the heavy mode's Gaussian is the best."""
    target = UnequalModes()
    settings = dict(starts=1, start_scale=0.1, max_iters=200, history=6, tol=1e-12, max_candidates=5,
                    elbo_draws=32, newton_steps=10)
    alone = pathfinder(target, generator=torch.Generator().manual_seed(0), probes=0, **settings)
    assert alone.probed_modes == 0 and len(alone.per_start) == 1
    assert float(alone.best.mean.norm()) < 1e-3  # the light mode (moved 4e-5 by the heavy one's tail)
    found = pathfinder(target, generator=torch.Generator().manual_seed(0), probes=16, **settings)
    assert found.probed_modes == 1 and len(found.per_start) == 2 and found.settled == [True, True]
    assert found.per_start[0].mean.tolist() == alone.per_start[0].mean.tolist()  # the start's path is unchanged
    heavy = found.per_start[1]
    assert float((heavy.mean - target.far).abs().max()) < 1e-3 and found.best is heavy
    torch.testing.assert_close(heavy.root @ heavy.root.T, torch.eye(6, dtype=torch.float64), rtol=0, atol=1e-4)
    # each ELBO is its component's log mass plus E_q log(1 + the other's density ratio), which the light mode's
    # draws towards the heavy one raise a little (0.78 against 0.85 here, 32 draws)
    assert abs(heavy.elbo - found.per_start[0].elbo - math.log(0.7 / 0.3)) < 0.1
    assert found.grad_evals > alone.grad_evals


def test_probes_add_no_path_on_one_mode_and_none_run_down_a_neck() -> None:
    """On a badly scaled Gaussian the probes (in the best Gaussian's whitened coordinates) settle back at the mode
    in a few iterations each and add nothing; down a funnel's neck no path settled, and no probe runs."""
    target = rotated(8, span=1.5)
    settings = dict(starts=2, start_scale=2.0, max_iters=2000, history=6, tol=1e-12, max_candidates=5,
                    elbo_draws=32, newton_steps=10)
    alone = pathfinder(target, generator=torch.Generator().manual_seed(0), probes=0, **settings)
    probed = pathfinder(target, generator=torch.Generator().manual_seed(0), probes=16, **settings)
    assert probed.probed_modes == 0 and len(probed.per_start) == 2
    assert [g.mean.tolist() for g in probed.per_start] == [g.mean.tolist() for g in alone.per_start]
    assert 0 < probed.grad_evals - alone.grad_evals < 16 * 20  # whitened: each probe a few iterations
    neck = dict(starts=2, start_scale=2.0, max_iters=100, history=6, tol=1e-9, max_candidates=5, elbo_draws=32,
                newton_steps=10)
    funnel = [pathfinder(Funnel(10), generator=torch.Generator().manual_seed(0), probes=probes, **neck)
              for probes in (0, 16)]
    assert not any(funnel[1].settled) and funnel[1].probed_modes == 0
    assert funnel[1].grad_evals == funnel[0].grad_evals
