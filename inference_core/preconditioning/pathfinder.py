"""The mode region and the local scale of a target, found before any particle moves (`auto`, issue 14).

Pathfinder (Zhang, Carpenter, Gelman & Vehtari 2022, JMLR 23, Alg. 1): follow an L-BFGS path towards the mode
of log p from a few dispersed starts; at points along each path form a Gaussian N(x + Σ∇log p(x), Σ) from the
local curvature; keep the one with the largest Monte-Carlo ELBO. Far from the mode (a funnel's neck, a
hierarchical model whose mode is degenerate) the path's intermediate Gaussians are better than a Laplace fit
at the end, and the ELBO picks them.

Our choice for Σ [differs from the paper]: the paper's Σ is the L-BFGS inverse-Hessian factor (a diagonal
plus 2J columns, J = 6 pairs), at every point of the path; ours is the inverse of a central finite-difference
Hessian of the score at up to `max_candidates` points of the path, spaced evenly in log(1 + iteration) (one
batched call of 2d rows each). For the dimensions `auto` is meant for (d ≤ a few hundred) this costs a few
hundred gradients more and gets every coordinate's scale of a badly scaled posterior, which six pairs cannot.
Directions of negative curvature (off the mode) take |λ| and every eigenvalue a floor (a saddle-free Newton
step, Dauphin et al. 2014), so Σ is always positive definite.

Newton refinement [our addition]: L-BFGS with six pairs crawls on a badly conditioned posterior (a regression
on collinear features: after 1,000 iterations its best Gaussian was still 0.9 posterior sds from the mean, and
in float32, whose gains fall below `tol` sooner, 4 sds), so each path goes on with up to `newton_steps`
saddle-free Newton steps x ← x + Σ∇log p from the Hessian the candidates use anyway (2d gradient rows a step).
Near a mode they converge in a few steps and the path's last candidate is the Laplace approximation; off a
mode (no mode: a funnel) they are one more stretch of the path, and the ELBO still chooses among them all.

Probes [our addition]: a mode that no start's path reaches stays unseen, and SVGD cannot find it later. After the
paths, short L-BFGS runs from points a few sds around the best settled mode, in its whitened coordinates (cheap
whatever the scales), look for other modes; each one found becomes a path (`probe_modes`).

Everything here is float64 arithmetic on top of the target's own dtype; `DensityCounter` counts every row
whose gradient is taken (the `grad_evals` a job reports).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor

from inference_core import errors
from inference_core.metrics.importance import normalised_weights, psis_smooth
from inference_core.targets.base import Target
from inference_core.targets.whitened import WhitenedTarget

#: Relative floor of the precision eigenvalues: Σ's condition number stays below 1e12.
EIGEN_FLOOR = 1e-12
#: Armijo constant and the most halvings of one line search.
ARMIJO_C = 1e-4
MAX_HALVINGS = 40


class DensityCounter:
    """log p and ∇log p of a target at rows x [m, d] in one autograd pass, as float64 on the CPU; counts the rows.
    The target is evaluated in the dtype and on the device it was built for (its data live there); Pathfinder's
    own d-dimensional algebra stays on the CPU."""

    def __init__(self, target: Target, batch: object | None = None, dtype: torch.dtype = torch.float64,
                 device: torch.device | None = None):
        self.target = target
        self.batch = batch
        self.evals = 0
        self._dtype = dtype  # the dtype the target was built in
        self._device = device  # and its device (None: the CPU)

    def __call__(self, x: Tensor) -> tuple[Tensor, Tensor]:
        self.evals += x.shape[0]
        with torch.enable_grad():
            leaf = x.to(device=self._device, dtype=self._dtype).detach().requires_grad_(True)
            lp = self.target.log_prob(leaf, self.batch)
            (grad,) = torch.autograd.grad(lp.sum(), leaf, allow_unused=True)
        grad = torch.zeros_like(leaf) if grad is None else grad
        return lp.detach().double().cpu(), grad.detach().double().cpu()


@dataclass
class Gaussian:
    """N(mean, root rootᵀ) in the target's coordinates, with its Monte-Carlo ELBO and where it was found."""

    mean: Tensor  # [d] float64
    root: Tensor  # [d, d] float64, Σ = root rootᵀ
    log_det: float  # log det Σ
    elbo: float
    start: int = 0
    iteration: int = 0

    @property
    def std(self) -> Tensor:
        return self.root.square().sum(-1).sqrt()

    def draw(self, eps: Tensor) -> Tensor:
        """Rows mean + root·ε for standard-normal rows ε [m, d]."""
        return self.mean + eps @ self.root.T

    def standardize(self, x: Tensor) -> Tensor:
        """The inverse of `draw`: rows ε = root⁻¹(x − mean) for rows x [m, d]."""
        return torch.linalg.solve(self.root.to(x), (x - self.mean.to(x)).T).T

    def log_q(self, eps: Tensor) -> Tensor:
        d = eps.shape[-1]
        return -0.5 * eps.square().sum(-1) - 0.5 * d * math.log(2 * math.pi) - 0.5 * self.log_det


