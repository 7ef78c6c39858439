"""Self-consistency of FVI's prior distillation (eq. 13) on a prior that IS an SPG with known parameters
(H = 1, σ_θ held, σ_ν = 0.05), so the exact log marginal log p(f) is a 1-D quadrature over h:

* the SPG likelihood (Woodbury) and its gradients equal a dense float64 `torch.distributions.MultivariateNormal`;
* `distillation_elbo` is a lower bound on log p(f), tight (within Monte Carlo) when the PoE posterior is the
  exact posterior's Gaussian fit, so its sign and terms are right;
* distillation through the method's own step (prior draws from the true SPG) from a fresh initialisation
  raises the held-out ELBO past what the TRUE model reaches with a trained encoder of the same family, and
  stays below the true log marginal. σ_ν rises above the truth (≈ 0.05 → 0.19): with the true bases and
  decoder frozen, training the encoder and σ_ν alone raises σ_ν too, so the rise is the amortised PoE
  encoder's gap (eq. 13 pays for the encoder's error in h as white noise), not a fault of the objective."""

from __future__ import annotations

import math

import numpy as np
import torch

from inference_core.methods.fvi import objective
from inference_core.methods.fvi.networks import StochasticProcessGenerator
from inference_core.spec import validate_job_spec
from inference_core.training import build_method

TRUE_NU = 0.05
X = np.linspace(-1.0, 2.0, 40)
OPTIONS = {"distill_steps": 100_000, "n_basis": 6, "latent_dim": 1, "distill_points": 24, "distill_extra_points": 8,
           "distill_functions": 32, "decoder_hidden": [32], "encoder_hidden": [32], "basis_hidden": [16],
           "sleep_weight": 0.0}


def fvi_method():
    job = {"method": "fvi", "seed": 0, "steps": 10,
           "target": {"kind": "function_posterior", "dataset": {"X": X[:, None].tolist(), "y": np.sin(2 * X).tolist()},
                      "prior": {"type": "gp", "lengthscale": 0.5}, "likelihood": {"noise_std": 0.1}},
           "options": OPTIONS}
    return build_method(validate_job_spec(job))


def true_spg(method) -> StochasticProcessGenerator:
    """Same architecture, other initialisation, decoder weights doubled so a(h) varies O(1); σ_ν = TRUE_NU."""
    truth = StochasticProcessGenerator(1, method.options, torch.Generator().manual_seed(123), method.box)
    with torch.no_grad():
        for p in truth.decoder.parameters():
            p.mul_(2.0)
        truth._freeze_decoder_std()  # re-impose σ_θ ≡ 1e-4 after the scaling
        truth.log_white_noise.fill_(math.log(TRUE_NU))
    return truth


