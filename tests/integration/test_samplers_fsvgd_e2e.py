"""An `amortized_fsvgd` hypernetwork end to end over real HTTP (as test_samplers_e2e.py for GPVI): a small bnn
regression job → sampler record → seeded, bit-identical /sample draws that equal the offline load of the
downloaded zip, and /predict from the stored sampler."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from tests.support.stack import started_embedded

pytestmark = pytest.mark.integration

RNG = np.random.default_rng(11)
X = np.sort(RNG.uniform(-3, 3, size=30))[:, None]
Y = np.sin(X[:, 0]) + 0.1 * RNG.normal(size=30)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    target = {"kind": "bnn", "dataset": {"X": X.tolist(), "y": Y.tolist()}, "standardize": True, "hidden": [8],
              "prior_std_scaling": "fan_out", "noise": {"type": "inverse_gamma_std"}}
    spec = {"method": "amortized_fsvgd", "target": target, "num_particles": 8, "steps": 50, "seed": 3,
            "options": {"generator": {"hidden": [16], "noise_dim": 4}, "extra_points": 10},
            "eval": {"ksd": False, "mmd": False}}
    with started_embedded(tmp_path_factory.mktemp("samplers_fsvgd")) as stack:
        job = stack.succeeded(spec)
        assert job["sampler_id"] and job["sampler_id"].startswith("smp_")
        yield stack, job


def test_sample_is_seeded_and_equals_the_downloaded_zip(trained) -> None:
    from inference_core.samplers import load

    stack, job = trained
    sampler_id = job["sampler_id"]
    meta = stack.client.get(f"/v1/samplers/{sampler_id}").json()
    assert meta["method"] == "amortized_fsvgd" and meta["job_id"] == job["id"]
    first, again = stack.sample_npy(sampler_id, 500, 7), stack.sample_npy(sampler_id, 500, 7)
    assert first.dtype == np.float32 and first.shape == (500, meta["dim"])
    assert np.array_equal(first, again)
    assert not np.array_equal(first, stack.sample_npy(sampler_id, 500, 8))
    archive = stack.client.get(f"/v1/samplers/{sampler_id}/download", params={"format": "safetensors"})
    assert archive.status_code == 200
    assert sorted(zipfile.ZipFile(io.BytesIO(archive.content)).namelist()) == ["config.json", "weights.safetensors"]
    rebuilt = load(archive.content)
    np.testing.assert_array_equal(rebuilt.sample(500, 7).numpy(), first)


def test_predict_from_the_stored_sampler_matches_the_offline_predictor(trained) -> None:
    from inference_core.prediction import predictor_from_sampler
    from inference_core.samplers import load

    stack, job = trained
    url = f"/v1/samplers/{job['sampler_id']}"
    x_new = [[-2.0], [0.0], [1.5]]
    response = stack.client.post(url + "/predict", json={"x": x_new, "n": 40, "seed": 2})
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["task"] == "regression" and answer["n_draws"] == 40
    offline = predictor_from_sampler(load(stack.client.get(url + "/download").content)).predict(
        np.asarray(x_new), n=40, seed=2)
    np.testing.assert_allclose(answer["mean"], offline["mean"], rtol=1e-6)
    np.testing.assert_allclose(answer["std"], offline["std"], rtol=1e-6)