@dataclass
class PathfinderResult:
    best: Gaussian
    per_start: list[Gaussian]  # the best Gaussian of each path
    path_ends: Tensor  # [starts, d] the last L-BFGS point of each path
    grad_evals: int
    iterations: list[int] = field(default_factory=list)
    #: per path: did it end at a mode (its gain fell below `tol`, or no step gained), or was log p still rising
    #: when its iterations ran out (a funnel's neck, where the density grows without a mode nearby)
    settled: list[bool] = field(default_factory=list)
    #: how many of the paths (the last ones) are `probe_modes`' finds, modes no start reached
    probed_modes: int = 0

    def start_disagreement(self, sd: Tensor | None = None) -> float:
        """Largest |mean_a − mean_b| of the paths' chosen Gaussians over coordinates and pairs of paths, in units
        of `sd` (default: the best Gaussian's): paths that settle in different modes end several posterior sds
        apart. (The Gaussians' means, not the paths' last points: on a badly conditioned target the paths stop
        at `max_iters` short of the mode, while their Newton-step means agree.)"""
        ends = torch.stack([g.mean for g in self.per_start])
        scale = self.best.std if sd is None else sd.to(ends)
        spread = (ends.max(0).values - ends.min(0).values) / scale
        return float(spread.max()) if ends.shape[0] > 1 else 0.0


def candidate_indices(points: int, count: int) -> list[int]:
    """Up to `count` of a path's `points` iterates, evenly spaced in log(1 + iteration), the start and the last
    included: dense early, where a path that runs down a neck still crosses the posterior's bulk (centred eight
    schools: every path reached log τ ≈ −15 by iteration 1,000, and with candidates evenly spaced in iteration
    the first after the start was iteration 144, in the neck already, on all four paths of 3 of 8 seeds)."""
    last = points - 1
    if count >= points:
        return list(range(points))
    if count == 1:
        return [last]
    top = math.log1p(last)
    return sorted({round(math.expm1(top * i / (count - 1))) for i in range(count)})


def finite_start(density: DensityCounter, draw: callable, retries: int) -> Tensor:
    """A row where log p and its gradient are finite: up to `retries` draws of `draw(k) -> [d]`, else
    `errors.TargetNonFinite` naming the coordinates of the gradient that were non-finite at the first draw."""
    first = None
    for attempt in range(retries):
        x = draw(attempt)
        lp, grad = density(x[None])
        if bool(torch.isfinite(lp).all() and torch.isfinite(grad).all()):
            return x
        first = (x, lp, grad) if first is None else first
    x, lp, grad = first
    bad = torch.nonzero(~torch.isfinite(grad[0])).flatten().tolist()
    raise errors.TargetNonFinite(
        f"no finite starting point in {retries} draws: log-density {float(lp[0])} at the first, with a non-finite "
        f"gradient in coordinates {bad[:20]}{' …' if len(bad) > 20 else ''}")


