"""`precondition: "pathfinder"` for generative methods: the generator trains in whitened coordinates
x = shift + R u, and its sampler (zip and ONNX) carries the affine output, so draws come back in x."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
import torch

from inference_core.samplers import load
from inference_core.spec import JobSpec
from inference_core.training import build_method, run

COV = [[4.0, 1.0, 0.0], [1.0, 1.0, 0.05], [0.0, 0.05, 0.01]]


def test_whitened_gpvi_sampler_maps_back_and_round_trips() -> None:
    result = run({"method": "gpvi", "seed": 0, "num_particles": 32, "steps": 5,
                  "target": {"kind": "gaussian", "mean": [100.0, -3.0, 0.5], "cov": COV},
                  "options": {"precondition": "pathfinder", "generator": {"hidden": [8]}, "dtype": "float64"}})
    method = result.method
    view = method.view
    # Pathfinder's Gaussian of a Gaussian target is the target: R Rᵀ = Σ, shift = mean
    torch.testing.assert_close(view.shift, torch.tensor([100.0, -3.0, 0.5], dtype=torch.float64), rtol=0, atol=1e-4)
    torch.testing.assert_close(view.root @ view.root.T, torch.tensor(COV, dtype=torch.float64), rtol=1e-4, atol=1e-6)
    sampler = method.sampler()
    assert sampler.config["generator"]["affine"] is True
    z = sampler.sample_noise(16, 3)
    with torch.no_grad():
        expected = method.to_target(method.network(z.to(method.dtype)))
    torch.testing.assert_close(sampler.sample(16, 3), expected.float(), rtol=1e-5, atol=1e-4)
    assert torch.equal(load(sampler.to_zip_bytes()).sample(16, 3), sampler.sample(16, 3))
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(sampler.to_onnx_bytes(), providers=["CPUExecutionProvider"])
    (out,) = session.run(None, {"z": z.numpy()})
    np.testing.assert_allclose(out, sampler.sample(16, 3).numpy(), rtol=1e-5, atol=1e-4)


def test_without_preconditioning_the_stored_config_has_no_affine_entry() -> None:
    result = run({"method": "gpvi", "seed": 0, "num_particles": 16, "steps": 2, "options": {"precondition": "none"},
                  "target": {"kind": "gaussian", "mean": [0.0, 0.0], "cov": [[1.0, 0.0], [0.0, 1.0]]}})
    sampler = result.method.sampler()
    assert sampler.config["generator"]["affine"] is False  # precondition "none" here
    with zipfile.ZipFile(io.BytesIO(sampler.to_zip_bytes())) as archive:  # bytes as before this option existed
        assert "affine" not in json.loads(archive.read("config.json"))["generator"]


def test_whitened_gpvi_starts_as_the_pathfinder_gaussian() -> None:
    """With k = d and whitening GPVI's default λ is 1 and g's output layer starts at zero, so before any step
    f(z) = z and the sampler's draws are shift + R z: the Pathfinder Gaussian (here the target itself)."""
    spec = JobSpec.model_validate({"method": "gpvi", "seed": 0, "num_particles": 16, "steps": 1,
                                   "target": {"kind": "gaussian", "mean": [100.0, -3.0, 0.5], "cov": COV},
                                   "options": {"dtype": "float64"}})
    method = build_method(spec)
    assert method.network.lam_float() == 1.0
    sampler = method.sampler()
    z = sampler.sample_noise(4096, 0).double()
    expected = method.view.shift + z @ method.view.root.T
    torch.testing.assert_close(sampler.sample(4096, 0).double(), expected, rtol=1e-6, atol=1e-4)
    unwhitened = build_method(spec.model_copy(update={"options": {"precondition": "none"}}))
    assert unwhitened.network.lam_float() == 0.0  # ALF's f = g for k = d in raw coordinates