def draw(truth: StochasticProcessGenerator, n: int, u: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    with torch.no_grad():
        h = torch.randn(n, 1, generator=g)
        a_mean, a_std = truth.decode(h)
        a = a_mean + a_std * torch.randn(a_mean.shape, generator=g)
        return a @ truth.basis(u).T + TRUE_NU * torch.randn(n, u.shape[0], generator=g)


def log_marginal(truth: StochasticProcessGenerator, f: torch.Tensor, u: torch.Tensor):
    """Exact log p(f) [M] under the H = 1 truth by quadrature on a fine h grid, and the exact posterior's
    mean and precision of h [M] (σ_θ = 1e-4 is negligible against σ_ν: a = μ_θ(h))."""
    h = torch.linspace(-7, 7, 20001, dtype=torch.float64)
    with torch.no_grad():
        mean_f = (truth.decode(h[:, None].float())[0] @ truth.basis(u).T).double()  # [G, m]
    out, post_mean, post_precision = [], [], []
    for row in f.double():
        log_joint = (-0.5 * (row - mean_f).square().sum(-1) / TRUE_NU**2 - u.shape[0] * math.log(TRUE_NU)
                     - 0.5 * u.shape[0] * math.log(2 * math.pi) - 0.5 * h.square() - 0.5 * math.log(2 * math.pi))
        out.append(torch.logsumexp(log_joint, 0) + math.log(float(h[1] - h[0])))
        w = torch.softmax(log_joint, 0)
        mu = (w * h).sum()
        post_mean.append(mu)
        post_precision.append(1 / (w * (h - mu).square()).sum())
    return torch.stack(out), torch.stack(post_mean), torch.stack(post_precision)


def test_spg_log_likelihood_and_gradients_match_a_dense_float64_normal() -> None:
    g = torch.Generator().manual_seed(4)
    M, m, S = 2, 6, 3
    leaves = [torch.randn(M, m, generator=g, dtype=torch.float64), torch.randn(m, S, generator=g, dtype=torch.float64),
              torch.randn(M, S, generator=g, dtype=torch.float64), torch.rand(M, S, generator=g, dtype=torch.float64) + 0.1,
              torch.tensor(0.05**2, dtype=torch.float64)]
    ours_in = [t.clone().requires_grad_(True) for t in leaves]
    ours = objective.spg_log_likelihood(*ours_in)
    dense_in = [t.clone().requires_grad_(True) for t in leaves]
    f, basis, a_mean, a_var, noise_var = dense_in
    dense = torch.stack([torch.distributions.MultivariateNormal(
        basis @ a_mean[i], basis @ torch.diag(a_var[i]) @ basis.T + noise_var * torch.eye(m, dtype=torch.float64)
    ).log_prob(f[i]) for i in range(M)])
    torch.testing.assert_close(ours, dense, rtol=1e-10, atol=1e-9)
    weights = torch.tensor([0.7, -1.3], dtype=torch.float64)
    ours_grads = torch.autograd.grad((weights * ours).sum(), ours_in)
    dense_grads = torch.autograd.grad((weights * dense).sum(), dense_in)
    for mine, ref in zip(ours_grads, dense_grads, strict=True):
        torch.testing.assert_close(mine, ref, rtol=1e-8, atol=1e-8)


def test_distillation_elbo_bounds_the_exact_marginal_and_is_tight_at_the_exact_posterior() -> None:
    method = fvi_method()
    truth = true_spg(method)
    g = torch.Generator().manual_seed(7)
    u = method._uniform_points(24)
    f = draw(truth, 16, u, g)
    exact, post_mean, post_precision = log_marginal(truth, f, u)
    noise = torch.randn(16, 400, 1, generator=g)

    def elbo(spg) -> torch.Tensor:  # MC mean over 400 reparameterised h per function
        with torch.no_grad():
            return torch.stack([spg.distillation_elbo(f, u, noise[:, k]) for k in range(400)]).double().mean(0)

    assert bool((elbo(truth) <= exact + 0.05).all())  # any encoder: a lower bound (Jensen)
    # PoE experts that combine to the exact posterior's Gaussian fit (m equal experts, precision (τ* − 1)/m):
    m = u.shape[0]
    truth.experts = lambda f_, u_: (
        (post_mean * post_precision / (post_precision - 1)).float()[:, None, None].expand(-1, m, 1),
        ((post_precision - 1) / m).float()[:, None, None].expand(-1, m, 1))
    tight = elbo(truth)
    assert bool((tight <= exact + 0.05).all()), (tight, exact)
    assert float((exact - tight).max()) < 0.5, (tight, exact)  # only the posterior's non-Gaussianity is left


def test_distillation_through_the_method_reaches_the_true_models_level() -> None:
    torch.manual_seed(0)
    method = fvi_method()
    truth = true_spg(method)
    method._prior_functions = lambda n, u: draw(truth, n, u, method.rng)
    g = torch.Generator().manual_seed(99)
    u = method._uniform_points(32)
    f = draw(truth, 64, u, g)
    noise = torch.randn(64, 1, generator=g)
    exact = float(log_marginal(truth, f, u)[0].mean()) / u.shape[0]

    def held_out(spg) -> float:
        with torch.no_grad():
            return float(spg.distillation_elbo(f, u, noise).mean()) / u.shape[0]

    # the truth's own ELBO with an encoder of the same family trained as long (bases, decoder, σ_ν fixed)
    # and, separately, with σ_ν learnt too: the encoder's gap alone raises σ_ν above TRUE_NU
    def train_truth_encoder(learn_nu: bool) -> StochasticProcessGenerator:
        t = true_spg(method)
        t.log_white_noise.requires_grad_(learn_nu)
        params = list(t.encoder.parameters()) + ([t.log_white_noise] if learn_nu else [])
        opt = torch.optim.Adam(params, lr=3e-3)
        for _ in range(800):
            x = method._uniform_points(32)
            loss = -t.distillation_elbo(draw(truth, 32, x, g), x, torch.randn(32, 1, generator=g)).mean() / 32
            opt.zero_grad()
            loss.backward()
            opt.step()
        return t
    truth_amortised = held_out(train_truth_encoder(False))
    gap_nu = float(train_truth_encoder(True).white_noise_std().detach())

    before = held_out(method.spg)
    for _ in range(800):
        metrics = method.step()
    after = held_out(method.spg)
    nu = metrics["white_noise_std"]
    assert after > before + 10, (before, after)
    assert after > truth_amortised, (after, truth_amortised)
    assert after < exact + 0.1, (after, exact)  # no model's ELBO beats the truth's marginal (MC slack)
    assert gap_nu > 1.5 * TRUE_NU, gap_nu  # the encoder's gap inflates σ_ν with the TRUE generative part
    assert TRUE_NU < nu < 5 * TRUE_NU, nu  # and distillation's σ_ν stays at that level, not runaway