def lbfgs_path(density: DensityCounter, x0: Tensor, max_iters: int, history: int,
               tol: float) -> tuple[list[Tensor], list[Tensor], list[float], bool]:
    """Points, gradients and log-densities along an L-BFGS ascent of log p from x0 (Nocedal & Wright 2006,
    Alg. 7.4-7.5, two-loop recursion; a backtracking Armijo search), and whether the path settled. Stops at
    `max_iters` (not settled: log p was still rising, as down a funnel's neck), when the relative gain of log p
    falls below `tol`, or when no step along the direction increases log p (both settled: a mode, to precision).

    The search starts from the unit step, or from twice the last accepted one where that was below 1/2: in a
    funnel's neck the curvature changes faster than the pairs follow, and every unit step was halved about 11
    times (the suite's funnel: 1,000 iterations a path, 5·10⁴ evaluations in all, 12.5 an iteration; now 1.0·10⁴,
    with the same chosen Gaussian). Where the unit step or its half is accepted the path is the one a unit start
    gives; the other suite problems' Pathfinder costs moved by at most 6 %."""
    lp, grad = density(x0[None])
    xs, grads, lps = [x0], [grad[0]], [float(lp[0])]
    s_hist: list[Tensor] = []
    y_hist: list[Tensor] = []
    last_step = 1.0
    for _ in range(max_iters):
        x, g = xs[-1], grads[-1]
        direction = _two_loop(g, s_hist, y_hist)
        if float(direction @ g) <= 0:  # not an ascent direction (curvature pairs gone stale): gradient step
            direction, s_hist, y_hist = g.clone(), [], []
        first = min(1.0, 2 * last_step) if s_hist else 1.0 / max(float(g.norm()), 1e-12)
        found = armijo_step(density, x, lps[-1], g, direction, first)
        if found is None:
            return xs, grads, lps, True
        candidate, value, new_grad, step = found
        last_step = step if s_hist else 1.0
        s, y = candidate - x, g - new_grad  # y for −log p
        if float(s @ y) > 1e-12 * float(y @ y):
            s_hist, y_hist = (s_hist + [s])[-history:], (y_hist + [y])[-history:]
        gain = value - lps[-1]
        xs.append(candidate)
        grads.append(new_grad)
        lps.append(value)
        if gain <= tol * max(1.0, abs(value)):
            return xs, grads, lps, True
    return xs, grads, lps, False


def newton_refine(density: DensityCounter, x: Tensor, lp: float, grad: Tensor, steps: int,
                  tol: float) -> tuple[list[Tensor], list[Tensor], bool]:
    """Points and gradients of up to `steps` saddle-free Newton steps x ← x + Σ∇log p (Σ of `local_gaussian`,
    from a finite-difference Hessian) after (x, log p, ∇log p), each with a backtracking Armijo search, and
    whether they settled; stops early like `lbfgs_path` (relative gain below `tol` or no ascent: settled; a
    non-finite Hessian, where nothing can be told, counts as settled too, so that `starts_disagree` still looks
    at the path). Not settled: every step still gained."""
    xs: list[Tensor] = []
    grads: list[Tensor] = []
    for _ in range(steps):
        hessian = finite_difference_hessian(density, x)
        if not bool(torch.isfinite(hessian).all()):
            return xs, grads, True
        mean, _, _ = local_gaussian(x, grad, hessian)
        found = armijo_step(density, x, lp, grad, mean - x, 1.0)
        if found is None:
            return xs, grads, True
        x, value, grad, _ = found
        xs.append(x)
        grads.append(grad)
        gain, lp = value - lp, value
        if gain <= tol * max(1.0, abs(value)):
            return xs, grads, True
    return xs, grads, False


