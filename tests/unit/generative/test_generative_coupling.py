"""The injective "coupling" generator structure (samplers.generator; issue 40): exact log q against a brute-force
log|det| of the full float64 Jacobian, GPVI's block form against the full D×D solve, a GPVI run on the GPVI
paper's Figure 1 BNN whose certificate says `density: "exact"`, the zip round trip and the ONNX export."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.func import jacrev, vmap

from inference_core import errors, run
from inference_core.methods.generative import gpvi_math
from inference_core.methods.generative.gpvi import DEFAULT_BNN_STRUCTURE
from inference_core.methods.generative.jacobian import GeneratorJacobian
from inference_core.samplers import GeneratorNetwork, Sampler, load
from inference_core.samplers.certificate import sampler_quality
from inference_core.serialization import state_from_bytes, state_to_bytes
from inference_core.targets import BuildContext, build_target
from tests.support.log_det import brute_force_log_q
from tests.support.resume import StopAt


def coupling_network(k: int, d: int, lam: float, hidden: list[int], activation: str = "tanh", seed: int = 3,
                     layers: int = 3, width: int = 6) -> GeneratorNetwork:
    network = GeneratorNetwork(input_dim=k, hidden=hidden, output_dim=d, activation=activation, lam=lam,
                               structure="coupling", coupling_layers=layers, coupling_hidden=width,
                               generator=torch.Generator().manual_seed(seed))
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # move off the identity flow (its last layers start at zero) and the unit scales
        for p in network.parameters():
            p.add_(0.5 * torch.randn(p.shape, generator=g))
    return network


@pytest.mark.parametrize(("k", "d", "lam", "hidden", "activation", "affine"), [
    (3, 7, 0.3, [8], "tanh", False),
    (2, 5, 0.01, [6, 5], "relu", False),   # the hypernetwork λ
    (4, 6, 1.0, [], "tanh", True),         # linear rows, whitened output map: + log|det root|
])
def test_coupling_log_q_matches_autograd_log_det(k, d, lam, hidden, activation, affine) -> None:
    network = coupling_network(k, d, lam, hidden, activation)
    shift_root = None
    if affine:
        g = torch.Generator().manual_seed(5)
        shift_root = (torch.randn(d, generator=g), torch.eye(d) + 0.3 * torch.randn(d, d, generator=g))
    sampler = Sampler.from_generator(network, method="gpvi", target_kind="gaussian", affine=shift_root)
    draws, log_q = sampler.sample(16, seed=11, with_log_q=True)
    z = sampler.sample_noise(16, 11)
    density = sampler.density(z)
    assert bool((density.orientation == 1).all()) and not density.folded
    torch.testing.assert_close(log_q, brute_force_log_q(sampler, z, one_orientation=True), rtol=1e-9, atol=1e-9)
    if not affine:  # the training network and the sampler's functional forward agree
        with torch.no_grad():
            torch.testing.assert_close(network(z), draws, rtol=1e-5, atol=1e-5)


def test_gpvi_block_form_with_the_coupling_top_equals_the_full_solve() -> None:
    network = coupling_network(3, 8, 0.6, [5]).double()
    g = torch.Generator().manual_seed(0)
    z, z_expect = (torch.randn(7, 8, generator=g, dtype=torch.float64),
                   torch.randn(5, 8, generator=g, dtype=torch.float64))
    full = vmap(jacrev(lambda u: network(u.unsqueeze(0)).squeeze(0)))(z_expect)
    assert bool((full[:, :3, 3:] == 0).all())  # block lower-triangular
    reference = gpvi_math.full_solve_repulsion(full, z, z_expect, 1.1)
    jac = GeneratorJacobian(network, z_expect)
    features_jacobian = jac.features_jacobian()
    torch.testing.assert_close(jac.top_block(features_jacobian), full[:, :3, :3], rtol=1e-10, atol=1e-12)
    P = jac.top_inverse_transpose(features_jacobian, 0.6)
    coupling = jac.coupling_factors(features_jacobian, z, z_expect)
    score = torch.randn(5, 8, dtype=torch.float64, generator=g)
    _, repulsion = gpvi_math.matrix_direction(z, z_expect, score, 1.1, P, 0.6, coupling)
    torch.testing.assert_close(repulsion, reference, rtol=1e-9, atol=1e-11)


def figure1_target() -> dict:
    """The GPVI paper's Figure 1 BNN (benchmarks/reproduce_bnn_figures.py: regression_data, regression_target)."""
    rng = np.random.default_rng(100)
    outer = rng.uniform(2, 6, size=76) * rng.choice([-1.0, 1.0], size=76)
    x = np.sort(np.r_[outer, rng.uniform(-2, 2, size=4)])
    y = -(1 + x) * np.sin(1.2 * x) + rng.normal(0, 0.2, size=80)
    return {"kind": "bnn", "task": "regression", "dataset": {"X": x[:, None].tolist(), "y": y.tolist()},
            "hidden": [50], "activation": "relu", "noise": {"type": "fixed", "std": 0.2 / float(y.std())},
            "prior_std": 1.0, "prior_std_scaling": "fan_in", "standardize": True}


