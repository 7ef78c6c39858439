"""Generative particle VI (Ratzlaff et al. 2021, Algorithm 1): `gpvi` (learned Jacobian-inverse helper)
and `gpvi_exact` (the k×k Jacobian block solved exactly). The math is in `gpvi_math`; this module orders
one step:

1. draw z [n, D], z' [n', D] (method RNG, in that order; with `expectation: "same"`, the default for BNN
   hypernetworks, z' = z: eq. 9's expectation over the updated batch, each draw's own score entering its driving
   term with k(z, z) = 1), then the target's minibatch;
2. x = f(z) with a graph; x' = f(z') and ∇log p(x') without;
3. h = median of ||z'_j − z_i||² over the n'·n pairs (the distinct pairs when z' = z) / divisor(n);
   K_ji = exp(−||z'_j − z_i||²/h);
4. the repulsive term J_f(z')^{-T}∇_{z'}k (block form) by
   * `pairwise` helper: w = v₁ − Bᵀv₂/λ per pair, `helper_network.steps` updates of h_η on the loss of
     eq. 10 (VJP form, eq. 11), using the outputs of the last helper forward (Algorithm 1, steps 4–7);
   * `matrix` helper: P_η(z'[:k]) ≈ (A + λI)^{-T}, `steps` updates on ||(A + λI)ᵀ P r − r||² with fresh
     N(0, I_k) probes r (drawn after the minibatch; A = W_top J_φ formed once per step, J_φ propagated
     forward through the hidden layers; the gradient in P is analytic and the helper a flat-parameter ReLU MLP
     with a written-out backward, so an update costs a few GEMMs), then the kernel-matmul reduction;
   * exact: P = (A + λI)^{-T} by torch.linalg.solve, then the same kernel-matmul reduction;
5. φ = driving term + entropy_weight · repulsive term; one generator update (surrogate loss, eq. 4).

With the injective "coupling" generator (`generator.structure`, samplers.generator; opt-in, see
DEFAULT_BNN_STRUCTURE) step 4 is exact whatever `helper` says: J_f(z') = [[J_t, 0], [B, λI]], J_t the k×k Jacobian of the
top block t (a coupling flow, formed per z' by forward mode: jacobian.py), P_j = J_t(z'_j)^{-T} by
torch.linalg.solve, then the same kernel-matmul reduction (gpvi_math.matrix_direction, "Block form":
y₁ = J_t^{-T}(v₁ − Bᵀv₂/λ), y₂ = v₂/λ). The helper is built (its state stays in checkpoints) but not trained.

On a `bnn` regression with a learnt noise, `noise_holdout` (0.1 by default; ours, not the paper's) keeps a seeded
share of the training rows out of step 1's minibatches, and the draws read out (particles, the stored sampler) have
every σ multiplied by one factor fitted to those rows' predictive log-likelihood (noise_calibration).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import Tensor

from inference_core import errors
from inference_core.methods.generative import gpvi_math
from inference_core.methods.generative.base import (
    HYPERNETWORK_LAMBDA,
    GenerativeMethod,
    expectation_size,
)
from inference_core.methods.generative.jacobian import GeneratorJacobian
from inference_core.methods.generative.networks import MatrixHelper, PairwiseHelper
from inference_core.methods.generative.noise_calibration import HeldOutNoiseScale
from inference_core.methods.optim import make_optimizer, optimizer_step, zero_grads
from inference_core.samplers import Sampler
from inference_core.schemas.generative import GPVIExactOptions, GPVIExpectationOptions, GPVIOptions
from inference_core.targets.base import Target

#: The generator structure GPVI gives BNN hypernetworks when `generator.structure` is left out (see
#: `default_structure`). Kept "residual". First measured on the GPVI paper's Figure 1 BNN (benchmarks/
#: reproduce_bnn_figures.py's target and generator [32, 32], k = 32, d = 151, λ = 0.01 (the default then), matrix
#: helper, 100 particles, Adam 1e-3, seed 0, the independent expectation batch of then; shared 2-core CPU, 1 thread),
#: mean predictive sd of 100 draws on the data / in the gap (NUTS: 0.085 / 0.134):
#:     2,000 steps: residual 1.08 / 0.90 (17 s), coupling 1.74 / 0.64 (79 s)
#:     5,000 steps: residual 0.92 / 0.77 (36 s), coupling 1.31 / 0.55 (205 s)
#: The coupling generator is injective (certificate density "exact"; the residual one folds: det ∂f/∂z < 0 at 989 and
#: 1,023 of 2,000 draws, density "branch"); both certificates were "unreliable" (k̂ 68-70 coupling, 34-68 residual) at
#: these step counts. Measured again on 2026-11-29 with today's defaults (λ 0.001, expectation over the updated batch)
#: and the coupling Jacobian in closed form (coupling.CouplingFlow.forward_jacobian; it was vmap(jacfwd)):
#:   * step time on Figure 1's BNN, side by side: residual 18.1 ms, coupling 30.8 ms (1.70×; ≈ 5× before);
#:   * Figure 1, 20,000 steps, sd on the data / in the gap: residual 0.030 / 0.035 (gap ratio 1.16), coupling 0.032 /
#:     0.031 (0.99: issue 40's gap-ratio goal, > 1, missed by the coupling generator, met by the residual one);
#:   * UCI split 0 (reproduce_uci.py's GPVI protocol, benchmarks/gpvi_structure_uci.py), test NLL residual →
#:     coupling: Boston 2.29 → 2.27, Concrete 3.20 → 3.26, Energy 0.67 → 0.57, Yacht 0.67 → 1.03 (RMSE 0.49 → 0.71),
#:     Wine 0.95 → 0.96; Yacht splits 1, 2: 0.99 → 1.10, 0.56 → 0.69. More couplings do not close Yacht's gap
#:     (`coupling_layers: 8`, splits 0-2: 0.83, 1.07, 0.76), wider ones widen it (`coupling_hidden: 128`, split 0: 1.30).
#: Mixed on split 0, behind on Yacht and short of a Figure 1 goal, so the switch waits for a coupling generator that
#: fits Yacht, then for the whole UCI grid (splits 0-4) and the figures under "coupling".
DEFAULT_BNN_STRUCTURE = "residual"

#: GPVI's learning-rate schedule for BNN hypernetworks when `lr_schedule` is left out (ours; the paper keeps Adam's
#: rate constant). Late in a constant-rate run the test NLL moved ±0.1 from step to step (Yacht split 3, Energy
#: split 1, every 100 steps), so the last state was a draw from that oscillation; a half-cosine down to 0.1 × the
#: rate lets it settle. Measured on UCI splits 0-4 (reproduce_uci.py's GPVI protocol, 2026-11-29), test NLL constant
#: → cosine per split: Energy 0.63 → 0.46, 0.99 → 0.89, 0.68 → 0.52, 0.76 → 0.67, 0.91 → 0.84 (mean 0.79 → 0.68,
#: RMSE 0.53 → 0.47); means Boston 2.44 → 2.46, Concrete 3.09 → 3.09, Wine 0.96 → 0.96, Yacht 1.04 → 1.10 (split 3
#: 1.78 → 2.14, split 1 0.92 → 0.65). Tried on Yacht and Energy and not kept: a step to 0.1 × at 75 % of the run
#: (Yacht mean 1.17), cosine from 3 × the rate (Yacht splits 0-3 no better); a final factor of 0.3: Energy 0.71.
#: What it costs: on the GPVI paper's Figure 1 the settled band is narrower in the gap than on the data (gap ratio
#: by final factor 1 / 0.5 / 0.3 / 0.1: 1.16 / 0.93 / 0.86 / 0.77, docs/reproduction.md): the constant rate's wider
#: gap band was in part the optimiser's noise.
DEFAULT_BNN_LR_SCHEDULE = "cosine"


class _GPVIBase(GenerativeMethod):
    options: GPVIExpectationOptions
    rank_sharing = "batch"

    def __init__(self, target: Target, options: GPVIExpectationOptions, num_particles: int, seed: int,
                 device: torch.device):
        super().__init__(target, options, num_particles, seed, device)
        own_init = getattr(target, "initial_particles", None) is not None
        #: eq. 9's expectation over the updated batch itself (GPVIExpectationOptions.expectation)
        self.same_batch = (options.expectation or ("same" if own_init else "independent")) == "same"
        self.expectation_particles = num_particles if self.same_batch else expectation_size(options, num_particles)
        #: σ calibrated on held-out rows (`noise_holdout`, noise_calibration), or None
        self.noise_scale = (HeldOutNoiseScale.build(target, options.noise_holdout, seed, device)
                            if self.view is target else None)  # trained whitened: the slot is not a coordinate

    # ---- read-out with the held-out noise factor (`noise_holdout`) --------------------------------------------

    def _noise_shift(self) -> float:
        return self.noise_scale.log_std_shift(self.network, self.step_count)  # type: ignore[union-attr]

    def particles(self) -> Tensor:
        x = super().particles()
        return x if self.noise_scale is None else self.noise_scale.shifted_draws(x, self._noise_shift())

    def sampler(self) -> Sampler:
        if self.noise_scale is None:
            return super().sampler()
        with self.noise_scale.shifted_network(self.network, self._noise_shift()):  # the sampler copies the tensors
            return super().sampler()

    def summary_metrics(self) -> dict[str, float]:
        """`holdout_noise_factor`: e^c, what the held-out rows multiplied every draw's σ by (`noise_holdout`)."""
        return {} if self.noise_scale is None else {"holdout_noise_factor": math.exp(self._noise_shift())}

    def default_structure(self, k: int, d: int, own_init: bool, whitened: bool, lam: float) -> str:
        """DEFAULT_BNN_STRUCTURE for BNN hypernetworks, the targets with their own initialisation where
        HYPERNETWORK_LAMBDA applies (k < d, λ > 0, not whitened; "residual" today, the measurement is recorded
        there); "residual" (eq. 6) elsewhere."""
        if own_init and not whitened and k < d and lam > 0:
            return DEFAULT_BNN_STRUCTURE
        return "residual"

    def default_lr_schedule(self, own_init: bool, whitened: bool) -> str:
        """DEFAULT_BNN_LR_SCHEDULE for BNN hypernetworks (targets with their own initialisation, not whitened; the
        measurement is recorded there), "constant" (the paper's Adam) elsewhere."""
        return DEFAULT_BNN_LR_SCHEDULE if own_init and not whitened else "constant"

    def default_lambda(self, k: int, d: int, own_init: bool, whitened: bool) -> float:
        """Paper §3.2: λ = 1; no λ term when k = d (ALF: f = g, J_f = J_g) unless trained whitened, where λ = 1
        and g's zeroed output layer start the generator at the Pathfinder Gaussian (base.whitened_view); BNN-like
        targets HYPERNETWORK_LAMBDA (0.001; λz floors every weight's sd at λ, ALF's 0.1 and our former 0.01 spread the
        weights measurably, see base.HYPERNETWORK_LAMBDA)."""
        if k == d:
            return 1.0 if whitened else 0.0
        return HYPERNETWORK_LAMBDA if own_init else 1.0

    def check_lambda(self, lam: float, k: int, d: int) -> None:
        if k < d and lam <= 0:
            raise errors.MethodOptionsInvalid(
                f"GPVI needs lambda > 0 when the noise prefix k={k} is smaller than d={d} (eq. 6: otherwise "
                "the Jacobian is singular)", loc=("options", "generator", "lambda"))

    def bandwidth(self, sq: Tensor) -> float:
        rule = self.options.kernel.bandwidth
        if rule.rule == "fixed":
            return float(rule.value)
        return gpvi_math.median_bandwidth(sq, rule.divisor, self.num_particles, distinct_pairs=self.same_batch)

    # ---- the ranked step (`inference_core.distributed`, rank_sharing "batch") ----------------------------------
    #
    # Every rank holds the whole generator, helper and their optimisers, identical on every rank, and draws the
    # whole noise batches, minibatch and probes from the method's RNG (the same state everywhere, so the same
    # draws as one rank). Rank r then works on its rows: i ∈ [lo, hi) of the updated batch z (its forward
    # f_θ(z_i) with a graph, its direction φ_i, its part of the surrogate) and j ∈ [elo, ehi) of the expectation
    # batch z' (f(z'_j) and its score, J_φ(z'_j), the matrix helper's P_j and its loss terms, the exact solve).
    # The per-z' rows of the kernel sums (gpvi_math.matrix_pieces) are all-gathered, each rank forms the sums for
    # its rows i against all n' (the O(n·n') kernel work split k ways), and the helper's and the generator's
    # gradients are all-reduced (the sum of the ranks' parts of each 1/N mean) before the same optimiser steps.
    # Not shared: the n'×n noise distances and their median (the bandwidth; every rank forms them, as one rank
    # does) and the φ forward at all z' that the pairwise helper's VJPs need.

    def prepare(self, with_jacobian: bool, all_expectation_jacobian: bool = False) -> dict[str, Any]:
        """Steps 1–3 of the module docstring for this rank's rows (all of them on one rank): z and z' whole,
        x = f(z_i) for own i (with a graph), f(z'_j), its score and J_φ(z'_j) for own j (with `with_jacobian`; its
        forward pass gives φ(z') for x' = f(z')), the whole n'×n distances and h. `jac`, the generator's Jacobian,
        is at own z'_j, or at all z' with `all_expectation_jacobian` (the pairwise helper)."""
        group = self.ranks
        n, n_expect = self.num_particles, self.expectation_particles
        lo, hi = group.bounds(n)
        elo, ehi = group.bounds(n_expect)
        z = self.noise(n)
        z_expect = z if self.same_batch else self.noise(n_expect)
        batch = self.target.sample_batch(self.rng) if self.noise_scale is None else self.noise_scale.batch(self.rng)
        x = self.network(z[lo:hi])
        with_jacobian = with_jacobian or self.network.coupling
        own_expect = z_expect[elo:ehi]
        jac = GeneratorJacobian(self.network, z_expect if all_expectation_jacobian else own_expect)
        features_jacobian = None
        with torch.no_grad():
            if with_jacobian:
                features, features_jacobian = jac.features_and_jacobian()
                x_expect = self.network.head(features, own_expect)
            else:
                x_expect = self.network(own_expect)
        score_expect = self.view.score(x_expect, batch)
        sq = gpvi_math.squared_distances(z_expect, z)
        h = self.bandwidth(sq)
        return {"z": z, "z_expect": z_expect, "x": x, "score_expect": score_expect, "sq": sq, "h": h, "jac": jac,
                "features_jacobian": features_jacobian, "rows": (lo, hi), "expect_rows": (elo, ehi)}

    def ranked_matrix_terms(self, jac: GeneratorJacobian, P: Tensor, features_jacobian: Tensor | None,
                            batch: dict[str, Any], lam: float, exact: bool = False) -> tuple[Tensor, Tensor]:
        """`matrix_terms` for this rank's rows i from its rows j of (score, P, coupling): the pieces of
        gpvi_math.matrix_pieces gathered over the ranks (one collective), then the kernel sums of own rows i against
        all n' (gpvi_math.matrix_direction's sums and combination). With `exact`, a singular solve on any rank
        (NaN rows of P) raises `errors.Diverged` on every rank."""
        z, z_expect = batch["z"], batch["z_expect"]
        (lo, hi), (elo, ehi) = batch["rows"], batch["expect_rows"]
        z_rows, own_expect = z[lo:hi], z_expect[elo:ehi]
        n_expect, k = z_expect.shape[0], P.shape[-1]
        coupling = jac.coupling_factors(features_jacobian, z_rows, own_expect) if self.noise_dim > jac.k else None
        pieces = gpvi_math.matrix_pieces(own_expect, batch["score_expect"], P,
                                         None if coupling is None else (coupling[0], coupling[2]))
        widths = [piece.shape[1] for piece in pieces]
        joined = self.ranks.all_gather_rows(torch.cat(pieces, dim=1), n_expect)
        d = widths[0]
        if exact and bool(torch.isnan(joined[:, d: d + k * k]).any()):
            raise errors.Diverged(f"the generator's Jacobian became singular at step {self.step_count + 1}; "
                                  "increase lambda or lower the learning rate")
        (sums,) = gpvi_math.cross_kernel_matmuls(z_rows, z_expect, [joined], batch["h"], batch["sq"][:, lo:hi],
                                                 scale=1.0 / n_expect)
        return gpvi_math.matrix_combine(z_rows, list(torch.split(sums, widths, dim=1)), k, batch["h"], lam,
                                        None if coupling is None else coupling[1], self.options.entropy_weight)

    def ranked_exact_step(self, batch: dict[str, Any], lam: float) -> dict[str, float]:
        """The exact top block (`gpvi_exact`, a coupling generator) for own z'_j, then the shared reduction and
        the ranked pull-back; a singular block on any rank raises `errors.Diverged` on every rank."""
        jac, features_jacobian = batch["jac"], batch["features_jacobian"]
        try:
            P = jac.top_inverse_transpose(features_jacobian, lam)
        except torch.linalg.LinAlgError:
            P = torch.full((jac.z_prefix.shape[0], jac.k, jac.k), float("nan"), dtype=self.dtype, device=self.device)
        drive, repulsion = self.ranked_matrix_terms(jac, P, features_jacobian, batch, lam, exact=True)
        (rep2,) = self.ranked_pullback(batch["x"], drive + repulsion, [repulsion.square().sum()])
        return {"bandwidth": batch["h"], "repulsion_norm": (rep2 / self.num_particles) ** 0.5}

    def matrix_terms(self, jac: GeneratorJacobian, P: Tensor, features_jacobian: Tensor | None,
                     batch: dict[str, Any], lam: float) -> tuple[Tensor, Tensor]:
        z, z_expect = batch["z"], batch["z_expect"]
        coupling = jac.coupling_factors(features_jacobian, z, z_expect) if self.noise_dim > jac.k else None
        return gpvi_math.matrix_direction(z, z_expect, batch["score_expect"], batch["h"], P, lam, coupling,
                                          entropy_weight=self.options.entropy_weight, sq=batch["sq"])


