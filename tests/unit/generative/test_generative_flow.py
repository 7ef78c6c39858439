"""`precondition: "flow"` for generative methods: the generator trains in the latent space of `auto`'s coupling
flow, x = shift + root·T(f(z)), and its sampler carries T (zip, ONNX, density), so draws and log q come back in x.
The density is checked against the autograd Jacobian of the whole map z ↦ x in float64."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from inference_core.coupling import CouplingFlow
from inference_core.preconditioning.transport import FlowTarget
from inference_core.samplers import GeneratorNetwork, Sampler, load
from inference_core.spec import validate_job_spec
from inference_core.targets.whitened import WhitenedTarget
from inference_core.training import build_method, run


def random_flow(dim: int, seed: int) -> CouplingFlow:
    """A coupling flow far from the identity (its last layers are not zero, as after a fit)."""
    flow = CouplingFlow(dim, 3, 8, torch.Generator().manual_seed(seed))
    rng = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for layer in flow.layers:
            last = layer.net[-1]
            last.weight.copy_(0.5 * torch.randn(last.weight.shape, generator=rng))
            last.bias.copy_(0.3 * torch.randn(last.bias.shape, generator=rng))
    return flow.requires_grad_(False)


def flow_sampler() -> Sampler:
    d = 3
    network = GeneratorNetwork(input_dim=d, hidden=[6], output_dim=d, activation="tanh", lam=1.0,
                               generator=torch.Generator().manual_seed(0))
    shift = torch.tensor([100.0, -3.0, 0.5])
    root = torch.tensor([[2.0, 0.0, 0.0], [0.5, 0.8, 0.0], [0.0, 0.03, 0.09]])
    return Sampler.from_generator(network, method="gpvi", target_kind="expression", affine=(shift, root),
                                  flow=random_flow(d, 3))


def test_the_sampler_draws_through_the_flow_and_round_trips() -> None:
    sampler = flow_sampler()
    tensors = sampler.tensors()
    assert sampler.config["generator"]["flow"] == {"layers": 3, "hidden": 8}
    z = sampler.sample_noise(64, 5)
    flow = CouplingFlow.from_tensors(tensors)
    with torch.no_grad():
        u = torch.tanh(z @ tensors["hidden.0.weight"].T + tensors["hidden.0.bias"]) @ tensors["output.weight"].T
        u = u + tensors["output.bias"] + z
        expected = tensors["affine.shift"] + flow(u)[0] @ tensors["affine.root"].T
    torch.testing.assert_close(sampler.sample(64, 5), expected)
    assert not torch.allclose(flow(u)[0], u)  # the flow is not the identity here
    assert torch.equal(load(sampler.to_zip_bytes()).sample(64, 5), sampler.sample(64, 5))


def test_the_density_is_that_of_the_autograd_jacobian() -> None:
    sampler = flow_sampler()
    z = sampler.sample_noise(6, 1).double()
    tensors = {name: value.double() for name, value in sampler.tensors().items()}
    flow = CouplingFlow.from_tensors(tensors)

    def x_of(row: torch.Tensor) -> torch.Tensor:
        u = torch.tanh(row @ tensors["hidden.0.weight"].T + tensors["hidden.0.bias"]) @ tensors["output.weight"].T
        u = u + tensors["output.bias"] + row
        return tensors["affine.shift"] + flow(u[None])[0][0] @ tensors["affine.root"].T

    expected = []
    for row in z:
        jacobian = torch.autograd.functional.jacobian(x_of, row)
        expected.append(-0.5 * row.square().sum() - 1.5 * math.log(2 * math.pi) - torch.linalg.slogdet(jacobian)[1])
    density = sampler.density(z)
    torch.testing.assert_close(density.log_q, torch.stack(expected), rtol=0, atol=1e-4)
    assert not density.folded


@pytest.mark.parametrize("dim", [2, 5, 8])
def test_the_closed_form_flow_jacobian_is_autograds(dim: int) -> None:
    """CouplingFlow.forward_jacobian (GPVI's coupling-generator solve) against autograd's Jacobian in float64, and its
    log|det| against the log-det the forward pass reads off the log-scales (the density's)."""
    flow = random_flow(dim, 7).double()
    z = 1.5 * torch.randn(9, dim, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    y, jacobian = flow.forward_jacobian(z)
    expected = torch.stack([torch.autograd.functional.jacobian(lambda row: flow(row[None])[0][0], row) for row in z])
    torch.testing.assert_close(y, flow(z)[0], rtol=0, atol=1e-12)
    torch.testing.assert_close(jacobian, expected, rtol=1e-10, atol=1e-12)
    assert float((jacobian - torch.eye(dim, dtype=torch.float64)).abs().max()) > 0.1  # far from the identity
    sign, log_det = torch.linalg.slogdet(jacobian)
    assert bool((sign > 0).all())
    torch.testing.assert_close(log_det, flow(z)[1], rtol=0, atol=1e-10)


def test_onnx_reproduces_the_flow_sampler() -> None:
    ort = pytest.importorskip("onnxruntime")
    sampler = flow_sampler()
    session = ort.InferenceSession(sampler.to_onnx_bytes(), providers=["CPUExecutionProvider"])
    z = sampler.sample_noise(32, 2)
    (out,) = session.run(None, {"z": z.numpy()})
    np.testing.assert_allclose(out, sampler.sample(32, 2).numpy(), rtol=1e-5, atol=1e-4)


def test_gpvi_auto_takes_the_flow_on_a_funnel_and_starts_at_its_draws() -> None:
    """The robustness suite's funnel (v ~ N(0, 3²), x_i | v ~ N(0, e^v), d = 10): Pathfinder's paths do not settle,
    so `precondition: "auto"` fits `auto`'s flow (a short fit here) and GPVI's generator starts as f(z) = z (λ = 1,
    g's output layer zero): before any step the sampler's draws are the flow's own, shift + root·T(z)."""
    from benchmarks.robustness.problems import problems

    target = problems()["funnel"].target_spec()
    spec = {"method": "gpvi", "seed": 0, "num_particles": 16, "steps": 1, "target": target,
            "options": {"flow": {"steps": 40, "batch": 16}}}
    method = build_method(validate_job_spec(spec))
    view = method.view
    assert isinstance(view, FlowTarget) and method.network.lam_float() == 1.0
    draws, pulled_back, checked_in = method.diagnostic_coordinates()  # the quality block checks in the latent space
    assert checked_in == "flow_latent" and pulled_back is view and draws is method.last_batch
    sampler = method.sampler()
    assert sampler.config["generator"]["flow"] == {"layers": 8, "hidden": 64}
    z = sampler.sample_noise(256, 0)
    with torch.no_grad():
        expected = view.base.to_target(view.flow(z.to(method.dtype))[0])
    torch.testing.assert_close(sampler.sample(256, 0), expected.float(), rtol=1e-5, atol=1e-4)
    result = run(spec)  # one step on, the sampler is still the method's map; the flow's fit is counted
    with torch.no_grad():
        expected = result.method.to_target(result.method.network(z.to(method.dtype)))
    torch.testing.assert_close(result.method.sampler().sample(256, 0), expected.float(), rtol=1e-5, atol=1e-4)
    assert result.final_metrics["grad_evals"] > 40 * 16


def test_a_gaussian_keeps_the_linear_whitening() -> None:
    """A correlated Gaussian: Pathfinder's paths settle together and its Gaussian is exact, so `auto` keeps the
    whitening alone and the sampler stores no flow."""
    target = {"kind": "gaussian", "mean": [100.0, -3.0, 0.5], "cov": [[4.0, 1.0, 0.0], [1.0, 1.0, 0.05], [0.0, 0.05, 0.01]]}
    method = build_method(validate_job_spec({"method": "gpvi", "seed": 0, "num_particles": 16, "steps": 1,
                                             "target": target}))
    assert type(method.view) is WhitenedTarget and method.sampler().config["generator"]["flow"] is None
    assert method.diagnostic_coordinates()[2] == "target"


def test_the_flow_fits_in_float64_to_a_float32_data_target() -> None:
    """The hierarchical logistic regression (breast-cancer data, float32 in a float32 job): Pathfinder's Gaussian
    misses mass, so `auto` fits the flow, in float64 with the target evaluated in float32 (before, the job failed
    with a dtype mismatch), and the generator trains in float32 through it."""
    from benchmarks.robustness.problems import problems

    spec = {"method": "gpvi", "seed": 0, "num_particles": 16, "steps": 2, "target": problems()["hierarchical_logistic"]
            .target_spec(), "options": {"flow": {"steps": 5, "batch": 8}}}
    result = run(spec)
    view = result.method.view
    assert isinstance(view, FlowTarget) and next(view.flow.parameters()).dtype == torch.float32
    assert bool(torch.isfinite(result.method.sampler().sample(64, 0)).all())


def test_a_resumed_job_refits_the_same_flow_and_goes_on_as_one_run() -> None:
    """A resumed job rebuilds its view (Pathfinder and the flow's fit, from the job's seed streams) before loading
    the generator's state: 3 steps, a checkpoint, 3 more give the draws of 6 steps in one go."""
    from benchmarks.robustness.problems import problems

    spec = validate_job_spec({"method": "gpvi", "seed": 1, "num_particles": 16, "steps": 6,
                              "target": problems()["eight_schools_centered"].target_spec(),
                              "options": {"precondition": "flow", "flow": {"steps": 30, "batch": 16}}})
    whole = build_method(spec)
    for _ in range(6):
        whole.step()
    first = build_method(spec)
    for _ in range(3):
        first.step()
    resumed = build_method(spec)
    resumed.load_state_dict(first.state_dict())
    for _ in range(3):
        resumed.step()
    assert isinstance(resumed.view, FlowTarget)
    assert torch.equal(resumed.sampler().sample(64, 0), whole.sampler().sample(64, 0))