def gpvi_figure1(steps: int, structure: str | None) -> object:
    generator = {"hidden": [32, 32], "noise_dim": 32, **({"structure": structure} if structure else {})}
    return run({"method": "gpvi", "target": figure1_target(), "num_particles": 50, "steps": steps, "seed": 0,
                "device": "cpu", "options": {"helper": "matrix", "generator": generator},
                "eval": {"ksd": False, "mmd": False}})


def test_gpvi_with_the_coupling_structure_certifies_an_exact_density() -> None:
    result = gpvi_figure1(20, "coupling")
    assert result.method.network.structure == "coupling"
    sampler = result.method.sampler()
    assert sampler.config["generator"]["structure"] == "coupling"
    target64 = build_target(figure1_target(), BuildContext(dtype=torch.float64))
    report = sampler_quality(sampler, target64, draws=500, bootstrap=200)
    assert report["density"] == "exact" and "density_reason" not in report
    assert report["importance"] is not None
    # the residual structure on the same target, same steps, folds (the reason for this option)
    residual = gpvi_figure1(20, "residual").method.sampler()
    assert residual.config["generator"]["structure"] == "residual"
    assert b'"structure"' not in residual.to_zip_bytes()  # config.json (stored) as before this option
    assert sampler_quality(residual, target64, draws=500, bootstrap=200)["density"] == "branch"
    # left out, the structure is DEFAULT_BNN_STRUCTURE for a hypernetwork and "residual" elsewhere
    assert gpvi_figure1(1, None).method.network.structure == DEFAULT_BNN_STRUCTURE


def test_a_resumed_coupling_run_is_bit_identical() -> None:
    spec = {"method": "gpvi", "target": figure1_target(), "num_particles": 8, "steps": 8, "seed": 2,
            "options": {"generator": {"hidden": [6], "noise_dim": 4, "structure": "coupling", "coupling_layers": 2,
                                      "coupling_hidden": 5}}, "checkpoint_every": 4}
    straight = run(spec)
    first = run(spec, hooks=StopAt(5))
    assert first.steps_completed == 5
    resumed = run(spec, resume_state=state_from_bytes(state_to_bytes(first.method.state_dict())))
    assert torch.equal(straight.particles, resumed.particles)
    assert straight.method.sampler().to_zip_bytes() == resumed.method.sampler().to_zip_bytes()


def test_the_coupling_sampler_round_trips_bit_identically() -> None:
    sampler = Sampler.from_generator(coupling_network(3, 9, 0.01, [8, 4], "relu"), method="gpvi", target_kind="bnn")
    blob = sampler.to_zip_bytes()
    again = load(blob)
    assert again.to_zip_bytes() == blob
    assert again.config == sampler.config
    assert all(torch.equal(again.tensors()[name], tensor) for name, tensor in sampler.tensors().items())
    draws, log_q = sampler.sample(64, 7, with_log_q=True)
    draws_again, log_q_again = again.sample(64, 7, with_log_q=True)
    assert torch.equal(draws, draws_again) and torch.equal(log_q, log_q_again)


def test_the_coupling_sampler_exports_to_onnx() -> None:
    onnx = pytest.importorskip("onnx")
    sampler = Sampler.from_generator(coupling_network(3, 7, 0.3, [8], "tanh"), method="gpvi", target_kind="gaussian")
    blob = sampler.to_onnx_bytes()
    assert blob == sampler.to_onnx_bytes()
    onnx.checker.check_model(onnx.load_from_string(blob))
    z = sampler.sample_noise(33, 4).numpy()
    try:
        import onnxruntime as ort
        out = ort.InferenceSession(blob, providers=["CPUExecutionProvider"]).run(["samples"], {"z": z})[0]
    except ImportError:
        from onnx.reference import ReferenceEvaluator
        out = ReferenceEvaluator(blob).run(["samples"], {"z": z})[0]
    np.testing.assert_allclose(out, sampler.sample(33, 4).numpy(), rtol=1e-4, atol=1e-4)


def test_coupling_needs_lambda_and_a_narrower_prefix() -> None:
    with pytest.raises(ValueError, match="coupling"):
        GeneratorNetwork(input_dim=3, hidden=[4], output_dim=3, activation="tanh", lam=0.5, structure="coupling")
    with pytest.raises(ValueError, match="coupling"):
        GeneratorNetwork(input_dim=2, hidden=[4], output_dim=3, activation="tanh", lam=0.0, structure="coupling")
    gaussian = {"kind": "gaussian", "mean": [0.0, 0.0, 0.0], "cov": [[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]]}
    with pytest.raises(errors.MethodOptionsInvalid, match="coupling"):  # amortised: λ = 0
        run({"method": "amortized_svgd", "target": gaussian, "num_particles": 4, "steps": 1, "seed": 0,
             "options": {"generator": {"hidden": [4], "noise_dim": 2, "structure": "coupling"}}})
    # and an explicit structure on a Gaussian trains (GPVI, raw coordinates)
    result = run({"method": "gpvi", "target": gaussian, "num_particles": 6, "steps": 3, "seed": 0,
                  "options": {"precondition": "none", "generator": {"hidden": [4], "noise_dim": 2,
                                                                    "structure": "coupling"}}})
    assert result.method.network.structure == "coupling" and torch.isfinite(result.particles).all()
