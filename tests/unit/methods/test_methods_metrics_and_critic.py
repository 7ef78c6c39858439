"""The eval diagnostics (IMQ KSD, MMD to reference draws, the Evaluator) and the KSD critic's pieces, each
against a naive reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from methods_support import F64, gram, imq, rbf, stein_kernel

from inference_core import run
from inference_core.catalog import METHODS
from inference_core.methods.directions import (
    EXACT_TRACE_MAX_DIM,
    jacobian_trace,
    stein_critic_loss,
    trace_method,
)
from inference_core.metrics.discrepancy import ksd_imq, mmd2_rbf
from inference_core.metrics.evaluation import Evaluator
from inference_core.networks import MLP
from inference_core.spec import EvalSpec, validate_job_spec
from inference_core.training import RunHooks, build_method


def sample(n: int, d: int, seed: int, shift: float = 0.0) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=F64) + shift


@pytest.mark.parametrize("h", [1.0, 0.4])
def test_ksd_imq_against_a_naive_double_loop(h: float) -> None:
    x = sample(9, 2, 0, shift=3.0)
    s = -(x - 1.0)  # score of N(1, I)
    k = imq(1.0, -0.5, h)
    n = x.shape[0]
    total = sum(float(stein_kernel(k, x[i], x[j], s[i], s[j])) for i in range(n) for j in range(n) if i != j)
    assert ksd_imq(x, s, h=h) == pytest.approx(total / (n * (n - 1)), rel=1e-9)
    v_total = total + sum(float(stein_kernel(k, x[i], x[i], s[i], s[i])) for i in range(n))
    assert ksd_imq(x, s, h=h, unbiased=False) == pytest.approx(v_total / n**2, rel=1e-9)


def test_mmd2_against_a_naive_computation_with_the_union_median() -> None:
    x, y = sample(7, 3, 1), sample(5, 3, 2, shift=0.5)
    union = torch.cat([x, y])
    dists = [float(((union[i] - union[j]) ** 2).sum()) for i in range(12) for j in range(i + 1, 12)]
    h = float(np.median(dists))  # 66 distinct pairs: the mean of the two middle values
    k = rbf(h)
    expected = float(gram(k, x, x).mean() + gram(k, y, y).mean() - 2 * gram(k, x, y).mean())
    value, bandwidth = mmd2_rbf(x, y)
    assert bandwidth == pytest.approx(h, rel=1e-12)
    assert value == pytest.approx(expected, rel=1e-9)
    unbiased, _ = mmd2_rbf(x, y, h=h, unbiased=True)
    kxx, kyy = gram(k, x, x), gram(k, y, y)
    expected_u = float((kxx.sum() - 7) / 42 + (kyy.sum() - 5) / 20 - 2 * gram(k, x, y).mean())
    assert unbiased == pytest.approx(expected_u, rel=1e-9)


GAUSS = {"kind": "gaussian", "mean": [1.0, -2.0], "cov": [[1.0, 0.8], [0.8, 2.0]]}


def test_evaluator_reports_every_diagnostic_and_caches_the_reference_draws() -> None:
    method = build_method(validate_job_spec({"method": "svgd", "target": GAUSS, "num_particles": 50}))
    state = method.generator.get_state()
    evaluator = Evaluator(EvalSpec(mmd_reference_samples=300, reference_seed=4))
    first = evaluator(method)
    assert set(first) == {"mean_error", "cov_error_rel", "ksd_imq", "mmd2_reference", "mmd_bandwidth"}
    draws = evaluator.reference_draws(method)
    assert draws is not None and draws.shape == (300, 2)
    assert evaluator.reference_draws(method) is draws  # cached, not redrawn
    # The reference draws are the target's exact sampler with the fixed seed.
    expected = method.target.reference().sample(300, torch.Generator().manual_seed(4))
    assert torch.equal(draws, expected)
    x = method.particles()
    assert first["ksd_imq"] == pytest.approx(ksd_imq(x, method.target.score(x)), rel=1e-9)
    assert first["mmd2_reference"] == pytest.approx(mmd2_rbf(x, expected)[0], rel=1e-9)
    assert torch.equal(method.generator.get_state(), state)  # evaluating never consumes the method's RNG


def test_evaluator_subsamples_the_particles_for_the_quadratic_diagnostics() -> None:
    method = build_method(validate_job_spec({"method": "svgd", "target": GAUSS, "num_particles": 60}))
    small = Evaluator(EvalSpec(max_particles=20, mmd=False))(method)
    full = Evaluator(EvalSpec(mmd=False))(method)
    assert small["ksd_imq"] != full["ksd_imq"]
    assert small["mean_error"] == full["mean_error"]  # moments use every particle


def test_run_reports_eval_metrics_periodically_and_at_the_end() -> None:
    seen: dict[int, dict[str, float]] = {}

    class Hooks(RunHooks):
        def on_step(self, step: int, total_steps: int, metrics: dict[str, float]) -> None:
            seen[step] = metrics

    result = run({"method": "svgd", "target": GAUSS, "num_particles": 40, "steps": 6, "eval": {"every": 3}},
                 hooks=Hooks())
    assert "ksd_imq" in seen[3] and "ksd_imq" in seen[6] and "ksd_imq" not in seen[2]
    assert {"ksd_imq", "mmd2_reference", "cov_error_rel"} <= set(result.final_metrics)
    quiet = run({"method": "svgd", "target": GAUSS, "num_particles": 40, "steps": 2,
                 "eval": {"ksd": False, "mmd": False}})
    assert set(quiet.final_metrics) == {"mean_error", "cov_error_rel", "grad_evals"}
    assert quiet.final_metrics["grad_evals"] == 2 * 40  # two steps of 40 scores (the start checks are not counted)


# ------------------------------------------------------------------------------------------ the critic


def critic_mlp(d: int, hidden: list[int], activation: str, seed: int, draw: str = "float32") -> MLP:
    return MLP([d, *hidden, d], activation, torch.Generator().manual_seed(seed), draw=draw).to(F64)


@pytest.mark.parametrize("draw", ["float32", "float64"])
def test_critic_has_no_batchnorm_and_rows_are_independent(draw: str) -> None:
    critic = critic_mlp(3, [16, 16], "tanh", 0, draw)
    assert not any(isinstance(mod, torch.nn.modules.batchnorm._BatchNorm) for mod in critic.modules())
    x = sample(5, 3, 3)
    moved = x.clone()
    moved[1:] += 10.0
    torch.testing.assert_close(critic(x)[0], critic(moved)[0])
    again = critic_mlp(3, [16, 16], "tanh", 0, draw)
    torch.testing.assert_close(critic(x), again(x))  # seeded initialisation
    bound = 1 / 16**0.5  # U(±1/√fan_in), PyTorch's nn.Linear default, for weights and biases
    assert all(float(layer.weight.detach().abs().max()) <= bound for layer in critic.layers[1:2])


def test_exact_and_hutchinson_traces_against_the_full_jacobian() -> None:
    critic = critic_mlp(3, [20], "softplus", 1)
    x = sample(4, 3, 4).requires_grad_(True)
    fx = critic(x)
    exact = jacobian_trace(fx, x)
    expected = torch.stack([torch.trace(torch.autograd.functional.jacobian(critic, x[i].detach()))
                            for i in range(4)])
    torch.testing.assert_close(exact.detach(), expected, rtol=1e-10, atol=1e-12)
    # Hutchinson with a probe ε is εᵀJε exactly; averaged over many Gaussian probes it approaches tr J.
    probe = torch.randn(4, 3, generator=torch.Generator().manual_seed(2), dtype=F64)
    single = jacobian_trace(fx, x, probe).detach()
    jac = [torch.autograd.functional.jacobian(critic, x[i].detach()) for i in range(4)]
    torch.testing.assert_close(single, torch.stack([probe[i] @ jac[i] @ probe[i] for i in range(4)]))
    g = torch.Generator().manual_seed(3)
    mean = torch.stack([jacobian_trace(fx, x, torch.randn(4, 3, generator=g, dtype=F64)).detach()
                        for _ in range(4000)]).mean(0)
    torch.testing.assert_close(mean, expected, atol=0.05 * float(expected.abs().max()), rtol=0)


def test_critic_loss_is_minus_the_stein_term_plus_the_l2_penalty() -> None:
    critic = critic_mlp(2, [8], "tanh", 5)
    x, s = sample(6, 2, 6), sample(6, 2, 7)
    xg = x.clone().requires_grad_(True)
    fxg = critic(xg)
    loss, stein = stein_critic_loss(fxg, jacobian_trace(fxg, xg), s, 10.0)
    fx = critic(x).detach()
    traces = torch.stack([torch.trace(torch.autograd.functional.jacobian(critic, x[i])) for i in range(6)])
    expected_stein = float(((s * fx).sum(1) + traces).mean())
    assert float(stein) == pytest.approx(expected_stein, rel=1e-10)
    assert float(loss.detach()) == pytest.approx(-expected_stein + 10.0 * float(fx.square().sum(1).mean()), rel=1e-10)


def test_critic_loss_has_the_stein_optimum() -> None:
    """For q = p = N(0, I) and a linear critic f(x) = Cx, the loss is l2·E||Cx||² (Stein's identity kills the
    rest), so its minimiser over C is 0; a nonzero C scores worse. The entropy weight scales the trace term."""
    x = sample(20000, 2, 9)
    C = torch.tensor([[0.5, 0.2], [-0.1, 0.3]], dtype=F64)
    out = x @ C.T
    trace = torch.full((20000,), float(torch.trace(C)), dtype=F64)
    loss, _ = stein_critic_loss(out, trace, -x, 1.0)
    assert float(loss) == pytest.approx(float((out.square().sum(-1)).mean()), abs=0.03)
    zero, _ = stein_critic_loss(torch.zeros_like(x), torch.zeros(20000, dtype=F64), -x, 1.0)
    assert float(zero) == 0.0 < float(loss)
    half, _ = stein_critic_loss(out, trace, -x, 1.0, entropy_weight=0.5)
    assert float(half) == pytest.approx(float(loss) + 0.5 * float(trace.mean()), rel=1e-12)


def test_trace_method_is_exact_up_to_the_threshold_and_hutchinson_above() -> None:
    assert EXACT_TRACE_MAX_DIM == 16
    assert trace_method("auto", 16) == "exact" and trace_method("auto", 17) == "hutchinson"
    assert trace_method("exact", 500) == "exact" and trace_method("hutchinson", 2) == "hutchinson"
    with pytest.raises(ValueError, match="trace"):
        trace_method("approximate", 3)


PARTICLE_METHODS = sorted(name for name, info in METHODS.items()
                          if info.family == "particle")


@pytest.mark.parametrize("name", PARTICLE_METHODS)
def test_every_step_reports_step_time_bandwidth_and_stein_force(name: str) -> None:
    options = {"subset_size": 8} if name.startswith("svgd_") else {}
    method = build_method(validate_job_spec({
        "method": name, "target": {"kind": "gaussian", "mean": [1.0, -1.0], "cov": [[1.0, 0.3], [0.3, 0.5]]},
        "num_particles": 16, "steps": 2, "seed": 0, "options": options}))
    metrics = method.step()
    assert metrics["step_time_s"] > 0 and np.isfinite(metrics["stein_force_norm"]) and metrics["stein_force_norm"] > 0
    if name != "ksd":  # the critic method has no kernel
        assert metrics["bandwidth"] > 0


def test_svgd_stein_force_is_the_rms_of_the_direction_computed_naively() -> None:
    mean, cov = torch.tensor([1.0, -1.0], dtype=F64), torch.tensor([[1.0, 0.3], [0.3, 0.5]], dtype=F64)
    method = build_method(validate_job_spec({
        "method": "svgd", "target": {"kind": "gaussian", "mean": mean.tolist(), "cov": cov.tolist()},
        "num_particles": 12, "steps": 1, "seed": 4, "options": {"dtype": "float64", "optimizer": {"name": "sgd"}}}))
    x = method.particles().clone()
    metrics = method.step()
    h, n = metrics["bandwidth"], x.shape[0]
    score = -(x - mean) @ torch.linalg.inv(cov)
    phi = torch.zeros_like(x)
    for i in range(n):
        for j in range(n):
            k = torch.exp(-((x[j] - x[i]) ** 2).sum() / h)
            phi[i] += k * score[j] + 2.0 * (x[i] - x[j]) / h * k
    phi /= n
    assert metrics["stein_force_norm"] == pytest.approx(float(phi.square().sum(-1).mean().sqrt()), rel=1e-9)


def test_a_critic_checkpoint_with_the_former_tensor_names_loads() -> None:
    """Before the critic was networks.MLP it was an nn.Sequential (Linear, act, Linear, ...): net.{2l}.*."""
    from inference_core.methods.ksd import legacy_critic_keys

    critic = critic_mlp(3, [5, 4], "tanh", 2)
    former = {f"net.{2 * layer}.{leaf}": value for key, value in critic.state_dict().items()
              for _, layer_s, leaf in [key.split(".")] for layer in [int(layer_s)]}
    again = critic_mlp(3, [5, 4], "tanh", 9)
    again.load_state_dict(legacy_critic_keys(former))
    x = sample(4, 3, 1)
    torch.testing.assert_close(again(x), critic(x), rtol=0, atol=0)
