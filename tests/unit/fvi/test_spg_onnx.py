"""ONNX export of spg samplers: onnxruntime on the exported graph reproduces `SPGSampler.sample` (float32
rounding) for given inputs x and the noise `sample_noise` draws, across activations and standardisations."""

from __future__ import annotations

import numpy as np
import pytest

from inference_core.samplers import load
from inference_core.training import run

ort = pytest.importorskip("onnxruntime")

X = np.stack([np.linspace(-1.0, 2.0, 30), np.cos(np.linspace(0.0, 3.0, 30))], axis=1)
Y = np.sin(2 * X[:, 0]) + X[:, 1]


@pytest.mark.parametrize(("activation", "basis_activation", "basis_hidden", "standardize"),
                         [("tanh", "tanh", [8], True), ("gelu", "relu", [6, 5], False), ("silu", "elu", [], True)])
def test_onnx_graph_matches_sample(activation: str, basis_activation: str, basis_hidden: list[int],
                                   standardize: bool) -> None:
    job = {"method": "fvi", "seed": 1, "steps": 12,
           "target": {"kind": "function_posterior", "dataset": {"X": X.tolist(), "y": Y.tolist()},
                      "prior": {"type": "gp", "lengthscale": 0.7}, "likelihood": {"noise_std": 0.2},
                      "standardize": standardize},
           "options": {"distill_steps": 6, "n_basis": 5, "latent_dim": 3, "basis_hidden": basis_hidden,
                       "basis_activation": basis_activation, "activation": activation, "decoder_hidden": [7],
                       "learn_decoder_std": True}}
    sampler = run(job).method.sampler()
    session = ort.InferenceSession(sampler.to_onnx_bytes())
    x = np.array([[-0.5, 0.3], [0.25, -1.0], [1.75, 0.9], [3.0, 0.0]], np.float32)
    for n, seed in ((1, 0), (7, 4)):
        eps_h, eps_a = sampler.sample_noise(n, seed)
        (ours,) = session.run(["samples"], {"x": x, "eps_h": eps_h.numpy(), "eps_a": eps_a.numpy()})
        expected = sampler.sample(n, seed, x).numpy()
        assert ours.shape == expected.shape == (n, 4)
        np.testing.assert_allclose(ours, expected, rtol=2e-5, atol=2e-5 * float(np.abs(expected).max()))
    # the graph is stored in the zip-reloaded sampler too (same config and tensors → same bytes)
    assert load(sampler.to_zip_bytes()).to_onnx_bytes() == sampler.to_onnx_bytes()
    with pytest.raises(Exception):  # noqa: B017 - onnxruntime's own error type for a wrong input width
        session.run(["samples"], {"x": np.zeros((2, 3), np.float32), "eps_h": eps_h.numpy(),
                                  "eps_a": eps_a.numpy()})
