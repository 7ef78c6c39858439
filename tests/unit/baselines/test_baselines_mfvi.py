"""`mfvi` (Bayes by Backprop): the ELBO estimate against its closed form on a Gaussian target, mean-field's known
optimum (μ = m, σ_i² = 1/Λ_ii), the diagonal-generator sampler and its zip round trip, resume, bad options."""

from __future__ import annotations

import math

import pytest
import torch
from baselines_support import GAUSSIAN, exact_moments, regression_data

from inference_core import errors, run
from inference_core.methods.baselines import mfvi as mfvi_module
from inference_core.samplers import load
from inference_core.serialization import state_from_bytes
from inference_core.spec import validate_job_spec
from inference_core.training import build_method
from tests.support.resume import StopAt

NO_EVAL = {"ksd": False, "mmd": False}


def gaussian_job(options: dict, steps: int = 10, n: int = 16) -> dict:
    return {"method": "mfvi", "target": GAUSSIAN, "num_particles": n, "steps": steps, "seed": 3,
            "options": {"dtype": "float64", **options}, "eval": NO_EVAL}


def closed_form_elbo(mu: torch.Tensor, rho: torch.Tensor) -> torch.Tensor:
    """E_q[log N(θ; m, Σ)] + H[q] for q = N(μ, diag softplus(ρ)²), written out (float64, autograd-able)."""
    m, cov, precision = exact_moments()
    sigma = torch.log1p(torch.exp(rho))
    d = m.shape[0]
    log_norm = -0.5 * d * math.log(2 * math.pi) - 0.5 * torch.logdet(cov)
    centred = mu - m
    expected_log_p = log_norm - 0.5 * (centred @ precision @ centred + (precision.diagonal() * sigma**2).sum())
    return expected_log_p + torch.log(sigma).sum() + 0.5 * d * (1 + math.log(2 * math.pi))


@pytest.mark.parametrize("entropy", ["closed_form", "monte_carlo"])
def test_the_elbo_estimate_and_its_gradient_match_the_closed_form(entropy: str) -> None:
    method = build_method(validate_job_spec(gaussian_job({"mc_samples": 1024, "entropy": entropy})))
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        method.mu.copy_(torch.randn(3, generator=generator, dtype=torch.float64))
        method.rho.copy_(torch.randn(3, generator=generator, dtype=torch.float64))
    mu = method.mu.detach().clone().requires_grad_(True)
    rho = method.rho.detach().clone().requires_grad_(True)
    exact = closed_form_elbo(mu, rho)
    exact_grad = torch.cat(torch.autograd.grad(exact, [mu, rho]))
    estimates, grads = [], []
    for _ in range(20):  # 20 × 1024 draws
        method.mu.grad = method.rho.grad = None
        value = method.elbo_estimate(None)
        value.backward()
        estimates.append(float(value.detach()))
        grads.append(torch.cat([method.mu.grad, method.rho.grad]))
    estimate = torch.tensor(estimates)
    spread = float(estimate.std() / math.sqrt(len(estimates)))
    assert abs(float(estimate.mean()) - float(exact.detach())) < 4 * spread + 1e-9
    mean_grad = torch.stack(grads).mean(0)
    grad_se = torch.stack(grads).std(0) / math.sqrt(len(grads))
    assert ((mean_grad - exact_grad).abs() < 4 * grad_se + 1e-9).all(), (mean_grad, exact_grad)
    if entropy == "closed_form":  # the entropy is exact: only E_q[log p] is estimated
        assert spread < 0.05