def armijo_step(density: DensityCounter, x: Tensor, lp: float, grad: Tensor, direction: Tensor,
                step: float) -> tuple[Tensor, float, Tensor, float] | None:
    """(x + t·direction, its log p, its gradient, t) for the first t = step, step/2, … that is finite and gains
    at least ARMIJO_C·t·(direction·∇log p); None after MAX_HALVINGS."""
    slope = float(direction @ grad)
    for _ in range(MAX_HALVINGS):
        candidate = x + step * direction
        new_lp, new_grad = density(candidate[None])
        value = float(new_lp[0])
        if math.isfinite(value) and bool(torch.isfinite(new_grad).all()) and value >= lp + ARMIJO_C * step * slope:
            return candidate, value, new_grad[0], step
        step *= 0.5
    return None


def _two_loop(g: Tensor, s_hist: list[Tensor], y_hist: list[Tensor]) -> Tensor:
    """H·g for the L-BFGS inverse Hessian of −log p (ascent direction of log p)."""
    q = g.clone()
    alphas = []
    for s, y in reversed(list(zip(s_hist, y_hist, strict=True))):
        rho = 1.0 / float(s @ y)
        alpha = rho * float(s @ q)
        q -= alpha * y
        alphas.append((rho, alpha, s, y))
    if s_hist:
        s, y = s_hist[-1], y_hist[-1]
        q *= float(s @ y) / float(y @ y)
    for rho, alpha, s, y in reversed(alphas):
        beta = rho * float(y @ q)
        q += (alpha - beta) * s
    return q


def finite_difference_hessian(density: DensityCounter, x: Tensor) -> Tensor:
    """[d, d] Hessian of log p at x by central differences of the gradient (2d rows in one call),
    steps 1e-5·(1 + |x_i|), symmetrised."""
    d = x.shape[0]
    steps = 1e-5 * (1.0 + x.abs())
    offsets = torch.diag(steps)
    _, grads = density(torch.cat([x + offsets, x - offsets]))
    hessian = (grads[:d] - grads[d:]) / (2 * steps[:, None])
    return 0.5 * (hessian + hessian.T)


def local_gaussian(x: Tensor, grad: Tensor, hessian: Tensor) -> tuple[Tensor, Tensor, float]:
    """(mean, root, log det Σ) of N(x + Σ∇log p, Σ), Σ = |−H|⁻¹ with the eigenvalues of −H made positive
    (absolute value, then a floor EIGEN_FLOOR · the largest)."""
    eigenvalues, vectors = torch.linalg.eigh(-hessian)
    magnitude = eigenvalues.abs()
    floor = EIGEN_FLOOR * max(float(magnitude.max()), 1e-300)
    precision = magnitude.clamp_min(floor)
    root = vectors * precision.rsqrt()
    mean = x + root @ (root.T @ grad)
    return mean, root, float(-precision.log().sum())


def elbo(density: DensityCounter, mean: Tensor, root: Tensor, log_det: float, eps: Tensor) -> float:
    """Monte-Carlo ELBO E_q[log p − log q] with the given standard-normal rows (common to all candidates).
    Draws outside the support (log p = −inf or NaN) would make every Gaussian's ELBO −inf on a bounded
    support [our choice]: the mean runs over the finite draws and adds log(share of finite draws), the ELBO
    of q truncated to the support; −inf only when no draw is finite."""
    gaussian = Gaussian(mean, root, log_det, 0.0)
    lp, _ = density(gaussian.draw(eps))
    values = lp - gaussian.log_q(eps)
    finite = torch.isfinite(values)
    if not bool(finite.any()):
        return -math.inf
    return float(values[finite].mean()) + math.log(float(finite.double().mean()))