#: The pairwise helper materialises ∇k for all n·n' pairs ([n, n', D]); refuse beyond this many values.
PAIRWISE_MAX_ELEMENTS = 2**27


class GPVI(_GPVIBase):
    name = "gpvi"
    options: GPVIOptions

    def build_auxiliary(self, generator: torch.Generator) -> None:
        opts = self.options.helper_network
        k = self.network.input_dim
        pairs = self.num_particles * expectation_size(self.options, self.num_particles)
        if self.options.helper == "pairwise" and pairs * self.noise_dim > PAIRWISE_MAX_ELEMENTS:
            raise errors.MethodOptionsInvalid(
                f"the pairwise helper needs n·n'·D = {pairs * self.noise_dim:,} values per step (cap "
                f"{PAIRWISE_MAX_ELEMENTS:,}); use helper 'matrix', fewer particles or a smaller noise dimension",
                loc=("options", "helper"))
        layers = opts.resolved_layers(self.options.helper)
        if self.options.helper == "pairwise":
            self.helper = PairwiseHelper(k, opts.hidden_width, layers, generator)
        else:
            self.helper = MatrixHelper(k, opts.hidden_width, layers, generator)
        self.helper.to(device=self.device, dtype=self.dtype)
        self.helper_optimizer = make_optimizer(self.helper.parameters(), opts.resolved_optimizer())

    def train_step(self) -> dict[str, float]:
        if self.ranks.world_size > 1:
            return self._ranked_train_step()
        batch = self.prepare(with_jacobian=self.options.helper == "matrix")
        lam = self.network.lam_float()
        jac = batch["jac"]
        if self.network.coupling:  # exact top block (module docstring): no helper
            features_jacobian = batch["features_jacobian"]
            P = jac.top_inverse_transpose(features_jacobian, lam)
            drive, repulsion = self.matrix_terms(jac, P, features_jacobian, batch, lam)
            self.pullback(batch["x"], drive + repulsion)
            return {"bandwidth": batch["h"], "repulsion_norm": float(repulsion.square().sum(-1).mean().sqrt())}
        if self.options.helper == "pairwise":
            drive, repulsion, loss = self._pairwise(jac, batch, lam)
        else:
            drive, repulsion, loss = self._matrix(jac, batch, lam)
        self.pullback(batch["x"], drive + repulsion)
        return {"bandwidth": batch["h"], "helper_loss": loss,
                "repulsion_norm": float(repulsion.square().sum(-1).mean().sqrt())}

    def _ranked_train_step(self) -> dict[str, float]:
        """`train_step` with the batch shared by the ranks (see "the ranked step" above): the coupling generator's
        exact block, the matrix helper (its P_j and loss terms for own z'_j) or the pairwise helper (its pairs
        (i, z'_j) for own rows i against all z')."""
        pairwise = self.options.helper == "pairwise" and not self.network.coupling
        batch = self.prepare(with_jacobian=self.options.helper == "matrix", all_expectation_jacobian=pairwise)
        lam = self.network.lam_float()
        if self.network.coupling:
            return self.ranked_exact_step(batch, lam)
        if pairwise:
            drive, repulsion, loss = self._ranked_pairwise(batch["jac"], batch, lam)
        else:
            drive, repulsion, loss = self._ranked_matrix(batch["jac"], batch, lam)
        (rep2,) = self.ranked_pullback(batch["x"], drive + repulsion, [repulsion.square().sum()])
        return {"bandwidth": batch["h"], "helper_loss": loss, "repulsion_norm": (rep2 / self.num_particles) ** 0.5}

    def _ranked_helper_update(self, loss_part: Tensor) -> float:
        """One helper step from this rank's part of its loss (the ranks' parts sum to the loss): back-propagate the
        part, all-reduce the gradients and the part (one collective), step. Returns the whole loss."""
        zero_grads(self.helper_optimizer)
        loss_part.backward()
        total = loss_part.detach().reshape(1).clone()
        grads = [p.grad for p in self.helper.parameters() if p.grad is not None]
        self.ranks.all_reduce_sum_([*grads, total])
        optimizer_step(self.helper_optimizer)
        return float(total)

    def _ranked_pairwise(self, jac: GeneratorJacobian, batch: dict[str, Any], lam: float
                         ) -> tuple[Tensor, Tensor, float]:
        """`_pairwise` for own rows i against all z' (`jac` at all z'): the helper's loss is the mean over all
        n·n'·k residual entries, so each rank's part is its rows' sum of squares over that count."""
        z, z_expect, h = batch["z"], batch["z_expect"], batch["h"]
        lo, hi = batch["rows"]
        z_rows = z[lo:hi]
        k = jac.k
        score_expect = self.ranks.all_gather_rows(batch["score_expect"], z_expect.shape[0])
        K = torch.exp(-batch["sq"][:, lo:hi] / h)  # [n', rows]
        v = gpvi_math.kernel_gradients(K, z_expect, z_rows, h)  # [rows, n', D]
        w = gpvi_math.block_rhs(v, k, lam, jac.coupling_vjp if self.noise_dim > k else None)
        z_in = z_expect[:, :k].unsqueeze(0).expand(z_rows.shape[0], -1, -1)
        count = self.num_particles * z_expect.shape[0] * k
        for _ in range(self.options.helper_network.steps):
            y = self.helper(z_in, w)
            residual = gpvi_math.transpose_top_product(y, jac.w_top, lam, jac.top_vjp()) - w
            loss = self._ranked_helper_update(residual.square().sum() / count)
        repulsion = gpvi_math.pairwise_repulsion(y.detach(), v, k, lam)
        drive = gpvi_math.driving_term(K, score_expect)
        return drive, self.options.entropy_weight * repulsion, loss

    def _ranked_matrix(self, jac: GeneratorJacobian, batch: dict[str, Any], lam: float
                       ) -> tuple[Tensor, Tensor, float]:
        """`_matrix` for own z'_j: the probes are drawn whole (the RNG stays in step) and each rank takes its
        columns; gpvi_math.matrix_helper_loss's mean over its own q·n'_r·k entries is rescaled to the whole
        q·n'·k, so the ranks' losses and dL/dP-driven gradients sum to one rank's."""
        k, z_prefix = jac.k, jac.z_prefix
        n_expect = batch["z_expect"].shape[0]
        elo, ehi = batch["expect_rows"]
        features_jacobian = batch["features_jacobian"]
        system = gpvi_math.top_system(jac.top_block(features_jacobian), lam)
        probes_per_point = self.options.helper_network.probes
        share = (ehi - elo) / n_expect
        for _ in range(self.options.helper_network.steps):
            probes = torch.randn(probes_per_point, n_expect, k, generator=self.rng, dtype=self.dtype).to(self.device)
            P = self.helper(z_prefix)  # own z'_j: [rows, k, k]
            part, grad_P = gpvi_math.matrix_helper_loss(system, P, probes[:, elo:ehi])
            self.helper.backward_into_grad(grad_P.mul_(share))
            total = (part * share).reshape(1)
            grads = [p.grad for p in self.helper.parameters() if p.grad is not None]
            self.ranks.all_reduce_sum_([*grads, total])
            optimizer_step(self.helper_optimizer)
            loss = float(total)
        drive, repulsion = self.ranked_matrix_terms(jac, P, features_jacobian, batch, lam)
        return drive, repulsion, loss

    def _helper_update(self, loss: Tensor) -> None:
        zero_grads(self.helper_optimizer)
        loss.backward()
        optimizer_step(self.helper_optimizer)

    def _pairwise(self, jac: GeneratorJacobian, batch: dict[str, Any], lam: float) -> tuple[Tensor, Tensor, float]:
        z, z_expect, h = batch["z"], batch["z_expect"], batch["h"]
        k = jac.k
        K = torch.exp(-batch["sq"] / h)
        v = gpvi_math.kernel_gradients(K, z_expect, z, h)  # [n, n', D]
        w = gpvi_math.block_rhs(v, k, lam, jac.coupling_vjp if self.noise_dim > k else None)
        z_in = z_expect[:, :k].unsqueeze(0).expand(z.shape[0], -1, -1)
        for _ in range(self.options.helper_network.steps):
            y = self.helper(z_in, w)
            residual = gpvi_math.transpose_top_product(y, jac.w_top, lam, jac.top_vjp()) - w
            loss = gpvi_math.helper_loss(residual)
            self._helper_update(loss)
        repulsion = gpvi_math.pairwise_repulsion(y.detach(), v, k, lam)
        drive = gpvi_math.driving_term(K, batch["score_expect"])
        return drive, self.options.entropy_weight * repulsion, float(loss.detach())

    def _matrix(self, jac: GeneratorJacobian, batch: dict[str, Any], lam: float) -> tuple[Tensor, Tensor, float]:
        k, z_prefix = jac.k, jac.z_prefix
        n_expect = z_prefix.shape[0]
        # J_φ once per step: the residual's (A + λI)ᵀ and, when k < D, the coupling of the reduction.
        features_jacobian = batch["features_jacobian"]
        system = gpvi_math.top_system(jac.top_block(features_jacobian), lam)
        probes_per_point = self.options.helper_network.probes
        for _ in range(self.options.helper_network.steps):
            probes = torch.randn(probes_per_point, n_expect, k, generator=self.rng, dtype=self.dtype).to(self.device)
            P = self.helper(z_prefix)  # [n', k, k], no graph: the gradient is analytic
            loss, grad_P = gpvi_math.matrix_helper_loss(system, P, probes)
            self.helper.backward_into_grad(grad_P)
            optimizer_step(self.helper_optimizer)
        drive, repulsion = self.matrix_terms(jac, P, features_jacobian, batch, lam)
        return drive, repulsion, float(loss)  # no graph: the helper's gradient is analytic

    def extra_state(self) -> dict[str, Any]:
        return {"helper": self.helper.state_dict(), "helper_optimizer": self.helper_optimizer.state_dict()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.helper.load_state_dict(state["helper"])
        self.helper_optimizer.load_state_dict(state["helper_optimizer"])


class GPVIExact(_GPVIBase):
    """GPVI with A_j = W_top J_φ(z'_j) formed by torch.func.jacfwd and P_j = (A_j + λI)^{-T} by
    torch.linalg.solve (O(n'·k³)); the reference the helpers are tested against (paper Table 2/5 "Exact Jac")."""

    name = "gpvi_exact"
    options: GPVIExactOptions

    def train_step(self) -> dict[str, float]:
        if self.ranks.world_size > 1:
            return self.ranked_exact_step(self.prepare(with_jacobian=True), self.network.lam_float())
        batch = self.prepare(with_jacobian=True)
        lam = self.network.lam_float()
        jac, features_jacobian = batch["jac"], batch["features_jacobian"]
        try:
            P = jac.top_inverse_transpose(features_jacobian, lam)
        except torch.linalg.LinAlgError:
            raise errors.Diverged(f"the generator's Jacobian became singular at step {self.step_count + 1}; "
                                  "increase lambda or lower the learning rate") from None
        drive, repulsion = self.matrix_terms(jac, P, features_jacobian, batch, lam)
        self.pullback(batch["x"], drive + repulsion)
        return {"bandwidth": batch["h"], "repulsion_norm": float(repulsion.square().sum(-1).mean().sqrt())}