def test_mfvi_recovers_the_mean_and_the_diagonal_of_the_precision() -> None:
    m, cov, precision = exact_moments()
    # The answer differs from the marginal variances here, so the check can tell them apart.
    assert ((1 / precision.diagonal() - cov.diagonal()).abs() / cov.diagonal()).max() > 0.2
    result = run(gaussian_job({"init_std": 1.0, "optimizer": {"lr": 0.005}, "mc_samples": 128}, steps=3000))
    method = result.method
    sigma2 = method.sigma().detach() ** 2
    assert (method.mu.detach() - m).abs().max() < 0.03
    assert ((sigma2 * precision.diagonal()) - 1).abs().max() < 0.06, sigma2
    draws = result.particles
    assert draws.shape == (16, 3) and torch.equal(draws, method.particles())  # seeded, the same every call


def test_particles_are_seeded_draws_of_q() -> None:
    method = build_method(validate_job_spec(gaussian_job({"init_std": 0.7}, n=4000)))
    x = method.particles()
    assert x.shape == (4000, 3)
    torch.testing.assert_close(x.mean(0), method.mu.detach(), atol=0.05, rtol=0)
    torch.testing.assert_close(x.std(0), torch.full((3,), 0.7, dtype=torch.float64), atol=0.03, rtol=0)


def test_the_sampler_is_the_diagonal_generator_and_survives_its_zip() -> None:
    result = run(gaussian_job({"init_std": 0.8, "optimizer": {"lr": 0.05}}, steps=50))
    method = result.method
    sampler = method.sampler()
    config = sampler.config
    assert config["method"] == "mfvi" and config["generator"]["hidden"] == [] and config["generator"]["lambda"] == 0
    sigma = method.sigma().detach().float()
    mu = method.mu.detach().float()
    z = sampler.sample_noise(500, 9)
    torch.testing.assert_close(sampler.sample(500, 9), mu + sigma * z, rtol=1e-6, atol=1e-6)
    again = load(sampler.to_zip_bytes())
    assert torch.equal(again.sample(500, 9), sampler.sample(500, 9))
    assert not torch.equal(again.sample(500, 10), sampler.sample(500, 9))
    wide = sampler.sample(20000, 1)
    torch.testing.assert_close(wide.std(0), sigma, atol=0.03, rtol=0)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(sampler.to_onnx_bytes(), providers=["CPUExecutionProvider"])
    (graph,) = session.run(None, {session.get_inputs()[0].name: z.numpy()})
    torch.testing.assert_close(torch.from_numpy(graph), sampler.sample(500, 9), rtol=1e-5, atol=1e-5)


def test_no_sampler_above_the_dense_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    method = build_method(validate_job_spec(gaussian_job({})))
    monkeypatch.setattr(mfvi_module, "SAMPLER_MAX_DIM", 2)
    assert method.sampler() is None


def test_bnn_sampler_carries_the_layout_and_resume_is_bit_identical() -> None:
    job = {"method": "mfvi", "target": {"kind": "bnn", "dataset": regression_data(), "hidden": [8], "batch_size": 10},
           "num_particles": 8, "steps": 12, "seed": 1, "options": {"mc_samples": 2}, "checkpoint_every": 4,
           "eval": NO_EVAL}
    straight = run(job)
    hooks = StopAt(7)
    run(job, hooks=hooks)
    resumed = run(job, resume_state=state_from_bytes(hooks.checkpoints[4]))
    assert torch.equal(resumed.method.mu, straight.method.mu) and torch.equal(resumed.method.rho, straight.method.rho)
    assert torch.equal(resumed.particles, straight.particles)
    layout = straight.method.sampler().config["layout"]
    assert layout is not None and sum(math.prod(b["shape"]) for b in layout) <= straight.method.target.dim


@pytest.mark.parametrize("options", [{"init_std": 0}, {"mc_samples": 0}, {"entropy": "exact"}, {"lr": 0.1},
                                     {"optimizer": {"name": "rmsprop"}}])
def test_bad_options_are_clear_errors(options: dict) -> None:
    with pytest.raises(errors.MethodOptionsInvalid) as caught:
        validate_job_spec(gaussian_job(options))
    assert caught.value.code == "method_options_invalid" and "options" in caught.value.detail