def best_on_path(density: DensityCounter, xs: list[Tensor], grads: list[Tensor], max_candidates: int, eps: Tensor,
                 start: int) -> Gaussian:
    """The highest-ELBO Gaussian among up to `max_candidates` of a path's points (`candidate_indices`); unit scale
    at its end where the curvature is finite nowhere on it."""
    best: Gaussian | None = None
    for index in candidate_indices(len(xs), max_candidates):
        hessian = finite_difference_hessian(density, xs[index])
        if not bool(torch.isfinite(hessian).all()):
            continue
        mean, root, log_det = local_gaussian(xs[index], grads[index], hessian)
        value = elbo(density, mean, root, log_det, eps)
        if best is None or value > best.elbo:
            best = Gaussian(mean, root, log_det, value, start, index)
    if best is None:
        d = xs[-1].shape[0]
        return Gaussian(xs[-1], torch.eye(d, dtype=torch.float64), 0.0, -math.inf, start, len(xs) - 1)
    return best


@dataclass
class Path:
    """One path's chosen Gaussian, its last point, its length and whether it settled at a mode."""

    gaussian: Gaussian
    end: Tensor
    iterations: int
    settled: bool


def follow_path(density: DensityCounter, x0: Tensor, *, max_iters: int, history: int, tol: float,
                newton_steps: int, max_candidates: int, eps: Tensor, start: int) -> Path:
    """An L-BFGS path from x0, its Newton steps, and the best Gaussian along it."""
    xs, grads, lps, settled = lbfgs_path(density, x0, max_iters, history, tol)
    more_xs, more_grads, refined = newton_refine(density, xs[-1], lps[-1], grads[-1], newton_steps, tol)
    xs, grads = xs + more_xs, grads + more_grads
    return Path(best_on_path(density, xs, grads, max_candidates, eps, start), xs[-1], len(xs) - 1,
                refined if newton_steps else settled)


def pathfinder_whitening(target: Target, seed: int, dtype: torch.dtype, device: torch.device,
                         **options: object) -> tuple[PathfinderResult, WhitenedTarget]:
    """Pathfinder (seeded by `seed`, `options` its keyword options) and the target seen in the coordinates its best
    Gaussian whitens (`targets.whitened`): what `gpvi`'s and the particle methods' `precondition` move in."""
    found = pathfinder(target, generator=torch.Generator().manual_seed(seed), dtype=dtype, device=device, **options)
    return found, WhitenedTarget(target, found.best.mean.to(device=device, dtype=torch.float64),
                                 found.best.root.to(device=device, dtype=torch.float64))


