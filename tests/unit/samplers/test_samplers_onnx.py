"""ONNX export: onnxruntime on `sample_noise(n, seed)` reproduces `sample(n, seed)` within 1e-5."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from inference_core.samplers import ACTIVATIONS, ONNX_INPUT_NAME, ONNX_OUTPUT_NAME, GeneratorNetwork, Sampler

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def session(blob: bytes):
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(blob, options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("activation", sorted(ACTIVATIONS))
@pytest.mark.parametrize(("k", "d", "lam", "hidden"), [(3, 3, 0.0, [8, 6]), (2, 5, 0.7, [7]), (4, 4, 0.0, [])])
def test_onnx_reproduces_sample(activation: str, k: int, d: int, lam: float, hidden: list[int]) -> None:
    network = GeneratorNetwork(input_dim=k, hidden=hidden, output_dim=d, activation=activation, lam=lam,
                               generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        for p in network.parameters():
            p.mul_(2.0)  # reach the nonlinear range of every activation
    sampler = Sampler.from_generator(network, method="gpvi", target_kind="gaussian")
    blob = sampler.to_onnx_bytes()
    model = onnx.load_from_string(blob)
    assert [i.name for i in model.graph.input] == [ONNX_INPUT_NAME]
    assert [o.name for o in model.graph.output] == [ONNX_OUTPUT_NAME]
    for n, seed in [(1, 0), (257, 9)]:
        z = sampler.sample_noise(n, seed).numpy()
        (out,) = session(blob).run([ONNX_OUTPUT_NAME], {ONNX_INPUT_NAME: z})
        expected = sampler.sample(n, seed).numpy()
        assert out.shape == expected.shape == (n, d)
        np.testing.assert_allclose(out, expected, atol=1e-5, rtol=1e-5)


def test_onnx_bytes_are_deterministic_and_carry_the_config() -> None:
    network = GeneratorNetwork(input_dim=2, hidden=[3], output_dim=4, activation="relu", lam=1.0,
                               generator=torch.Generator().manual_seed(1))
    sampler = Sampler.from_generator(network, method="gpvi", target_kind="bnn")
    blob = sampler.to_onnx_bytes()
    assert blob == sampler.to_onnx_bytes()
    props = {p.key: p.value for p in onnx.load_from_string(blob).metadata_props}
    assert '"noise_dim": 4' in props["parvis.sampler_config"]
