"""A trained generator end to end over real HTTP: GPVI job → sampler record → bit-identical /sample draws,
download as zip (rebuilt with inference_core.samplers.load) and ONNX (run with onnxruntime), deletion."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from tests.support.stack import started_embedded

pytestmark = pytest.mark.integration

COV = [[1.0, 0.6], [0.6, 2.0]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory):
    spec = {"method": "gpvi_exact", "target": {"kind": "gaussian", "mean": [1.0, -1.0], "cov": COV},
            "num_particles": 64, "steps": 1500, "seed": 5,
            "options": {"generator": {"hidden": []}, "optimizer": {"lr": 0.01}}}
    with started_embedded(tmp_path_factory.mktemp("samplers"), {"PARVIS_MAX_SAMPLE_N": "20000"}) as stack:
        job = stack.succeeded(spec)
        assert job["sampler_id"] and job["sampler_id"].startswith("smp_")
        yield stack, job


def test_sample_is_seeded_bit_identical_and_fits_the_target(trained) -> None:
    stack, job = trained
    sampler_id = job["sampler_id"]
    first, again = stack.sample_npy(sampler_id, 5000, 7), stack.sample_npy(sampler_id, 5000, 7)
    assert first.dtype == np.float32 and first.shape == (5000, 2)
    assert np.array_equal(first, again)
    assert not np.array_equal(first, stack.sample_npy(sampler_id, 5000, 8))
    as_json = stack.client.post(f"/v1/samplers/{sampler_id}/sample", json={"n": 5000, "seed": 7}).json()
    assert as_json["shape"] == [5000, 2] and as_json["seed"] == 7
    np.testing.assert_array_equal(np.asarray(as_json["samples"], dtype=np.float32), first)
    # Fresh draws follow the posterior (5000 draws: sampling error of the covariance ~ 0.04 relative).
    assert np.linalg.norm(first.mean(0) - [1.0, -1.0]) < 0.15
    assert np.linalg.norm(np.cov(first.T) - COV) / np.linalg.norm(COV) < 0.2


def test_limits_and_negotiation(trained) -> None:
    stack, job = trained
    url = f"/v1/samplers/{job['sampler_id']}/sample"
    too_many = stack.client.post(url, json={"n": 20001, "seed": 0})
    assert too_many.status_code == 413 and too_many.json()["code"] == "limit_exceeded"
    assert stack.client.post(url, json={"n": 0}).status_code == 422
    assert stack.client.post(url, json={"n": 5, "seed": -1}).status_code == 422
    assert stack.client.post(url, json={"n": 5}, headers={"Accept": "text/html"}).status_code == 406
    assert stack.client.post("/v1/samplers/smp_nope/sample", json={"n": 5}).status_code == 404


def test_quality_report_and_certified_draws(trained) -> None:
    """Issue 16 over real HTTP: the worker stored a quality report (recomputed here from the downloaded zip
    and the target, it is the same), and /sample answers log q, log weights (against scipy's closed-form
    log-density) and a PSIS correction."""
    import scipy.stats as st
    import torch

    from inference_core.samplers import load
    from inference_core.samplers.certificate import VERDICTS, sampler_quality
    from inference_core.targets import BuildContext, build_target

    stack, job = trained
    url = f"/v1/samplers/{job['sampler_id']}"
    quality = stack.client.get(url).json()["quality"]
    assert quality["density"] == "exact" and quality["verdict"] in VERDICTS and quality["reason"]
    sampler = load(stack.client.get(url + "/download").content)
    target = build_target({"kind": "gaussian", "mean": [1.0, -1.0], "cov": COV}, BuildContext(dtype=torch.float64))
    again = sampler_quality(sampler, target, seed=5)
    for key in ("pareto_k", "ess", "log_z", "log_z_se", "elbo"):
        assert quality["importance"][key] == pytest.approx(again["importance"][key], rel=1e-9)
    assert quality["ksd"]["pvalue"] == again["ksd"]["pvalue"] and quality["verdict"] == again["verdict"]
    # a well-trained linear generator of a Gaussian: the evidence of the normalised target is log Z = 0
    assert abs(quality["importance"]["log_z"]) < 3 * quality["importance"]["log_z_se"] + 1e-3

    body = stack.client.post(url + "/sample", json={"n": 200, "seed": 3, "return": ["log_q", "log_weights"]}).json()
    draws = np.asarray(body["samples"])
    np.testing.assert_array_equal(draws, sampler.sample(200, 3).numpy())
    log_p = st.multivariate_normal([1.0, -1.0], COV).logpdf(draws.astype(np.float64))
    np.testing.assert_allclose(np.asarray(body["log_weights"]) + np.asarray(body["log_q"]), log_p, rtol=1e-10)
    corrected = stack.client.post(url + "/sample", json={"n": 200, "seed": 3, "correct": "psis"}).json()
    assert corrected["correction"]["proposals"] == 400  # the default, 2n
    assert corrected["correction"]["pareto_k"] < corrected["correction"]["khat_threshold"]
    assert np.asarray(corrected["samples"]).shape == (200, 2)


def test_downloads_reproduce_the_servers_draws(trained) -> None:
    import onnxruntime

    from inference_core.samplers import ONNX_INPUT_NAME, ONNX_OUTPUT_NAME, load

    stack, job = trained
    sampler_id = job["sampler_id"]
    meta = stack.client.get(f"/v1/samplers/{sampler_id}").json()
    assert meta["method"] == "gpvi_exact" and meta["job_id"] == job["id"] and meta["dim"] == 2
    digests = {a["role"]: a["sha256"] for a in meta["artifacts"]}
    assert set(digests) == {"weights", "onnx"}
    assert sampler_id in {s["id"] for s in stack.client.get("/v1/samplers").json()["samplers"]}

    archive = stack.client.get(f"/v1/samplers/{sampler_id}/download", params={"format": "safetensors"})
    assert archive.status_code == 200 and archive.headers["content-type"] == "application/zip"
    import hashlib

    assert hashlib.sha256(archive.content).hexdigest() == digests["weights"]
    assert sorted(zipfile.ZipFile(io.BytesIO(archive.content)).namelist()) == ["config.json", "weights.safetensors"]
    rebuilt = load(archive.content)
    server = stack.sample_npy(sampler_id, 1000, 11)
    np.testing.assert_array_equal(rebuilt.sample(1000, 11).numpy(), server)

    graph = stack.client.get(f"/v1/samplers/{sampler_id}/download", params={"format": "onnx"})
    assert graph.status_code == 200 and hashlib.sha256(graph.content).hexdigest() == digests["onnx"]
    session = onnxruntime.InferenceSession(graph.content)
    z = rebuilt.sample_noise(1000, 11).numpy()
    out = session.run([ONNX_OUTPUT_NAME], {ONNX_INPUT_NAME: z})[0]
    np.testing.assert_allclose(out, server, atol=1e-5, rtol=0)
    bad = stack.client.get(f"/v1/samplers/{sampler_id}/download", params={"format": "pickle"})
    assert bad.status_code == 422 and bad.json()["code"] == "format_invalid"


def test_a_deleted_jobs_sampler_is_gone(trained) -> None:
    stack, job = trained
    sampler_id = job["sampler_id"]
    assert stack.client.delete(f"/v1/jobs/{job['id']}").status_code == 204
    assert stack.client.get(f"/v1/samplers/{sampler_id}").status_code == 404
    assert stack.client.post(f"/v1/samplers/{sampler_id}/sample", json={"n": 5}).status_code == 404
    assert stack.client.get(f"/v1/samplers/{sampler_id}/download").status_code == 404



def test_quality_of_a_sampler_over_an_uploaded_data_set(trained) -> None:
    """A target over an uploaded data set: the API does not rebuild it (its /sample log weights are 422
    `log_weights_unavailable`, log q alone is served), but the worker, which has the data, stored the importance
    diagnostics, and they equal a local recomputation on the same rows given inline."""
    import torch

    from inference_core.samplers import load
    from inference_core.samplers.certificate import sampler_quality
    from inference_core.targets import BuildContext, build_target

    stack, _ = trained
    rng = np.random.default_rng(1)
    x = rng.normal(size=(40, 1))
    y = (rng.uniform(size=40) < 1 / (1 + np.exp(-(1.5 * x[:, 0] - 0.5)))).astype(float)
    upload = stack.client.post("/v1/datasets", json={"X": x.tolist(), "y": y.tolist()})
    assert upload.status_code == 201, upload.text
    target = {"kind": "bayesian_logistic_regression", "prior_std": 2.0}
    spec = {"method": "gpvi_exact", "target": {**target, "dataset": upload.json()["id"]}, "num_particles": 64,
            "steps": 800, "seed": 7, "options": {"generator": {"hidden": []}, "optimizer": {"lr": 0.01}}}
    job = stack.wait_status(stack.submit(spec).json()["id"], {"succeeded", "failed"}, timeout=300)
    assert job["status"] == "succeeded", (job["error"], stack.log_tail())
    url = f"/v1/samplers/{job['sampler_id']}"
    quality = stack.client.get(url).json()["quality"]
    assert quality["density"] == "exact"

    sampler = load(stack.client.get(url + "/download").content)
    inline = build_target({**target, "dataset": {"X": x.tolist(), "y": y.tolist()}},
                          BuildContext(dtype=torch.float64))
    again = sampler_quality(sampler, inline, seed=7)
    for key in ("pareto_k", "ess", "log_z", "log_z_se", "elbo"):
        assert quality["importance"][key] == pytest.approx(again["importance"][key], rel=1e-9)

    refused = stack.client.post(url + "/sample", json={"n": 10, "seed": 0, "return": ["log_weights"]})
    assert refused.status_code == 422 and refused.json()["code"] == "log_weights_unavailable"
    served = stack.client.post(url + "/sample", json={"n": 10, "seed": 0, "return": ["log_q"]})
    assert served.status_code == 200 and len(served.json()["log_q"]) == 10