def pathfinder(target: Target, *, starts: int, start_scale: float, max_iters: int, history: int, tol: float,
               max_candidates: int, elbo_draws: int, generator: torch.Generator, newton_steps: int = 0,
               start_retries: int = 20, probes: int = 0, probe_scale: float = 5.0, probe_iters: int = 100,
               dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> PathfinderResult:
    """Multi-path Pathfinder (see the module docstring). `generator` drives the starts and the ELBO draws.

    Each start is N(0, start_scale²) (redrawn, bounded by `start_retries`, where log p or its gradient is not
    finite). Each L-BFGS path goes on with up to `newton_steps` Newton steps (module docstring). On each path
    the candidates are up to `max_candidates` points spaced evenly in log(1 + iteration), the last included; the
    ELBO draws are shared by all candidates of all paths (common random numbers). Then `probes` short paths look
    for modes the starts missed (`probe_modes`); each one found is one more path of the result. `dtype`,
    `device`: what the target was built for (its log-density is evaluated there; everything else is float64 on
    the CPU)."""
    density = DensityCounter(target, dtype=dtype, device=device)
    d = int(target.dim)
    eps = torch.randn(elbo_draws, d, generator=generator, dtype=torch.float64)
    follow = {"history": history, "tol": tol, "newton_steps": newton_steps, "max_candidates": max_candidates,
              "eps": eps}
    paths = []
    for start in range(starts):
        x0 = finite_start(density, lambda _: start_scale * torch.randn(d, generator=generator, dtype=torch.float64),
                          start_retries)
        paths.append(follow_path(density, x0, max_iters=max_iters, start=start, **follow))
    # the probes' own stream, so that the paths above do not depend on how many probes there are
    probe_generator = torch.Generator().manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
    found = probe_modes(density, paths, probes=probes, scale=probe_scale, max_iters=probe_iters,
                        retries=start_retries, generator=probe_generator, **follow)
    paths += found
    return PathfinderResult(max((p.gaussian for p in paths), key=lambda g: g.elbo), [p.gaussian for p in paths],
                            torch.stack([p.end for p in paths]), density.evals, [p.iterations for p in paths],
                            [p.settled for p in paths], probed_modes=len(found))


#: two settled paths ended at different modes when each end lies farther than this from the other, in Mahalanobis
#: sds of the other path's Gaussian: closer modes exchange particles through SVGD's kernel on their own
SEPARATION_SD = 3.0


def separated(a: Gaussian, a_end: Tensor, b: Gaussian, b_end: Tensor) -> bool:
    """The two ends farther apart than SEPARATION_SD in both paths' Gaussians' sds."""
    return all(_distance(g, a_end, b_end) > SEPARATION_SD for g in (a, b))


def _distance(gaussian: Gaussian, a: Tensor, b: Tensor) -> float:
    """|a − b| in the Mahalanobis units of `gaussian`."""
    return float(torch.diff(gaussian.standardize(torch.stack([a, b]).double()), dim=0).norm())


class WhitenedDensity:
    """A `DensityCounter` seen in the coordinates u of x = mean + root·u of a Gaussian: log p and Rᵀ∇log p."""

    def __init__(self, density: DensityCounter, gaussian: Gaussian):
        self.density = density
        self.gaussian = gaussian

    def __call__(self, u: Tensor) -> tuple[Tensor, Tensor]:
        lp, grad = self.density(self.gaussian.draw(u))
        return lp, grad @ self.gaussian.root


def probe_modes(density: DensityCounter, paths: list[Path], *, probes: int, scale: float, max_iters: int,
                retries: int, generator: torch.Generator, history: int, tol: float, newton_steps: int,
                max_candidates: int, eps: Tensor) -> list[Path]:
    """Paths to modes that no start reached [our addition to Pathfinder]: `probes` L-BFGS runs of at most
    `max_iters` iterations from N(0, scale²) in the whitened coordinates of the best path's Gaussian (x = μ + R·u,
    so they converge in a few iterations whatever x's scales), i.e. `scale` of its sds around its mode in every
    direction. A probe that settles farther than SEPARATION_SD from every path's end (in that path's sds)
    becomes a path: Newton steps from its end, the best Gaussian there, kept where it is
    separated from all the others in its own sds too. None where some path did not settle (a funnel's neck: there
    the probes run down the neck for all their iterations, halving every step; gpvi on centred eight schools, seed
    1, one path settled: 4.7 s more a Pathfinder run).

    Why: SVGD keeps the mode shares it starts with (`modes.py`), so a mode no path reaches stays unseen, and
    the job cannot say so. The suite's 0.3·N(m₁, I) + 0.7·N(m₂, I) (d = 10, modes 5 apart, the light one near
    the origin): 7.5 % of L-BFGS paths from Pathfinder's N(0, 2²) starts reach the heavy mode, so with 4 starts
    `auto` missed it on some seeds (0.5 sds off in a mean, called `good`). Probes at 5 sds around the light mode
    settled at the heavy one (measured: the description of PathfinderOptions.probes); on single-mode posteriors
    they settle back at the mode, and on badly conditioned ones the whitening makes them as cheap."""
    if probes <= 0 or not all(p.settled for p in paths):
        return []
    known = [(p.gaussian, p.end) for p in paths]
    centre = max(known, key=lambda pair: pair[0].elbo)[0]
    view = WhitenedDensity(density, centre)
    d = centre.mean.shape[0]
    found: list[Path] = []
    for probe in range(probes):
        try:
            u0 = finite_start(view, lambda _: scale * torch.randn(d, generator=generator, dtype=torch.float64),
                              retries)
        except errors.TargetNonFinite:
            continue
        us, _, _, settled = lbfgs_path(view, u0, max_iters, history, tol)
        end = centre.draw(us[-1][None])[0]
        if not settled or not all(_distance(g, end, known_end) > SEPARATION_SD for g, known_end in known):
            continue
        # on from that end in x, as the starts' paths go (it settles again at once), for its Gaussian
        path = follow_path(density, end, max_iters=max_iters, history=history, tol=tol, newton_steps=newton_steps,
                           max_candidates=max_candidates, eps=eps, start=len(paths) + probe)
        if path.settled and all(separated(path.gaussian, path.end, g, known_end) for g, known_end in known):
            known.append((path.gaussian, path.end))
            found.append(path)
    return found


#: draws evaluated at once by `importance_check` (no more than the particles SVGD moves a step)
KHAT_CHUNK = 128


@dataclass(frozen=True)
class ImportanceCheck:
    """How Pathfinder's Gaussian q does as an importance proposal for p (`importance_check`)."""

    khat: float  # Pareto k̂ of the weights p/q
    shift_sd: float  # largest |E_w[x] − mean_q| / sd_q over coordinates, E_w the PSIS-weighted mean


def importance_check(target: Target, gaussian: Gaussian, draws: int, generator: torch.Generator,
                     dtype: torch.dtype = torch.float64, device: torch.device | None = None) -> ImportanceCheck:
    """Pareto k̂ (PSIS, Vehtari et al. 2024, §3) of the importance weights p/q of `draws` draws of q = `gaussian`:
    how well the Gaussian covers the posterior's mass, not only its mode. k̂ < 0.5: q covers p's tails; 0.5-1:
    heavier, still a finite mean weight; k̂ ≥ 1: the mean weight does not exist. For p = N(0, τ²), q = N(0, σ²)
    with τ > σ the tail index is 1 − σ²/τ² (tested). Draws outside the support weigh 0; inf when none is finite (or
    too few for a tail, under 25). `draws` log p rows, no gradients.

    k̂ ≥ 1 has two causes that cost differently. Tails heavier than any Gaussian's (a Student-t likelihood) give a
    weight tail of index 1 whatever q's scale, so k̂ lands on either side of 1 by chance (README's example, seeds
    0-7: 0.34-3.23), and the particles fix them in the linear whitening. Mass that q misses in some direction (a
    hierarchical scale skewed away from its mode) needs the flow. The second moves the PSIS-weighted mean: in q's
    sds, `shift_sd` was 1.95-3.69 on the hierarchical logistic regression (k̂ 1.25-1.65, seeds 0-5), 2.66 on
    non-centred eight schools' seed 5 (k̂ 1.05), 0.03-0.34 on the README example and 0.38-0.57 on breast cancer."""
    eps = torch.randn(draws, int(target.dim), generator=generator, dtype=torch.float64)
    x = gaussian.draw(eps)
    with torch.no_grad():  # in rows of KHAT_CHUNK: a model over a large dataset holds one activation per row
        rows = x.to(device=device, dtype=dtype)
        log_p = torch.cat([target.log_prob(chunk) for chunk in rows.split(KHAT_CHUNK)]).double().cpu()
    log_w = (log_p - gaussian.log_q(eps)).numpy()
    if not np.isfinite(log_w).any():
        return ImportanceCheck(math.inf, math.inf)
    smoothed, khat = psis_smooth(log_w)
    weighted_mean = normalised_weights(smoothed) @ x.numpy()
    shift = np.abs((weighted_mean - gaussian.mean.numpy()) / gaussian.std.numpy())
    return ImportanceCheck(khat, float(shift.max()))