def test_a_target_without_a_density_is_refused() -> None:
    data = regression_data()
    target = {"kind": "function_posterior", "dataset": data, "prior": {"type": "piecewise_constant"}}
    job = validate_job_spec({"method": "mfvi", "target": target})  # the kind is accepted ...
    with pytest.raises(errors.MethodUnsupportedForTarget, match="log density"):
        build_method(job)  # ... but a piecewise prior has no density over parameters


def test_the_service_serves_the_mfvi_sampler(make_client) -> None:
    """Stored as the worker stores it, POST /v1/samplers/{id}/sample returns the sampler's own seeded draws."""
    from service.api_keys import create_api_key
    from service.db import make_engine, make_session_factory
    from service.job_state import new_id
    from service.models import Job
    from service.samplers import store_sampler
    from service.store import make_store

    trained = run(gaussian_job({"init_std": 0.8}, steps=20)).method.sampler()
    client, settings = make_client(auth_enabled=True)
    sessions = make_session_factory(make_engine(settings.database_url))
    with sessions() as session:
        headers = {"Authorization": f"Bearer {create_api_key(session, 'a')}"}
        job = Job(id=new_id("job"), tenant_id="a", status="succeeded", method="mfvi", spec={"steps": 20},
                  spec_sha256="0" * 64, max_attempts=1)
        session.add(job)
        session.flush()
        record, artifacts = store_sampler(make_store(settings.artifacts_url), trained, tenant_id="a", job_id=job.id,
                                          method="mfvi")
        session.add(record)
        session.flush()
        session.add_all(artifacts)
        session.commit()
        sampler_id = record.id
    response = client.post(f"/v1/samplers/{sampler_id}/sample", json={"n": 50, "seed": 4}, headers=headers)
    assert response.status_code == 200
    assert torch.equal(torch.tensor(response.json()["samples"], dtype=torch.float32), trained.sample(50, 4))


def test_held_out_metrics_of_a_bnn_come_from_the_samplers_weight_draws() -> None:
    """On a bnn target with a test part, the run reports test RMSE/LL of the mixture of 100 weight draws of
    its sampler (seed 0), here recomputed with the network written out by hand (1×8 ReLU, fixed σ = 0.5)."""
    import numpy as np
    from scipy import special, stats

    from inference_core.datasets.dataset import Dataset
    from inference_core.targets.base import BuildContext

    rng = np.random.default_rng(0)
    X, X_test = rng.uniform(-2, 2, (40, 1)), rng.uniform(-2, 2, (15, 1))
    data = Dataset(X=X, y=np.sin(X[:, 0]), X_test=X_test, y_test=np.sin(X_test[:, 0]), name="synthetic")
    spec = {"method": "mfvi", "num_particles": 10, "steps": 20, "eval": NO_EVAL,
            "target": {"kind": "bnn", "dataset": "ds_" + "1" * 32, "hidden": [8], "noise": {"type": "fixed", "std": 0.5}}}
    result = run(spec, context=BuildContext(load_dataset=lambda _: data))
    theta = load(result.method.sampler().to_zip_bytes()).sample(100, 0).numpy().astype(np.float64)
    w0, b0, w1, b1 = theta[:, 0:8], theta[:, 8:16], theta[:, 16:24], theta[:, 24]
    f = np.einsum("nh,nmh->nm", w1, np.maximum(X_test[None, :, 0, None] * w0[:, None, :] + b0[:, None, :], 0))
    f += b1[:, None]
    y_test = data.y_test
    ll = special.logsumexp(stats.norm.logpdf(y_test, loc=f, scale=0.5), axis=0) - np.log(100)
    assert result.final_metrics["test_rmse"] == pytest.approx(np.sqrt(np.mean((f.mean(0) - y_test) ** 2)), rel=1e-5)
    assert result.final_metrics["test_ll"] == pytest.approx(ll.mean(), rel=1e-5)
